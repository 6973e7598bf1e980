"""CUDA C environments: phases written as `__device__` C functions, declarations kept in Python.

Either a Python env has a sibling NAME.cu (`attach_c`), or a pure C source declares everything in a
leading `/*@workbench ... */` block of Python (`parse_c`); the cuda-c target compiles the phases.
"""
from __future__ import annotations

import dataclasses
import hashlib
import keyword
import re
import textwrap
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .declaration_checks import refuse_truncated
from .envdef import SPECIAL_ARGS, EnvDefinition, exec_source, parse, phase_index
from ..errors import EnvDefinitionError, TargetUnavailableError, did_you_mean

C_LANGUAGES = ("cuda", "cuda-c")
C_BLOCK = "/*@workbench"
_C_ONLY = "THIS_ENV_IS_CUDA_C_ONLY__RUN_IT_WITH_TARGET_CUDA_C"
_C_FUNCTION = re.compile(r"\b__device__\b(?P<head>[^;{}()#]*?)\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*\{")
_C_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


@dataclass(frozen=True)
class CPhase:
    """A `__device__` function of a C env source: its name, parameter names and source line (and
    each parameter's declared type, as written without its name)."""
    name: str
    args: tuple
    line: int
    types: tuple = field(default=(), compare=False)


def _blank(match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _c_param_type(param: str) -> str:
    """A parameter's type as written, without its name: 'const float* const x' -> 'const float* const'."""
    param = param.split("=")[0].strip()
    brackets = "[]" if "[" in param else ""
    param = re.sub(r"\[[^\]]*\]", "", param).strip()
    return re.sub(r"([A-Za-z_]\w*)\s*$", "", param).strip() + brackets


def _c_param_name(param: str) -> str | None:
    param = re.sub(r"\[[^\]]*\]", "", param.split("=")[0]).strip()
    if not param or param == "void":
        return None
    found = re.search(r"([A-Za-z_]\w*)\s*$", param)
    return found.group(1) if found else param


def _split_params(text: str) -> list:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


def c_functions(source: str) -> dict:
    """Every `__device__` function defined in C `source`: name -> [CPhase, ...] (in source order)."""
    code = _C_NOISE.sub(_blank, source)
    found: dict = {}
    for m in _C_FUNCTION.finditer(code):
        params = [p for p in _split_params(m.group("params")) if _c_param_name(p)]
        line = code.count("\n", 0, m.start("name")) + 1
        found.setdefault(m.group("name"), []).append(CPhase(m.group("name"), tuple(map(_c_param_name, params)), line,
                                                            tuple(map(_c_param_type, params))))
    return found


def c_phases(defn: EnvDefinition) -> dict:
    """The C phases of `defn` by stage ("reset", "step", "observe"): the `__device__` functions
    named as its (Python or stub) phases, their parameters checked against the arrays."""
    if defn.c_source is None:
        raise EnvDefinitionError(f"{defn.name}: has no CUDA C phases (ship envs/{defn.name}.cu beside the .py, "
                                 f"or write it in CUDA C with a {C_BLOCK} ... */ block)")
    where = defn.c_filename.rsplit("/", 1)[-1] if defn.c_filename else "the C source"
    found = c_functions(defn.c_source)
    stages = {}
    for stage, fns in (("reset", defn.reset_phases), ("step", defn.step_phases), ("observe", defn.observe_phases)):
        stages[stage] = []
        for fn in fns:
            defs = found.get(fn.__name__, [])
            if not defs:
                raise EnvDefinitionError(f"{defn.name}: {where} defines no `__device__ void {fn.__name__}(...)` "
                                         f"({_a(stage)} phase){did_you_mean(fn.__name__, found)}")
            if len(defs) > 1:
                raise EnvDefinitionError(f"{defn.name}: {where} defines {fn.__name__}() more than once (lines "
                                         f"{', '.join(str(d.line) for d in defs)})", line=defs[1].line)
            phase = defs[0]
            for arg in phase.args:
                if arg not in defn.arrays and arg not in SPECIAL_ARGS and arg not in defn.entities:
                    raise EnvDefinitionError(
                        f"{defn.name}: {phase.name}() (line {phase.line} of {where}) takes '{arg}', which is neither "
                        f"env/agent/key, an entity of ENTITIES nor an array (arrays: {sorted(defn.arrays)})"
                        f"{did_you_mean(arg, [*defn.arrays, *defn.entities], repr)}",
                        line=phase.line)
            _check_array_types(defn, phase, where)
            refuse_truncated(defn.name, f"{phase.name}() (line {phase.line} of {where})", phase.args, phase.line)
            phase_index(defn.name, f"{phase.name}() (line {phase.line} of {where})", phase.args, defn.entities,
                        phase.line)
            stages[stage].append(phase)
    return stages


_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.int8): "signed char",
            np.dtype(np.int16): "short", np.dtype(np.int32): "int", np.dtype(np.int64): "long long",
            np.dtype(np.uint8): "unsigned char"}


def c_type(dtype) -> str:
    """C element type of a store array dtype."""
    return _C_TYPES[np.dtype(dtype)]


