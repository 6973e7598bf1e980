"""What a phase may call on every target, and the checks made on an env's source when it is parsed.

`check_source` walks the env's syntax tree before anything compiles and raises EnvDefinitionError
for a call some target cannot compile (naming the function, the env's line, the targets that lack
it and the portable alternative), for an array indexed with more indices than its layout has
(a per-agent index into a per-replica array), and for a constant index past the end of an axis.
"""
from __future__ import annotations

import ast

from ..errors import EnvDefinitionError

PYTHON_TARGETS = ("cpu", "cuda")

MATH = frozenset("""sqrt exp expm1 log log2 log10 log1p pow sin cos tan asin acos atan atan2 sinh cosh tanh
    asinh acosh atanh floor ceil trunc fabs hypot copysign fmod isnan isinf isfinite erf erfc gamma lgamma
    degrees radians""".split())
BUILTINS = frozenset("min max abs int float bool round range len".split())
NUMPY_SCALARS = frozenset("float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool_".split())
HELPERS = frozenset("rint round_half_even clip sign".split())
RANDOM = frozenset("uniform uniform_range normal randint make_key mix64".split())
ATOMICS = frozenset("atomic_add atomic_max atomic_min".split())

# numpy functions authors reach for, with what works on every target instead
NUMPY_ALTERNATIVES = {
    "rint": "rint(x) (or round_half_even(x)), a workbench helper", "round": "rint(x), a workbench helper",
    "around": "rint(x), a workbench helper", "clip": "clip(x, lo, hi), a workbench helper",
    "sign": "sign(x), a workbench helper", "abs": "abs(x)", "absolute": "abs(x)", "fabs": "math.fabs(x)",
    "minimum": "min(a, b)", "maximum": "max(a, b)", "fmin": "min(a, b)", "fmax": "max(a, b)",
    "arctan2": "math.atan2(y, x)", "arcsin": "math.asin(x)", "arccos": "math.acos(x)", "arctan": "math.atan(x)",
    "power": "x ** y", "mod": "x % y", "floor_divide": "x // y", "square": "x * x",
}
for _fn in MATH:
    NUMPY_ALTERNATIVES.setdefault(_fn, f"math.{_fn}(x)")


def _where(name: str, node: ast.AST, lines: list) -> str:
    text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
    return f"{name}: line {node.lineno}: {text}"


def _call_problem(func: ast.expr, local_functions: set) -> tuple | None:
    """(what, missing targets, alternative) for a call no every-target phase may make, else None."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module, attr = func.value.id, func.attr
        if module in ("np", "numpy"):
            if attr in NUMPY_SCALARS:
                return None
            alternative = NUMPY_ALTERNATIVES.get(attr, "a math.* function or a workbench helper (rint, clip, sign)")
            return f"np.{attr}", "cuda, cuda-c", alternative
        if module == "math":
            if attr in MATH:
                return None
            return f"math.{attr}", "cuda, cuda-c", "a function of the portable list in docs/writing-an-env.md"
        if module == "cuda":
            return None
        return None
    if isinstance(func, ast.Name):
        name = func.id
        if name in BUILTINS or name in HELPERS or name in RANDOM or name in ATOMICS or name in local_functions \
                or name in NUMPY_SCALARS:
            return None
        if name in ("sum", "sorted", "list", "dict", "set", "print", "enumerate", "zip", "any", "all", "map",
                    "isinstance", "tuple"):
            alternative = {"sum": "a loop accumulating into a local", "sorted": "an insertion into a small local",
                           "print": "writing the value into a state array", "enumerate": "range(n) and an index",
                           "zip": "range(n) and an index", "tuple": "a literal (a, b)"}.get(name, "a loop")
            return f"{name}()", "cuda, cuda-c" if name in ("print",) else "cpu, cuda, cuda-c", alternative
    return None


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


def _check_subscript(name: str, node: ast.Subscript, spec, lines: list, params: dict):
    index = node.slice
    items = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    ndim = _ndim(spec)
    if len(items) > ndim:
        hint = f"{spec.name}[env]" if spec.layout == "env" and not spec.shape else f"{ndim} indices"
        raise EnvDefinitionError(
            f"{_where(name, node, lines)}\n    '{spec.name}' takes {ndim} ind{'ex' if ndim == 1 else 'ices'} "
            f"({_shape_text(spec)}), given {len(items)}: write {hint}", line=node.lineno)
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


KERNEL_GLOBALS = frozenset("NUM_AGENTS MAX_STEPS TPE EPB RESET_STEP OBSERVE_STEP cuda prange THIS_ENV_IS_CUDA_C_ONLY__RUN_IT_WITH_TARGET_CUDA_C".split())


def _undefined(fn: ast.FunctionDef, known: set):
    """The first name `fn` reads that nothing defines, else None."""
    local = {a.arg for a in fn.args.args}
    local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local \
                and node.id not in known:
            return node
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
    local_functions = set(functions)
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
        missing = _undefined(fn, known) if namespace is not None else None
        if missing is not None:
            raise EnvDefinitionError(
                f"{_where(name, missing, lines)}\n    name '{missing.id}' is not defined (not a parameter, array, "
                f"local or function of the env)", line=missing.lineno)
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                problem = _call_problem(node.func, local_functions)
                if problem is not None:
                    what, missing, alternative = problem
                    raise EnvDefinitionError(
                        f"{_where(name, node, lines)}\n    {what} does not compile on target(s) {missing}; "
                        f"use {alternative}", line=node.lineno)
            if fn_name in phase_names and isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                array = node.value.id
                if array in arguments and array in arrays and array not in rebound:
                    _check_subscript(name, node, arrays[array], lines, params)
