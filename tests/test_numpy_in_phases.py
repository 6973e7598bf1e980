"""numpy written in phases compiles on every Python target with numpy's meaning (vocabulary.NUMPY:
each np function of one value becomes a workbench helper or a math function in the kernels), and
the parse's messages name a close name, the missing argument or where a helper comes from."""
import textwrap

import numpy as np
import pytest
import torch

import workbench as wb

# the CUDA simulator runs the phases on numpy scalars, which warn where numpy itself would
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

# u and w are set from the host; one step writes out[env, k] = the k-th numpy expression of them.
EXPRESSIONS = [
    "np.clip(u, -1.0, 1.2)", "np.rint(u)", "hypot(u, w)", "np.arctan2(u, w)", "np.floor(u)", "np.sign(u)",
    "np.minimum(u, w)", "np.maximum(u, w)", "np.sqrt(np.abs(u))", "np.exp(np.minimum(u, 50.0))",
    "np.where(u > w, u, 2.0 * w)", "np.ceil(u)", "np.trunc(u)", "np.round(u)", "np.arcsin(np.clip(u / 5.0, -1.0, 1.0))",
    "np.tanh(u)", "np.power(np.abs(u), 1.5)", "np.mod(u, 0.75)", "np.square(u)", "np.log1p(np.abs(u))",
    "np.fmin(u, w)", "np.fmax(u, w)", "np.copysign(1.5, u)", "np.floor_divide(u, 0.75)", "numpy.fabs(u)",
    "np.arctan(u)", "np.deg2rad(u)", "np.exp2(np.minimum(u, 50.0))", "np.sign(np.int32(-3))",
    "np.divide(u, w)", "np.add(u, w) - np.multiply(u, 2.0)", "np.negative(u) + np.positive(w)",
    "np.signbit(u) + 2.0 * np.signbit(np.negative(u))", "np.subtract(u, w) * np.logical_not(np.greater(u, w))",
    "np.logical_and(np.less(u, 1.0), np.greater_equal(w, 0.0)) + 2.0 * np.logical_or(np.equal(u, w), "
    "np.less_equal(u, -1.0)) + 4.0 * np.logical_xor(np.not_equal(u, 0.5), u > w)",
]
SOURCE = textwrap.dedent('''
    import numpy
    import numpy as np
    from numpy import hypot
    from workbench.envdef import Box, Discrete, per_env

    NUM_AGENTS = 1
    MAX_STEPS = 1000
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(u=per_env("float64"), w=per_env("float64"), out=per_env("float64", (N,)))

    def reset(env, u, w, out):
        u[env] = 0.0
        w[env] = 0.0

    def step(env, u, w, out):
        u = u[env]
        w = w[env]
        BODY

    def observe(env, agent, out, obs):
        obs[env, agent, 0] = out[env, 0]
''').replace("N,", f"{len(EXPRESSIONS)},").replace("BODY", "\n    ".join(
    f"out[env, {k}] = {expr}" for k, expr in enumerate(EXPRESSIONS)))

FINITE = [-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 0.3, -0.7, 3.7, -4.2, 1e-3, 7.25, -0.75, 2.0, 0.1]
NON_FINITE = [np.inf, -np.inf, np.nan, 1e300, -1e300, 2.0**53 + 2, np.nan, 0.5]


def reference(u, w):
    with np.errstate(all="ignore"):
        return np.stack([np.broadcast_to(eval(expr, {"np": np, "numpy": np, "hypot": np.hypot, "u": u, "w": w}),
                                         u.shape).astype(np.float64) for expr in EXPRESSIONS], axis=1)


@pytest.fixture(scope="module")
def registered():
    wb.register("numpy_phases", SOURCE)


@pytest.mark.parametrize("inputs", ["finite", "non-finite"])
def test_numpy_functions_match_numpy(registered, target, inputs):
    u = np.array(FINITE if inputs == "finite" else NON_FINITE)
    w = np.roll(u, 3)
    w[1] = u[1]  # a tie for minimum, maximum and where
    env = wb.make("numpy_phases", num_envs=len(u), target=target)
    env.data["u"].copy_(torch.as_tensor(u))
    env.data["w"].copy_(torch.as_tensor(w))
    env.step()
    got = env.data["out"].cpu().numpy()
    want = reference(u, w)
    if inputs == "non-finite":  # what numpy gives for inf and NaN, where a math function would raise or overflow
        keep = [EXPRESSIONS.index(e) for e in ("np.clip(u, -1.0, 1.2)", "np.rint(u)", "np.floor(u)", "np.ceil(u)",
                                               "np.trunc(u)", "np.round(u)", "np.sign(u)", "np.minimum(u, w)",
                                               "np.maximum(u, w)", "np.fmin(u, w)", "np.fmax(u, w)",
                                               "np.where(u > w, u, 2.0 * w)", "numpy.fabs(u)")]
        got, want = got[:, keep], want[:, keep]
    for k in range(got.shape[1]):
        np.testing.assert_allclose(got[:, k], want[:, k], rtol=1e-13, atol=0, equal_nan=True,
                                   err_msg=EXPRESSIONS[k] if inputs == "finite" else str(k))


