"""The sampling kernels' source and its compilation for the cpu and cuda kinds (workbench.runtime.sampling's
`Sampler` launches them): categorical (one or several lanes per row), multi-discrete and clipped
Gaussian drivers over workbench.compiler.rng's counter-based streams.
"""
from __future__ import annotations

import linecache
import math

import numpy as np

BLOCK = 256  # threads per CUDA block
_KIND_CATEGORICAL, _KIND_MULTI_DISCRETE, _KIND_GAUSSIAN = 0xFFFFFFF1, 0xFFFFFFF2, 0xFFFFFFF3


# Kernel source: exec'd into a namespace that already holds workbench.compiler.rng's functions compiled
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

_KERNEL_FILE = "<workbench.runtime.sampling kernels>"
_COMPILED: dict = {}


class _Drivers:
    """The drivers of one kind, each compiled on first use. On cpu each has one signature per action
    dtype with 'A' (any-stride) arrays, so contiguous inputs and strided views share one compile (a
    parallel numba compile costs seconds); numba-cuda specialises per type and layout by itself."""

    def __init__(self, kind, ns, wrap_driver, signatures):
        self.kind, self._ns, self._wrap, self._sigs, self._done = kind, ns, wrap_driver, signatures, {}

    def get(self, name, out_dtype=None):
        """The driver `name`; on cpu, its compile for outs of `out_dtype` (a numpy dtype)."""
        fn = self._done.get((name, out_dtype))
        if fn is None:
            make_sig = self._sigs.get(name)
            wrap = self._wrap(make_sig(out_dtype)) if make_sig is not None else self._wrap
            fn = self._done[(name, out_dtype)] = wrap(self._ns[name])
        return fn


def _cpu_signatures():
    """Signature makers of the cpu drivers, given the dtype of their out (the integer actions the
    discrete ones write; the Gaussian's is always float32)."""
    from numba import types as nt
    from numba.np.numpy_support import from_dtype
    f1, f3, state = nt.Array(nt.float32, 1, "A"), nt.Array(nt.float32, 3, "A"), nt.Array(nt.int64, 1, "A")
    ints = lambda dtype, dims: nt.Array(from_dtype(np.dtype(dtype)), dims, "A")  # noqa: E731
    return {"_cpu_categorical": lambda dtype: nt.void(f3, ints(dtype, 2), state, nt.boolean),
            "_cpu_multi_discrete": lambda dtype: nt.void(f3, ints(dtype, 3), state, state, nt.boolean),
            "_cpu_gaussian": lambda dtype: nt.void(f3, f3, f1, f1, f3, state, nt.int64)}


def build_kernels(kind: str) -> _Drivers:
    """The drivers for kind "cpu" or "cuda" (namespace built once per process, drivers compiled
    on first use)."""
    if kind in _COMPILED:
        return _COMPILED[kind]
    import numba

    from ..compiler.targets._numba import _RNG_SOURCE
    ns = {"__name__": "workbench_sampling_kernels"}
    exec(compile(_RNG_SOURCE, "<workbench.compiler.rng>", "exec"), ns)
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

        from ..compiler.targets import cuda as _cuda_target  # noqa: F401  (numpy alias fix for numba-cuda)
        ns["cuda"] = cuda
        wrap_device = cuda.jit(device=True)
        drivers = _Drivers(kind, ns, cuda.jit, {})
    for name, value in list(ns.items()):
        if callable(value) and getattr(value, "__globals__", None) is ns and not name.startswith(("_", "reference_")):
            ns[name] = wrap_device(value)
    _COMPILED[kind] = drivers
    return drivers
