"""What a phase may call on every target, and the checks made on an env's source when it is parsed.

`check_source` walks the env's syntax tree before anything compiles and raises EnvDefinitionError
for a call some target cannot compile (naming the function, the env's line, the targets that lack
it and the portable alternative), for an array indexed with more indices than its layout has
(a per-agent index into a per-replica array) or too few where one value is meant (a per-agent phase
storing a whole row, arithmetic on a row), for a constant index past the end of an axis, for an
array's name assigned (which stores nothing), for a call of the env's own function that binds no
arguments, for a name nothing defines (with the closest name that exists), and for a construct that
runs on the cpu target and the CUDA simulator but not on a GPU (a list in a name, a dict, an f-string,
try/except, raise, ...). `NUMPY` says what `np.NAME(...)` of one
value means in a phase: the numba targets bind it to a helper or a `math` function (targets/_numba.py).
"""
from __future__ import annotations

import ast
import inspect
import types
import math

from . import helpers, rng, same_meaning
from .same_meaning import where as _where
from ..errors import EnvDefinitionError, did_you_mean

MATH = frozenset("""sqrt exp expm1 log log2 log10 log1p pow sin cos tan asin acos atan atan2 sinh cosh tanh
    asinh acosh atanh floor ceil trunc fabs hypot copysign fmod isnan isinf isfinite erf erfc gamma lgamma
    degrees radians""".split())
BUILTINS = frozenset("min max abs int float bool round range len".split())
NUMPY_SCALARS = frozenset("float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_".split())
HELPERS = frozenset("rint round_half_even clip sign".split())
RANDOM = frozenset("uniform uniform_range normal randint make_key mix64".split())
ATOMICS = frozenset("atomic_add atomic_max atomic_min".split())


def _numpy_table() -> dict:
    """np name -> (what the kernels call: a helpers.py function or math.NAME, its arguments)."""
    table = {name: (f"math.{name}", "x") for name in
             "sqrt exp expm1 log log2 log10 log1p sin cos tan sinh cosh tanh degrees radians fabs isnan isinf "
             "isfinite".split()}
    table.update({name: (f"math.{name}", "x, y") for name in ("hypot", "copysign")})
    table.update({np_name: (f"math.{name}", "x") for np_name, name in dict(
        arcsin="asin", arccos="acos", arctan="atan", arcsinh="asinh", arccosh="acosh", arctanh="atanh",
        deg2rad="radians", rad2deg="degrees", asin="asin", acos="acos", atan="atan", asinh="asinh", acosh="acosh",
        atanh="atanh").items()})
    table["arctan2"] = table["atan2"] = ("math.atan2", "y, x")
    table.update({name: (f"_np_{twin}", "x") for name, twin in dict(
        rint="rint", round="rint", around="rint", floor="floor", ceil="ceil", trunc="trunc", fix="trunc",
        sign="sign", abs="abs", absolute="abs", square="square", exp2="exp2", negative="negative",
        positive="positive", signbit="signbit", logical_not="logical_not").items()})
    table.update({name: (f"_np_{twin}", "x, y") for name, twin in dict(
        minimum="minimum", maximum="maximum", fmin="fmin", fmax="fmax", power="power", pow="power", mod="mod",
        remainder="mod", floor_divide="floor_divide", fmod="fmod", add="add", subtract="subtract",
        multiply="multiply", divide="divide", true_divide="divide", logical_and="logical_and",
        logical_or="logical_or", logical_xor="logical_xor", greater="greater", greater_equal="greater_equal",
        less="less", less_equal="less_equal", equal="equal", not_equal="not_equal").items()})
    table["clip"] = ("_np_clip", "x, lo, hi")
    table["where"] = ("_np_where", "condition, a, b")
    return table


NUMPY = _numpy_table()
# math functions a phase may call that not every target compiles with C's meaning: the helper each becomes
MATH_TWINS = {"fmod": "_np_fmod"}

