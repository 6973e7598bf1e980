"""The `%%warpenv` cell magic: write an environment in a notebook cell, get it compiled,
registered and checked.

    %load_ext workbench

    %%warpenv chase --agents 16
    from workbench.compiler.envdef import Box, Discrete, per_agent
    ...                                   # the same text as a file in envs/

The cell goes through the path every env takes (`registry.register` -> `envdef.parse`, or
`envdef_c.parse_c` for `--lang cuda`, then the targets' compile), so `wb.make(NAME, ...)` works
afterwards. Errors raise (a notebook run in CI fails) and render as one short message naming the
cell's own line: the source is registered as `<warpenv NAME>` with a blank first line standing
for the `%%warpenv` line, so line N of a message is line N of the cell as the notebook shows it.
Results are cached by a hash of the cell and its options: re-running an unchanged cell is instant.
"""
from __future__ import annotations

import hashlib
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..runtime import registry
from ..errors import WorkbenchError

DEFAULT_ARCH = "sm_80"  # what a CUDA C cell is compiled for when no GPU is present
DEFAULT_REPLICAS = 4
CHECK_STEPS = 64
LANGUAGES = ("python", "cuda")  # what --lang gives; registry.LANGUAGES holds every spelling it takes


class WarpenvOptionError(WorkbenchError, ValueError):
    """A `%%warpenv` option that is malformed or does not fit the cell."""


@dataclass
class WarpenvResult:
    """What one `%%warpenv` run produced (kept in the cache; `cached` tells a re-run apart)."""
    name: str
    language: str  # "python" or "cuda"
    key: str  # hash of the cell and its options
    entry: registry.EnvSource  # what was registered under `name`
    definition: object  # the EnvDefinition (parameters resolved)
    targets: tuple  # targets compiled and run here
    envs: dict = field(default_factory=dict)  # target -> the small Env compiled for it
    compile_seconds: float | None = None  # None when every kernel came from the kernel cache
    nvrtc_arch: str | None = None  # a CUDA C cell compiled without a GPU: the arch it was compiled for
    nvrtc_cached: bool = False  # ... its cubin taken from the compile cache (NVRTC did not run)
    report: object = None  # check_env's CheckReport, None when not checked
    note: str = ""  # why a CUDA C cell did not run here
    cached: bool = False  # True when this run came from the cache
    loaded_from_cache: list = field(default_factory=list)  # targets whose kernels came from the on-disk cache
    made: dict = field(default_factory=dict)  # target -> (where its kernels came from, seconds its make took)
    summary: str = ""


_CACHE: dict = {}  # key -> WarpenvResult
_LAST: dict = {}  # env name -> the last WarpenvResult for it


def last_result(name: str) -> WarpenvResult | None:
    """The result of the last successful `%%warpenv NAME` run in this session."""
    return _LAST.get(name)


def clear_cache() -> None:
    """Forget cached cells (compiled kernels stay in the kernel cache)."""
    _CACHE.clear()


# ---- options ---------------------------------------------------------------------------------

def _language(lang: str) -> str:
    found = registry.canonical_language(lang)
    if found is None:
        raise WarpenvOptionError(f"%%warpenv: --lang {lang!r} is not a cell language; use --lang python (the "
                                 f"default) or --lang cuda (a CUDA C source with a /*@workbench ... */ block)")
    return found


def _targets(lang: str, target: str | None, c_twin: bool = False) -> tuple:
    """The targets a cell compiles and runs for here (a Python cell with a C twin: cuda-c too, where it
    runs); a CUDA C cell with no GPU gets ()."""
    from ..compiler.targets import all_targets, available_targets, best_target, get_target
    if target is not None and target not in all_targets():
        raise WarpenvOptionError(f"%%warpenv: --target {target!r} is not a target; choose cpu, cuda or cuda-c "
                                 f"(available here: {', '.join(available_targets())})")
    if lang == "python":
        if target == "cuda-c" and not c_twin:
            raise WarpenvOptionError("%%warpenv: a Python cell compiles for the cpu and cuda targets; target cuda-c "
                                     "runs CUDA C phases (--c-source FILE: the cell's phases in CUDA C; or --lang cuda "
                                     "and the whole env in CUDA C)")
        if target is not None:
            get_target(target)  # TargetUnavailableError names what is available
            return (target,)
        found = ("cpu", "cuda") if best_target() == "cuda" else ("cpu",)
        return found + ("cuda-c",) if c_twin and "cuda-c" in available_targets() else found
    if target not in (None, "cuda-c"):
        raise WarpenvOptionError(f"%%warpenv: a CUDA C cell (--lang cuda) runs only on target cuda-c, not {target!r}; "
                                 f"write the env in Python for the cpu and cuda targets")
    return ("cuda-c",) if "cuda-c" in available_targets() else ()


