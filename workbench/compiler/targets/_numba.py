"""Shared by the numba targets: the env's kernel module (the env source, the random-number library,
the target's intrinsics, jit-wrapped, then the drivers). It is written to the on-disk compile cache
and imported from there, so numba's `cache=True` keeps the compiled drivers for the next process;
where the cache cannot be written the same text is executed in memory."""
from __future__ import annotations

import ast
import inspect
import math
import os
import re
from pathlib import Path

import numpy as np

from .. import codegen, kernel_cache, vocabulary
from ..envdef import EnvDefinition, exec_source
from ...errors import EnvCompileError

_RNG_SOURCE = (Path(__file__).resolve().parent.parent / "rng.py").read_text()
_HELPERS_SOURCE = (Path(__file__).resolve().parent.parent / "helpers.py").read_text()


def _helpers_for(defn: EnvDefinition) -> str:
    """workbench.compiler.helpers' functions, less those the env defines itself (its own win)."""
    tree = ast.parse(_HELPERS_SOURCE)
    own = {n.name for n in ast.parse(defn.source).body if isinstance(n, ast.FunctionDef)}
    lines = _HELPERS_SOURCE.splitlines()
    kept = ["import math"]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name not in own:
            kept.extend(lines[node.lineno - 1:node.end_lineno] + [""])
    return "\n".join(kept) + "\n"


def _numpy_text() -> str:
    """After the jit wrap: every global naming numpy (`import numpy as np`) becomes a module whose
    functions are vocabulary.NUMPY's portable ones (other names fall through to numpy: np.float32,
    np.pi), every global naming math one whose vocabulary.MATH_TWINS are helpers (math.fmod),
    and every function imported from numpy or math (`from numpy import clip`) its portable twin."""
    lines = ["import math as _wb_math", "import types as _wb_types",
             "_wb_numpy = _wb_types.ModuleType('workbench_phase_numpy')",
             "_wb_numpy.__getattr__ = lambda _wb_attr: getattr(_wb_np, _wb_attr)",
             "_wb_phase_math = _wb_types.ModuleType('workbench_phase_math')",
             "_wb_phase_math.__getattr__ = lambda _wb_attr: getattr(_wb_math, _wb_attr)"]
    lines += [f"_wb_numpy.{name} = {target.replace('math.', '_wb_math.')}"
              for name, (target, _args) in vocabulary.NUMPY.items()]
    lines += [f"_wb_phase_math.{name} = {twin}" for name, twin in vocabulary.MATH_TWINS.items()]
    lines += ["_wb_twins = {id(getattr(_wb_np, _wb_n)): getattr(_wb_numpy, _wb_n) for _wb_n in "
              f"{sorted(vocabulary.NUMPY)!r} if hasattr(_wb_np, _wb_n)}}",
              f"_wb_twins.update({{id(getattr(_wb_math, _wb_n)): getattr(_wb_phase_math, _wb_n) for _wb_n in "
              f"{sorted(vocabulary.MATH_TWINS)!r}}})",
              "for _wb_name, _wb_value in list(globals().items()):",
              "    if _wb_value is _wb_np and not _wb_name.startswith('_wb_'):",
              "        globals()[_wb_name] = _wb_numpy",
              "    elif _wb_value is _wb_math and not _wb_name.startswith('_wb_'):",
              "        globals()[_wb_name] = _wb_phase_math",
              "    elif id(_wb_value) in _wb_twins:",
              "        globals()[_wb_name] = _wb_twins[id(_wb_value)]",
              "_wb_float64 = _wb_np.float64  # (float(x) in the env's source: kernel_source)"]
    return "\n".join(lines) + "\n"


# Plain Python (the CUDA simulator, the out-of-bounds replay) runs the division helpers on Python
# scalars too, where `%` by zero raises: numpy's own functions give numpy's values there.
HOST_DIVISION = '''
def _np_mod(x, y):
    with _wb_np.errstate(all="ignore"):
        return _wb_np.remainder(x, y)


def _np_floor_divide(x, y):
    with _wb_np.errstate(all="ignore"):
        return _wb_np.floor_divide(x, y)


def _np_fmod(x, y):
    with _wb_np.errstate(all="ignore"):
        return _wb_np.fmod(x, y)


def _np_divide(x, y):
    with _wb_np.errstate(all="ignore"):
        return _wb_np.true_divide(x, y)
'''


_SEPARATOR = "\n\n# ---- workbench kernel module: everything below is generated ----\n"


