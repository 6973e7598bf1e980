"""On-device action sampling: distributions, bounds, determinism, cross-target equality, errors."""
import math

import numpy as np
import pytest
import torch

import workbench as wb
from conftest import HAS_GPU, gpu_only, tiny
from workbench.runtime.sampling import Sampler, SamplingError, lanes_per_row


def chi2_limit(dof: int, z: float = 4.5) -> float:
    """Wilson-Hilferty upper quantile of chi-square(dof) at a normal z (z=4.5: p ~ 3e-6)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a category with zero probability was drawn"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


@pytest.fixture(scope="module")
def cpu():
    return Sampler("cpu", seed=11)


# -- categorical ---------------------------------------------------------------------------
def test_categorical_frequencies_match_softmax(cpu):
    gen = torch.Generator().manual_seed(0)
    groups = torch.randn(4, 6, generator=gen) * 1.5
    groups[2, 3] = -math.inf  # a masked action is never drawn
    groups[3] = torch.tensor([1000.0, 999.0, 998.0, 0.0, -1e4, 1000.0])  # needs the max subtracted
    n = 400_000
    logits = groups.repeat(n // 4, 1)
    out = cpu.categorical(logits)
    assert out.dtype == torch.int32 and out.shape == (n,)
    for g in range(4):
        counts = np.bincount(out[g::4].numpy(), minlength=6)
        probs = torch.softmax(groups[g].double(), 0).numpy()
        assert chi2(counts, probs) < chi2_limit(5), (g, counts / counts.sum(), probs)


def test_categorical_from_unnormalised_probs(cpu):
    weights = torch.tensor([[0.0, 2.0, 1.0, 0.0, 5.0]]).repeat(200_000, 1)
    out = cpu.categorical(weights, probs=True)
    counts = np.bincount(out.numpy(), minlength=5)
    assert chi2(counts, np.array([0, 2, 1, 0, 5]) / 8.0) < chi2_limit(2)


def test_dominant_logit_gives_the_argmax_and_dead_rows_give_minus_one(cpu):
    gen = torch.Generator().manual_seed(1)
    for k in (2, 21, 100):
        logits = torch.randn(3000, k, generator=gen)
        best = torch.randint(0, k, (3000,), generator=gen)
        logits[torch.arange(3000), best] += 40.0
        assert torch.equal(cpu.categorical(logits).long(), best)
    dead = torch.randn(5, 7)
    dead[1] = -math.inf
    out = cpu.categorical(dead)
    assert out[1] == -1 and bool((out[[0, 2, 3, 4]] >= 0).all())
    zero = torch.rand(4, 3)
    zero[2] = 0.0
    assert cpu.categorical(zero, probs=True)[2] == -1


def test_lanes_per_row():
    assert [lanes_per_row(k) for k in (1, 2, 8, 9, 21, 64, 100, 5000)] == [1, 1, 1, 4, 8, 16, 32, 32]


# -- multi-discrete ------------------------------------------------------------------------
def test_multi_discrete_ranges_and_frequencies(cpu):
    nvec = (2, 3, 5)
    gen = torch.Generator().manual_seed(2)
    row = torch.randn(sum(nvec), generator=gen)
    n = 150_000
    out = cpu.multi_discrete(row.repeat(n, 1), nvec)
    assert out.shape == (n, 3) and out.dtype == torch.int32
    start = 0
    for j, size in enumerate(nvec):
        col = out[:, j].numpy()
        assert col.min() >= 0 and col.max() < size
        probs = torch.softmax(row[start:start + size].double(), 0).numpy()
        assert chi2(np.bincount(col, minlength=size), probs) < chi2_limit(size - 1), j
        start += size
    # components are drawn independently: the joint of (0, 1) factorises
    joint = np.bincount(out[:, 0].numpy() * 3 + out[:, 1].numpy(), minlength=6)
    p01 = np.outer(torch.softmax(row[:2].double(), 0).numpy(), torch.softmax(row[2:5].double(), 0).numpy()).ravel()
    assert chi2(joint, p01) < chi2_limit(5)


# -- gaussian ------------------------------------------------------------------------------
def test_gaussian_moments_and_per_row_std(cpu):
    n = 200_000
    mean = torch.tensor([[0.5, -2.0, 3.0]]).repeat(n, 1)
    out = cpu.gaussian(mean, torch.tensor([1.0, 0.1, 2.0]))
    assert out.dtype == torch.float32 and out.shape == (n, 3)
    np.testing.assert_allclose(out.mean(0).numpy(), [0.5, -2.0, 3.0], atol=5 * 2.0 / math.sqrt(n))
    np.testing.assert_allclose(out.std(0).numpy(), [1.0, 0.1, 2.0], rtol=0.01)
    row_std = torch.full((n, 3), 0.5)
    row_std[n // 2:] = 3.0
    out = cpu.gaussian(mean, row_std)
    assert float(out[: n // 2, 0].std()) == pytest.approx(0.5, rel=0.02)
    assert float(out[n // 2:, 0].std()) == pytest.approx(3.0, rel=0.02)
    assert float(cpu.gaussian(mean[:1000], 0.0)[:, 1].sub(-2.0).abs().max()) == 0.0


def test_gaussian_clipped_to_bounds(cpu):
    n = 200_000
    out = cpu.gaussian(torch.zeros(n, 2), 1.0, low=-1.0, high=[2.0, 0.5])
    assert float(out[:, 0].min()) == -1.0 and float(out[:, 0].max()) == 2.0 and float(out[:, 1].max()) == 0.5
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    tol = 5 * math.sqrt(0.25 / n)
    assert float((out[:, 0] == -1.0).float().mean()) == pytest.approx(phi(-1.0), abs=tol)
    assert float((out[:, 0] == 2.0).float().mean()) == pytest.approx(1 - phi(2.0), abs=tol)
    assert float((out[:, 1] == 0.5).float().mean()) == pytest.approx(1 - phi(0.5), abs=tol)
    bounded = cpu.gaussian(torch.zeros(1000, 2), 5.0, low=torch.tensor([-0.1, -3.0]), high=torch.tensor(0.2))
    assert bool((bounded[:, 0] >= torch.tensor(-0.1)).all()) and bool((bounded <= torch.tensor(0.2)).all())
    assert float(bounded[:, 1].min()) == -3.0


# -- determinism, state, out views -------------------------------------------------------
def test_same_seed_same_numbers_and_the_counter_moves_on():
    logits = torch.randn(5000, 4)
    a, b, c = Sampler("cpu", seed=5), Sampler("cpu", seed=5), Sampler("cpu", seed=6)
    first = [a.categorical(logits).clone() for _ in range(3)]
    second = [b.categorical(logits).clone() for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(first, second))
    assert not torch.equal(first[0], first[1])  # each call draws fresh numbers
    assert not torch.equal(first[0], c.categorical(logits))
    assert a.calls == 3
    a.reseed(5)
    assert a.calls == 0 and torch.equal(a.categorical(logits), first[0])
    g1 = a.gaussian(torch.zeros(100, 3), 1.0).clone()
    assert torch.equal(g1, b.gaussian(torch.zeros(100, 3), 1.0)) is False  # b is one call ahead
    b.reseed(5)
    b.categorical(logits)
    assert torch.equal(g1, b.gaussian(torch.zeros(100, 3), 1.0))


def test_batch_shapes_and_strided_out(cpu):
    logits = torch.full((6, 2, 3), -50.0)
    logits[:, 0, 1] = 50.0
    logits[:, 1, 2] = 50.0
    action = torch.full((6, 4), 7, dtype=torch.int32)
    ret = cpu.categorical(logits, action[:, 1:3])  # agents 1 and 2 of 4: a strided view
    assert ret.shape == (6, 2)
    assert action[:, 0].tolist() == [7] * 6 and action[:, 3].tolist() == [7] * 6
    assert action[:, 1].tolist() == [1] * 6 and action[:, 2].tolist() == [2] * 6
    cpu.categorical(logits[:, 0], action[:, 3])  # one column of a row-major array
    assert action[:, 3].tolist() == [1] * 6
    flat = torch.zeros(12, dtype=torch.int32)  # [E*A] logits into [E, A] out and back
    cpu.categorical(logits.reshape(12, 3), flat.view(6, 2))
    assert flat.view(6, 2)[:, 1].tolist() == [2] * 6
    # [E, A, K] and [E*A, K] batches draw the same numbers for the same row
    x = torch.randn(6, 2, 3)
    s1, s2 = Sampler("cpu", seed=9), Sampler("cpu", seed=9)
    assert torch.equal(s1.categorical(x).reshape(-1), s2.categorical(x.reshape(12, 3)))
    with pytest.raises(SamplingError, match=r"out has shape \(6, 2\); expected \[12\]"):
        cpu.categorical(x.reshape(12, 3), action[:, 1:3])  # cannot be viewed as [12] without a copy
    md_out = torch.zeros(6, 5, dtype=torch.int32)
    cpu.multi_discrete(torch.zeros(6, 5), (2, 3), md_out[:, 3:])
    assert md_out[:, :3].abs().sum() == 0 and md_out[:, 3].max() < 2 and md_out[:, 4].max() < 3


def test_with_an_env():
    env = wb.make("cartpole", num_envs=64, target="cpu", seed=0)
    sampler = Sampler.for_env(env)
    logits = torch.zeros(64, 1, 2)
    logits[:32, 0, 1] = 30.0
    logits[32:, 0, 0] = 30.0
    assert sampler.categorical(logits, env.data["action"]) is env.data["action"]
    assert env.data["action"][:32].eq(1).all() and env.data["action"][32:].eq(0).all()
    x_before = env.data["x_dot"].clone()
    env.step(env.data["action"])
    assert bool((env.data["x_dot"][:32] > x_before[:32]).all()) and bool((env.data["x_dot"][32:] < x_before[32:]).all())


def test_narrow_action_dtypes_draw_the_same_numbers():
    """An env's actions are int8 or int16 when its categories fit (envdef.action_dtype): samples into
    them equal the int32 ones, and a dead row's -1 survives, on cpu and cuda (the simulator here)."""
    n = tiny(512, 24)
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(n, 2, 6, generator=gen) * 2
    logits[0, 1] = -math.inf
    md = torch.randn(n, 2, 9, generator=gen)
    for kind in ("cpu", "cuda"):
        dev = Sampler(kind).device
        reference = {}
        for dtype in (torch.int32, torch.int8, torch.int16):
            sampler = Sampler(kind, seed=11)
            cat = sampler.categorical(logits.to(dev), torch.empty(n, 2, dtype=dtype, device=dev))
            multi = sampler.multi_discrete(md.to(dev), (2, 3, 4), torch.empty(n, 2, 3, dtype=dtype, device=dev))
            assert cat.dtype == multi.dtype == dtype
            reference.setdefault("cat", cat.cpu().int())
            reference.setdefault("multi", multi.cpu().int())
            assert torch.equal(cat.cpu().int(), reference["cat"]), (kind, dtype)
            assert torch.equal(multi.cpu().int(), reference["multi"]), (kind, dtype)
            assert cat[0, 1] == -1 and 0 <= int(cat[1:].min()) and int(cat.max()) < 6


