"""padded_linear's layers against nn.Linear (+ tanh or ReLU): the same output and the same gradients
of the input, weight and bias (fp32; and in bf16 autocast on a GPU), for one policy's layers and
stacked members', and policies.MLP taking them on GPUs while gradients are recorded. Without a GPU
their kernels run in Triton's interpreter."""

import contextlib

import pytest
import torch

triton = pytest.importorskip("triton", reason="the fused kernels need Triton (pip install triton)")

from workbench.learn import fused, padded_linear  # noqa: E402
from workbench.learn.policies import mlp  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if GPU else "cpu")


@pytest.fixture(autouse=True)
def _kernels(triton_kernels):
    """Every test here runs the kernels (conftest.triton_kernels)."""


@contextlib.contextmanager
def _padded_layers(on: bool):
    """policies.MLP through the padded layers (on) or layer by layer (off), whatever the device."""
    original = padded_linear.serves
    padded_linear.serves = lambda v: on
    try:
        yield
    finally:
        padded_linear.serves = original


def _on_both_paths(model, x, loss, bf16: bool = False):
    """For the padded layers, then layer by layer: [model(x)'s outputs, detached] + its parameters'
    gradients of loss(*outputs)."""
    results = []
    for padded in (True, False):
        model.zero_grad(set_to_none=True)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with _padded_layers(padded), autocast:
            outputs = model(x)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        loss(*outputs).backward()
        results.append([o.detach() for o in outputs] + [p.grad.clone() for p in model.parameters()])
    return results


def _grads(fn, x, layer, upstream):
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    y = fn(x)
    (y.float() * upstream).sum().backward()
    return y.detach().float(), x.grad.float(), layer.weight.grad.clone(), layer.bias.grad.clone()


@pytest.mark.parametrize("rows,features,units,act",
                         [(70, 13, 24, "tanh"), (200, 78, 256, "tanh"), (70, 13, 24, "relu")])
def test_activation_layers_match_torch(rows, features, units, act):
    """LinearTanh and LinearReLU: nn.Linear's values and gradients, the bias gradient from the fused kernel."""
    function, f = (padded_linear.LinearTanh, torch.tanh) if act == "tanh" else (padded_linear.LinearReLU, torch.relu)
    torch.manual_seed(0)
    layer = torch.nn.Linear(features, units).to(DEVICE)
    x = torch.randn(rows, features, device=DEVICE)
    upstream = torch.randn(rows, units, device=DEVICE)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        want = _grads(lambda v: f(layer(v)), x, layer, upstream)
        got = _grads(lambda v: function.apply(v, layer.weight, layer.bias), x, layer, upstream)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    for name, g, w in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=name)
    assert got[3].dtype == torch.float32 and got[2].dtype == torch.float32


@pytest.mark.parametrize("rows,features,units", [(70, 78, 42), (33, 256, 1), (40, 16, 8)])
def test_padded_output_layer_matches_torch(rows, features, units):
    """padded_linear.Linear pads features in and out to multiples of 8: the same values and gradients
    as nn.Linear, for a column-major upstream gradient too (categorical.LogProbEntropy's)."""
    torch.manual_seed(2)
    layer = torch.nn.Linear(features, units).to(DEVICE)
    x = torch.randn(rows, features, device=DEVICE)
    upstream = torch.randn(units, rows, device=DEVICE).t()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        want = _grads(layer, x, layer, upstream)
        got = _grads(lambda v: padded_linear.Linear.apply(v, layer.weight, layer.bias), x, layer, upstream)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    for name, g, w in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("units", [42, 1])
