"""Code that compiles on every target but means something else on one of them, or something other
than the Python it reads as: refused when the env's source is parsed (vocabulary.check_source calls
`check_function` for each function the kernels run).

- A parameter's name assigned inside a function: Python makes the name local to the whole function,
  so the parameter is no longer read there (the cpu target reads 0 on the other paths, the CUDA
  simulator raises UnboundLocalError). `global` and `nonlocal` are refused with it.
- A per-agent phase reading another agent's entry of an array it stores its own entries of: the
  read sees that entry before or after the other agent's store.
- A store into the framework's inputs (`t`, `action`, `episode`, the episode bookkeeping): the
  kernels keep their own copies, so the store has no effect or corrupts the counts.
- A read-modify-write (`total[env] += x`, `x[env] = f(x[env])`, `reward[env, 0] += 1.0`) from a
  per-agent phase of an env with several agents (or a per-entity phase), of an entry other agents
  (entities) of the replica also reach: the agents run at once on a GPU and updates are lost,
  while the cpu target and the simulator run them one after another.
- Python's `random` module (one host stream no seed controls; the GPUs have none) and arithmetic on
  a random key (numba makes uint64 + int64 a float64, so the stream changes with the target); a
  randint bound or a draw index given as a float.
- A phase returning a value (the kernels drop it); round(x, ndigits) (Python rounds by the decimal
  text, the compiled targets by scaling).
"""
from __future__ import annotations

import ast
import types

from ..errors import EnvDefinitionError

FRAMEWORK_INPUTS = {"t": "the step counter of the replica's episode, which the framework advances",
                    "action": "the actions the policies chose this step",
                    "episode": "the replica's episode counter, which the framework advances",
                    "last_return": "the framework's running episode return",
                    "last_length": "the framework's record of the last episode's length",
                    "final_obs": "the observation the framework keeps where an episode ends"}
KEY_MAKERS = ("make_key", "mix64")
DRAWS = ("uniform", "uniform_range", "normal", "randint")  # (key, i, ...): i is the draw index


def where(name: str, node: ast.AST, lines: list) -> str:
    """'ENV: line N: the line's text', the head of a parse-time refusal."""
    text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    return f"{name}: line {node.lineno}: {text}"


def _refuse(name, node, lines, message):
    raise EnvDefinitionError(f"{where(name, node, lines)}\n    {message}", line=node.lineno)


def _stores(fn: ast.FunctionDef):
    """(statement, target) of every store in fn: assignments, augmented assignments, for targets."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield node, target
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
            yield node, node.target


def _names(target):
    return [leaf for leaf in ast.walk(target) if isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Store)]


def _agent_names(fn: ast.FunctionDef, scope: str = "agent") -> set:
    """`agent` (or the entity a phase runs for) and the names the function binds to it alone (me = agent)."""
    names = {scope}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == scope:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _is_agent(node, agents: set) -> bool:
    return isinstance(node, ast.Name) and node.id in agents


def _one_agent_test(test, agents: set) -> bool:
    """test holds for one agent at most: `agent == X` (or X == agent), alone or in an `and`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_one_agent_test(v, agents) for v in test.values)
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and any(
        _is_agent(side, agents) for side in (test.left, test.comparators[0]))


def _all_but_one_agent_test(test, agents: set) -> bool:
    """test fails for one agent at most: `agent != X`, `agent > 0`, `agent >= 1` (or mirrored)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.NotEq):
        return _is_agent(left, agents) or _is_agent(right, agents)
    constant = right if _is_agent(left, agents) else left if _is_agent(right, agents) else None
    if not isinstance(constant, ast.Constant):
        return False
    mirrored = constant is left
    return (isinstance(op, ast.Lt if mirrored else ast.Gt) and constant.value == 0) or \
        (isinstance(op, ast.LtE if mirrored else ast.GtE) and constant.value == 1)


def _returns(body: list) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


def _under_one_agent(node, parents, fn, agents: set) -> bool:
    """node runs for one agent of the replica at most: inside `if agent == X:` (an `and` of it too),
    in the else of `if agent != X:`, or after `if agent != X: ... return` in the same block."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and ((child in parent.body and _one_agent_test(parent.test, agents))
                                           or (child in parent.orelse and _all_but_one_agent_test(parent.test,
                                                                                                   agents))):
            return True
        block = next((b for b in (getattr(parent, "body", None), getattr(parent, "orelse", None))
                      if isinstance(b, list) and child in b), None)
        if block is not None and any(isinstance(s, ast.If) and _all_but_one_agent_test(s.test, agents)
                                     and _returns(s.body) for s in block[:block.index(child)]):
            return True
        if parent is fn:
            return False
        child, parent = parent, parents.get(parent)
    return False


def _shared_entry(target: ast.Subscript, agents: set = frozenset({"agent"})) -> bool:
    """Does this access reach an entry other agents of the replica reach too (its second index not the
    agent: x[env], x[env, 0], row[env, i])?"""
    items = list(target.slice.elts) if isinstance(target.slice, ast.Tuple) else [target.slice]
    return not (len(items) >= 2 and _is_agent(items[1], agents))


