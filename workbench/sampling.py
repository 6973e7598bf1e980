"""On-device action sampling from policy outputs, written straight into an action tensor.

    sampler = Sampler("cuda", seed=0)                      # once per (target, device)
    sampler.categorical(logits, env.data["action"])        # logits [E, A, K] (or [E*A, K])
    sampler.multi_discrete(logits, nvec, out)              # logits [..., sum(nvec)], out [..., len(nvec)]
    sampler.gaussian(mean, std, out, low=-1.0, high=1.0)   # mean [..., d], std [d] or [..., d]

Every call launches one kernel (numba `njit(parallel=True)` over rows on `cpu`; numba-cuda on
`cuda` and `cuda-c`) on torch's current stream, then advances a device-side call counter. The
seed and the counter live in one int64 device tensor, so a call holds no per-call host scalar,
allocates nothing (given `out`, tensor bounds or bounds seen before), and never synchronises:
it can be captured in a CUDA graph (warm it up once before capturing, so the kernel is compiled).

Random numbers come from workbench.rng, compiled into the kernels: row i of call t draws from
`make_key(seed', i, 0, t, kind)` (seed' a salted hash of the seed, so the sampler's streams do not
coincide with an env's streams under the same seed). Row i is the flat index over the batch
dimensions, so [E, A, K] and [E*A, K] logits give the same actions. Same seed, same sequence of
calls and same shapes: same numbers, on every target (up to float32 rounding of exp, which moves
a draw only when it falls within ~1e-7 of a category boundary).

Tensors: logits/probs/mean/std float32; discrete `out` int32 (the env's action dtype), Gaussian
`out` float32; all on the sampler's device. `out` may be a strided view (for example
`env.data["action"][:, 2:5]`, the actions of agents 2..4); it must be a *view*: advanced indexing
such as `action[:, ids]` makes a copy, and writes into a copy never reach the env (sample into a
buffer and `action[:, ids] = buffer` instead). `out` may have any shape that torch can `view` as
the batch shape without a copy. Categories with logit -inf (or probability 0) are never drawn; a
row with no positive finite mass (all -inf, all zero, NaN) gets -1.
"""
from __future__ import annotations

import linecache
import math

import numpy as np
import torch

from .errors import WorkbenchError

BLOCK = 256  # threads per CUDA block
_KIND_CATEGORICAL, _KIND_MULTI_DISCRETE, _KIND_GAUSSIAN = 0xFFFFFFF1, 0xFFFFFFF2, 0xFFFFFFF3
_SEED_SALT = 0x3C6EF372FE94F82B


class SamplingError(WorkbenchError, ValueError):
    """A sampling argument has the wrong type, dtype, shape or device; the message names it."""


