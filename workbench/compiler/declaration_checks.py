"""Checks of an env source's declarations and names at parse time (envdef.parse calls them): names
the kernels define after the env's code (which would replace the env's own silently), spaces and
shapes that are not valid where they are declared, host hooks (AGENT_GROUPS, RENDER, draw) that
the trainer or the viewer could not use, and an ACTIVE that names no per-agent flag."""
from __future__ import annotations

import ast
import functools
import inspect
import traceback
import types
from typing import Iterable, Mapping

import numpy as np

from ..errors import EnvDefinitionError, did_you_mean


# what every env source defines, each with an example of its form (for the error naming a missing one)
REQUIRED = {"NUM_AGENTS": "`NUM_AGENTS = 1`", "OBSERVATION": "`OBSERVATION = Box(shape=(4,))`",
            "ACTION": "`ACTION = Discrete(2)`",
            "observe": "`def observe(env, agent, x, obs): obs[env, agent, 0] = x[env]` (the state arrays it reads "
                       "as arguments, obs last)"}


@functools.lru_cache(maxsize=1)
def _reserved_names() -> dict:
    """Name -> what it is, for every global the numba kernel modules define after the env's code
    (workbench.rng's source, workbench.helpers' source, the layout's constants, the atomics): an env's
    own global of that name would be silently replaced by it."""
    from . import helpers, rng
    reserved = {}
    for module, what in ((rng, "a name of workbench.rng's random-number code"),
                         (helpers, "a name of workbench.helpers' math code")):
        for node in ast.parse(inspect.getsource(module)).body:
            if isinstance(node, ast.FunctionDef):
                arguments = ", ".join(a.arg for a in node.args.args)
                kind = "random draw" if module is rng else "numpy-like helper"
                public = "workbench.rng" if module is rng else "workbench.helpers"
                reserved[node.name] = f"the workbench's {kind} {node.name}({arguments}) ({public})"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Name):
                        reserved.setdefault(target.id, what)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    reserved.setdefault((alias.asname or alias.name).split(".")[0], what)
    reserved["TPE"] = "the kernels' threads per replica, set from the target's layout"
    reserved["EPB"] = "the kernels' replicas per block, set from the target's layout"
    for atomic in ("atomic_add", "atomic_max", "atomic_min"):
        reserved[atomic] = f"the workbench's atomic {atomic}(array, index, value)"
    return reserved


def _top_level_lines(source: str) -> dict:
    """Name -> (line, how the env binds it: "function" or "global") of the last top-level binding of each name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = (node.lineno, "function" if isinstance(node, ast.FunctionDef) else "global")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = (node.lineno, "global")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        found[leaf.id] = (node.lineno, "global")
    return found


def _param_line(source: str, key: str):
    """The line of `key` inside the PARAMS declaration (or of PARAMS itself), else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PARAMS" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Dict):
                for k in value.keys:
                    if isinstance(k, ast.Constant) and k.value == key:
                        return k.lineno
            if isinstance(value, ast.Call):
                for keyword_arg in value.keywords:
                    if keyword_arg.arg == key:
                        return keyword_arg.lineno
            return node.lineno
    return None


def check_reserved_names(name: str, source: str, namespace: dict, params: Mapping) -> None:
    """EnvDefinitionError for an env global or parameter named like something the kernels define
    after the env's code (a random draw, a helper, an atomic), which would replace it silently."""
    from . import helpers, rng
    reserved = _reserved_names()
    lines = source.splitlines()
    bound = _top_level_lines(source)

    def refuse(reserved_name, kind, line):
        text = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
        where = f"line {line}: {text}\n    " if line else ""
        raise EnvDefinitionError(
            f"{name}: {where}the env's {kind} '{reserved_name}' has a reserved name: it is "
            f"{reserved[reserved_name]}, which the kernels define after the env's code and which would replace "
            f"the env's own; rename it (e.g. 'my_{reserved_name}')",
            line=line)

    for key in params:
        if key in reserved:
            refuse(key, "parameter", _param_line(source, key))
    for global_name, value in namespace.items():
        if global_name not in reserved:
            continue
        if value is getattr(rng, global_name, None) or value is getattr(helpers, global_name, None):
            continue  # imported from workbench: the same thing the kernels define
        line, kind = bound.get(global_name, (None, "global"))
        own_helper = hasattr(helpers, global_name) and inspect.isfunction(getattr(helpers, global_name)) \
            and kind == "function" and inspect.isfunction(value)
        from_numpy = callable(value) and getattr(np, getattr(value, "__name__", ""), None) is value
        if own_helper or (from_numpy and not hasattr(rng, global_name)):
            continue  # the kernels keep the env's own def of a helper, and re-bind a numpy import to its twin
        refuse(global_name, kind, line)