def _reads_same_entry(statement, target: ast.Subscript) -> bool:
    if isinstance(statement, ast.AugAssign):
        return True
    if not isinstance(statement, ast.Assign):
        return False
    text = ast.unparse(target)
    return any(isinstance(n, ast.Subscript) and ast.unparse(n) == text for n in ast.walk(statement.value))


def _atomic_fix(statement, target, array: str, index: str) -> str:
    """'use atomic_add(...), ' where an atomic does the update (a sum, a max, a min), else ''."""
    value = statement.value
    if isinstance(statement, ast.AugAssign):
        op = statement.op
    elif isinstance(value, ast.BinOp) and ast.unparse(target) in (ast.unparse(value.left), ast.unparse(value.right)):
        op = value.op
    else:
        op = None
    if isinstance(op, (ast.Add, ast.Sub)):
        return f"use atomic_add({array}, {index}, value), "
    called = value.func.attr if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) else \
        value.func.id if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) else ""
    for kind in ("max", "min"):
        if called in (kind, f"{kind}imum", f"f{kind}"):
            return f"use atomic_{kind}({array}, {index}, value), "
    return ""


def _check_races(name, fn, arrays, lines, parents, scope: str):
    arguments = {a.arg for a in fn.args.args}
    agents = _agent_names(fn, scope)
    stores = [(s, leaf) for s, t in _stores(fn) for leaf in (t.elts if isinstance(t, ast.Tuple) else [t])]
    for statement, target in stores:
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            continue
        array = target.value.id
        if array not in arguments or array not in arrays or not _shared_entry(target, agents):
            continue
        if _reads_same_entry(statement, target) and not _under_one_agent(statement, parents, fn, agents):
            items = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
            index = ast.unparse(items[0]) if len(items) == 1 else f"({', '.join(ast.unparse(i) for i in items)})"
            fix = _atomic_fix(statement, target, array, index)
            _refuse(name, statement, lines,
                    f"every {scope} of the replica updates {ast.unparse(target)} in {fn.name}(), a per-{scope} "
                    f"phase: on a GPU every {scope} runs at once and updates are lost (the cpu target and the CUDA "
                    f"simulator run them one after another, so check_env passes); {fix}guard it with "
                    f"`if {scope} == 0:`, or compute it in a per-replica phase (no `{scope}` argument) that loops "
                    f"over them")


def _check_read_after_write(name, fn, arrays, lines):
    """A per-agent phase that stores an array's own entries (x[env, agent]) and reads another agent's
    (x[env, other]): on a GPU that read sees the other's entry before or after this step's store."""
    arguments = {a.arg for a in fn.args.args}
    agents = _agent_names(fn)
    own = {}
    for statement, target in _stores(fn):
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in arguments \
                and target.value.id in arrays and arrays[target.value.id].layout == "agent" \
                and not _shared_entry(target, agents):
            own.setdefault(target.value.id, statement)
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) \
                and node.value.id in own and _shared_entry(node, agents):
            array, store = node.value.id, own[node.value.id]
            _refuse(name, node, lines,
                    f"{fn.name}() reads {ast.unparse(node)}, another agent's entry, and stores its own "
                    f"{array}[env, agent] (line {store.lineno}): on a GPU the agents run at once, so the read "
                    f"sees the other agent's entry before or after this step's store (the cpu target and the "
                    f"CUDA simulator: in agent order); store it in a later phase (STEP = [..., the phase "
                    f"that stores it]) or keep this step's value in another array")


def _key_names(fn: ast.FunctionDef, phase: bool) -> set:
    names = {"key"} & {a.arg for a in fn.args.args} if phase else set()  # (a helper's `key` may be anything)
    for _ in range(3):  # (k = make_key(...); k2 = k: keys through a few names)
        for node in ast.walk(fn):
            made = isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id in KEY_MAKERS
            aliased = isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names
            if made or aliased:
                names |= {leaf.id for target in node.targets for leaf in _names(target)}
    return names