def test_rounding_and_sign_are_exact(registered, target):
    u = np.array(FINITE)
    env = wb.make("numpy_phases", num_envs=len(u), target=target)
    env.data["u"].copy_(torch.as_tensor(u))
    env.data["w"].copy_(torch.as_tensor(u[::-1].copy()))
    env.step()
    got = env.data["out"].cpu().numpy()
    want = reference(u, u[::-1].copy())
    exact = [k for k, e in enumerate(EXPRESSIONS) if e.split("(")[0] in (
        "np.clip", "np.rint", "np.floor", "np.sign", "np.minimum", "np.maximum", "np.where", "np.ceil",
        "np.trunc", "np.round", "np.mod", "np.fmin", "np.fmax", "np.floor_divide", "np.copysign")]
    assert len(exact) == 16
    assert got[:, exact].tolist() == want[:, exact].tolist()
    # and zeros keep numpy's sign (np.ceil(-0.5) is -0.0, so 1 / it is -inf; before: +0.0)
    assert (np.signbit(got[:, exact]) == np.signbit(want[:, exact])).all()


ROUNDINGS = ["np.trunc(u[env])", "np.fix(u[env])", "np.floor(u[env])", "np.ceil(u[env])", "np.rint(u[env])"]


def test_rounding_of_float32_state_matches_numpy(target):
    """Rounding float32 state (the CUDA simulator hands the phases numpy float32 scalars)."""
    source = SOURCE.replace('per_env("float64")', 'per_env("float32")').replace('"float64", (', '"float32", (')
    body = "\n    ".join(f"out[env, {k}] = {expr}" for k, expr in enumerate(ROUNDINGS))
    start, end = source.index("    u = u[env]"), source.index("\n\ndef observe")
    wb.register("numpy_float32_rounding", source[:start] + "    " + body + source[end:])
    u = np.array(FINITE[:8], dtype=np.float32)
    env = wb.make("numpy_float32_rounding", num_envs=len(u), target=target)
    env.data["u"].copy_(torch.as_tensor(u))
    env.step()
    got = env.data["out"].cpu().numpy()[:, :len(ROUNDINGS)]
    want = np.stack([np.trunc(u), np.fix(u), np.floor(u), np.ceil(u), np.rint(u)], axis=1)
    assert got.tolist() == want.tolist()


SMALL = textwrap.dedent('''
    import math
    import numpy as np
    from numpy import linspace
    from workbench.envdef import Box, Discrete, per_env
    NUM_AGENTS = 1
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    PARAMS = dict(speed=0.5)
    STATE = dict(x=per_env())

    def reset(env, x):
        x[env] = 0.0

    def step(env, x):
        x[env] = x[env] + speed

    def observe(env, agent, x, obs):
        obs[env, agent, 0] = x[env]
''')