def test_output_layers_take_column_major_gradients(units):
    """A column-major gradient (categorical.LogProbEntropy's) and a row-major one of the same values
    give nn.Linear's gradients through Linear and, for three stacked members, MemberLinearOut."""
    from workbench.learn.members import MemberLinear
    torch.manual_seed(6)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        _check_column_major_gradients(units, MemberLinear)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _check_column_major_gradients(units, MemberLinear):
    layers = [torch.nn.Linear(256, units).to(DEVICE) for _ in range(3)]
    stacked = MemberLinear(layers).to(DEVICE)
    rows = 40
    x = torch.randn(3 * rows, 256, device=DEVICE)
    g = torch.randn(units, 3 * rows, device=DEVICE)
    want = [torch.autograd.grad(layer(x[k * rows:(k + 1) * rows]), [layer.weight, layer.bias],
                                g.t()[k * rows:(k + 1) * rows].contiguous()) for k, layer in enumerate(layers)]
    for grad in (g.t(), g.t().contiguous()):
        got = torch.autograd.grad(padded_linear.Linear.apply(x[:rows], layers[0].weight, layers[0].bias),
                                  [layers[0].weight, layers[0].bias], grad[:rows])
        torch.testing.assert_close(got[0], want[0][0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[1], want[0][1], rtol=1e-4, atol=1e-4)
        got = torch.autograd.grad(padded_linear.MemberLinearOut.apply(x, stacked.weight, stacked.bias),
                                  [stacked.weight, stacked.bias], grad)
        for k in range(3):
            torch.testing.assert_close(got[0][k].t(), want[k][0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got[1][k, 0], want[k][1], rtol=1e-4, atol=1e-4)


def test_unaligned_hidden_layers_inside_mlp():
    """An MLP of 13 -> 100 -> 50 -> 3 through LinearTanh and Linear (every width padded) against the
    layer-by-layer path: the same output and parameter gradients."""
    torch.manual_seed(3)
    net = mlp([13, 100, 50, 3]).to(DEVICE)
    x = torch.randn(45, 13, device=DEVICE)
    upstream = torch.randn(45, 3, device=DEVICE)
    for mine, ref in zip(*_on_both_paths(net, x, lambda out: (out * upstream).sum())):
        torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not GPU, reason="bf16 autocast is the GPU's")
def test_padded_layers_in_bf16_and_inside_mlp():
    torch.manual_seed(1)
    net = mlp([78, 256, 256, 42]).to(DEVICE)
    x = torch.randn(1000, 78, device=DEVICE)
    upstream = torch.randn(1000, 42, device=DEVICE)
    grads = [r[1:] for r in _on_both_paths(net, x, lambda out: (out.float() * upstream).sum(), bf16=True)]
    for (name, _), mine, ref in zip(net.named_parameters(), *grads):
        assert mine.dtype == torch.float32
        err = float((mine - ref).abs().max() / ref.abs().max())
        assert err < 0.03, f"{name}: bf16 gradient off by {err:.3f} of its largest element"
    assert padded_linear.serves(x.requires_grad_(False)) and not padded_linear.serves(x.cpu())
    with torch.no_grad():
        assert not padded_linear.serves(x)


@pytest.mark.parametrize("shared,act", [(False, "tanh"), (True, "tanh"), (False, "relu"), (True, "relu")])
def test_actor_critic_through_padded_layers(shared, act):
    """The default ActorCritic on the padded layers (observations padded once for both networks),
    and a SharedActorCritic (one body: 43 outputs, the value in the last), against layer by layer:
    the same head outputs, values and gradients, for one policy and for stacked members
    (MemberLinearTanh, MemberLinearOut: each member's bias gradient its own)."""
    from workbench.compiler.envdef import MultiDiscrete
    from workbench.learn.members import stack_members
    from workbench.learn.policies import ActorCritic, SharedActorCritic
    body = SharedActorCritic if shared else ActorCritic
    torch.manual_seed(4)
    single = body(78, MultiDiscrete([21, 21]), (32, 24), act).to(DEVICE)
    stacked = stack_members([body(78, MultiDiscrete([21, 21]), (32, 24), act).to(DEVICE) for _ in range(3)])
    for model, rows in ((single, 50), (stacked, 3 * 70)):
        x = torch.randn(rows, 78, device=DEVICE)
        results = _on_both_paths(model, x, lambda out, value: (out.sum(1) * value).sum())
        assert all(r[0].shape == (rows, 42) and r[1].shape == (rows,) for r in results)
        for mine, ref in zip(*results):
            torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows,K,N,act", [(70, 80, 256, "tanh"), (130, 16, 104, "tanh"), (70, 80, 256, "relu")])
def test_linear_activation_kernel_matches_torch(rows, K, N, act):
    """linear_kernels.linear_activation (the bf16 forward's matmul with bias and tanh, or ReLU, in its
    epilogue) against torch: bf16 on a GPU (to bf16's rounding), float32 in Triton's interpreter."""
    f = torch.tanh if act == "tanh" else torch.relu
    mode = 0 if act == "tanh" else 2
    torch.manual_seed(5)
    dtype = torch.bfloat16 if GPU else torch.float32
    x = torch.randn(rows, K, device=DEVICE).to(dtype)
    w = (torch.randn(N, K, device=DEVICE) / K ** 0.5).to(dtype)
    b = torch.randn(N, device=DEVICE).to(dtype)
    want = f(x.float() @ w.float().t() + b.float())
    if GPU:
        got = padded_linear._linear_activation_bf16(x, w, b, act=act)
        tol = 1e-2
    else:
        got = torch.empty(rows, N)
        fused._linear_kernels().linear_activation[(-(-rows // 32), -(-N // 64), 1)](
            x, w, b, got, rows, 0, 0, 1, K, K=K, N=N, BM=32, BN=64, BK=16, ACT=mode)
        tol = 1e-5
    assert got.shape == (rows, N) and got.dtype == dtype
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)
    # three members' layers in MemberLinear's layout [M, K, N], each member's rows through its own
    ws = torch.stack([w.t(), -w.t(), 0.5 * w.t()]).contiguous()
    bs = torch.stack([b, -b, b]).unsqueeze(1).contiguous()
    xs = torch.cat([x, x.flip(0), x])
    want = torch.cat([f(xs[k * rows:(k + 1) * rows].float() @ ws[k].float() + bs[k].float())
                      for k in range(3)])
    if GPU:
        got = padded_linear._linear_activation_bf16(xs, ws, bs, act=act)
    else:
        got = torch.empty(3 * rows, N)
        fused._linear_kernels().linear_activation[(-(-rows // 32), -(-N // 64), 3)](
            xs, ws, bs, got, rows, K * N, N, N, 1, K=K, N=N, BM=32, BN=64, BK=16, ACT=mode)
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("rows,Kn,N,act,members,column_major",
                         [(70, 48, 256, "relu", 0, False), (130, 256, 104, "tanh", 0, True),
                          (50, 8, 64, "tanh", 3, True), (40, 256, 128, "relu", 3, False)])
def test_backward_into_hidden_matches_torch(rows, Kn, N, act, members, column_major):
    """linear_kernels.linear_backward_activation (a layer's input gradient dz W times the previous
    hidden layer's activation derivative, with that layer's bias gradient from the same tile) against
    torch, for one layer (nn.Linear's [Kn, N] weight) and three stacked members ([M, N, Kn]), with a
    row-major or a column-major dz: bf16 on a GPU (to bf16's rounding), float32 in Triton's interpreter."""
    torch.manual_seed(7)
    dtype = torch.bfloat16 if GPU else torch.float32
    M = max(members, 1)
    dz = torch.randn(M * rows, Kn, device=DEVICE)
    dz = (dz.t().contiguous().t() if column_major else dz).to(dtype)
    w = (torch.randn(M, Kn, N, device=DEVICE) / Kn ** 0.5).to(dtype)
    pre = torch.randn(M * rows, N, device=DEVICE)
    y = (pre.tanh() if act == "tanh" else pre.relu()).to(dtype)
    deriv = 1 - y.float() ** 2 if act == "tanh" else (y.float() > 0).float()
    want = torch.cat([dz[k * rows:(k + 1) * rows].float() @ w[k].float() for k in range(M)]) * deriv
    wc = w.transpose(1, 2).contiguous() if members else w[0]
    if GPU:
        got, db = padded_linear._backward_into_hidden(dz, wc, y, act, members)
        tol = 2e-2
    else:
        got = torch.empty_like(y)
        programs = -(-rows // 32)
        partials = torch.empty(M, programs, N)
        strides = (N * Kn, 1, Kn) if members else (0, N, 1)
        fused._linear_kernels().linear_backward_activation[(programs, -(-N // 64), M)](
            dz, wc, y, got, partials, rows, dz.stride(0), dz.stride(1), *strides, K=Kn, N=N, BM=32, BN=64, BK=16,
            RELU=int(act == "relu"))
        db = partials.sum(1, keepdim=True)
        tol = 1e-5
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)
    assert db.dtype == torch.float32 and db.shape == (M, 1, N)
    torch.testing.assert_close(db, want.reshape(M, rows, N).sum(1, keepdim=True), rtol=tol, atol=tol * rows ** 0.5)


def test_mlp_runs_as_one_chain(monkeypatch):
    """policies.MLP hands a run of (linear, activation) pairs ending in an output layer, or in an
    activation (a shared body's hidden layers), to padded_linear.Chain as one function, for one policy and
    stacked members; its outputs and gradients are the layer-by-layer path's."""
    from workbench.learn.members import stack_members
    calls = []
    apply = padded_linear.Chain.apply
    monkeypatch.setattr(padded_linear.Chain, "apply", lambda *a: calls.append(a[1]) or apply(*a))
    torch.manual_seed(8)
    nets = [mlp([13, 32, 24, 5], activation=torch.nn.ReLU).to(DEVICE),
            stack_members([mlp([13, 32, 24, 5]).to(DEVICE) for _ in range(3)])]
    for net, rows in zip(nets, (45, 3 * 20)):
        x = torch.randn(rows, 13, device=DEVICE)
        upstream = torch.randn(rows, 5, device=DEVICE)
        for mine, ref in zip(*_on_both_paths(net, x, lambda out: (out * upstream).sum())):
            torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-5)
        with _padded_layers(True):
            hidden = net.hidden(x)
        assert hidden.shape == (rows, 24)
    assert calls == [("relu", "relu", None), ("relu", "relu"), ("tanh", "tanh", None), ("tanh", "tanh")]


@pytest.mark.skipif(not GPU, reason="bf16 autocast is the GPU's")
@pytest.mark.parametrize("members", [0, 3])
def test_chain_in_bf16_matches_layer_by_layer_functions(members, monkeypatch):
    """In bf16 Chain (its backward's fused kernel) gives the gradients of the per-layer functions
    (LinearReLU ..., whose backward is cuBLAS's matmul then the activation kernel) to bf16's rounding,
    for one policy and stacked members, at Tag's widths."""
    from workbench.learn import policies
    from workbench.learn.members import stack_members
    torch.manual_seed(9)
    nets = [mlp([78, 256, 256, 42], activation=torch.nn.ReLU).to(DEVICE) for _ in range(max(members, 1))]
    net = stack_members(nets) if members else nets[0]
    rows = 3000 * max(members, 1)
    x = torch.randn(rows, 78, device=DEVICE)
    upstream = torch.randn(rows, 42, device=DEVICE)
    results = []
    for chain in (True, False):
        if not chain:
            monkeypatch.setattr(policies, "_chain", lambda layers: None)
        net.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = net(x)
        (out.float() * upstream).sum().backward()
        results.append([out.detach().float()] + [p.grad.clone() for p in net.parameters()])
    for (name, _), mine, ref in zip([("output", None)] + list(net.named_parameters()), *results):
        err = float((mine - ref).abs().max() / ref.abs().max())
        assert err < 0.02, f"{name}: off by {err:.4f} of its largest element"