def _check_array_types(defn: EnvDefinition, phase: CPhase, where: str) -> None:
    """EnvDefinitionError where a phase takes an array as a pointer to another element type than the
    array's, or as another array's view (which NVRTC would refuse without naming the array, or not
    at all)."""
    for arg, written in zip(phase.args, phase.types):
        spec = defn.arrays.get(arg)
        if spec is None:
            continue
        own = c_type(spec.dtype)
        words = [w for w in re.split(r"[\s*\[\]]+", written) if w and w not in ("const", "__restrict__", "volatile")]
        pointer = "*" in written or "[]" in written
        base = " ".join(words)
        fix = f"write `{own}* {arg}` (or `{arg}_view {arg}`)"
        if pointer and base in C_ELEMENT_TYPES and base != own:
            problem = f"as {base}*, but '{arg}' holds {np.dtype(spec.dtype).name} ({own})"
        elif not pointer and base.endswith("_view") and base != f"{arg}_view" and base[:-5] in defn.arrays:
            problem, fix = f"as {base}, another array's view", f"write `{arg}_view {arg}`"
        else:
            continue
        raise EnvDefinitionError(f"{defn.name}: {phase.name}() (line {phase.line} of {where}) takes '{arg}' {problem}: "
                                 f"{fix}", line=phase.line)


C_ELEMENT_TYPES = ("float", "double", "signed char", "char", "short", "int", "long", "long long", "unsigned char",
                   "unsigned short", "unsigned int", "unsigned", "unsigned long long", "bool")


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def c_only_error(defn: EnvDefinition, target: str) -> TargetUnavailableError:
    """The error for making an env written in CUDA C alone on a target other than cuda-c."""
    return TargetUnavailableError(
        f"env '{defn.name}' is written in CUDA C alone: it runs on target 'cuda-c' (an NVIDIA GPU, with NVRTC), "
        f"not on '{target}'; to run it on the cpu or cuda target too, give it Python phases: register a Python "
        f"source with the same declarations and this C source as its twin, wb.register({defn.name!r}, "
        f"python_source, c_source=c_source)")


def attach_c(defn: EnvDefinition, c_source: str, c_filename: str | None = None) -> EnvDefinition:
    """`defn` with C phases attached (checked by `c_phases` when the cuda-c target compiles)."""
    digest = hashlib.sha256((defn.digest + "\0" + c_source).encode()).hexdigest()[:16]
    return dataclasses.replace(defn, c_source=c_source, c_filename=c_filename or f"<warpenv {defn.name} C>",
                               digest=digest)


def _c_block_python(name: str, source: str) -> str:
    """The `/*@workbench ... */` block as Python, each line at its line number in `source`."""
    start = source.find(C_BLOCK)
    end = source.find("*/", start + len(C_BLOCK)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise EnvDefinitionError(f"{name}: a CUDA C env begins with a {C_BLOCK} ... */ comment declaring NUM_AGENTS, "
                                 f"OBSERVATION, ACTION, STATE and PARAMS in Python syntax")
    first_line = source.count("\n", 0, start)
    body = source[start + len(C_BLOCK):end].split("\n")
    rest = textwrap.dedent("\n".join(body[1:])).split("\n") if len(body) > 1 else []
    prelude = ("from workbench.compiler.envdef import Box, Discrete, MultiDiscrete, check_ranges, per_agent, "
               "per_entity, per_env; import math")
    head = body[0].strip()
    lines = [""] * first_line + [prelude + (f"; {head}" if head else "")] + rest
    return "\n".join(lines) + "\n"


def parse_c(name: str, source: str, filename: str | None = None, overrides: Mapping | None = None) -> EnvDefinition:
    """Parse a pure CUDA C env source: declarations from its `/*@workbench ... */` block (Python,
    with Box, Discrete, MultiDiscrete, per_env, per_agent and math imported), phases from its
    `__device__` functions: `reset`, `step`, `observe`, or the names listed in RESET / STEP /
    OBSERVE. The Python phases of the result are stubs that no numba target compiles."""
    filename = filename or f"<warpenv {name}>"
    block = _c_block_python(name, source)
    found = c_functions(source)
    try:
        declared = exec_source(block, filename, f"workbench_env_{name}")
    except EnvDefinitionError as exc:  # (STEP = [move, score]: C function names written as Python names)
        named = re.search(r"NameError at line \d+: name '(\w+)'", str(exc))
        if named and named.group(1) in found:
            raise EnvDefinitionError(f"{exc}: {named.group(1)} is a C function; the {C_BLOCK} block is Python, "
                                     f"so phases are listed by name as text, e.g. STEP = [\"{named.group(1)}\"]",
                                     line=exc.line) from None
        raise
    lists = {}
    for key, default in (("RESET", "reset"), ("STEP", "step"), ("OBSERVE", "observe")):
        value = declared.get(key, default)
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
            raise EnvDefinitionError(f"{name}: {key} must name the C phase functions, e.g. {key} = [\"{default}\"]; "
                                     f"got {value!r}")
        for fn in names:
            if fn not in found:
                raise EnvDefinitionError(f"{name}: the source defines no `__device__ void {fn}(...)` ({_a(default)} "
                                         f"phase, named in {key}){did_you_mean(fn, found)}")
            if not fn.isidentifier() or keyword.iskeyword(fn):
                raise EnvDefinitionError(f"{name}: a phase may not be called '{fn}'")
        lists[key] = list(names)
    stubs = [f"def {fn}():\n    return {_C_ONLY}\n" for fn in dict.fromkeys(sum(lists.values(), []))]
    trailer = [f"{key} = [{', '.join(names)}]" for key, names in lists.items()]
    trailer += ["reset = RESET[0]", "observe = OBSERVE[0] if len(OBSERVE) == 1 else OBSERVE"]
    stand_in = block + "\n" + "\n".join(stubs) + "\n" + "\n".join(trailer) + "\n"
    defn = parse(name, stand_in, filename, overrides)
    defn = dataclasses.replace(attach_c(defn, source, filename), language="cuda-c")
    c_phases(defn)
    return defn
