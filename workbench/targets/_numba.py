"""Shared by the numba targets: the env's kernel module (the env source, the random-number library,
the target's intrinsics, jit-wrapped, then the drivers). It is written to the on-disk compile cache
and imported from there, so numba's `cache=True` keeps the compiled drivers for the next process;
where the cache cannot be written the same text is executed in memory."""
from __future__ import annotations

import ast
import inspect
import math
import re
from pathlib import Path

import numpy as np

from .. import codegen, kernel_cache
from ..envdef import EnvDefinition, exec_source
from ..errors import EnvCompileError

_RNG_SOURCE = (Path(__file__).resolve().parent.parent / "rng.py").read_text()
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


def module_text(defn: EnvDefinition, *, prelude: str, imports: str, device_decorator: str,
                layout: codegen.Layout, gpu: bool) -> str | None:
    """The kernel module of `defn` for a numba target; None when a parameter has no literal form.
    The env source comes first, unchanged, so line N of the module is line N of the env."""
    params = []
    for key, value in defn.params.items():
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
    source = defn.source if defn.source.endswith("\n") else defn.source + "\n"
    return (source + _SEPARATOR + "import inspect as _wb_inspect\nimport numpy as _wb_np\n" + imports + "\n"
            + "\n".join(params) + "\n\n" + _RNG_SOURCE + "\n" + prelude + "\n" + constants + "\n" + wrap
            + "\n\n" + driver)


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
    ns = exec_source(defn.source, defn.filename, f"workbench_env_{defn.name}")
    if text is not None:
        generated = text[len(defn.source):]
        exec(compile("\n" * defn.source.count("\n") + generated, defn.filename, "exec"), ns)
    else:  # parameters without a literal form: bind the objects themselves
        ns.update(defn.params)
        exec(compile(_RNG_SOURCE, "<workbench.rng>", "exec"), ns)
        exec(compile("import inspect as _wb_inspect\nimport numpy as _wb_np\n" + imports + "\n" + prelude,
                     "<workbench intrinsics>", "exec"), ns)
        ns.update(NUM_AGENTS=defn.num_agents, MAX_STEPS=defn.max_steps, TPE=layout.threads_per_env,
                  EPB=layout.envs_per_block)
        device = eval(device_decorator, ns)
        for key, value in list(ns.items()):
            if inspect.isfunction(value) and value.__globals__ is ns and not key.startswith(("reference_", "_wb_")) \
                    and key != "validate_params":
                ns[key] = device(value)
        exec(compile(codegen.numba_drivers(defn, gpu=gpu, layout=layout), f"<workbench driver {defn.name}>", "exec"),
             ns)
    ns["_wb_cached_module"] = None
    ns["_wb_driver_source"] = codegen.numba_drivers(defn, gpu=gpu, layout=layout)
    return ns
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = ("During:", "Failed in nopython mode pipeline", "Failed in cuda mode pipeline")


def compile_error(defn: EnvDefinition, target: str, exc: BaseException, module_file: str | None = None
                  ) -> EnvCompileError:
    """A short message naming the env source line and the compiler's own text."""
    text = _ANSI.sub("", str(exc))
    name = re.escape(defn.filename)
    lines = [int(n) for n in re.findall(rf'File "{name}", line (\d+)', text)]
    lines += [int(n) for n in re.findall(rf"at {name} \((\d+)\)", text)]
    src = defn.source.splitlines()
    missing = re.search(r"NameError: name '(\w+)' is not defined", text)
    if not lines and missing:
        word = re.compile(rf"\b{missing.group(1)}\b")
        lines = [k + 1 for k, ln in enumerate(src) if word.search(ln.split("#")[0])][:1]
    where = ""
    if lines and 0 < lines[-1] <= len(src):
        where = f" at line {lines[-1]}:\n    {src[lines[-1] - 1].strip()}"
    kept = []
    for ln in text.splitlines():
        if ln.strip() and not ln.strip().startswith(_NOISE) and ln not in kept:
            kept.append(ln)
    summary = "\n".join(kept[:12])
    return EnvCompileError(f"env '{defn.name}' failed to compile for target '{target}'{where}\n{summary}",
                           line=lines[-1] if lines else None)