@pytest.mark.parametrize("expression, message", [
    ("np.round(x[env], 2)", "np.round takes 1 argument (x), given 2; for decimals scale around it: "
                            "np.round(x * 100.0) / 100.0"),
    ("np.clip(x[env], a_min=0.0, a_max=1.0)", "np.clip takes its arguments by position in a phase: "
                                              "np.clip(x, lo, hi)"),
    ("np.arctan3(x[env], 1.0)", "np.arctan3 is not a numpy function; did you mean np.arctan, np.arctanh or np.arctan2?"),
    ("np.max(x[env], 1.0)", "np.max does not compile on target(s) cuda, cuda-c; use np.maximum(a, b)"),
    ("np.random.uniform()", "np.random.uniform does not compile on target(s) cuda, cuda-c; use a workbench.rng "
                            "draw (from workbench.rng import uniform)"),
    ("linspace(0.0, 1.0, 3)[0]", "linspace does not compile on target(s) cuda, cuda-c; use a STATE array"),
    ("math.sqr(x[env])", "math.sqr is not a math function; did you mean math.sqrt?"),
    ("math.atan2(x[env])", "math.atan2 takes 2 arguments (y, x), given 1"),  # before: numba's own message
    ("math.log(x[env], 2.0)", "math.log takes 1 argument (x), given 2; for another base: math.log(x) / math.log(base)"),
    ("x[env] + sped", "name 'sped' is not defined (not a parameter, array, local or function of the env); "
                      "did you mean 'speed'?"),
    ("clp(x[env], 0.0, 1.0)", "name 'clp' is not defined (not a parameter, array, local or function of the env); "
                              "did you mean 'clip' (from workbench.helpers import clip)?"),
    ("clip(x[env], 1.0)", "clip takes 3 arguments (x, low, high), given 2 (from workbench.helpers import clip)"),
    ("uniform(x[env])", "uniform takes 2 arguments (key, i), given 1 (from workbench.rng import uniform)"),
    ("x[env] + reward[env, 0]", "name 'reward' is not defined (not a parameter, array, local or function of the "
                                "env); 'reward' is an array: take it as an argument of the phase "
                                "(def step(env, x, reward))"),
    ("x[env] + np.pie", "np.pie is not a numpy name; did you mean np.pi?"),
    ("x[env] + np.PI", "np.PI is not a numpy name; did you mean np.pi?"),  # numpy 1's spellings: np.PI, np.NaN
    ("x[env] * np.NaN", "np.NaN is not a numpy name; did you mean np.nan?"),
    ("print(x[env])", "print() does not compile on target(s) cuda, cuda-c; use a state array the phase writes and "
                      "the host reads after the step"),
])
def test_messages_name_the_fix(expression, message):
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("numpy_message", SMALL.replace("x[env] + speed", expression))
    lines = str(info.value).splitlines()
    assert lines[0] == f"numpy_message: line 16: x[env] = {expression}"
    assert lines[1].strip().startswith(message), lines[1]


def test_module_level_name_error_suggests_the_name():
    with pytest.raises(wb.EnvDefinitionError, match=r"name 'Discrte' is not defined; did you mean 'Discrete'\?"):
        wb.register("numpy_module_level", SMALL.replace("ACTION = Discrete(2)", "ACTION = Discrte(2)"))


@pytest.mark.parametrize("module, line", [("np", "import numpy as np"), ("math", "import math")])
def test_a_module_not_imported_says_to_import_it(module, line):
    source = SMALL.replace("import math\nimport numpy as np\n", "").replace("x[env] + speed", f"{module}.fabs(x[env])")
    with pytest.raises(wb.EnvDefinitionError, match=f"name '{module}' is not defined .*; add `{line}` at the top"):
        wb.register("numpy_no_import", source)


def test_a_missing_observe_gives_its_form():
    with pytest.raises(wb.EnvDefinitionError, match=r"the source does not define observe; add e.g. `def observe\("
                                                      r"env, agent, x, obs\): obs\[env, agent, 0\] = x\[env\]`"):
        wb.register("numpy_no_observe", SMALL.split("def observe")[0])


def test_host_code_keeps_numpy():
    """Only the kernels see the translation: the env's host functions (validate_params, a drawer) run
    with numpy itself, on arrays."""
    source = SMALL.replace("PARAMS = dict(speed=0.5)", "PARAMS = dict(speed=0.5)\n\ndef validate_params(p):\n"
                           "    return None if np.clip(np.array([p.speed]), 0, 1).shape == (1,) else 'no'")
    wb.register("numpy_host", source)
    env = wb.make("numpy_host", num_envs=2, target="cpu")
    env.step()
    assert env.data["x"].tolist() == [0.5, 0.5]


DIVISIONS = ["np.mod(x[env], y[env])", "np.remainder(x[env], y[env])", "np.floor_divide(x[env], y[env])",
             "np.fmod(x[env], y[env])", "math.fmod(x[env], y[env])", "np.mod(m[env], n[env])",
             "np.floor_divide(m[env], n[env])", "np.fmod(m[env], n[env])", "math.fmod(m[env], n[env])"]
DIVISION_SOURCE = textwrap.dedent('''
    import math
    import numpy as np
    from workbench.envdef import Box, Discrete, per_env

    NUM_AGENTS = 1
    MAX_STEPS = 1000
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(x=per_env("float64"), y=per_env("float64"), m=per_env("int32"), n=per_env("int32"),
                 out=per_env("float64", (N,)))

    def reset(env, x):
        x[env] = 0.0

    def step(env, x, y, m, n, out):
        BODY

    def observe(env, agent, out, obs):
        obs[env, agent, 0] = out[env, 0]
''').replace("N,", f"{len(DIVISIONS)},").replace("BODY", "\n    ".join(
    f"out[env, {k}] = {expr}" for k, expr in enumerate(DIVISIONS)))


