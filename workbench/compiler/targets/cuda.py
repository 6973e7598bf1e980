"""The `cuda` target: numba-cuda kernels, one group of lanes per replica and agents strided over
the lanes, `cuda.syncthreads()` between phases. Launches go on torch's current stream so they
order with torch work and can be captured in a CUDA graph. Under NUMBA_ENABLE_CUDASIM=1 the same
kernels run in numba's simulator on host arrays (for CI without a GPU)."""
from __future__ import annotations

import contextvars
import os
import warnings

import numpy as np
import torch

from ..codegen import gpu_layout
from ._numba import (HOST_DIVISION, build_namespace, compile_error, is_compile_failure, locate_out_of_bounds,
                     module_is_cached)

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls np.row_stack, removed in numpy 2.5
    np.row_stack = np.vstack

_PRELUDE = '''
def atomic_add(array, index, value):
    return cuda.atomic.add(array, index, value)


def atomic_max(array, index, value):
    return cuda.atomic.max(array, index, value)


def atomic_min(array, index, value):
    return cuda.atomic.min(array, index, value)
'''


_NO_FMA = contextvars.ContextVar("workbench_no_fma", default=False)


def _install_fma_switch():
    """NVVM contracts a*b + c into one fused multiply-add by default; the cpu target never does,
    so near-ties (k-NN order, a tag at exactly the radius) could resolve differently. Env kernels
    compile with contraction off, as the cuda-c target's __fmul_rn/__fadd_rn do; other numba-cuda
    code in the process is left alone."""
    from numba.cuda.cudadrv import nvvm
    original = nvvm.compile_ir
    if getattr(original, "_workbench_no_fma", False):
        return

    def compile_ir(llvmir, **options):
        if _NO_FMA.get() and not options.get("fastmath"):
            options["fma"] = False
        return original(llvmir, **options)

    compile_ir._workbench_no_fma = True
    nvvm.compile_ir = compile_ir


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


if simulator_enabled():  # the simulator evaluates uint64 hashing on numpy scalars, which warn on wrap-around
    warnings.filterwarnings("ignore", message="overflow encountered in scalar", category=RuntimeWarning)


class CudaKernels:
    def __init__(self, defn, ns, layout, boundscheck=False):
        from numba import cuda
        self.defn = defn
        self.layout = layout
        self.boundscheck = boundscheck
        self.module = ns["_wb_cached_module"]
        self.module_file = ns.get("__file__")
        # without link-time optimisation: nvJitLink would contract a*b + c again at link time,
        # whatever NVVM was told (the simulator has no such option, checks bounds itself and
        # compiles nothing to cache)
        options = {}
        if not simulator_enabled():
            options = {"lto": False, "cache": self.module is not None}
        self._reset = cuda.jit(ns["_wb_reset"], **options)
        self._step = cuda.jit(ns["_wb_step"], **options)
        self.driver_source = ns["_wb_driver_source"]
        self._streams = {}

    def _stream(self):
        from numba import cuda
        if simulator_enabled():
            return 0
        handle = torch.cuda.current_stream().cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cuda.external_stream(handle)
        return stream

    def _run(self, kernel, n_envs, seed, span, views, draw=0):
        envs_per_block = min(self.layout.envs_per_block, n_envs)  # small runs (and the simulator) launch less
        grid = (n_envs + envs_per_block - 1) // envs_per_block
        token = _NO_FMA.set(True)  # the first launch compiles
        before = [v.copy() for v in views] if simulator_enabled() else None  # to locate an IndexError
        try:
            kernel[grid, envs_per_block * self.layout.threads_per_env, self._stream()](n_envs, seed, span, draw, *views)
        except Exception as exc:  # noqa: BLE001 - numba raises errors outside NumbaError too (try/except as err)
            if is_compile_failure(kernel, exc):
                raise compile_error(self.defn, "cuda", exc, self.module_file) from None
            if not isinstance(exc, IndexError):
                located = simulator_error(self.defn, exc, self.module_file) if simulator_enabled() else None
                if located is None:
                    raise
                raise located from None
            # the simulator's arrays check their bounds
            from .cpu import _PRELUDE as host_prelude
            located = None if before is None else locate_out_of_bounds(
                self.defn, kernel.py_func.__name__, n_envs, seed, span, before, None, host_prelude, "cuda", draw)
            if located is None:
                raise
            raise located from None
        finally:
            _NO_FMA.reset(token)

    def reset(self, n_envs, seed, span, views):
        self._run(self._reset, n_envs, seed, span, views)

    def step(self, n_envs, seed, span, views, draw=0):
        """One step of every replica; draw=1: each agent's action drawn in the step (codegen.drawn_actions)."""
        self._run(self._step, n_envs, seed, span, views, draw)

    @property
    def loaded_from_cache(self) -> bool:
        """True when both kernels came from the on-disk cache (never under the simulator)."""
        stats = [getattr(k, "stats", None) for k in (self._reset, self._step)]
        return all(s is not None and s.cache_hits and not s.cache_misses for s in stats)