def _literal(value):
    """Python text that evaluates to `value` in the kernel module, or None when there is none."""
    if isinstance(value, np.generic):
        inner = _literal(value.item())
        return None if inner is None else f"_wb_np.{type(value).__name__}({inner})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, (bool, int, float, str)) or value is None:
        text = repr(value)
        return text if ast.literal_eval(text) == value else None
    if isinstance(value, (tuple, list)):
        items = [_literal(v) for v in value]
        if any(item is None for item in items):
            return None
        body = ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1 else "")
        return f"({body})" if isinstance(value, tuple) else f"[{body}]"
    return None


# float(x) is float64 in Python (and so in the CUDA simulator), while numba keeps a float32 one float32:
# the kernels call numpy's float64 instead, but where the argument is a string (float('inf')), which
# numba builds with float itself. (Line for line: the env's line N stays line N.)
_FLOAT_CALL = re.compile(r"(?<![.\w])float(\s*\()(?!\s*[rbuRBU]?['\"])")


def kernel_source(source: str) -> str:
    """The env's source as the numba targets compile it: float(x) as numpy's float64(x), unless the
    env defines a float of its own."""
    if re.search(r"^(def\s+float\b|float\s*=)", source, re.M):
        return source
    return _FLOAT_CALL.sub(r"_wb_float64\1", source)


def module_text(defn: EnvDefinition, *, prelude: str, imports: str, device_decorator: str,
                layout: codegen.Layout, gpu: bool) -> str | None:
    """The kernel module of `defn` for a numba target; None when a parameter has no literal form.
    The env source comes first, unchanged, so line N of the module is line N of the env."""
    params = []
    for key, value in defn.kernel_params().items():  # float32 scalars under PRECISION = "float32"
        text = _literal(value)
        if text is None:
            return None
        params.append(f"{key} = {text}")
    driver = codegen.numba_drivers(defn, gpu=gpu, layout=layout)
    wrap = (f"_wb_device = {device_decorator}\n"
            "for _wb_name, _wb_value in list(globals().items()):\n"
            "    if _wb_inspect.isfunction(_wb_value) and _wb_value.__globals__ is globals() \\\n"
            "            and not _wb_name.startswith(('reference_', '_wb_')) and _wb_name != 'validate_params':\n"
            "        globals()[_wb_name] = _wb_device(_wb_value)\n")
    constants = (f"NUM_AGENTS = {defn.num_agents}\nMAX_STEPS = {defn.max_steps}\n"
                 f"TPE = {layout.threads_per_env}\nEPB = {layout.envs_per_block}\n")
    source = kernel_source(defn.source if defn.source.endswith("\n") else defn.source + "\n")
    return (source + _SEPARATOR + "import inspect as _wb_inspect\nimport numpy as _wb_np\n" + imports + "\n"
            + "\n".join(params) + "\n\n" + _RNG_SOURCE + "\n" + _helpers_for(defn) + "\n" + prelude + "\n" + constants
            + "\n" + wrap + "\n" + _numpy_text() + "\n\n" + driver)


def module_is_cached(defn: EnvDefinition, target: str, **module) -> bool:
    """True when the kernel module these arguments make has been compiled into the on-disk cache."""
    text = module_text(defn, **module)
    return text is not None and kernel_cache.enabled() and kernel_cache.is_ready(text, target)


