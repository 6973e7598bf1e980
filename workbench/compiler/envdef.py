"""How an environment is declared: spaces, state arrays, parameters and per-agent phase functions.

An environment source (a file in envs/ or a `%%warpenv` cell) is Python that declares, at
module level:

    NUM_AGENTS   int, or a function of the parameters
    MAX_STEPS    episode length (a truncation, not a termination)
    OBSERVATION  Box(shape=...) per agent
    ACTION       Discrete(n) | MultiDiscrete(nvec) | Box(low, high, shape)
    STATE        {name: per_env(...) | per_agent(...) | per_entity(entity, ...)}
    PARAMS       {name: value}: globals of the kernel code, overridable in wb.make
    ENTITIES     optional {entity: count}: other things of a replica that phases can run over
    PRECISION    optional "float64" (default) | "float32": the type of float parameters in phases
    RESET = [phase, ...] (or a single `reset`), STEP = [phase, ...] (or a single `step`) and observe
    as phase functions

Phase functions take (env, agent, key, <array names>...); the framework binds arrays by name.
A phase taking `agent` runs once per (replica, agent); one taking an entity's name instead runs
once per (replica, entity); one taking neither runs once per replica.
"""
from __future__ import annotations

import hashlib
import inspect
import keyword
import linecache
import math
import re
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import EnvDefinitionError, EnvParameterError, did_you_mean
from .observed_state import observed_state
from .declaration_checks import (REQUIRED, box_problem, check_active, check_host_hooks, check_phase_arguments,
                                 check_reserved_names, refuse_declaration, refuse_space, refuse_truncated,
                                 refuse_unknown_params)

SPECIAL_ARGS = ("env", "agent", "key")
# names of the generated drivers' own arguments and locals (codegen, codegen_c): an array or entity so named
# would be shadowed by them
DRIVER_NAMES = ("n_envs", "seed", "span", "draw", "tid", "e", "e64", "a", "ea", "ws", "lane", "active", "i")
_DTYPES = {"float32": np.float32, "float64": np.float64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
           "int64": np.int64, "uint8": np.uint8}


def action_dtype(categories: int) -> np.dtype:
    """The smallest signed integer that holds discrete actions 0 .. categories - 1 and the samplers'
    -1 (a row with nothing to draw): int8 up to 128 categories, int16 up to 32768, else int32."""
    for dtype in (np.int8, np.int16):
        if categories - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


@dataclass(frozen=True)
class Discrete:
    """One integer action in [0, n) per agent."""
    n: int


@dataclass(frozen=True)
class MultiDiscrete:
    """Several integer actions per agent, the i-th in [0, nvec[i])."""
    nvec: tuple


@dataclass(frozen=True)
class Box:
    """Float32 vector per agent with elementwise bounds: numbers or sequences, whose entries (or the
    whole bound) may be functions of the parameters, as a shape's may."""
    low: Any = -math.inf
    high: Any = math.inf
    shape: tuple = ()


@dataclass(frozen=True)
class ArrayDecl:
    """A state array: `layout` is "env" ([E, *shape]), "agent" ([E, A, *shape]) or "entity"
    ([E, count of `entity`, *shape])."""
    layout: str
    dtype: str = "float32"
    shape: tuple = ()
    entity: str = ""


def _dtype_name(dtype) -> str:
    """A dtype as its name: "int32" for np.int32 or np.dtype("int32") too (an unknown one is refused by name later)."""
    if isinstance(dtype, str):
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        return repr(dtype)


def per_env(dtype: str = "float32", shape: tuple = ()) -> ArrayDecl:
    """State array with one entry (of `shape`: a tuple, or one dimension) per replica: [E, *shape]."""
    return ArrayDecl("env", _dtype_name(dtype), _shape_tuple(shape))


def per_agent(dtype: str = "float32", shape: tuple = ()) -> ArrayDecl:
    """State array with one entry (of `shape`: a tuple, or one dimension) per agent: [E, A, *shape]."""
    return ArrayDecl("agent", _dtype_name(dtype), _shape_tuple(shape))


