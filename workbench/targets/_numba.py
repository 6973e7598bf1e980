"""Shared by the numba targets: builds a namespace where the env source, the random-number
library and the target's intrinsics are compiled with the target's jit, then the drivers."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

from .. import codegen
from ..envdef import EnvDefinition, exec_source
from ..errors import EnvCompileError

_RNG_SOURCE = (Path(__file__).resolve().parent.parent / "rng.py").read_text()


def build_namespace(defn: EnvDefinition, *, prelude: str, wrap_device, extra: dict, layout: codegen.Layout,
                    gpu: bool) -> dict:
    """Fresh namespace holding jit-wrapped env functions and the `_wb_reset`/`_wb_step` drivers
    (still plain Python: the caller wraps them as kernels)."""
    ns = exec_source(defn.source, defn.filename, f"workbench_env_{defn.name}")
    ns.update(defn.params)
    exec(compile(_RNG_SOURCE, "<workbench.rng>", "exec"), ns)
    exec(compile(prelude, "<workbench intrinsics>", "exec"), ns)
    ns.update(extra)
    ns.update(NUM_AGENTS=defn.num_agents, MAX_STEPS=defn.max_steps, TPE=layout.threads_per_env,
              EPB=layout.envs_per_block)
    for key, value in list(ns.items()):
        if inspect.isfunction(value) and value.__globals__ is ns and not key.startswith("reference_") \
                and key != "validate_params":
            ns[key] = wrap_device(value)
    driver = codegen.numba_drivers(defn, gpu=gpu, layout=layout)
    exec(compile(driver, f"<workbench driver {defn.name}>", "exec"), ns)
    ns["_wb_driver_source"] = driver
    return ns


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = ("During:", "Failed in nopython mode pipeline", "Failed in cuda mode pipeline")


def compile_error(defn: EnvDefinition, target: str, exc: BaseException) -> EnvCompileError:
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