def test_division_functions_by_zero_and_signs_match_numpy(target):
    """np.mod/remainder/floor_divide/fmod and math.fmod with numpy's values for a zero divisor (float: nan
    or +-inf, int: 0) and C fmod's sign (the dividend's, -0.0 kept)."""
    wb.register("numpy_divisions", DIVISION_SOURCE)
    x = np.array([7.0, -7.0, 0.0, -0.0, 7.5, -7.5, np.inf, np.nan, 5.0, -6.0, -5.0, 5.0, -0.0, 0.0])
    y = np.array([0.0, 0.0, 0.0, 3.0, 2.0, 2.0, 3.0, 0.0, np.inf, -3.0, np.inf, -np.inf, np.inf, -np.inf])
    m = np.array([7, -7, 0, 5, -5, 7, -7, 3, 0, 1, 9, -9, 4, -4], dtype=np.int32)
    n = np.array([0, 0, 0, 3, 3, -3, -3, 0, 2, 1, 4, 4, -3, -3], dtype=np.int32)
    env = wb.make("numpy_divisions", num_envs=len(x), target=target)
    for key, value in dict(x=x, y=y, m=m, n=n).items():
        env.data[key].copy_(torch.as_tensor(value))
    env.step()
    got = env.data["out"].cpu().numpy()
    with np.errstate(all="ignore"):
        want = np.stack([np.mod(x, y), np.remainder(x, y), np.floor_divide(x, y), np.fmod(x, y), np.fmod(x, y),
                         np.mod(m, n), np.floor_divide(m, n), np.fmod(m, n), np.fmod(m, n)], axis=1).astype(np.float64)
    np.testing.assert_array_equal(got, want)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))  # -0.0 from fmod(-0.0, 3)


def test_a_division_by_zero_in_the_env_own_code_is_numpy_arithmetic_on_the_cpu():
    """x / 0.0 is inf and an int // 0 is 0 on the cpu target, as numba-cuda computes them on the GPU
    (Python's error model raised ZeroDivisionError from inside the parallel loop, in make() itself)."""
    wb.register("divides_by_zero", textwrap.dedent('''
        from workbench.envdef import Box, Discrete, per_env

        NUM_AGENTS = 1
        OBSERVATION = Box(shape=(1,))
        ACTION = Discrete(2)
        STATE = dict(x=per_env(), y=per_env(), k=per_env("int32"))

        def reset(env, x, y, k):
            x[env] = 1.0
            y[env] = 1.0
            k[env] = 5

        def step(env, x, y, k):
            x[env] = x[env] / (y[env] - 1.0)
            k[env] = k[env] // (k[env] - k[env])

        def observe(env, agent, x, obs):
            obs[env, agent, 0] = x[env]
    '''))
    env = wb.make("divides_by_zero", num_envs=3, target="cpu")
    env.reset()
    env.step()
    assert torch.isinf(env.data["x"]).all() and (env.data["k"] == 0).all()


def test_zero_to_a_negative_integer_power_on_the_cpu_names_the_fix():
    """numba's integer power raises at 0 ** -1 whatever the error model (before: SystemError, "returned a
    result with an exception set", naming nothing); a float exponent gives numpy's inf."""
    source = textwrap.dedent('''
        from workbench.envdef import Box, Discrete, per_env

        NUM_AGENTS = 1
        OBSERVATION = Box(shape=(1,))
        ACTION = Discrete(2)
        STATE = dict(x=per_env("float64"), y=per_env("float64"))

        def reset(env, x, y):
            x[env] = 0.0

        def step(env, x, y):
            y[env] = x[env] ** -1

        def observe(env, agent, y, obs):
            obs[env, agent, 0] = y[env]
    ''')
    wb.register("zero_power", source)
    with pytest.raises(ZeroDivisionError) as info:
        wb.make("zero_power", num_envs=2, target="cpu").step()
    assert str(info.value).startswith("zero_power: a step phase divided by zero on the cpu target")
    assert "write the exponent as a float (x ** -1.0)" in str(info.value)
    wb.register("zero_power", source.replace("** -1", "** -1.0"))
    env = wb.make("zero_power", num_envs=2, target="cpu")
    env.step()
    assert torch.isinf(env.data["y"]).all()
