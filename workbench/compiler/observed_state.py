"""Whether an env's observation is its state: a one-agent env whose one observe phase only copies
per-env float32 state arrays into the observation's columns (envdef.parse records the answer)."""
from __future__ import annotations

import ast

import numpy as np


def observed_state(source: str, observe_phases: list, arrays: dict, num_agents: int, obs_shape: tuple) -> tuple:
    """The per-env float32 state arrays whose values a one-agent env's observation is, in its order, when
    its one observe phase does nothing but copy them (`obs[env, agent, i] = NAME[env]` for every i);
    else (). The store then lays those arrays out as the observation's columns, and no kernel writes
    the observation: it is the state (CartPole's 16 B a replica-step)."""
    if num_agents != 1 or len(observe_phases) != 1 or len(obs_shape) != 1:
        return ()
    fn = observe_phases[0]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    found = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == fn.__name__
             and node.lineno == fn.__code__.co_firstlineno and not node.decorator_list]
    if len(found) != 1:
        return ()
    body = [s for s in found[0].body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    columns = {}
    for statement in body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            return ()
        target, value = statement.targets[0], statement.value
        ok = (isinstance(target, ast.Subscript) and _is_name(target.value, "obs")
              and isinstance(target.slice, ast.Tuple) and len(target.slice.elts) == 3
              and _is_name(target.slice.elts[0], "env") and _is_name(target.slice.elts[1], "agent")
              and isinstance(target.slice.elts[2], ast.Constant) and type(target.slice.elts[2].value) is int
              and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
              and _is_name(value.slice, "env"))
        if not ok:
            return ()
        spec = arrays.get(value.value.id)
        if spec is None or spec.owner != "env" or spec.layout != "env" or spec.shape != () \
                or spec.dtype != np.float32 or spec.entity is not None:
            return ()
        columns[target.slice.elts[2].value] = spec.name
    names = [columns.get(i) for i in range(obs_shape[0])]
    if len(columns) != obs_shape[0] or None in names or len(set(names)) != len(names):
        return ()
    return tuple(names)


def _is_name(node, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