def box_problem(box) -> str | None:
    """Why a Box (its shape resolved) is not a valid space, with the fix; None when it is."""
    if min(box.shape, default=1) < 0:
        return f"Box shape {box.shape} has a negative dimension: make every dimension >= 0"
    try:
        low = np.broadcast_to(np.asarray(box.low, dtype=np.float64), box.shape)
        high = np.broadcast_to(np.asarray(box.high, dtype=np.float64), box.shape)
    except (TypeError, ValueError):
        return f"Box low={box.low!r} and high={box.high!r} must be numbers or arrays of shape {box.shape}"
    if np.isnan(low).any() or np.isnan(high).any() or (low > high).any():
        return f"Box low={box.low!r} is above high={box.high!r} (or NaN): give low <= high"
    return None


def refuse_unknown_params(name: str, overrides: Mapping, defaults: Mapping) -> None:
    """EnvDefinitionError naming parameters given that PARAMS does not declare, with the likely meant ones."""
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        # (a key 'lenght:0.6' is YAML's reading of {lenght:0.6}: the name before the colon gets the hint)
        names = {k: k.split(":")[0].strip() if isinstance(k, str) else str(k) for k in unknown}
        hints = "".join(did_you_mean(names[k], defaults, lambda c, k=k: f"{c!r} for {k!r}") for k in unknown)
        hints += "; YAML reads 'key:value' as one key: put a space after the colon" if any(
            isinstance(k, str) and ":" in k for k in unknown) else ""
        raise EnvDefinitionError(f"{name}: unknown parameter(s) {unknown}{hints}; this env takes {sorted(defaults)}")


def refuse_space(name: str, declared: str, value) -> None:
    """EnvDefinitionError for an OBSERVATION that is no Box or an ACTION that is no space, with the way to
    give teams different spaces where a dict of them was declared."""
    kinds = "a Box" if declared == "OBSERVATION" else "Discrete, MultiDiscrete or Box"
    per_team = ""
    if isinstance(value, Mapping):
        per_team = ("; every agent has the same observation space: where teams see different things, give "
                    "OBSERVATION the largest team's width and let observe leave the rest 0 (or write a team flag)"
                    if declared == "OBSERVATION" else
                    "; every agent has the same action space: where teams act differently, take the largest "
                    "(Discrete(max n)) and let step read the actions a team has, treating the others as one of them")
    raise EnvDefinitionError(f"{name}: {declared} must be {kinds}, got {value!r}{per_team}")


def refuse_declaration(name: str, source: str, declared: str, problem: str | None, line=None) -> None:
    """EnvDefinitionError naming `line` (else the source line that declares `declared`), when there
    is a problem."""
    if problem is None:
        return
    line = line or _top_level_lines(source).get(declared, (None,))[0]
    lines = source.splitlines()
    where = f"line {line}: {lines[line - 1].strip()}\n    " if line and 0 < line <= len(lines) else f"{declared}: "
    raise EnvDefinitionError(f"{name}: {where}{problem}", line=line)