def _read_c_source(path: str) -> str:
    """The text of --c-source's file; WarpenvOptionError naming it when it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise WarpenvOptionError(f"%%warpenv: --c-source {path}: cannot read it ({exc.strerror or exc})") from None


def _positive(value, option: str) -> int | None:
    if value is not None and value < 1:
        raise WarpenvOptionError(f"%%warpenv: {option} must be >= 1, got {value}")
    return value


def _agents_param(defn) -> str:
    """The parameter NUM_AGENTS names, which --agents overrides."""
    declared = defn.namespace.get("NUM_AGENTS")
    if isinstance(declared, str) and declared in defn.params:
        return declared
    raise WarpenvOptionError(f"%%warpenv {defn.name}: --agents needs NUM_AGENTS to name a parameter (e.g. "
                             f"NUM_AGENTS = \"num_agents\" with num_agents in PARAMS); this env declares "
                             f"NUM_AGENTS = {declared!r}")


# ---- the build -------------------------------------------------------------------------------

def _summary(result: WarpenvResult) -> str:
    defn = result.definition
    agents = f"{defn.num_agents} agent{'s' if defn.num_agents != 1 else ''}"
    parts = [f"warpenv {result.name}: {agents}, obs {tuple(defn.obs_shape)} per agent, "
             f"action {registry.describe_space(defn.action)}"]
    if result.targets:
        built = f"compiled for {', '.join(result.targets)}"
    elif result.nvrtc_arch and result.nvrtc_cached:
        built = f"CUDA C for {result.nvrtc_arch} loaded from the compile cache"
    elif result.nvrtc_arch:
        built = f"CUDA C compiled with NVRTC for {result.nvrtc_arch}"
    else:
        built = "CUDA C parsed"
    if result.cached:
        built += " (cached)"
    elif result.targets and set(result.loaded_from_cache) == set(result.targets):
        built = f"loaded from cache for {', '.join(result.targets)}"
        if result.compile_seconds is not None:
            built += f" in {result.compile_seconds:.1f} s"
    elif result.compile_seconds is not None:
        built += f" in {result.compile_seconds:.1f} s"
    elif result.targets:
        built += " (kernels reused)"
    parts.append(built)
    if result.report is not None:
        report = result.report
        where = " vs ".join(report.targets)
        diff = max(report.max_abs_diff.values(), default=None)
        parts.append(f"check passed on {where} ({report.steps} steps x {report.num_envs} replicas, "
                     f"{report.episodes_finished} episodes finished"
                     + (f", largest difference {diff:.1e}" if diff is not None else "") + ")"
                     + (f"; {report.caveat}" if report.caveat else ""))
    elif result.targets:
        parts.append("check skipped (--no-check)")
    if result.note:
        parts.append(result.note)
    return "; ".join(parts)


def details(result: WarpenvResult) -> str:
    """What `%%warpenv --verbose` prints after the summary: where each target's kernels came from and
    how long its make took, and the check's largest difference per array."""
    if result.cached:
        lines = [f"  {', '.join(result.targets) or 'nothing'}: this cell ran unchanged before; its result was reused"]
    else:
        lines = [f"  {target}: {origin}, make {took:.2f} s" for target, (origin, took) in result.made.items()]
    if result.report is not None and result.report.max_abs_diff:
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in result.report.max_abs_diff.items())
        lines.append(f"  check: largest difference between targets per array: {diffs}")
    elif result.report is not None:
        lines.append(f"  check: the runner's contract on {result.report.targets[0]} (one target here: no "
                     f"other to compare with)")
    return "\n".join(lines)