# Kernel source: exec'd into a namespace that already holds workbench.rng's functions compiled
# with the target's jit (the same approach as targets/_numba.py for env code). Helpers are
# device functions; the `_cpu_*` drivers become njit(parallel=True), the `_cuda_*` ones kernels.
_KERNELS = '''
def weight(v, m, use_probs):
    """Unnormalised probability of one category: exp(logit - max) or max(prob, 0)."""
    if use_probs:
        return v if v > ZERO else ZERO
    if v == NEG_INF:
        return ZERO
    return np.float32(math.exp(v - m))


def row_max(x, r, c, lo, hi, use_probs):
    m = ZERO
    if not use_probs:
        m = NEG_INF
        for k in range(lo, hi):
            v = x[r, c, k]
            if v > m:
                m = v
    return m


def scan_segment(x, r, c, lo, hi, m, target, acc, use_probs):
    """First k in [lo, hi) whose cumulative weight (from acc) exceeds target, else the last k
    with positive weight, else -1."""
    last = -1
    for k in range(lo, hi):
        w = weight(x[r, c, k], m, use_probs)
        if w > ZERO:
            acc += w
            last = k
            if target < acc:
                return k
    return last


def sample_segment(x, r, c, lo, hi, u, use_probs):
    """Inverse-CDF draw from x[r, c, lo:hi] with the uniform u; index relative to lo, or -1."""
    m = row_max(x, r, c, lo, hi, use_probs)
    total = ZERO
    for k in range(lo, hi):
        total += weight(x[r, c, k], m, use_probs)
    k = scan_segment(x, r, c, lo, hi, m, u * total, ZERO, use_probs)
    return k - lo if k >= 0 else -1


def gaussian_value(mean, std, low, high, r, c, j, rs, key):
    v = mean[r, c, j] + std[r * rs, c * rs, j] * normal(key, j)
    if v < low[j]:
        v = low[j]
    if v > high[j]:
        v = high[j]
    return v


def _cpu_categorical(x, out, state, use_probs):
    n_c = x.shape[1]
    n = x.shape[0] * n_c
    seed = state[0]
    ctr = state[1]
    for i in prange(n):
        r = i // n_c
        c = i - r * n_c
        key = make_key(seed, i, 0, ctr, KIND_CATEGORICAL)
        out[r, c] = sample_segment(x, r, c, 0, x.shape[2], uniform(key, 0), use_probs)
    state[1] = ctr + 1


def _cpu_multi_discrete(x, out, state, offsets, use_probs):
    n_c = x.shape[1]
    n = x.shape[0] * n_c
    seed = state[0]
    ctr = state[1]
    for i in prange(n):
        r = i // n_c
        c = i - r * n_c
        key = make_key(seed, i, 0, ctr, KIND_MULTI_DISCRETE)
        for j in range(out.shape[2]):
            out[r, c, j] = sample_segment(x, r, c, offsets[j], offsets[j + 1], uniform(key, j), use_probs)
    state[1] = ctr + 1


def _cpu_gaussian(mean, std, low, high, out, state, rs):
    n_c = mean.shape[1]
    n = mean.shape[0] * n_c
    seed = state[0]
    ctr = state[1]
    for i in prange(n):
        r = i // n_c
        c = i - r * n_c
        key = make_key(seed, i, 0, ctr, KIND_GAUSSIAN)
        for j in range(mean.shape[2]):
            out[r, c, j] = gaussian_value(mean, std, low, high, r, c, j, rs, key)
    state[1] = ctr + 1


def _cuda_categorical(x, out, state, use_probs, lanes):
    """`lanes` threads per row (a power of two <= 32): lane l owns the contiguous segment
    [l*seg, (l+1)*seg) of the row; the row's max and the segments' sums go through shared
    memory, then the lane whose cumulative interval holds the target scans its segment."""
    smax = cuda.shared.array(BLOCK, np.float32)
    ssum = cuda.shared.array(BLOCK, np.float32)
    n_c = x.shape[1]
    n_k = x.shape[2]
    n = x.shape[0] * n_c
    tid = cuda.threadIdx.x
    lane = tid % lanes
    base = tid - lane
    i = cuda.blockIdx.x * (BLOCK // lanes) + tid // lanes
    active = i < n
    r = i // n_c
    c = i - r * n_c
    m = NEG_INF
    if active and not use_probs:
        k = lane
        while k < n_k:
            v = x[r, c, k]
            if v > m:
                m = v
            k += lanes
    smax[tid] = m
    cuda.syncthreads()
    m = ZERO
    if not use_probs:
        m = NEG_INF
        for l in range(lanes):
            v = smax[base + l]
            if v > m:
                m = v
    seg = (n_k + lanes - 1) // lanes
    lo = min(n_k, lane * seg)
    hi = min(n_k, lo + seg)
    part = ZERO
    if active:
        for k in range(lo, hi):
            part += weight(x[r, c, k], m, use_probs)
    ssum[tid] = part
    cuda.syncthreads()
    if active:
        key = make_key(state[0], i, 0, state[1], KIND_CATEGORICAL)
        total = ZERO
        for l in range(lanes):
            total += ssum[base + l]
        target = uniform(key, 0) * total
        owner = -1
        owner_acc = ZERO
        last = -1
        last_acc = ZERO
        acc = ZERO
        for l in range(lanes):
            p = ssum[base + l]
            if p > ZERO:
                if owner < 0 and target < acc + p:
                    owner = l
                    owner_acc = acc
                last = l
                last_acc = acc
            acc += p
        if owner < 0:
            owner = last
            owner_acc = last_acc
        if owner < 0:
            if lane == 0:
                out[r, c] = -1
        elif lane == owner:
            out[r, c] = scan_segment(x, r, c, lo, hi, m, target, owner_acc, use_probs)


def _cuda_multi_discrete(x, out, state, offsets, use_probs):
    """One thread per (row, component)."""
    n_c = x.shape[1]
    n_j = out.shape[2]
    g = cuda.grid(1)
    if g < x.shape[0] * n_c * n_j:
        i = g // n_j
        j = g - i * n_j
        r = i // n_c
        c = i - r * n_c
        key = make_key(state[0], i, 0, state[1], KIND_MULTI_DISCRETE)
        out[r, c, j] = sample_segment(x, r, c, offsets[j], offsets[j + 1], uniform(key, j), use_probs)


def _cuda_gaussian(mean, std, low, high, out, state, rs):
    """One thread per (row, dimension)."""
    n_c = mean.shape[1]
    n_d = mean.shape[2]
    g = cuda.grid(1)
    if g < mean.shape[0] * n_c * n_d:
        i = g // n_d
        j = g - i * n_d
        r = i // n_c
        c = i - r * n_c
        key = make_key(state[0], i, 0, state[1], KIND_GAUSSIAN)
        out[r, c, j] = gaussian_value(mean, std, low, high, r, c, j, rs, key)
'''