def per_entity(entity: str, dtype: str = "float32", shape: tuple = ()) -> ArrayDecl:
    """State array with one entry (of `shape`) per entity of ENTITIES: [E, count, *shape]. It is
    stored as a per-replica array whose shape starts with the entity count."""
    if not isinstance(entity, str):
        raise EnvDefinitionError(f"per_entity takes the entity's name (a key of ENTITIES) first, got {entity!r}")
    return ArrayDecl("entity", _dtype_name(dtype), _shape_tuple(shape), entity)


def _shape_tuple(shape) -> tuple:  # one dimension (3, or a parameter's name) as np.zeros(3) takes it
    return (shape,) if isinstance(shape, (int, np.integer, str)) else tuple(shape)


@dataclass(frozen=True)
class ResolvedArray:
    name: str
    layout: str  # "env" | "agent"
    dtype: np.dtype
    shape: tuple  # trailing shape after [E] or [E, A]
    owner: str  # "env" (declared in STATE) or "framework"
    entity: str | None = None  # per_entity arrays: the entity (layout "env", shape[0] its count)


@dataclass
class EnvDefinition:
    """A parsed environment source with its parameters resolved."""
    name: str
    source: str
    filename: str
    namespace: dict
    params: dict
    num_agents: int
    max_steps: int
    observation: Box
    action: Any
    arrays: dict  # name -> ResolvedArray, framework arrays included
    reset_phases: list
    step_phases: list
    observe_phases: list
    digest: str = field(default="")
    c_source: str | None = None  # CUDA C phases for the cuda-c target (see parse_c, attach_c)
    c_filename: str | None = None
    language: str = "python"  # "cuda-c" when the phases exist only in C (the Python ones are stubs)
    entities: dict = field(default_factory=dict)  # ENTITIES resolved: name -> count
    precision: str = "float64"  # PRECISION: the type of float parameters inside phases
    origin: Any = None  # the registry entry (runtime/registry.EnvSource) it was parsed from, if any
    obs_state: tuple = ()  # the state arrays the observation copies, in its order (observed_state)
    active: str | None = None  # ACTIVE: the per-agent array nonzero while the agent is in the game

    def phase_index(self, fn) -> str | None:
        """What a Python phase runs over: "agent", an entity's name, or None (once per replica)."""
        line = fn.__code__.co_firstlineno
        return phase_index(self.name, f"{fn.__name__}() (line {line})", self.phase_args(fn), self.entities, line)

    def kernel_params(self) -> dict:
        """PARAMS as the kernels see them: float values (and floats inside tuples and lists) become
        numpy float32 scalars when PRECISION is "float32"; otherwise the values themselves."""
        return {k: _with_precision(v, self.precision) for k, v in self.params.items()}

    @property
    def obs_shape(self) -> tuple:
        return tuple(self.observation.shape)

    def agent_groups(self) -> dict | None:
        """AGENT_GROUPS at these parameters, {group: agent ids} (None: the env declares none)."""
        fn = self.namespace.get("AGENT_GROUPS")
        return None if fn is None else {str(k): [int(i) for i in ids]
                                        for k, ids in fn(types.SimpleNamespace(**self.params)).items()}

    def phase_args(self, fn) -> list:
        return list(inspect.signature(fn).parameters)


PRECISIONS = ("float64", "float32")


def _with_precision(value, precision):
    if precision != "float32" or isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, (float, np.floating)):
        return np.float32(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_with_precision(v, precision) for v in value)
    return value


def phase_index(env_name: str, what: str, args, entities: Mapping, line=None) -> str | None:
    """"agent", an entity's name or None (per replica) for a phase taking `args`; a phase taking
    more than one of them is an EnvDefinitionError."""
    taken = [a for a in args if a == "agent" or a in entities]
    if len(taken) > 1:
        raise EnvDefinitionError(
            f"{env_name}: {what} takes {' and '.join(repr(a) for a in taken)}; a phase runs over "
            f"one thing: take 'agent', or one entity of ENTITIES ({', '.join(entities) or 'none declared'}), or "
            f"neither (once per replica)", line=line)
    return taken[0] if taken else None


_INTERVAL = re.compile(r"^\s*(int\s+)?([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])\s*$")


