"""The `cuda-c` target: an env's CUDA C phases (envs/NAME.cu beside NAME.py, or a pure C source)
inside generated driver kernels (codegen_c), compiled at run time with NVRTC through cuda.core and
launched on torch's current stream over the store's own device tensors (passed as raw pointers).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from .. import codegen_c, kernel_cache
from ..codegen import gpu_layout
from ..envdef import EnvDefinition
from ...errors import EnvCompileError
from .cuda import simulator_enabled

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "cuda"
CUBIN_FILE = "program.cubin"
_LOG_LINE = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?:catastrophic )?error")


def nvrtc_problem() -> str | None:
    """None when NVRTC can be loaded here, else why not."""
    try:
        from cuda.bindings import nvrtc
        err, _, _ = nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001 - a missing library shows up as several error types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"NVRTC cannot be loaded ({first}); pip install nvidia-cuda-nvrtc"
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return f"NVRTC cannot be loaded ({err})"
    return None


# an error inside a template of wb_runtime.cuh: NVRTC names the line of the env that instantiated it
_INSTANTIATED_AT = re.compile(r"detected during.*? at line (?P<line>\d+) of (?P<file>[^\n]+)")


def _compile_error(defn: EnvDefinition, log: str) -> EnvCompileError:
    """The errors of an NVRTC log at the env's own C lines (at most two; the first error elsewhere
    when none is the env's, at the env's line that instantiated it when that is in wb_runtime.cuh),
    without the warnings about the generated driver; the whole log in `details`."""
    name = defn.c_filename or ""
    errors = [m for m in map(_LOG_LINE.match, (ln.strip() for ln in log.splitlines())) if m]
    own = [m for m in errors if m.group("file") == name]
    shown = [m.string for m in (own[:2] or errors[:1])]
    if not shown:  # no error with a place: the log's first error line, else its first line
        lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
        shown = [next((ln for ln in lines if "error" in ln), lines[0] if lines else "NVRTC gave no log")]
    where, line = "", None
    if own:
        line = int(own[0].group("line"))
    elif errors:  # an error inside wb_runtime.cuh's templates: the env's line that instantiated it
        calls = _INSTANTIATED_AT.finditer(log, max(log.find(errors[0].string), 0))
        line = next((int(c.group("line")) for c in calls if c.group("file").strip() == name), None)
    if line is not None:
        src = defn.c_source.splitlines()
        text = src[line - 1].strip() if 0 < line <= len(src) else ""
        where = f" at line {line} of {Path(name).name}:\n    {text}"
    summary = "\n".join("  " + ln for ln in shown)
    return EnvCompileError(f"env '{defn.name}' failed to compile for target 'cuda-c'{where}\n{summary}", line=line,
                           details=log.strip())


def _cubin_path(source: str, options) -> Path:
    """Where the compile cache keeps the cubin of `source` under `options`: the key holds the source,
    the runtime header it includes, the architecture, a register cap and NVRTC's version."""
    from cuda.bindings import nvrtc
    header = (INCLUDE_DIR / codegen_c.RUNTIME_HEADER).read_text()
    key = repr((source, header, options.arch, getattr(options, "max_register_count", None),
                tuple(nvrtc.nvrtcVersion()[1:])))
    return kernel_cache.cache_root() / kernel_cache.digest(key, "cuda-c") / CUBIN_FILE


def compile_program(defn: EnvDefinition, arch: str, layout=None, target_type: str = "cubin"):
    """(cuda.core ObjectCode, generated source) of `defn` for `arch` ("sm_90"); needs NVRTC, no GPU.
    A cubin comes from the compile cache when an earlier process compiled the same program (NVRTC
    takes about a second a program). A compiler error raises EnvCompileError naming the env's C line."""
    from cuda.core import ObjectCode, Program
    from cuda.core._utils.cuda_utils import NVRTCError

    source, options = _program(defn, arch, layout)
    cached = _cubin_path(source, options) if target_type == "cubin" and kernel_cache.enabled() else None
    if cached is not None and cached.is_file():
        return ObjectCode.from_cubin(cached.read_bytes(), name=defn.name), source
    program = Program(source, code_type="c++", options=options)
    try:
        code = program.compile(target_type)
    except NVRTCError as exc:
        raise _compile_error(defn, str(exc).split("compilation log:", 1)[-1]) from None
    finally:
        program.close()
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        kernel_cache.write_once(cached, bytes(code.code))
    return code, source


def _program(defn: EnvDefinition, arch: str, layout=None) -> tuple:
    """(generated source, NVRTC options) of `defn`'s program for `arch`."""
    from cuda.core import ProgramOptions
    source = codegen_c.c_program(defn, layout or gpu_layout(defn.num_agents))
    return source, ProgramOptions(arch=arch, std="c++17", include_path=[str(INCLUDE_DIR)])


def cubin_cached(defn: EnvDefinition, arch: str, layout=None) -> bool:
    """Whether compile_program(defn, arch) would load its cubin from the compile cache (no NVRTC run)."""
    return kernel_cache.enabled() and _cubin_path(*_program(defn, arch, layout)).is_file()


class CudaCKernels:
    def __init__(self, defn, layout, code, source, device):
        self.defn = defn
        self.layout = layout
        self.driver_source = source
        self.device = device
        self._reset = code.get_kernel("wb_reset")
        self._step = code.get_kernel("wb_step")
        self._streams = {}
        self._configs = {}

    def _stream(self):
        from cuda.core import Stream
        handle = torch.cuda.current_stream().cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = Stream.from_handle(handle)
        return stream

    def _run(self, kernel, n_envs, seed, span, views, draw=0):
        from cuda.core import LaunchConfig, launch
        config = self._configs.get(n_envs)
        if config is None:
            grid = (n_envs + self.layout.envs_per_block - 1) // self.layout.envs_per_block
            config = self._configs[n_envs] = LaunchConfig(grid=grid, block=self.layout.block)
        launch(self._stream(), config, kernel, np.int32(n_envs), np.uint64(seed), np.int32(span), np.int32(draw),
               *views)

    def reset(self, n_envs, seed, span, views):
        self._run(self._reset, n_envs, seed, span, views)

    def step(self, n_envs, seed, span, views, draw=0):
        """One step of every replica; draw=1: each agent's action drawn in the step (codegen.drawn_actions)."""
        self._run(self._step, n_envs, seed, span, views, draw)


class CudaCTarget:
    name = "cuda-c"
    device = torch.device("cuda")

    def __init__(self):
        self._problem = ...

    def availability(self):
        if simulator_enabled() or not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch on this machine (CUDA C needs a real GPU)"
        if self._problem is ...:
            try:
                import cuda.core  # noqa: F401
            except ImportError as exc:
                self._problem = f"cuda.core is not installed ({exc}); pip install cuda-core"
            else:
                self._problem = nvrtc_problem()
        return self._problem

    def view(self, tensor):
        """The device address of `tensor` (cuda.core passes a Python int as a pointer)."""
        return tensor.data_ptr()

    def compile(self, defn, layout=None):
        from cuda.core import Device
        layout = layout or gpu_layout(defn.num_agents)
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        code, source = compile_program(defn, f"sm_{major}{minor}", layout)
        device = Device(index)
        device.set_current()  # torch's primary context, which the kernels load into
        return CudaCKernels(defn, layout, code, source, device)