def build_namespace(defn: EnvDefinition, *, prelude: str, imports: str, device_decorator: str, target: str,
                    layout: codegen.Layout, gpu: bool) -> dict:
    """Namespace holding jit-wrapped env functions and the `_wb_reset`/`_wb_step` drivers (still
    plain Python: the caller wraps them as kernels). `_wb_cached_module` is the KernelModule when
    the module lives in the on-disk cache (its drivers can be compiled with cache=True)."""
    text = module_text(defn, prelude=prelude, imports=imports, device_decorator=device_decorator,
                       layout=layout, gpu=gpu)
    if text is not None and kernel_cache.enabled():
        try:
            module = kernel_cache.KernelModule(text, target, defn.name)
        except OSError:
            module = None  # an unwritable cache: compile in memory as below
        if module is not None:
            ns = module.namespace
            ns["_wb_cached_module"] = module
            ns["_wb_driver_source"] = codegen.numba_drivers(defn, gpu=gpu, layout=layout)
            return ns
    source = kernel_source(defn.source)
    ns = exec_source(source, defn.filename, f"workbench_env_{defn.name}")
    if text is not None:
        head = text.index(_SEPARATOR)  # (the generated code on the lines it has in the module's text)
        exec(compile("\n" * text[:head].count("\n") + text[head:], defn.filename, "exec"), ns)
    else:  # parameters without a literal form: bind the objects themselves
        ns.update(defn.kernel_params())
        exec(compile(_RNG_SOURCE, "<workbench.compiler.rng>", "exec"), ns)
        exec(compile(_helpers_for(defn), "<workbench.compiler.helpers>", "exec"), ns)
        exec(compile("import inspect as _wb_inspect\nimport numpy as _wb_np\n" + imports + "\n" + prelude,
                     "<workbench intrinsics>", "exec"), ns)
        ns.update(NUM_AGENTS=defn.num_agents, MAX_STEPS=defn.max_steps, TPE=layout.threads_per_env,
                  EPB=layout.envs_per_block)
        device = eval(device_decorator, ns)
        for key, value in list(ns.items()):
            if inspect.isfunction(value) and value.__globals__ is ns and not key.startswith(("reference_", "_wb_")) \
                    and key != "validate_params":
                ns[key] = device(value)
        exec(compile(_numpy_text(), "<workbench numpy in phases>", "exec"), ns)
        exec(compile(codegen.numba_drivers(defn, gpu=gpu, layout=layout), f"<workbench driver {defn.name}>", "exec"),
             ns)
    ns["_wb_cached_module"] = None
    ns["_wb_driver_source"] = codegen.numba_drivers(defn, gpu=gpu, layout=layout)
    return ns
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = ("During:", "Failed in nopython mode pipeline", "Failed in cuda mode pipeline", "File ", "^", "raised from",
          "- Resolution failure", "There are ", "Rejected as", "- Of which", "Overload of", "No match", "With argument",
          "Current values", "Ignored during")


def _missing_name(text: str, source: str):
    """The name numba says is undefined, where the env's source writes it (else the name is one of the
    compiler's own, which an unsupported construct made it look up), else None."""
    missing = re.search(r"NameError: name '(\w+)' is not defined|Untyped global name '(\w+)'", text)
    if missing and re.search(rf"\b{missing.group(1) or missing.group(2)}\b", source):
        return missing
    return None


def _reason(text: str, source: str = "") -> list:
    """One or two lines of the compiler's text that say what is wrong."""
    missing = _missing_name(text, source)
    if missing:
        return [f"name '{missing.group(1) or missing.group(2)}' is not defined (not a parameter, array, local or "
                f"function of the env)"]
    kept, quoting = [], False
    for ln in text.splitlines():
        stripped = ln.strip()
        quoting = stripped.startswith('File "') or (quoting and bool(stripped))  # numba quotes the source below
        if (quoting or not stripped or stripped.startswith(_NOISE) or re.match(r"^\d+\s*\|", stripped)
                or stripped.startswith(">")):
            if stripped.startswith(">>>") and kept and kept[-1].startswith("No implementation"):
                kept.append(stripped.lstrip("> ").strip())
            continue
        stripped = re.sub(r"\.*\s*Raised from .*$", ".", stripped)  # the place: the env's line says it
        if stripped not in kept:
            kept.append(stripped)
    if kept and kept[0].startswith("No implementation") and len(kept) > 1 and "(" in kept[1]:
        return [kept[0].rstrip(":"), "for " + kept[1]]
    return [k[:240] for k in kept[:2]]


_PLACE = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+)'
                    r'|(?:\bat|Raised from) (?P<at>[^\n]+?) \((?P<at_line>\d+)\)')


def _same_file(shown: str, names: set) -> bool:
    """numba shows a file relative to the working directory when it lies below it."""
    if shown in names:
        return True
    return not shown.startswith("<") and os.path.realpath(shown) in {os.path.realpath(n) for n in names
                                                                     if not n.startswith("<")}


def is_compile_failure(kernel, exc: BaseException) -> bool:
    """True when `exc` comes from numba compiling `kernel` (a numba error, or any error while no
    signature of it has compiled), not from running the compiled kernel."""
    from numba.core.errors import NumbaError
    if isinstance(exc, NumbaError) or type(exc).__module__ in ("numba.core.errors", "numba.cuda.core.errors"):
        return True
    return getattr(kernel, "signatures", None) == []  # the simulator's kernels have none: never


