"""Checks of an env source's declarations and names at parse time (envdef.parse calls them): names
the kernels define after the env's code (which would replace the env's own silently), and spaces and
shapes that are not valid where they are declared."""
from __future__ import annotations

import ast
import functools
import inspect
from typing import Mapping

import numpy as np

from ..errors import EnvDefinitionError


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


def refuse_declaration(name: str, source: str, declared: str, problem: str | None) -> None:
    """EnvDefinitionError naming the source line that declares `declared`, when there is a problem."""
    if problem is None:
        return
    line = _top_level_lines(source).get(declared, (None,))[0]
    lines = source.splitlines()
    where = f"line {line}: {lines[line - 1].strip()}\n    " if line and 0 < line <= len(lines) else f"{declared}: "
    raise EnvDefinitionError(f"{name}: {where}{problem}", line=line)
