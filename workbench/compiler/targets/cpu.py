"""The `cpu` target: the env's per-agent code through numba `njit`, replicas spread over cores
with `prange`, agents of a replica looped in order (so a phase boundary needs no barrier).

On two cores or fewer the kernels are compiled serial (prange a plain loop): the trainer runs numba
on one thread there, and serial kernels compile 2 to 3.5x faster (CartPole 3.7 s against 7.6 s, Tag
12 s against 28 s, on a first run) and step as fast on one thread. NUMBA_NUM_THREADS above 1 asks
for parallel kernels anyway (env-only rollouts on two cores gain from both).
"""
from __future__ import annotations

import os

import numba
import torch

from ..codegen import Layout
from ._numba import build_namespace, compile_error, is_compile_failure, locate_out_of_bounds, module_is_cached

_PRELUDE = '''
def atomic_add(array, index, value):
    old = array[index]
    array[index] = old + value
    return old


def atomic_max(array, index, value):
    old = array[index]
    if value > old:
        array[index] = value
    return old


def atomic_min(array, index, value):
    old = array[index]
    if value < old:
        array[index] = value
    return old
'''


def parallel_kernels() -> bool:
    """Whether to compile the replicas' loop parallel: on more than two cores, or where NUMBA_NUM_THREADS
    asks for more than one thread."""
    asked = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if asked.isdigit():
        return int(asked) > 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores > 2


class CpuKernels:
    def __init__(self, defn, ns, boundscheck=False, parallel=True):
        self.defn = defn
        self.boundscheck = boundscheck
        self.module = ns["_wb_cached_module"]
        self.module_file = ns.get("__file__")
        # bounds-checked kernels run replicas in order: an IndexError leaves a parallel region badly
        options = dict(parallel=parallel and not boundscheck, boundscheck=boundscheck, cache=self.module is not None,
                       error_model="numpy")
        self._reset = numba.njit(**options)(ns["_wb_reset"])
        self._step = numba.njit(**options)(ns["_wb_step"])
        self.driver_source = ns["_wb_driver_source"]

    @property
    def loaded_from_cache(self) -> bool:
        """True when both kernels came from the on-disk cache (nothing was compiled)."""
        return all(k.stats.cache_hits and not k.stats.cache_misses for k in (self._reset, self._step))

    def _run(self, fn, n_envs, seed, span, views, draw=0):
        before = [v.copy() for v in views] if self.boundscheck else None
        try:
            fn(n_envs, seed, span, draw, *views)
        except Exception as exc:  # noqa: BLE001 - numba raises errors outside NumbaError too (try/except as err)
            if is_compile_failure(fn, exc):
                raise compile_error(self.defn, "cpu", exc, self.module_file) from None
            if isinstance(exc.__cause__ or exc, ZeroDivisionError):
                # numba's power of a number to an integer exponent raises at 0 ** -n, whatever the error model
                raise ZeroDivisionError(
                    f"{self.defn.name}: a {fn.py_func.__name__.removeprefix('_wb_')} phase divided by zero on the cpu "
                    f"target; under numpy's arithmetic what still raises there is 0 to a negative integer power (x ** -1, "
                    f"np.power(x, -2)), where numpy gives inf: write the exponent as a float (x ** -1.0), or guard "
                    f"x == 0") from None
            if not self.boundscheck or not isinstance(exc, IndexError):
                raise
            located = locate_out_of_bounds(self.defn, fn.py_func.__name__, n_envs, seed, span, before, None,
                                           _PRELUDE, "cpu", draw)
            if located is None:
                raise
            raise located from None

    def reset(self, n_envs, seed, span, views):
        self._run(self._reset, n_envs, seed, span, views)

    def step(self, n_envs, seed, span, views, draw=0):
        """One step of every replica; draw=1: each agent's action drawn in the step (codegen.drawn_actions)."""
        self._run(self._step, n_envs, seed, span, views, draw)


class CpuTarget:
    name = "cpu"
    bounds_checked = True  # debug=True and check_env compile with bounds checking
    device = torch.device("cpu")

    def availability(self):
        return None

    def view(self, tensor):
        return tensor.numpy()

    def _module(self, boundscheck):
        # numpy's error model, as numba-cuda's on the GPU: one env source means the same on both (x / 0.0
        # is inf, an int // 0 is 0), where Python's would raise from inside the parallel loop
        device = "_wb_numba.njit(boundscheck=True, error_model='numpy')" if boundscheck else \
            "_wb_numba.njit(error_model='numpy')"
        # (serial kernels are another module text, so another cache entry: numba's cache keys no options)
        serial = "" if parallel_kernels() or boundscheck else "\n# serial kernels (two cores or fewer)"
        return dict(prelude=_PRELUDE, imports="import numba as _wb_numba\nfrom numba import prange" + serial,
                    device_decorator=device, layout=Layout(1, 1), gpu=False)

    def is_cached(self, defn, boundscheck=False) -> bool:
        """True when the on-disk cache holds `defn`'s compiled kernels."""
        return module_is_cached(defn, self.name, **self._module(boundscheck))

    def compile(self, defn, boundscheck=False):
        ns = build_namespace(defn, target=self.name, **self._module(boundscheck))
        return CpuKernels(defn, ns, boundscheck, parallel_kernels())