def check_host_hooks(name: str, source: str, filename: str, namespace: dict, params: Mapping,
                     num_agents: int) -> None:
    """EnvDefinitionError for an AGENT_GROUPS that does not give each of the env's agents one group
    at these parameters, or a RENDER / draw that the viewer cannot call: the trainer, the adapters
    and the viewer call them later, far from the line at fault."""
    groups_fn = namespace.get("AGENT_GROUPS")
    if groups_fn is not None:
        form = "declare AGENT_GROUPS = lambda p: {\"name\": range(...), ...} (agent ids for each group)"
        if not callable(groups_fn):
            refuse_declaration(name, source, "AGENT_GROUPS", f"AGENT_GROUPS must be a function of the parameters, got "
                                                       f"{groups_fn!r}: {form}")
        try:
            groups = groups_fn(types.SimpleNamespace(**params))
        except Exception as exc:  # noqa: BLE001 - the env author's own code: say where it failed
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
            hint = did_you_mean(getattr(exc, "name", None) or "", params) if isinstance(exc, AttributeError) else ""
            refuse_declaration(name, source, "AGENT_GROUPS",
                         f"AGENT_GROUPS raised {type(exc).__name__}: {exc}{hint}; the parameters are {sorted(params)}; "
                         f"{form}", frames[-1].lineno if frames else None)
        if not isinstance(groups, Mapping):
            refuse_declaration(name, source, "AGENT_GROUPS", f"AGENT_GROUPS returned {groups!r}, not a dict; {form}")
        seen = {}
        for group, ids in groups.items():
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                refuse_declaration(name, source, "AGENT_GROUPS", f"AGENT_GROUPS gives group {group!r} {ids!r}, not a "
                                                           f"sequence of agent ids; {form}")
            if not isinstance(group, str):
                refuse_declaration(name, source, "AGENT_GROUPS", f"AGENT_GROUPS names a group {group!r}: group names are "
                                                           f"strings (served as env.<name>); {form}")
            for i in ids:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < num_agents:
                    refuse_declaration(name, source, "AGENT_GROUPS",
                                 f"AGENT_GROUPS gives group '{group}' the agent {i!r}, but agents are the ints 0 .. "
                                 f"{num_agents - 1} (NUM_AGENTS is {num_agents}); {form}")
                if int(i) in seen:
                    refuse_declaration(name, source, "AGENT_GROUPS",
                                 f"AGENT_GROUPS puts agent {i} in '{seen[int(i)]}' and in '{group}': the groups are "
                                 f"the trainer's default policy map, where each agent has one group")
                seen[int(i)] = group
        missing = sorted(set(range(num_agents)) - set(seen))
        if missing:
            refuse_declaration(name, source, "AGENT_GROUPS",
                         f"AGENT_GROUPS leaves agents {missing[:10]}{' ...' if len(missing) > 10 else ''} (of 0 .. "
                         f"{num_agents - 1}) in no group: the groups are the trainer's default policy map, where each "
                         f"agent has one group")

    drawer = namespace.get("RENDER")
    if drawer is not None and not (inspect.isclass(drawer) and callable(getattr(drawer, "setup", None))
                                   and callable(getattr(drawer, "update", None))):
        refuse_declaration(name, source, "RENDER", f"RENDER must be a drawer class (class MyDrawer(render.Drawer) with "
                                             f"setup(ax) and update(k); see docs/writing-an-env.md), got {drawer!r}")
    draw = namespace.get("draw")
    if inspect.isfunction(draw):
        try:
            inspect.signature(draw).bind(None, None)
        except TypeError:
            refuse_declaration(name, source, "draw", f"draw{inspect.signature(draw)} must take (frame, ax): the viewer calls "
                                               f"it with one frame's arrays and the matplotlib axes")