# -- cpu and cuda (the simulator without a GPU) draw the same numbers -------------------------
def test_cpu_and_cuda_agree():
    a, b = Sampler("cpu", seed=4), Sampler("cuda", seed=4)
    gen = torch.Generator().manual_seed(3)
    n = tiny(4096, 12)
    dev = b.device
    for k in (3, 21):  # one thread per row, and 8 lanes per row
        logits = torch.randn(n, k, generator=gen) * 2
        logits[1, 1:] = -math.inf
        logits[2] = -math.inf
        x = a.categorical(logits)
        assert torch.equal(x, b.categorical(logits.to(dev)).cpu()), k
        assert x[1] == 0 and x[2] == -1
    probs = torch.rand(n, 5, generator=gen)
    assert torch.equal(a.categorical(probs, probs=True), b.categorical(probs.to(dev), probs=True).cpu())
    md = torch.randn(n, 2, 9, generator=gen)
    out = torch.zeros(n, 2, 3, dtype=torch.int32, device=dev)
    b.multi_discrete(md.to(dev), (2, 3, 4), out)
    assert torch.equal(a.multi_discrete(md, (2, 3, 4)), out.cpu())
    mean = torch.randn(n, 3, generator=gen)
    std = torch.rand(n, 3, generator=gen)
    args = dict(low=-1.0, high=torch.tensor([0.5, 1.0, 2.0]))
    y = b.gaussian(mean.to(dev), std.to(dev), low=-1.0, high=args["high"].to(dev)).cpu()
    torch.testing.assert_close(a.gaussian(mean, std, **args), y, rtol=1e-5, atol=1e-6)
    assert a.calls == b.calls == 5