def check_ranges(p, ranges: Mapping) -> str | None:
    """For an env's `validate_params`: the first parameter of `p` outside its range, as a message
    naming the parameter, its value and the range; None when all are inside.

    ranges: {name: "(0, inf)" | "[0, 1]" | "int [1, inf)" | ...}, intervals in the usual notation
    ("[" closed, "(" open; "inf", "pi" and numbers as bounds; "int" asks for an integer). NaN is in
    no range."""
    for name, spec in ranges.items():
        m = _INTERVAL.match(spec)
        if m is None:
            raise EnvDefinitionError(f"range of '{name}' must read like '(0, inf)' or 'int [1, inf)', got {spec!r}")
        want_int, left, low, high, right = m.groups()
        low, high = _bound(name, low), _bound(name, high)
        value = getattr(p, name)
        is_number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        ok = is_number and (is_int or not want_int) and \
            (low < value if left == "(" else low <= value) and (value < high if right == ")" else value <= high)
        if not ok:
            shown = spec.replace("int ", "").strip()
            return f"parameter {name}={value!r} is out of range: it must be {'an int ' if want_int else ''}in {shown}"
    return None


def _bound(name, text):
    sign, body = (-1.0, text[1:].strip()) if text.startswith("-") else (1.0, text)
    named = {"inf": math.inf, "pi": math.pi}
    try:
        return sign * (named[body] if body in named else float(body))
    except ValueError:
        raise EnvDefinitionError(f"range of '{name}': bound {text!r} is not a number, inf or pi") from None


def _of_params(fn, params, what):
    """fn(p) for a declaration that is a function of the parameters; its error names the declaration."""
    try:
        return fn(types.SimpleNamespace(**params))
    except Exception as exc:
        raise EnvDefinitionError(f"{what}: its function of the parameters raised {type(exc).__name__}: {exc} "
                                 f"(PARAMS has {sorted(params)})") from None


def _as_int(value, params, what):
    if callable(value):
        value = _of_params(value, params, what)
    if isinstance(value, str):
        if value not in params:
            raise EnvDefinitionError(f"{what}: '{value}' is not a parameter; PARAMS has {sorted(params)}"
                                     + did_you_mean(value, params, repr))
        value = params[value]
    if not isinstance(value, (int, np.integer)):
        raise EnvDefinitionError(f"{what} must be an int (or a function of the parameters), got {value!r}")
    return int(value)


def _box_bound(bound, params, what):
    """A Box's low or high with its functions of the parameters called (the whole bound or entries)."""
    bound = _of_params(bound, params, what) if callable(bound) else bound
    if isinstance(bound, (tuple, list)):
        return tuple(_of_params(b, params, what) if callable(b) else b for b in bound)
    return bound


def _box(box, params, what):
    return Box(_box_bound(box.low, params, f"{what}.low"), _box_bound(box.high, params, f"{what}.high"),
               _shape(box.shape, params, f"{what}.shape"))


def _shape(shape, params, what):
    if isinstance(shape, (int, str)) or callable(shape):
        shape = (shape,)
    return tuple(_as_int(s, params, what) for s in shape)