def warpenv(name: str, cell: str, *, lang: str = "python", target: str | None = None, agents: int | None = None,
            replicas: int = DEFAULT_REPLICAS, check: bool = True, progress=None,
            c_source: str | None = None, c_filename: str | None = None) -> WarpenvResult:
    """What `%%warpenv` does, callable without IPython: register the env `name` from the cell body
    `cell` (the text below the `%%warpenv` line), compile it for the targets it supports here, check
    it at `replicas` replicas, and return a WarpenvResult (its `summary` is the printed line).
    c_source: a Python cell's phases in CUDA C (its twin, read from the file `c_filename`), for the
    cuda-c target, which the check then compares with the others.
    `progress(message)` hears of a wait before it starts (a first-time compile)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise WarpenvOptionError(f"%%warpenv: the env name must be a Python identifier, got {name!r}")
    lang = _language(lang)
    replicas = _positive(replicas, "--replicas")
    agents = _positive(agents, "--agents")
    if not cell.strip():
        raise WarpenvOptionError(f"%%warpenv {name}: the cell is empty; write the env source below the %%warpenv line")
    if c_source is not None and lang != "python":
        raise WarpenvOptionError(f"%%warpenv {name}: --c-source gives a Python cell its CUDA C twin; a --lang cuda "
                                 f"cell holds its C phases itself")
    key = hashlib.sha256(repr((name, cell, lang, target, agents, replicas, bool(check), c_source)).encode()).hexdigest()
    hit = _CACHE.get(key)
    if hit is not None:
        entry = hit.entry
        registry.register(name, entry.source, language=entry.language, filename=entry.filename,
                          params=dict(entry.params), c_source=entry.c_source, c_filename=entry.c_filename)
        result = replace(hit, cached=True)
        result.summary = _summary(result)
        _LAST[name] = result
        return result

    targets = _targets(lang, target, c_source is not None)
    twin = dict(c_source=c_source, c_filename=c_filename)
    source = "\n" + cell  # line 1 stands for the %%warpenv line: messages count lines as the cell shows them
    filename = f"<warpenv {name}>"
    previous = registry._REGISTRY.get(name)
    try:
        entry = registry.register(name, source, language=lang, filename=filename, **twin)
        defn = registry.definition(name)
        if agents is not None:
            entry = registry.register(name, source, language=lang, filename=filename,
                                      params={_agents_param(defn): agents}, **twin)
            defn = registry.definition(name)
        result = WarpenvResult(name, lang, key, entry, defn, targets)
        _build(result, replicas, check, progress)
    except BaseException:
        if previous is None:  # a cell that fails leaves the registry as it found it
            registry._REGISTRY.pop(name, None)
        else:
            registry._REGISTRY[name] = previous
        raise
    result.summary = _summary(result)
    _CACHE[key] = result
    _LAST[name] = result
    return result


def _compile_c_without_running(result: WarpenvResult, own: bool) -> str:
    """Compile the definition's C phases with NVRTC where it loads (a C error is named without a
    GPU); returns the note saying what did not happen here. own: the cell is the C source (its
    compile is the result's), else a Python cell's C twin."""
    from ..compiler.envdef_c import c_phases
    from ..compiler.targets.cuda import simulator_enabled
    from ..compiler.targets.cuda_c import compile_program, cubin_cached, nvrtc_problem
    defn = result.definition
    c_phases(defn)  # (the phases and their arrays, checked before NVRTC runs)
    try:
        import cuda.core  # noqa: F401
        problem = nvrtc_problem()
    except ImportError as exc:
        problem = f"cuda.core is not installed ({exc}); pip install cuda-core"
    cached = problem is None and cubin_cached(defn, DEFAULT_ARCH)
    if problem is None:
        start = time.perf_counter()
        compile_program(defn, DEFAULT_ARCH)
        if own:
            result.nvrtc_cached = cached
            result.compile_seconds = None if cached else time.perf_counter() - start
            result.nvrtc_arch = DEFAULT_ARCH
    twin = "" if own else "its C twin "
    note = f"{twin}not compiled: {problem}" if problem is not None else "" if own else \
        f"its C twin compiled with NVRTC for {DEFAULT_ARCH}"
    import torch
    if simulator_enabled() or not torch.cuda.is_available():
        note += ("; " if note else "") + ("running it" if own else "running the C twin (cuda-c)") + \
            " needs a GPU (none is visible here)"
    return note


def _build(result: WarpenvResult, replicas: int, check: bool, progress=None) -> None:
    from ..runtime.check import check_env
    from ..runtime.env import _KERNEL_CACHE, _kernel_key, make

    defn = result.definition
    if not result.targets:  # a CUDA C cell where the cuda-c target cannot run: compile it if NVRTC is here
        result.note = _compile_c_without_running(result, own=True)
        return
    if defn.c_source is not None and "cuda-c" not in result.targets:  # a C twin that cannot run here
        result.note = _compile_c_without_running(result, own=False)

    from ..compiler.targets import all_targets

    seconds, fresh, announced = 0.0, False, False
    with warnings.catch_warnings():  # numba-cuda warns that a few replicas leave the GPU idle: that is the point
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
        for target in result.targets:
            in_memory = _kernel_key(defn, all_targets()[target], False) in _KERNEL_CACHE
            fresh |= not in_memory
            on_disk = getattr(all_targets()[target], "is_cached", lambda d: False)(defn)
            if not in_memory and not on_disk and progress is not None and not announced:
                progress("compiling (first time)...")
                announced = True
            start = time.perf_counter()
            env = result.envs[target] = make(result.name, num_envs=replicas, target=target)
            took = time.perf_counter() - start
            seconds += took
            if not in_memory and getattr(env.kernels, "loaded_from_cache", False):
                result.loaded_from_cache.append(target)
            origin = ("kernels compiled earlier in this session" if in_memory else
                      "the on-disk kernel cache" if target in result.loaded_from_cache else "compiled")
            result.made[target] = (origin, took)
        result.compile_seconds = seconds if fresh else None
        if check:
            # (past MAX_STEPS where that costs at most 4x: every replica's reset is compared then)
            steps = min(max(CHECK_STEPS, defn.max_steps + 8), 4 * CHECK_STEPS)
            result.report = check_env(result.name, targets=result.targets, num_envs=replicas, steps=steps)


# ---- IPython ---------------------------------------------------------------------------------

@magics_class
class WarpenvMagics(Magics):
    """Holds the `%%warpenv` cell magic."""

    @magic_arguments()
    @argument("name", help="Name to register the env under (wb.make(NAME, ...) afterwards).")
    @argument("--target", default=None,
              help="Compile and check only this target: cpu, cuda or cuda-c. Default: every target of the "
                   "cell's language present here (cpu, plus cuda on a GPU; cuda-c for --lang cuda).")
    @argument("--lang", default="python",
              help="Language of the cell: python (default) or cuda (a CUDA C source whose declarations sit in a "
                   "leading /*@workbench ... */ block). Without a GPU a CUDA C cell is compiled with NVRTC "
                   f"for {DEFAULT_ARCH} but not run.")
    @argument("--c-source", default=None, metavar="FILE",
              help="A Python cell's phases in CUDA C (a .cu file defining each phase as a __device__ function of "
                   "the same name and arguments): the cuda-c target runs them, and the check compares it with "
                   "the cpu and cuda targets where a GPU is present.")
    @argument("--agents", type=int, default=None,
              help="Number of agents: overrides the parameter that NUM_AGENTS names (e.g. num_agents), also "
                   "as the default of later wb.make(NAME) calls.")
    @argument("--replicas", type=int, default=DEFAULT_REPLICAS,
              help=f"Replicas of the compile and the check (default {DEFAULT_REPLICAS}).")
    @argument("--no-check", action="store_true",
              help="Compile and register only; skip wb.check_env.")
    @argument("--verbose", action="store_true",
              help="Also print where each target's kernels came from and how long they took, the check's "
                   "differences per array, and on a compile error the compiler's full text (else condensed).")
    @cell_magic
    def warpenv(self, line, cell):
        """Compile, register and check the environment written in this cell.

        The cell holds an env source in the format of the files in envs/ (or, with --lang cuda, a CUDA
        C source beginning with a /*@workbench ... */ block). It is registered under NAME, compiled
        for the targets it supports here and checked with wb.check_env at a few replicas; one summary
        line is printed. Re-running an unchanged cell with the same options is instant (cached).
        Errors raise, with a short message naming the cell's line (--verbose adds the compiler's full text).
        """
        args = parse_argstring(self.warpenv, line)
        try:
            c_source = _read_c_source(args.c_source) if args.c_source else None
            result = warpenv(args.name, cell, lang=args.lang, target=args.target, agents=args.agents,
                             replicas=args.replicas, check=not args.no_check,
                             progress=lambda message: print(message, flush=True), c_source=c_source,
                             c_filename=str(Path(args.c_source).resolve()) if args.c_source else None)
        except WorkbenchError as exc:
            full_text = getattr(exc, "details", "")
            if full_text and args.verbose:
                print(full_text, file=sys.stderr, flush=True)
            elif full_text:
                print(f"(the compiler's full text: run the cell as %%warpenv {line.strip()} --verbose, "
                      f"or read the error's .details)", file=sys.stderr, flush=True)
            raise
        print(result.summary)
        if args.verbose and details(result):
            print(details(result))


def load_ipython_extension(ipython):
    """`%load_ext workbench` registers the `%%warpenv` cell magic."""
    ipython.register_magics(WarpenvMagics)