# -- errors name the argument -----------------------------------------------------------------
def test_errors_name_the_argument(cpu):
    logits = torch.zeros(4, 3)
    cases = [
        (lambda: cpu.categorical(logits.double()), "logits has dtype float64; expected float32"),
        (lambda: cpu.categorical(logits.numpy()), "logits must be a torch.Tensor"),
        (lambda: cpu.categorical(logits, torch.zeros(4)), "out has dtype float32; expected int8, int16 or int32"),
        (lambda: cpu.categorical(logits, torch.zeros(4, dtype=torch.int64)),
         "out has dtype int64; expected int8, int16 or int32"),
        (lambda: cpu.categorical(logits, torch.zeros(5, dtype=torch.int32)), r"out has shape \(5,\); expected \[4\]"),
        (lambda: cpu.categorical(torch.zeros(4, 0)), "logits must have at least one category"),
        (lambda: cpu.categorical(torch.zeros(4, 3, device="meta")), "logits is on meta; this sampler runs on cpu"),
        (lambda: cpu.multi_discrete(logits, (2, 2)), r"logits has 3 entries .* nvec=\[2, 2\] needs sum\(nvec\)=4"),
        (lambda: cpu.multi_discrete(logits, (3, 0)), "nvec must be a non-empty sequence of positive ints"),
        (lambda: cpu.multi_discrete(logits, (1, 2), torch.zeros(4, 3, dtype=torch.int32)),
         r"out has shape \(4, 3\); expected \[4, 2\]"),
        (lambda: cpu.gaussian(logits, torch.ones(2)), r"std has shape \(2,\); expected a scalar, \[3\] or the shape"),
        (lambda: cpu.gaussian(logits, torch.ones(3, dtype=torch.float64)), "std has dtype float64"),
        (lambda: cpu.gaussian(logits, 1.0, low=[0.0, 1.0]), "low must be a float, a sequence of 3 floats"),
        (lambda: cpu.gaussian(logits, 1.0, high=torch.ones(4)), r"high has shape \(4,\)"),
        (lambda: cpu.gaussian(logits.int(), 1.0), "mean has dtype int32; expected float32"),
        (lambda: cpu.gaussian(logits, 1.0, torch.zeros(4, 3, dtype=torch.int32)), "out has dtype int32"),
    ]
    for call, message in cases:
        with pytest.raises(SamplingError, match=message):
            call()
    assert issubclass(SamplingError, wb.WorkbenchError)