def exec_source(source: str, filename: str, module_name: str) -> dict:
    """Run an env source into a fresh namespace; a syntax error names the env and the source line."""
    env = module_name.removeprefix("workbench_env_")
    lines = source.splitlines(True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    namespace = {"__name__": module_name, "__file__": filename}
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        raise EnvDefinitionError(f"{env}: syntax error at line {exc.lineno}: {exc.msg}\n    "
                                 f"{(exc.text or '').rstrip()}", line=exc.lineno) from None
    try:
        exec(code, namespace)
    except Exception as exc:  # noqa: BLE001 - any error while defining the env is the author's
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        hint = ""
        if isinstance(exc, NameError) and getattr(exc, "name", None):
            import builtins
            import difflib
            close = difflib.get_close_matches(exc.name, [k for k in namespace if not k.startswith("__")]
                                              + dir(builtins), n=1, cutoff=0.75)
            hint = f"; did you mean '{close[0]}'?" if close else ""
        raise EnvDefinitionError(f"{env}: {type(exc).__name__} at line {line}: {exc}{hint}", line=line) from None
    return namespace


def parse(name: str, source: str, filename: str | None = None, overrides: Mapping | None = None) -> EnvDefinition:
    """Parse an env source and resolve its parameters (defaults updated by `overrides`)."""
    filename = filename or f"<warpenv {name}>"
    namespace = exec_source(source, filename, f"workbench_env_{name}")
    defaults = dict(namespace.get("PARAMS", {}))
    overrides = dict(overrides or {})
    refuse_unknown_params(name, overrides, defaults)
    check_reserved_names(name, source, namespace, defaults)
    params = {**defaults, **overrides}
    for key, value in params.items():
        if (key in defaults and isinstance(defaults[key], (int, float))
                and not isinstance(value, (int, float, np.number))):
            raise EnvDefinitionError(f"{name}: parameter '{key}' must be a number, got {value!r}")
    counts = [k for k in params if isinstance(defaults.get(k), int) and not isinstance(defaults[k], bool)]
    params.update({k: int(params[k]) for k in counts  # (2.0 for a count: ranges, shapes and loops take ints)
                   if isinstance(params[k], (float, np.floating)) and float(params[k]).is_integer()})
    validate = namespace.get("validate_params")
    if validate is not None:
        try:
            message = validate(types.SimpleNamespace(**params))
        except Exception as exc:  # noqa: BLE001 - the env author's own code: say where it failed
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
            line = frames[-1].lineno if frames else None
            where = f" at line {line}" if line else ""
            raise EnvDefinitionError(f"{name}: validate_params raised {type(exc).__name__}{where}: {exc}",
                                     line=line) from None
        if message:
            raise EnvParameterError(f"{name}: {message}")
    for key in counts:  # (after the env's own checks, whose messages say more)
        if not isinstance(params[key], (bool, np.bool_)) and not float(params[key]).is_integer():
            raise EnvDefinitionError(f"{name}: parameter '{key}' is a count (its default is {defaults[key]!r}): "
                                     f"it must be a whole number, got {params[key]!r}")
        params[key] = int(params[key])

    for required, example in REQUIRED.items():
        if required not in namespace:
            raise EnvDefinitionError(f"{name}: the source does not define {required}; add e.g. {example} "
                                     f"(docs/writing-an-env.md)")
    if "RESET" not in namespace and "reset" not in namespace:
        raise EnvDefinitionError(f"{name}: the source defines no reset function (define `reset` or `RESET = [...]`)")
    if "STEP" not in namespace and "step" not in namespace:
        raise EnvDefinitionError(f"{name}: the source defines no step function (define `step` or `STEP = [...]`)")
    num_agents = _as_int(namespace["NUM_AGENTS"], params, "NUM_AGENTS")
    if not 1 <= num_agents <= 1_000_000:
        raise EnvDefinitionError(f"{name}: NUM_AGENTS must be in [1, 1000000], got {num_agents}")
    max_steps = _as_int(namespace.get("MAX_STEPS", 2**31 - 1), params, "MAX_STEPS")
    if max_steps < 1:
        raise EnvDefinitionError(f"{name}: MAX_STEPS must be positive, got {max_steps}")
    check_host_hooks(name, source, filename, namespace, params, num_agents)

    obs_space = namespace["OBSERVATION"]
    if not isinstance(obs_space, Box):
        refuse_space(name, "OBSERVATION", obs_space)
    obs_space = _box(obs_space, params, "OBSERVATION")
    refuse_declaration(name, source, "OBSERVATION", box_problem(obs_space))
    action = namespace["ACTION"]
    if isinstance(action, Discrete):
        action = Discrete(_as_int(action.n, params, "ACTION.n"))
        refuse_declaration(name, source, "ACTION", None if action.n >= 1 else
                            f"Discrete(n) needs n >= 1 (the number of actions), got n={action.n}: declare "
                            f"Discrete(n) with n >= 1")
        act_shape, act_dtype = (), action_dtype(action.n)
    elif isinstance(action, MultiDiscrete):
        nvec = action.nvec if isinstance(action.nvec, (tuple, list)) else (action.nvec,)
        action = MultiDiscrete(tuple(_as_int(n, params, "ACTION.nvec") for n in nvec))
        if not action.nvec:
            refuse_declaration(name, source, "ACTION", "MultiDiscrete(nvec) needs at least one action: declare "
                                "MultiDiscrete((n0, n1, ...)) with every n >= 1, or Discrete(n) for one action")
        refuse_declaration(name, source, "ACTION", None if min(action.nvec) >= 1 else
                            f"MultiDiscrete(nvec) needs every count >= 1 (the number of choices of each action), "
                            f"got nvec={action.nvec}: make every entry >= 1")
        act_shape, act_dtype = (len(action.nvec),), action_dtype(max(action.nvec))
    elif isinstance(action, Box):
        action = _box(action, params, "ACTION")
        refuse_declaration(name, source, "ACTION", box_problem(action))
        act_shape, act_dtype = action.shape, np.float32
    else:
        refuse_space(name, "ACTION", action)

    o = obs_space.shape
    arrays = {
        "obs": ResolvedArray("obs", "agent", np.dtype(np.float32), o, "framework"),
        "final_obs": ResolvedArray("final_obs", "agent", np.dtype(np.float32), o, "framework"),
        "action": ResolvedArray("action", "agent", np.dtype(act_dtype), act_shape, "framework"),
        "reward": ResolvedArray("reward", "agent", np.dtype(np.float32), (), "framework"),
        "terminated": ResolvedArray("terminated", "env", np.dtype(np.uint8), (), "framework"),
        "truncated": ResolvedArray("truncated", "env", np.dtype(np.uint8), (), "framework"),
        "done": ResolvedArray("done", "env", np.dtype(np.uint8), (), "framework"),
        "t": ResolvedArray("t", "env", np.dtype(np.int32), (), "framework"),
        "episode": ResolvedArray("episode", "env", np.dtype(np.int32), (), "framework"),
        "last_return": ResolvedArray("last_return", "agent", np.dtype(np.float32), (), "framework"),
        "last_length": ResolvedArray("last_length", "env", np.dtype(np.int32), (), "framework"),
    }
    if "ACTIVE" in namespace:  # ACTIVE as the episode's last step left it, before the auto-reset
        arrays[FINAL_ACTIVE] = ResolvedArray(FINAL_ACTIVE, "agent", np.dtype(np.uint8), (), "framework")
    entities = _entities(name, namespace.get("ENTITIES", {}), params, arrays)
    precision = namespace.get("PRECISION", "float64")
    if precision not in PRECISIONS:
        raise EnvDefinitionError(f"{name}: PRECISION must be \"float64\" or \"float32\", got {precision!r}")
    for arr_name, decl in dict(namespace.get("STATE", {})).items():
        if arr_name in arrays or arr_name in SPECIAL_ARGS:
            raise EnvDefinitionError(f"{name}: STATE name '{arr_name}' is reserved by the framework")
        if arr_name in DRIVER_NAMES or arr_name.startswith(("_wb", "wb_")):
            raise EnvDefinitionError(f"{name}: STATE name '{arr_name}' is one the generated kernels use for their "
                                     f"own variables ({', '.join(DRIVER_NAMES)} and names starting _wb or wb_); "
                                     f"rename it (e.g. '{arr_name}_value')")
        if arr_name in entities:
            raise EnvDefinitionError(f"{name}: STATE name '{arr_name}' is also an entity of ENTITIES; rename one")
        if not isinstance(decl, ArrayDecl):
            raise EnvDefinitionError(f"{name}: STATE['{arr_name}'] must be per_env(...), per_agent(...) or "
                                     f"per_entity(...)")
        if decl.dtype not in _DTYPES:
            raise EnvDefinitionError(f"{name}: STATE['{arr_name}'] dtype '{decl.dtype}' is not one a state array "
                                     f"takes: write one of {sorted(_DTYPES)} (e.g. per_env(\"int32\"))")
        shape = _shape(decl.shape, params, f"STATE['{arr_name}'].shape")
        refuse_declaration(name, source, "STATE", None if min(shape, default=0) >= 0 else
                            f"STATE['{arr_name}'] has shape {shape}: a dimension is negative; make every "
                            f"dimension >= 0")
        if decl.layout == "entity":
            if decl.entity not in entities:
                raise EnvDefinitionError(
                    f"{name}: STATE['{arr_name}'] is per_entity({decl.entity!r}), which ENTITIES does not declare "
                    f"(declare it: ENTITIES = dict({decl.entity}=\"<count parameter>\"); declared: "
                    f"{sorted(entities) or 'none'})")
            arrays[arr_name] = ResolvedArray(arr_name, "env", np.dtype(_DTYPES[decl.dtype]),
                                             (entities[decl.entity],) + shape, "env", decl.entity)
        else:
            arrays[arr_name] = ResolvedArray(arr_name, decl.layout, np.dtype(_DTYPES[decl.dtype]), shape, "env")

    def phases(value, what):
        fns = list(value) if isinstance(value, (list, tuple)) else [value]
        for fn in fns:
            if not inspect.isfunction(fn):
                hint = ""
                if isinstance(fn, str):
                    defined = [k for k, v in namespace.items() if inspect.isfunction(v)]
                    names = [f if isinstance(f, str) else getattr(f, "__name__", "?") for f in fns]
                    hint = f"; list the functions themselves, not their names: {what} = [{', '.join(names)}]" + (
                        "" if fn in defined else did_you_mean(fn, defined, repr))
                raise EnvDefinitionError(f"{name}: {what} must hold functions, got {fn!r}{hint}")
            args, line = list(inspect.signature(fn).parameters), fn.__code__.co_firstlineno
            check_phase_arguments(name, fn, arrays, entities, params, SPECIAL_ARGS)
            refuse_truncated(name, f"{fn.__name__}() (line {line})", args, line)
            phase_index(name, f"{fn.__name__}() (line {line})", args, entities, line)
        return fns

    active = check_active(name, source, namespace, arrays)
    reset_phases = phases(namespace["RESET"] if "RESET" in namespace else namespace["reset"], "RESET")
    step_phases = phases(namespace.get("STEP", namespace.get("step")), "STEP")
    observe_phases = phases(namespace["observe"], "observe")
    from .vocabulary import check_source
    check_source(name, source, reset_phases + step_phases + observe_phases, arrays, params, namespace)
    digest = hashlib.sha256((source + repr(sorted(params.items()))).encode()).hexdigest()[:16]
    return EnvDefinition(name, source, filename, namespace, params, num_agents, max_steps, obs_space, action,
                         arrays, reset_phases, step_phases, observe_phases, digest, entities=entities,
                         precision=precision, active=active, obs_state=observed_state(source, observe_phases, arrays, num_agents,
                                                                       obs_space.shape))


# where an episode ends (every replica done at a step), each agent's ACTIVE flag before the auto-reset:
# a time limit's bootstrap leaves out the agents that left the game in the episode's last step
FINAL_ACTIVE = "final_active"


def _entities(name: str, declared, params: dict, arrays: dict) -> dict:
    """ENTITIES resolved to {entity: count}, each name checked against what phases already bind."""
    if not isinstance(declared, Mapping):
        raise EnvDefinitionError(f"{name}: ENTITIES must be a dict of entity name to count, e.g. "
                                 f"ENTITIES = dict(patch=\"num_patches\"); got {declared!r}")
    entities = {}
    for entity, count in declared.items():
        if not isinstance(entity, str) or not entity.isidentifier() or keyword.iskeyword(entity):
            raise EnvDefinitionError(f"{name}: ENTITIES name {entity!r} must be a Python identifier")
        if entity in SPECIAL_ARGS or entity in arrays or entity in params or entity in DRIVER_NAMES:
            what = "a parameter" if entity in params else "reserved by the framework"
            raise EnvDefinitionError(f"{name}: ENTITIES name '{entity}' is {what}; phases bind it as the entity's "
                                     f"index, so pick another name (e.g. the singular of what it counts)")
        n = _as_int(count, params, f"ENTITIES['{entity}']")
        if not 0 <= n <= 1_000_000:
            raise EnvDefinitionError(f"{name}: ENTITIES['{entity}'] must be in [0, 1000000], got {n}")
        entities[entity] = n
    return entities


# ---- CUDA C phases (the cuda-c target) -----------------------------------------------------------
#