_KERNEL_FILE = "<workbench.sampling kernels>"
_COMPILED: dict = {}


class _Drivers:
    """The drivers of one kind, each compiled on first use. On cpu each has one signature with
    'A' (any-stride) arrays, so contiguous inputs and strided views share one compile (a parallel
    numba compile costs seconds); numba-cuda specialises per layout (contiguous is faster there)."""

    def __init__(self, kind, ns, wrap_driver, signatures):
        self.kind, self._ns, self._wrap, self._sigs, self._done = kind, ns, wrap_driver, signatures, {}

    def __getitem__(self, name):
        fn = self._done.get(name)
        if fn is None:
            sig = self._sigs.get(name)
            fn = self._done[name] = (self._wrap(sig) if sig is not None else self._wrap)(self._ns[name])
        return fn


def _cpu_signatures():
    from numba import types as nt
    f1, f3 = nt.Array(nt.float32, 1, "A"), nt.Array(nt.float32, 3, "A")
    i2, i3, state = nt.Array(nt.int32, 2, "A"), nt.Array(nt.int32, 3, "A"), nt.Array(nt.int64, 1, "A")
    return {"_cpu_categorical": nt.void(f3, i2, state, nt.boolean),
            "_cpu_multi_discrete": nt.void(f3, i3, state, state, nt.boolean),
            "_cpu_gaussian": nt.void(f3, f3, f1, f1, f3, state, nt.int64)}


def _build_kernels(kind: str) -> _Drivers:
    """The drivers for kind "cpu" or "cuda" (namespace built once per process, drivers compiled
    on first use)."""
    if kind in _COMPILED:
        return _COMPILED[kind]
    import numba

    from .targets._numba import _RNG_SOURCE
    ns = {"__name__": "workbench_sampling_kernels"}
    exec(compile(_RNG_SOURCE, "<workbench.rng>", "exec"), ns)
    linecache.cache[_KERNEL_FILE] = (len(_KERNELS), None, _KERNELS.splitlines(True), _KERNEL_FILE)
    exec(compile(_KERNELS, _KERNEL_FILE, "exec"), ns)
    ns.update(np=np, math=math, BLOCK=BLOCK, ZERO=np.float32(0.0), NEG_INF=np.float32(-np.inf),
              KIND_CATEGORICAL=_KIND_CATEGORICAL, KIND_MULTI_DISCRETE=_KIND_MULTI_DISCRETE,
              KIND_GAUSSIAN=_KIND_GAUSSIAN)
    if kind == "cpu":
        ns["prange"] = numba.prange
        wrap_device = numba.njit(inline="always")
        drivers = _Drivers(kind, ns, lambda sig=None: numba.njit(sig, parallel=True), _cpu_signatures())
    else:
        from numba import cuda

        from .targets import cuda as _cuda_target  # noqa: F401  (numpy alias fix for numba-cuda)
        ns["cuda"] = cuda
        wrap_device = cuda.jit(device=True)
        drivers = _Drivers(kind, ns, cuda.jit, {})
    for name, value in list(ns.items()):
        if callable(value) and getattr(value, "__globals__", None) is ns and not name.startswith(("_", "reference_")):
            ns[name] = wrap_device(value)
    _COMPILED[kind] = drivers
    return drivers