# numpy functions with no meaning for one value in a phase, with what to write instead
NUMPY_ALTERNATIVES = {
    "min": "np.minimum(a, b) (or min(a, b)) for two values, a loop for an array",
    "max": "np.maximum(a, b) (or max(a, b)) for two values, a loop for an array",
    "amin": "np.minimum(a, b) for two values, a loop for an array",
    "amax": "np.maximum(a, b) for two values, a loop for an array",
    "sum": "a loop accumulating into a local", "mean": "a loop accumulating into a local",
    "prod": "a loop multiplying into a local", "cumsum": "a loop accumulating into a local",
    "dot": "a loop (or x0 * y0 + x1 * y1)", "argmin": "a loop keeping the best index",
    "argmax": "a loop keeping the best index", "sort": "an insertion into a small local",
    "random": "a workbench.rng draw (from workbench.rng import uniform)",
    "reciprocal": "1.0 / x", "cbrt": "np.sign(x) * np.abs(x) ** (1.0 / 3.0)",
    "heaviside": "np.where(x > 0.0, 1.0, np.where(x == 0.0, h, 0.0))",
    "float_power": "np.power(np.float64(x), y)", "nan_to_num": "np.where(x != x, 0.0, x) (NaN is the one value "
                                                              "not equal to itself)",
}
for _fn in ("zeros", "ones", "empty", "full", "array", "asarray", "zeros_like", "ones_like", "empty_like",
            "arange", "linspace"):
    NUMPY_ALTERNATIVES[_fn] = "a STATE array (per_env / per_agent with a shape), locals or a tuple"

IMPORT_OF = {**{name: f"from workbench.helpers import {name}" for name in HELPERS},
             **{name: f"from workbench.rng import {name}" for name in RANDOM}}


def _arguments(module, names) -> dict:
    return {name: ", ".join(inspect.signature(getattr(module, name)).parameters) for name in names}


SIGNATURES = {**_arguments(helpers, HELPERS), **_arguments(rng, RANDOM),
              **{name: "array, index, value" for name in ATOMICS}}


MODULE_IMPORTS = {"np": "import numpy as np", "numpy": "import numpy", "math": "import math"}


def _import_hint(name: str) -> str:
    return f" ({IMPORT_OF[name]})" if name in IMPORT_OF else ""


def _math_arguments(name: str) -> str:
    """The arguments a phase passes math.NAME: its signature's, one value each (log and hypot have
    none to read; the kernels take log of one value and hypot of two)."""
    if name in ("log", "hypot"):
        return "x" if name == "log" else "x, y"
    return ", ".join(inspect.signature(getattr(math, name)).parameters)


def _count(node: ast.Call, what: str, arguments: str) -> str | None:
    """Why a call of `what(arguments)` with these arguments is refused, else None."""
    wanted = len([a for a in arguments.split(", ") if a])
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        return f"{what} takes its arguments by position in a phase: {what}({arguments})"
    if len(node.args) != wanted:
        return f"{what} takes {wanted} argument{'s' if wanted != 1 else ''} ({arguments}), given {len(node.args)}"
    return None


def _numpy_name(value) -> str | None:
    """The numpy name of a function imported from numpy (`from numpy import clip`), else None."""
    import numpy
    name = getattr(value, "__name__", None)
    if isinstance(name, str) and getattr(numpy, name, None) is value and callable(value) \
            and not isinstance(value, type):
        return name
    return None


def _numpy_call(node: ast.Call, attr: str, shown: str) -> str | None:
    import numpy
    if attr in NUMPY_SCALARS:
        return None
    if attr in NUMPY:
        wrong = _count(node, shown, NUMPY[attr][1])
        if wrong and attr in ("round", "around") and len(node.args) == 2:
            wrong += f"; for decimals scale around it: {shown}(x * 100.0) / 100.0"
        return wrong
    prefix = shown[:-len(attr)]
    if not hasattr(numpy, attr):
        return f"{shown} is not a numpy function" + (
            did_you_mean(attr, list(NUMPY) + list(NUMPY_SCALARS), lambda c: prefix + c)
            or did_you_mean(attr, dir(numpy), lambda c: prefix + c))
    alternative = NUMPY_ALTERNATIVES.get(attr, "a numpy function of the list in docs/writing-an-env.md ('What a "
                                               "phase may use')")
    return f"{shown} does not compile on target(s) cuda, cuda-c; use {alternative}" + \
        did_you_mean(attr, NUMPY, lambda c: prefix + c)


REFUSED_BUILTINS = {"sum": "a loop accumulating into a local", "sorted": "an insertion into a small local",
                    "print": "a state array the phase writes and the host reads after the step",
                    "enumerate": "range(n) and an index",
                    "zip": "range(n) and an index", "tuple": "a literal (a, b)", "list": "a loop",
                    "dict": "a loop", "set": "a loop", "any": "a loop", "all": "a loop", "map": "a loop",
                    "isinstance": "a loop"}