def _host_random(func, namespace: dict) -> str | None:
    """'random' or 'secrets' where the call draws from that module (random.random(), or a function
    imported from it: `from random import random`), else None."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = namespace.get(func.value.id)
        owners = {module.__name__} if isinstance(module, types.ModuleType) else set()
    elif isinstance(func, ast.Name):  # (a function's module, or a bound method's: random.Random's)
        value = namespace.get(func.id)
        owners = {getattr(value, "__module__", None), type(getattr(value, "__self__", None)).__module__}
    else:
        owners = set()
    return next((o for o in ("random", "secrets") if o in owners), None)


def _check_draws(name, fn, lines, namespace, phase: bool):
    keys = _key_names(fn, phase)
    for node in ast.walk(fn):
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.target, node.value]
            key = next((o.id for o in operands if isinstance(o, ast.Name) and o.id in keys), None)
            if key is not None:
                _refuse(name, node, lines,
                        f"arithmetic on the random key '{key}' (a 64-bit unsigned integer): numba makes uint64 "
                        f"+ int64 a float64, so the stream differs between targets; draw distinct numbers with "
                        f"distinct indices (uniform({key}, i)), or make another stream with make_key(...)")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        host = _host_random(func, namespace)
        if host is not None:
            _refuse(name, node, lines,
                    f"{ast.unparse(func)}: Python's {host} module draws from one host stream no seed of the env "
                    f"controls (and a GPU has none); use workbench.rng's draws, e.g. `from workbench.rng import "
                    f"uniform` and uniform(key, i) with `key` a phase argument")
        if isinstance(func, ast.Name) and func.id == "round" and len(node.args) + len(node.keywords) > 1 \
                and "round" not in namespace:
            _refuse(name, node, lines, "round(x, ndigits) rounds by the decimal text in Python (round(2.675, 2) is "
                                       "2.67) and by scaling in the compiled targets (2.68); scale around one "
                                       "argument: round(x * 100.0) / 100.0")
        if isinstance(func, ast.Name) and func.id in DRAWS:
            integers = node.args[1:3] if func.id == "randint" else node.args[1:2]  # (the index; randint's n)
            given = next((a for a in integers if isinstance(a, ast.Constant) and isinstance(a.value, float)), None)
            if given is not None:
                what = "the draw index" if given is node.args[1] else "randint's bound n"
                _refuse(name, node, lines, f"{func.id}(): {what} is an integer, given {ast.unparse(given)}: the "
                                           f"targets round it differently; write an int")


def _c_stub(node: ast.Return) -> bool:
    """The Python stub of a CUDA C phase (envdef_c), whose body returns this marker."""
    return isinstance(node.value, ast.Name) and node.value.id == "THIS_ENV_IS_CUDA_C_ONLY__RUN_IT_WITH_TARGET_CUDA_C"


def _enclosing_function(node, parents):
    parent = parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.Lambda)):
        parent = parents.get(parent)
    return parent


def _read_where_unassigned(fn: ast.FunctionDef, local: str) -> bool:
    """Whether `local`, a parameter's name the function assigns (so a local of all of it), may be read
    where no assignment has run: unless its first assignment is a statement of the function's own body
    (or a `for` over it, read only inside the loop) before every read."""
    stores = [s for s, t in _stores(fn) if any(leaf.id == local for leaf in _names(t))]
    loads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == local and isinstance(n.ctx, ast.Load)]
    if not loads:
        return False
    first = min(stores, key=lambda s: (s.lineno, s.col_offset))
    if first not in fn.body:
        return True
    if isinstance(first, ast.For):
        inside = {id(n) for statement in first.body for n in ast.walk(statement)}
        return any(id(n) not in inside for n in loads)
    return any((n.lineno, n.col_offset) <= (first.end_lineno, first.end_col_offset) for n in loads)


def check_function(name: str, fn: ast.FunctionDef, *, phase: bool, arrays: dict, params: dict, lines: list,
                   namespace: dict, agents=None) -> None:
    """Raise EnvDefinitionError for the first construct of `fn` (a phase, or a function the phases
    call) that the targets would run with different meanings (see the module's docstring); agents: the
    env's NUM_AGENTS as declared (an int, or a function of the parameters)."""
    arguments = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            kind = "global" if isinstance(node, ast.Global) else "nonlocal"
            _refuse(name, node, lines, f"`{kind}` does not compile in a kernel: read parameters as globals without "
                                       f"it, and keep what changes in a STATE array")
        if phase and isinstance(node, ast.Return) and node.value is not None \
                and not (isinstance(node.value, ast.Constant) and node.value.value is None) \
                and _enclosing_function(node, parents) is fn and not _c_stub(node):
            _refuse(name, node, lines, f"{fn.name}() is a phase, and the kernels drop what a phase returns: store "
                                       f"the value into an array (a STATE array, reward, obs, done) and return nothing")
    for statement, target in _stores(fn):
        for leaf in _names(target):
            if leaf.id in params and leaf.id not in arguments and _read_where_unassigned(fn, leaf.id):
                _refuse(name, statement, lines,
                        f"'{leaf.id}' is a parameter (PARAMS): assigning it inside {fn.name}() makes '{leaf.id}' a "
                        f"local for the whole function (Python's rule), so the parameter is not read there (the "
                        f"cpu target reads 0 where the assignment has not run); use another name "
                        f"({leaf.id}_now = ...)")
        if phase and isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                and target.value.id in FRAMEWORK_INPUTS and target.value.id in arguments:
            array = target.value.id
            _refuse(name, statement, lines, f"'{array}' is {FRAMEWORK_INPUTS[array]}: a phase reads it and may not "
                                            f"store into it; keep your own value in a STATE array")
    if phase and "agent" in arguments and agents != 1:  # (one agent: nothing runs beside it)
        _check_races(name, fn, arrays, lines, parents, "agent")
        _check_read_after_write(name, fn, arrays, lines)
    entity = next((a for a in fn.args.args if a.arg in {spec.entity for spec in arrays.values()} - {None}), None)
    if phase and entity is not None and "agent" not in arguments:  # (a per-entity phase: its entities at once)
        _check_races(name, fn, arrays, lines, parents, entity.arg)
    _check_draws(name, fn, lines, namespace, phase)