# -- on a GPU --------------------------------------------------------------------------------
@gpu_only
def test_cuda_frequencies_and_graph_capture():
    sampler = Sampler("cuda", seed=1)
    row = torch.randn(100, device="cuda")
    logits = row.repeat(1_000_000, 1)
    out = torch.empty(1_000_000, dtype=torch.int32, device="cuda")
    sampler.categorical(logits, out)
    counts = torch.bincount(out.long(), minlength=100).cpu().numpy()
    assert chi2(counts, torch.softmax(row.double(), 0).cpu().numpy()) < chi2_limit(99)
    small = torch.randn(4096, 5, device="cuda")
    small_out = torch.empty(4096, dtype=torch.int32, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sampler.categorical(small, small_out)  # warm-up: compiles before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sampler.categorical(small, small_out)
    before = sampler.calls
    graph.replay()
    first = small_out.clone()
    graph.replay()
    torch.cuda.synchronize()
    assert sampler.calls == before + 2
    assert not torch.equal(first, small_out)  # the device counter moved on inside the graph
    assert bool(((small_out >= 0) & (small_out < 5)).all())


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_cuda_strided_out_and_large_k():
    sampler = Sampler("cuda", seed=2)
    logits = torch.full((1000, 3, 300), -30.0, device="cuda")
    best = torch.randint(0, 300, (1000, 3), device="cuda")
    logits.scatter_(2, best.unsqueeze(2), 30.0)
    action = torch.full((1000, 5), -7, dtype=torch.int32, device="cuda")
    sampler.categorical(logits, action[:, 1:4])
    assert torch.equal(action[:, 1:4].long(), best)
    assert bool((action[:, 0] == -7).all()) and bool((action[:, 4] == -7).all())