def _own_call_problem(node: ast.Call, fn: ast.FunctionDef) -> str | None:
    """Why a call of the env's own function `fn` binds no arguments, else None (numba would say so
    only after compiling, in its words)."""
    a = fn.args
    if a.vararg or a.kwarg or any(isinstance(x, ast.Starred) for x in node.args) \
            or any(k.arg is None for k in node.keywords):
        return None
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    unknown = [k.arg for k in node.keywords if k.arg not in names]
    if unknown:
        return f"{fn.name}() (line {fn.lineno}) has no argument '{unknown[0]}'" + did_you_mean(unknown[0], names, repr)
    given = len(node.args) + len(node.keywords)
    most = len(names)
    required = len(a.posonlyargs + a.args) - len(a.defaults) + sum(d is None for d in a.kw_defaults)
    if required <= given <= most:
        return None
    count = str(most) if required == most else f"{required} to {most}"
    return f"{fn.name}() (line {fn.lineno}) takes {count} argument{'s' if most != 1 else ''} " \
           f"({', '.join(names)}), given {given}"


def _call_problem(node: ast.Call, local_functions: dict, namespace: dict) -> str | None:
    """Why a phase may not make this call on every target (the message), else None."""
    import math
    import numpy
    func = node.func
    chain = []
    while isinstance(func, ast.Attribute):
        chain.insert(0, func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    root, value = func.id, namespace.get(func.id)
    if chain:
        shown = ".".join([root] + chain)
        if value is numpy or (value is None and root in ("np", "numpy")):
            if len(chain) == 1:
                return _numpy_call(node, chain[0], shown)
            hint = NUMPY_ALTERNATIVES["random"] if chain[0] == "random" else \
                "loops over math.* functions and the numpy functions of docs/writing-an-env.md"
            return f"{shown} does not compile on target(s) cuda, cuda-c; use {hint}"
        if (value is math or (value is None and root == "math")) and len(chain) == 1:
            if chain[0] in MATH:
                wrong = _count(node, shown, _math_arguments(chain[0]))
                if wrong and chain[0] == "log" and len(node.args) == 2:
                    wrong += f"; for another base: {shown}(x) / {shown}(base)"
                return wrong
            if not hasattr(math, chain[0]):
                return f"{shown} is not a math function" + did_you_mean(chain[0], MATH, lambda c: f"{root}.{c}")
            return f"{shown} does not compile on target(s) cuda, cuda-c; use a function of the portable list in " \
                   f"docs/writing-an-env.md"
        module = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else ""
        if module.split(".")[0] in ("torch", "jax", "scipy", "tensorflow"):
            instead = f"np.{chain[-1]}" if chain[-1] in NUMPY else "numpy or math functions on scalars"
            return f"{shown}: {module} does not compile in a phase, which runs one replica (and agent) at a time " \
                   f"on scalars in compiled kernels; use {instead} (the portable list: docs/writing-an-env.md)"
        return None
    name = root
    if name in local_functions:
        return _own_call_problem(node, local_functions[name])
    imported = _numpy_name(value) if value is not None else None
    if imported is not None:
        return _numpy_call(node, imported, name)
    if name in SIGNATURES and (value is None or value is getattr(helpers, name, None)
                               or value is getattr(rng, name, None)):
        wrong = _count(node, name, SIGNATURES[name])
        return wrong + _import_hint(name) if wrong else None
    if name in REFUSED_BUILTINS and value is None:
        where = "cuda, cuda-c" if name == "print" else "cpu, cuda, cuda-c"
        return f"{name}() does not compile on target(s) {where}; use {REFUSED_BUILTINS[name]}"
    return None


PER_ENV_ARRAY = "a per-replica array in STATE (per_env(\"float32\", (n,)))"
UNPORTABLE_CONSTRUCTS = {
    ast.List: ("a list", f"a tuple (a, b) for a few fixed values, or {PER_ENV_ARRAY} for more"),
    ast.Dict: ("a dict", f"locals, a tuple, or {PER_ENV_ARRAY} indexed by position"),
    ast.Set: ("a set", f"a tuple, or {PER_ENV_ARRAY} of flags"),
    ast.ListComp: ("a list comprehension", f"a for loop over range(n) into locals or {PER_ENV_ARRAY}"),
    ast.DictComp: ("a dict comprehension", f"a for loop over range(n) into {PER_ENV_ARRAY}"),
    ast.SetComp: ("a set comprehension", f"a for loop over range(n) into {PER_ENV_ARRAY} of flags"),
    ast.GeneratorExp: ("a generator expression", "a for loop over range(n) accumulating into a local"),
    ast.Try: ("try/except", "an if on the condition (a phase's division by zero gives numpy's inf or nan: "
                            "it does not raise)"),
    ast.With: ("a with statement", "plain statements"),
    ast.JoinedStr: ("an f-string", "numbers only: store the value into a state array and format it on the host"),
    ast.Yield: ("yield", "stores into a state array"),
    ast.YieldFrom: ("yield from", "stores into a state array"),
}
if hasattr(ast, "TryStar"):
    UNPORTABLE_CONSTRUCTS[ast.TryStar] = UNPORTABLE_CONSTRUCTS[ast.Try]


def _construct_problem(node: ast.AST, parent) -> str | None:
    """Why a GPU kernel cannot hold this construct (the cpu target and the CUDA simulator run it, so
    only a GPU would fail), else None. numba-cuda compiles a loop over a list of constants
    (`for v in [1.0, 2.0]`) but no list kept in a name (measured on an H100)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "an import inside a function does not compile on target(s) cpu, cuda; import at the top of the " \
               "env's source, where the phases see it"
    if isinstance(node, (ast.Raise, ast.Assert)):
        what = "raise" if isinstance(node, ast.Raise) else "assert"
        return f"{what} does not mean the same on every target (a GPU kernel ignores it, the cpu target stops " \
               f"the whole step); store a flag into a state array and check it from the host"
    found = UNPORTABLE_CONSTRUCTS.get(type(node))
    if found is None or (isinstance(node, ast.List) and isinstance(parent, ast.For) and node is parent.iter):
        return None
    what, alternative = found
    return f"{what} does not compile on target(s) cuda (a GPU kernel has no lists, dicts, sets, formatted " \
           f"strings, generators or exceptions); use {alternative}"


def _ndim(spec) -> int:
    return 1 + (spec.layout == "agent") + len(spec.shape)


def _shape_text(spec) -> str:
    dims = ["E"] + (["A"] if spec.layout == "agent" else []) + [str(d) for d in spec.shape]
    scope = "per agent" if spec.layout == "agent" else f"per {spec.entity}" if spec.entity else "per replica"
    return f"{scope}, shape [{', '.join(dims)}] ({spec.dtype.name})"


def _constant(node: ast.expr):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand)
        return None if inner is None else -inner
    return None


def _full_index(spec) -> str:
    """`name[env, agent, i]`: every index of the array, as a phase would write it."""
    trailing = ["i", "j", "k", "l", "m"][:len(spec.shape)] + ["n"] * max(0, len(spec.shape) - 5)
    return f"{spec.name}[{', '.join(['env'] + (['agent'] if spec.layout == 'agent' else []) + trailing)}]"


# a row (too few indices) used as one value: arithmetic or a scalar function of it
_SCALAR_USES = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)
_SCALAR_CALLS = frozenset("abs min max float int bool round".split()) | MATH | HELPERS | frozenset(NUMPY)


def _used_as_one_value(node: ast.Subscript, parent) -> bool:
    if isinstance(parent, _SCALAR_USES):
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        func = parent.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        return called in _SCALAR_CALLS
    return isinstance(parent, (ast.Assign, ast.AugAssign)) and parent.value is node and all(
        isinstance(t, ast.Subscript) for t in (parent.targets if isinstance(parent, ast.Assign) else [parent.target]))


def _check_subscript(name: str, node: ast.Subscript, spec, lines: list, params: dict, per_agent_phase: bool = False,
                     parent=None):
    index = node.slice
    items = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    ndim = _ndim(spec)
    if len(items) > ndim:
        hint = f"{spec.name}[env]" if spec.layout == "env" and not spec.shape else f"{ndim} indices"
        raise EnvDefinitionError(
            f"{_where(name, node, lines)}\n    '{spec.name}' takes {ndim} ind{'ex' if ndim == 1 else 'ices'} "
            f"({_shape_text(spec)}), given {len(items)}: write {hint}", line=node.lineno)
    given = f"'{spec.name}' takes {ndim} ind{'ex' if ndim == 1 else 'ices'} ({_shape_text(spec)}), given {len(items)}"
    own_row = len(items) >= 2 and isinstance(items[1], ast.Name) and items[1].id == "agent"
    if per_agent_phase and spec.layout == "agent" and len(items) < ndim and not own_row \
            and isinstance(node.ctx, ast.Store):
        # agents of a replica run concurrently: a row store not of the agent's own row is every agent
        # writing the same entries (x[env, agent] = 0.0 for a per-agent vector fills its own row: allowed)
        whose = "every agent's entry of the replica" if len(items) < 2 else f"the whole row {ast.unparse(node)}"
        raise EnvDefinitionError(
            f"{_where(name, node, lines)}\n    {given}: this writes {whose} from each agent (a race on a GPU); "
            f"write {_full_index(spec)} = ...", line=node.lineno)
    if len(items) < ndim and isinstance(node.ctx, ast.Load) and _used_as_one_value(node, parent):
        raise EnvDefinitionError(
            f"{_where(name, node, lines)}\n    {given}: {ast.unparse(node)} is a whole row of the array, not one "
            f"value; write {_full_index(spec)}", line=node.lineno)
    full = [None] + ([None] if spec.layout == "agent" else []) + list(spec.shape)
    for axis, item in enumerate(items):
        value = _constant(item)
        if value is None and isinstance(item, ast.Name) and isinstance(params.get(item.id), int):
            value = params[item.id]
        size = full[axis]
        if value is not None and size is not None and not -size <= value < size:
            raise EnvDefinitionError(
                f"{_where(name, node, lines)}\n    index {value} is out of bounds for axis {axis} of '{spec.name}' "
                f"({_shape_text(spec)})", line=node.lineno)


KERNEL_GLOBALS = frozenset("NUM_AGENTS MAX_STEPS TPE EPB RESET_STEP OBSERVE_STEP cuda prange "
                           "THIS_ENV_IS_CUDA_C_ONLY__RUN_IT_WITH_TARGET_CUDA_C".split())


def _local_names(fn: ast.FunctionDef) -> set:
    """Names `fn` binds: its arguments, the arguments of functions and lambdas inside it, and assignments."""
    names = {a.arg for a in fn.args.args}
    names |= {a.arg for node in ast.walk(fn) if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn
              for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
    return names | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _nested_function(fn: ast.FunctionDef, missing: str):
    """The function named `missing` defined inside `fn`, else None."""
    return next((node for node in ast.walk(fn) if isinstance(node, ast.FunctionDef) and node is not fn
                 and node.name == missing), None)


def _undefined(fn: ast.FunctionDef, known: set):
    """The first name `fn` reads that nothing defines, else None."""
    local = _local_names(fn)
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local \
                and node.id not in known:
            return node
    return None


def _undefined_message(missing: str, fn: ast.FunctionDef, namespace: dict, params: dict, arrays: dict) -> str:
    nested = _nested_function(fn, missing)
    if nested is not None:
        return (f"'{missing}' is defined inside {fn.name}() (line {nested.lineno}); the kernels see only functions "
                f"defined at the env source's top level: move `def {missing}` out of {fn.name}(), above it")
    text = f"name '{missing}' is not defined (not a parameter, array, local or function of the env)"
    args = [a.arg for a in fn.args.args]
    at = 0 if missing == "env" else 1 if missing == "agent" and args[:1] == ["env"] else len(args)
    with_it = f"(def {fn.name}({', '.join(args[:at] + [missing] + args[at:])}))"
    if missing in arrays:
        return f"{text}; '{missing}' is an array: take it as an argument of the phase {with_it}"
    if missing in MODULE_IMPORTS:
        return f"{text}; add `{MODULE_IMPORTS[missing]}` at the top of the env source"
    if missing == "key":
        return f"{text}; 'key' is the phase's random stream (what the random draws take): add it to the " \
               f"phase's parameters {with_it}"
    if missing in ("env", "agent"):
        what = "replica" if missing == "env" else "agent"
        return f"{text}; '{missing}' is the index of the {what} the phase runs for: take it as an argument " \
               f"{with_it}"
    indexed = any(isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == missing
                  for node in ast.walk(fn))
    close = did_you_mean(missing, set(arrays) | set(params), repr)
    if indexed and not close:
        return f"{text}; to keep '{missing}' between steps, declare it in STATE, e.g. " \
               f"STATE = dict(..., {missing}=per_agent()) (or per_env() for one value a replica), and take it " \
               f"as an argument {with_it}"
    candidates = set(_local_names(fn)) | set(params) | set(arrays) | HELPERS | RANDOM | ATOMICS | BUILTINS | \
        {k for k in namespace if not k.startswith("__")}
    return text + did_you_mean(missing, candidates, lambda c: f"'{c}'" + ("" if c in namespace else _import_hint(c)))


def _refuse_rebound_arrays(name: str, fn: ast.FunctionDef, arrays: dict, lines: list):
    """An array argument assigned as a name (`reward = -d` for `reward[env, agent] = -d`): the
    assignment rebinds the phase's local name and stores nothing. (`u = u[env]`, one value of the
    array read into its name, stays allowed.)"""
    arguments = {a.arg for a in fn.args.args} & set(arrays)
    for node in sorted(ast.walk(fn), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t for target in targets for t in ast.walk(target) if isinstance(t, ast.Name) and t.id in arguments
                 and isinstance(t.ctx, ast.Store)]
        reads_itself = isinstance(node, ast.Assign) and all(
            any(isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id == t.id
                for v in ast.walk(node.value)) for t in names)
        if not names or reads_itself:
            continue
        array, spec = names[0].id, arrays[names[0].id]
        raise EnvDefinitionError(
            f"{_where(name, node, lines)}\n    '{array}' is an array ({_shape_text(spec)}): assigning to the name "
            f"rebinds it inside {fn.name}() and stores nothing; write {_full_index(spec)} = ...", line=node.lineno)


def _numpy_attribute(node: ast.Attribute, namespace: dict) -> str | None:
    """np.NAME read (not called) where numpy has no NAME."""
    import numpy
    if isinstance(node.value, ast.Name) and namespace.get(node.value.id) is numpy and not hasattr(numpy, node.attr):
        return f"{node.value.id}.{node.attr} is not a numpy name" + did_you_mean(
            node.attr, list(NUMPY) + list(NUMPY_SCALARS) + ["pi", "e", "inf", "nan"], lambda c: f"{node.value.id}.{c}")
    return None


def check_source(name: str, source: str, phases: list, arrays: dict, params: dict, namespace: dict = None) -> None:
    """Raise EnvDefinitionError for the first non-portable call, undefined name or wrong index in the
    env's functions."""
    import builtins
    known = set(namespace or {}) | set(params) | set(dir(builtins)) | HELPERS | RANDOM | ATOMICS | KERNEL_GLOBALS
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return  # exec_source has reported it already
    lines = source.splitlines()
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    phase_names = {fn.__name__ for fn in phases}
    # only what runs in a kernel: the phases and the env functions they call (not host-side helpers
    # such as validate_params, reference_* or a draw(frame, ax) for the viewer)
    kernel_code, todo = set(), [n for n in phase_names if n in functions]
    while todo:
        current = todo.pop()
        if current in kernel_code:
            continue
        kernel_code.add(current)
        todo += [node.func.id for node in ast.walk(functions[current]) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and node.func.id in functions]
    for fn_name, fn in functions.items():
        if fn_name not in kernel_code:
            continue
        arguments = {a.arg for a in fn.args.args}
        rebound = {t.id for node in ast.walk(fn) if isinstance(node, (ast.Assign, ast.AugAssign, ast.For))
                   for t in ast.walk(node.target if not isinstance(node, ast.Assign) else node)
                   if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        if fn_name in phase_names:
            _refuse_rebound_arrays(name, fn, arrays, lines)
        same_meaning.check_function(name, fn, phase=fn_name in phase_names, arrays=arrays, params=params, lines=lines,
                                    namespace=namespace or {}, agents=(namespace or {}).get("NUM_AGENTS"))
        missing = _undefined(fn, known) if namespace is not None else None
        if missing is not None:
            raise EnvDefinitionError(f"{_where(name, missing, lines)}\n    "
                                     f"{_undefined_message(missing.id, fn, namespace, params, arrays)}",
                                     line=missing.lineno)
        parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(fn):
            problem = None
            if isinstance(node, ast.Call):
                problem = _call_problem(node, functions, namespace or {})
            elif isinstance(node, ast.Attribute):
                problem = _numpy_attribute(node, namespace or {})
            else:
                problem = _construct_problem(node, parents.get(node))
            if problem is not None:
                raise EnvDefinitionError(f"{_where(name, node, lines)}\n    {problem}", line=node.lineno)
            if fn_name in phase_names and isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                array = node.value.id
                if array in arguments and array in arrays and array not in rebound:
                    _check_subscript(name, node, arrays[array], lines, params, "agent" in arguments,
                                     parents.get(node))
