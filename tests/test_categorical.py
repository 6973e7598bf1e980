"""categorical.LogProbEntropy against the torch path of policies.ActionHead: the same log-probabilities,
entropies and gradients of the logits for Discrete and MultiDiscrete heads (fp32, and bf16 logits
on a GPU), and ActionHead taking it on GPUs while gradients are recorded. Without a GPU its kernels
run in Triton's interpreter."""

import pytest
import torch

triton = pytest.importorskip("triton", reason="the fused kernels need Triton (pip install triton)")

from workbench.compiler.envdef import Discrete, MultiDiscrete  # noqa: E402
from workbench.learn import categorical  # noqa: E402
from workbench.learn.policies import ActionHead  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if GPU else "cpu")


@pytest.fixture(autouse=True)
def _kernels(triton_kernels):
    """Every test here runs the kernels (conftest.triton_kernels)."""


def _torch_path(head, out, actions):
    original = categorical.serves
    categorical.serves = lambda o: False
    try:
        return head.log_prob_entropy(out, None, actions)
    finally:
        categorical.serves = original


def _values_and_grads(fn, out, g_logp, g_ent):
    out = out.detach().clone().requires_grad_(True)
    logp, ent = fn(out)
    (logp * g_logp + ent * g_ent).sum().backward()
    return logp.detach(), ent.detach(), out.grad


@pytest.mark.parametrize("space,rows", [(MultiDiscrete([21, 21]), 150), (Discrete(5), 70), (MultiDiscrete([3, 7, 2]), 33)])
def test_log_prob_entropy_matches_torch(space, rows):
    torch.manual_seed(0)
    head = ActionHead(space).to(DEVICE)
    out = torch.randn(rows, head.out_dim, device=DEVICE) * 3
    splits = head.splits if head.kind == "multi" else [head.out_dim]
    actions = torch.stack([torch.randint(0, n, (rows,), device=DEVICE) for n in splits], -1)
    if head.kind == "discrete":
        actions = actions[:, 0]
    g_logp, g_ent = torch.randn(rows, device=DEVICE), torch.randn(rows, device=DEVICE)
    want = _values_and_grads(lambda o: _torch_path(head, o, actions), out, g_logp, g_ent)
    got = _values_and_grads(lambda o: categorical.LogProbEntropy.apply(o, actions, head.starts(DEVICE), max(splits)), out,
                            g_logp, g_ent)
    for name, g, w in zip(("log-probability", "entropy", "logits' gradient"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=name)
    # only the entropy used: the log-probability's gradient counts as zero
    out2 = out.clone().requires_grad_(True)
    categorical.LogProbEntropy.apply(out2, actions, head.starts(DEVICE), max(splits))[1].sum().backward()
    ref = out.clone().requires_grad_(True)
    _torch_path(head, ref, actions)[1].sum().backward()
    torch.testing.assert_close(out2.grad, ref.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not GPU, reason="bf16 logits and the GPU dispatch")
def test_bf16_logits_and_dispatch():
    torch.manual_seed(1)
    head = ActionHead(MultiDiscrete([21, 21])).to("cuda")
    out = (torch.randn(5000, 42, device="cuda") * 2).bfloat16()
    actions = torch.randint(0, 21, (5000, 2), device="cuda")
    g = torch.randn(5000, device="cuda")
    got = _values_and_grads(lambda o: head.log_prob_entropy(o, None, actions), out, g, g)
    want = _values_and_grads(lambda o: _torch_path(head, o, actions), out, g, g)
    assert got[2].dtype == torch.bfloat16
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_.float(), w.float(), rtol=1e-2, atol=1e-2)
    assert categorical.serves(out.requires_grad_(True))
    with torch.no_grad():
        assert not categorical.serves(out)
    assert not categorical.serves(out.cpu())