def lanes_per_row(num_categories: int) -> int:
    """CUDA threads that share one categorical row: 1 for K <= 8, then about K/4, at most 32."""
    lanes = 1
    while lanes < 32 and lanes * 4 < num_categories:
        lanes *= 2
    return lanes if num_categories > 8 else 1


def _salted(seed: int) -> int:
    x = (int(seed) + _SEED_SALT) & 0xFFFFFFFFFFFFFFFF
    for mul in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB):
        x = ((x ^ (x >> 31)) * mul) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 29)) & 0x7FFFFFFFFFFFFFFF


class Sampler:
    """Samples actions on one target's device into given tensors; see the module docstring.

    target: "cpu", "cuda" or "cuda-c" (the last runs the numba-cuda kernels on the same device
    memory), a Target, or an Env (its target). device: the CUDA device (default: torch's current
    one). The seed and call counter are `state`, an int64 [2] device tensor.
    """

    def __init__(self, target="cpu", seed: int = 0, device=None):
        from .targets import get_target
        if hasattr(target, "target") and hasattr(target, "store"):  # an Env
            target = target.target
        self.target = get_target(target) if isinstance(target, str) else target
        self.kind = "cpu" if self.target.name == "cpu" else "cuda"
        from .targets.cuda import simulator_enabled
        self.simulated = self.kind == "cuda" and simulator_enabled()
        if self.kind == "cpu" or self.simulated:
            self.device = torch.device("cpu")
        else:
            self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        self.state = torch.zeros(2, dtype=torch.int64, device=self.device)
        self._counter = self.state[1:]
        self._kernels = _build_kernels(self.kind)
        self._views: dict = {}
        self._consts: dict = {}
        self._streams: dict = {}
        self.reseed(seed)
        self._state_view = self._view(self.state)

    @classmethod
    def for_env(cls, env, seed: int | None = None) -> "Sampler":
        """A sampler on `env`'s target and device (seed defaults to the env's seed)."""
        return cls(env.target, seed=env.seed if seed is None else seed, device=env.device if env.device.type == "cuda" else None)

    def reseed(self, seed: int) -> None:
        """Restart the streams from `seed` (writes the device state; do this outside graph capture)."""
        self.seed = int(seed)
        self.state.copy_(torch.tensor([_salted(self.seed), 0], dtype=torch.int64))

    @property
    def calls(self) -> int:
        """Calls made since the last reseed (reads the device counter: synchronises)."""
        return int(self.state[1])

    # -- public sampling calls ----------------------------------------------------------
    def categorical(self, logits: torch.Tensor, out: torch.Tensor | None = None, *, probs: bool = False) -> torch.Tensor:
        """One category per row of `logits` [*B, K] (or probabilities [*B, K] with probs=True:
        non-negative, need not be normalised) into out [*B] int32; returns out."""
        self._check_tensor("logits", logits, (torch.float32,), min_dim=1)
        if logits.shape[-1] < 1:
            raise SamplingError(f"logits must have at least one category in its last dimension, got shape "
                                f"{tuple(logits.shape)}")
        batch = tuple(logits.shape[:-1])
        dest = self._out("out", out, batch, (torch.int32,), "int32")
        x3, o2 = _rows(logits, "logits", 1), _rows(dest, "out", 0)
        n = x3.shape[0] * x3.shape[1]
        lanes = lanes_per_row(int(logits.shape[-1]))
        self._run("categorical", n, (n + BLOCK // lanes - 1) // (BLOCK // lanes), (x3, o2), (bool(probs),),
                  (lanes,))
        return dest if out is None else out

    def multi_discrete(self, logits: torch.Tensor, nvec, out: torch.Tensor | None = None, *,
                       probs: bool = False) -> torch.Tensor:
        """Component j of each row drawn from logits[..., offset_j : offset_j + nvec[j]];
        logits [*B, sum(nvec)] float32, out [*B, len(nvec)] int32; returns out."""
        nvec_t = tuple(int(v) for v in (nvec.tolist() if isinstance(nvec, (torch.Tensor, np.ndarray)) else nvec))
        if not nvec_t or min(nvec_t) < 1:
            raise SamplingError(f"nvec must be a non-empty sequence of positive ints, got {nvec!r}")
        self._check_tensor("logits", logits, (torch.float32,), min_dim=1)
        if logits.shape[-1] != sum(nvec_t):
            raise SamplingError(f"logits has {logits.shape[-1]} entries in its last dimension; nvec={list(nvec_t)} "
                                f"needs sum(nvec)={sum(nvec_t)}")
        batch = tuple(logits.shape[:-1])
        dest = self._out("out", out, batch + (len(nvec_t),), (torch.int32,), "int32")
        offsets = self._const(("nvec", nvec_t), lambda: np.concatenate([[0], np.cumsum(nvec_t)]).astype(np.int64))
        x3, o3 = _rows(logits, "logits", 1), _rows(dest, "out", 1)
        n = x3.shape[0] * x3.shape[1]
        self._run("multi_discrete", n, (n * len(nvec_t) + BLOCK - 1) // BLOCK, (x3, o3), (offsets, bool(probs)))
        return dest if out is None else out

    def gaussian(self, mean: torch.Tensor, std, out: torch.Tensor | None = None, low=None, high=None) -> torch.Tensor:
        """clip(mean + std * N(0, 1), low, high): mean [*B, d] float32, std float, [d] or [*B, d],
        low/high None (unbounded), float, sequence of d, or float32 tensor [d]; out [*B, d]."""
        self._check_tensor("mean", mean, (torch.float32,), min_dim=1)
        d = int(mean.shape[-1])
        dest = self._out("out", out, tuple(mean.shape), (torch.float32,), "float32")
        if isinstance(std, torch.Tensor) and tuple(std.shape) == tuple(mean.shape):
            self._check_tensor("std", std, (torch.float32,), min_dim=1)
            std3, rs = _rows(std, "std", 1), 1
        else:
            std3, rs = self._bound("std", std, d, None, f" or the shape of mean {tuple(mean.shape)}")[None, None], 0
        lo = self._bound("low", low, d, -math.inf)
        hi = self._bound("high", high, d, math.inf)
        m3, o3 = _rows(mean, "mean", 1), _rows(dest, "out", 1)
        n = m3.shape[0] * m3.shape[1] * d
        self._run("gaussian", n, (n + BLOCK - 1) // BLOCK, (m3, std3, lo, hi, o3), (rs,))
        return dest if out is None else out

    # -- helpers --------------------------------------------------------------------------
    def _check_tensor(self, name, t, dtypes, min_dim):
        if not isinstance(t, torch.Tensor):
            raise SamplingError(f"{name} must be a torch.Tensor on {self.device}, got {type(t).__name__}")
        if t.dtype not in dtypes:
            wanted = " or ".join(str(d).replace("torch.", "") for d in dtypes)
            raise SamplingError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected {wanted}")
        if t.device.type != self.device.type or (self.device.type == "cuda" and t.device.index != self.device.index):
            raise SamplingError(f"{name} is on {t.device}; this sampler runs on {self.device} "
                                f"(target '{self.target.name}')")
        if t.dim() < min_dim:
            raise SamplingError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(t.shape)}")

    def _out(self, name, out, shape, dtypes, default):
        if out is None:
            return torch.empty(shape, dtype=getattr(torch, default), device=self.device)
        self._check_tensor(name, out, dtypes, min_dim=0)
        if tuple(out.shape) == shape:
            return out
        if out.numel() == math.prod(shape):
            try:
                return out.view(shape)
            except RuntimeError:
                pass
        raise SamplingError(f"{name} has shape {tuple(out.shape)}; expected {list(shape)} (or a tensor torch can "
                            f"view as that shape without a copy)")

    def _const(self, key, make):
        t = self._consts.get(key)
        if t is None:
            t = self._consts[key] = torch.as_tensor(make()).to(self.device)
        return t

    def _bound(self, name, value, d, default, alternative=""):
        """[d] float32 device tensor from a float, a sequence of d floats or a tensor [d] / [1] / []
        (host values are converted once and cached)."""
        if isinstance(value, torch.Tensor):
            self._check_tensor(name, value, (torch.float32,), min_dim=0)
            if value.dim() <= 1 and value.numel() == 1:
                return value.reshape(1).expand(d)
            if tuple(value.shape) == (d,):
                return value
            raise SamplingError(f"{name} has shape {tuple(value.shape)}; expected a scalar, [{d}]{alternative}")
        if value is None:
            if default is None:
                raise SamplingError(f"{name} must be given")
            value = default
        try:
            arr = np.broadcast_to(np.asarray(value, dtype=np.float32), (d,))
        except (TypeError, ValueError):
            raise SamplingError(f"{name} must be a float, a sequence of {d} floats or a float32 tensor [{d}], "
                                f"got {value!r}") from None
        return self._const((name, tuple(arr.tolist())), lambda: arr.copy())

    def _view(self, t):
        """Kernel-side array over `t` (cached by pointer and layout on CUDA, where making one costs ~20 us)."""
        if self.kind == "cpu" or self.simulated:
            return t.detach().numpy()
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        view = self._views.get(key)
        if view is None:
            from numba import cuda
            if len(self._views) > 256:
                self._views.clear()
            # owner=None: the view holds no reference; it is only used while a live tensor sits at
            # this exact pointer with this exact layout, which is then the memory it describes.
            view = self._views[key] = cuda.from_cuda_array_interface(t.detach().__cuda_array_interface__,
                                                                     owner=None, sync=False)
        return view

    def _run(self, name, work, grid, arrays, extra, cuda_extra=()):
        """Run the `name` driver: (*arrays, state, *extra) on cpu, then cuda_extra on cuda; the
        counter advances on the device (in the cpu driver, or by a torch op on the stream)."""
        if work == 0:
            self._counter.add_(1)
            return
        views = [self._view(a) if isinstance(a, torch.Tensor) else a for a in arrays]
        extra = tuple(self._view(a) if isinstance(a, torch.Tensor) else a for a in extra)
        if self.kind == "cpu":
            self._kernels["_cpu_" + name](*views, self._state_view, *extra)
            return
        kernel = self._kernels["_cuda_" + name]
        args = (*views, self._state_view, *extra, *cuda_extra)
        if self.simulated:
            kernel[grid, BLOCK](*args)
        else:
            from numba import cuda
            handle = torch.cuda.current_stream(self.device).cuda_stream
            stream = self._streams.get(handle)
            if stream is None:
                stream = self._streams[handle] = cuda.external_stream(handle)
            kernel[grid, BLOCK, stream](*args)
        self._counter.add_(1)


def _rows(t: torch.Tensor, name: str, trailing: int) -> torch.Tensor:
    """View of t with exactly two batch dimensions before its `trailing` ones: [R, C, *tail]."""
    lead = t.dim() - trailing
    tail = tuple(t.shape[lead:])
    if lead == 2:
        return t
    if lead == 1:
        return t.unsqueeze(1)
    if lead == 0:
        return t.unsqueeze(0).unsqueeze(0)
    try:
        return t.view((-1, t.shape[lead - 1]) + tail)
    except RuntimeError:
        raise SamplingError(f"{name} has shape {tuple(t.shape)} and strides {t.stride()}, which cannot be viewed "
                            f"with its batch dimensions merged; pass it with at most 2 batch dimensions") from None