def check_active(name: str, source: str, namespace: dict, arrays: dict) -> str | None:
    """ACTIVE checked: the name of a per-agent integer STATE array of one value an agent, or None."""
    if "ACTIVE" not in namespace:
        return None
    declared = namespace["ACTIVE"]
    spec = arrays.get(declared) if isinstance(declared, str) else None
    ints = [k for k, v in arrays.items() if v.owner == "env" and v.layout == "agent" and v.shape == ()
            and v.entity is None and np.issubdtype(v.dtype, np.integer)]
    problem = None
    if spec is None or spec.owner != "env":
        problem = (f"ACTIVE = {declared!r} names no STATE array" + (did_you_mean(str(declared), ints, repr) or ".")
                   + " Name a per_agent(\"int32\") array that is nonzero while the agent is in the game"
                   + (f" (this env's: {', '.join(ints)})" if ints else ""))
    elif spec.layout != "agent" or spec.shape != () or spec.entity is not None \
            or not np.issubdtype(spec.dtype, np.integer):
        problem = (f"ACTIVE = {declared!r} must name a per_agent integer array of one value an agent "
                   f"(per_agent(\"int32\")), nonzero while the agent is in the game; got a "
                   f"{'per_agent' if spec.layout == 'agent' else 'per_env'} {spec.dtype} array of shape {spec.shape}")
    refuse_declaration(name, source, "ACTIVE", problem)
    return declared


def refuse_truncated(env_name: str, what: str, args, line=None) -> None:
    """EnvDefinitionError for a phase taking `truncated`: the framework sets it at MAX_STEPS, and a learner
    bootstraps across only the time limit it knows of (an env's own would be learned as an end)."""
    if "truncated" in args:
        raise EnvDefinitionError(
            f"{env_name}: {what} takes 'truncated', which is the framework's: it is set when an episode reaches "
            f"MAX_STEPS (declare MAX_STEPS for a time limit); to end an episode, set terminated[env] = 1", line=line)


# index names other codebases use, for the framework's own
_INDEX_ALIASES = {"e": "env", "env_id": "env", "env_idx": "env", "env_index": "env", "replica": "env", "i": "env",
                  "a": "agent", "agent_id": "agent", "agent_idx": "agent", "agent_index": "agent", "rng": "key",
                  "rng_key": "key"}


def check_phase_arguments(env_name: str, fn, arrays: Mapping, entities: Mapping, params: Mapping,
                          special: Iterable) -> None:
    """EnvDefinitionError for a phase argument the kernels cannot bind: phases take env/agent/key,
    entities and arrays, by name, as plain arguments."""
    line = fn.__code__.co_firstlineno
    where = f"{env_name}: {fn.__name__}() (line {line})"
    bindable = [*arrays, *entities, *special]
    for arg in inspect.signature(fn).parameters.values():
        if arg.kind in (arg.VAR_POSITIONAL, arg.VAR_KEYWORD, arg.KEYWORD_ONLY):
            shown = {arg.VAR_POSITIONAL: "*", arg.VAR_KEYWORD: "**"}.get(arg.kind, "")
            raise EnvDefinitionError(f"{where} takes {shown}{arg.name} as {arg.kind.description}: phases take plain "
                                     f"arguments, each named after what it binds; write {arg.name}", line=line)
        if arg.name in bindable:  # (a default on it is never used: the kernels pass every argument)
            continue
        if arg.default is not arg.empty:
            raise EnvDefinitionError(
                f"{where} gives '{arg.name}' a default ({arg.name}={arg.default!r}): phase arguments bind to arrays "
                f"by name and take no defaults; for a constant, add it to PARAMS (PARAMS = dict(..., "
                f"{arg.name}={arg.default!r})) and read it as a global name", line=line)
        if arg.name in params:
            raise EnvDefinitionError(f"{where} takes '{arg.name}', which is a parameter (PARAMS): phases read "
                                     f"parameters as global names; drop it from the arguments", line=line)
        hint = f"; did you mean '{_INDEX_ALIASES[arg.name]}'? (the framework's name for that index)" \
            if arg.name in _INDEX_ALIASES else did_you_mean(arg.name, bindable, repr)
        if not hint:
            hint = f"; a new array: declare it in STATE, e.g. STATE = dict(..., {arg.name}=per_agent()) " \
                   f"(or per_env())"
        raise EnvDefinitionError(f"{where} takes '{arg.name}', which is neither env/agent/key, an entity of ENTITIES "
                                 f"nor an array (arrays: {sorted(arrays)}){hint}", line=line)