def simulator_error(defn, exc: Exception, module_file):
    """EnvRuntimeError naming the env's line where a phase raised under the CUDA simulator (a math
    domain error, int() of NaN, a name assigned on some paths only), else None."""
    import traceback
    from ...errors import EnvRuntimeError
    env_lines = defn.source.count("\n") + 1
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == module_file and f.lineno <= env_lines]
    if not frames or module_file is None:
        return None
    line = frames[-1].lineno
    text = defn.source.splitlines()[line - 1].strip()
    threads, _, message = str(exc).partition(": ") if str(exc).startswith("tid=") else ("", "", str(exc))
    return EnvRuntimeError(f"env '{defn.name}' raised in numba's CUDA simulator at line {line}:\n    {text}\n  "
                           f"{type(exc).__name__}: {message}{f' ({threads})' if threads else ''}\n  The compiled "
                           f"targets do "
                           f"not raise there: they compute NaN or an undefined value and go on. Keep the value in its "
                           f"domain (math.sqrt(max(x, 0.0)), a float checked with x == x before int(x)) or give the "
                           f"name a value on every path.", line=line)


class CudaTarget:
    name = "cuda"
    bounds_checked = True  # debug=True and check_env compile with bounds checking

    def availability(self):
        if simulator_enabled():
            return None
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch on this machine"
        try:
            from numba import cuda
        except ImportError as exc:
            return f"numba-cuda is not installed ({exc}); pip install numba-cuda"
        if not cuda.is_available():
            return "numba-cuda finds no usable GPU driver"
        return None

    @property
    def device(self):
        return torch.device("cpu") if simulator_enabled() else torch.device("cuda")

    def view(self, tensor):
        if simulator_enabled():
            return tensor.numpy()
        from numba import cuda
        return cuda.as_cuda_array(tensor.detach())

    def _module(self, defn, layout, boundscheck):
        device = "cuda.jit(device=True)"
        prelude = _PRELUDE + HOST_DIVISION if simulator_enabled() else _PRELUDE
        return dict(prelude=prelude, imports="from numba import cuda", device_decorator=device,
                    layout=layout or gpu_layout(defn.num_agents), gpu=True)

    def is_cached(self, defn, boundscheck=False) -> bool:
        """True when the on-disk cache holds `defn`'s compiled kernels (never under the simulator)."""
        return not simulator_enabled() and module_is_cached(defn, self.name, **self._module(defn, None, boundscheck))

    def compile(self, defn, layout=None, boundscheck=False):
        if not simulator_enabled():
            _install_fma_switch()
            # numba-cuda has no bounds checking on a GPU (NotImplementedError): ordinary kernels,
            # and check_env's cpu target, compiled with bounds checks, finds the access
            boundscheck = False
        module = self._module(defn, layout, boundscheck)
        ns = build_namespace(defn, target=self.name, **module)
        return CudaKernels(defn, ns, module["layout"], boundscheck)