def compile_error(defn: EnvDefinition, target: str, exc: BaseException, module_file: str | None = None
                  ) -> EnvCompileError:
    """The env's line and one or two lines of the compiler's reason; the full text in `details`.
    The line is the innermost place in the env's source that numba names (it lists the failing
    statement first, then its callers)."""
    text = _ANSI.sub("", str(exc)) or type(exc).__name__
    env_lines = defn.source.count("\n") + 1
    names = {defn.filename, module_file} - {None}
    lines = []
    for m in _PLACE.finditer(text):
        shown, number = (m.group("file"), m.group("line")) if m.group("file") else (m.group("at"), m.group("at_line"))
        if _same_file(shown.strip(), names) and int(number) <= env_lines:  # later lines are the generated drivers'
            lines.append(int(number))
    src = defn.source.splitlines()
    missing = _missing_name(text, defn.source)
    if not lines and missing:
        word = re.compile(rf"\b{missing.group(1) or missing.group(2)}\b")
        lines = [k + 1 for k, ln in enumerate(src) if word.search(ln.split("#")[0])][:1]
    line = lines[0] if lines and 0 < lines[0] <= len(src) else None
    where = f" at line {line}:\n    {src[line - 1].strip()}" if line else ""
    reason = "\n".join("  " + ln for ln in _reason(text, defn.source))
    return EnvCompileError(f"env '{defn.name}' failed to compile for target '{target}'{where}\n{reason}",
                           line=line, details=text)


class _OutOfBounds(Exception):
    pass


class _CheckedArray:
    """A numpy array that refuses an index outside its shape, naming itself (the replay's arrays)."""

    def __init__(self, name, array):
        self.name, self.array, self.shape, self.dtype = name, array, array.shape, array.dtype

    def _check(self, index):
        items = index if isinstance(index, tuple) else (index,)
        for axis, (item, size) in enumerate(zip(items, self.shape)):
            if not isinstance(item, slice) and not -size <= int(item) < size:
                shown = ", ".join(str(int(i)) if not isinstance(i, slice) else ":" for i in items)
                raise _OutOfBounds(f"{self.name}[{shown}] is out of bounds: index {int(item)} on axis {axis} "
                                   f"of shape {tuple(self.shape)}")

    def __getitem__(self, index):
        self._check(index)
        value = self.array[index]
        # (a compiled phase does integer arithmetic in 64 bits: an int8 action times 100 is 200, not -56)
        return int(value) if isinstance(value, np.integer) and value.dtype.itemsize < 8 else value

    def __setitem__(self, index, value):
        self._check(index)
        if isinstance(value, int) and self.dtype.kind in "iu":  # (stored as the kernel stores it: wrapped)
            value = np.array(value, dtype=np.int64).astype(self.dtype)
        self.array[index] = value

    def __len__(self):
        return len(self.array)


def locate_out_of_bounds(defn: EnvDefinition, kernel: str, n_envs: int, seed: int, span: int, views: list, layout,
                         prelude: str, target: str, draw: int = 0):
    """Replay one launch in plain Python over copies of the arrays as they were before it; an
    EnvIndexError naming the array, index and env line of the first out-of-bounds access, or None."""
    import sys
    import warnings
    from ...errors import EnvIndexError
    text = module_text(defn, prelude=prelude + HOST_DIVISION, imports="prange = range",
                       device_decorator="(lambda f: f)", layout=codegen.Layout(1, 1), gpu=False)
    if text is None:
        return None
    filename = f"<workbench replay {defn.name}>"
    ns = {"__name__": f"workbench_replay_{defn.name}"}
    exec(compile(text, filename, "exec"), ns)
    names = codegen.kernel_args(defn)[len(codegen.SCALAR_ARGS):]
    arrays = [_CheckedArray(name, view.copy()) for name, view in zip(names, views)]
    env_lines = defn.source.count("\n") + 1
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ns[kernel](n_envs, seed, span, draw, *arrays)
    except _OutOfBounds as exc:
        line, tb = None, sys.exc_info()[2]
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename and tb.tb_lineno <= env_lines:
                line = tb.tb_lineno
            tb = tb.tb_next
        src = defn.source.splitlines()
        where = f" at line {line}:\n    {src[line - 1].strip()}" if line else ""
        return EnvIndexError(f"env '{defn.name}' on target '{target}' indexed an array out of its bounds{where}\n"
                             f"  {exc}", line=line)
    except Exception:  # noqa: BLE001 - the replay only locates; the kernel's own error stands otherwise
        return None
    return None
