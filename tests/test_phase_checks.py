"""What the parse refuses in a phase, and what it now reads as Python does: mistakes that compiled
and silently did something else (an array's name assigned, a store a whole row short, float() of a
float32 kept narrow), and messages that named the wrong fix."""
import textwrap

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.compiler.targets import _numba

BASE = textwrap.dedent('''
    import numpy as np
    from workbench.compiler.envdef import Box, Discrete, per_agent, per_env
    NUM_AGENTS = 2
    MAX_STEPS = 20
    PARAMS = dict(speed=0.5)
    OBSERVATION = Box(shape=(2,))
    ACTION = Discrete(2)
    STATE = dict(u=per_env(), w=per_env(), out=per_env("float64", (2,)), x=per_agent())

    def near(a, b, scale=1.0):
        return scale * abs(a - b)

    def reset(env, agent, x):
        x[env, agent] = 0.0

    def step(env, agent, action, u, w, out, x, reward, terminated):
        x[env, agent] = x[env, agent] + speed
        out[env, 0] = np.hypot(float(u[env]), float(w[env]))
        out[env, 1] = min(float(u[env]) / 3.0, float('inf'))
        reward[env, agent] = near(x[env, agent], 1.0)
        terminated[env] = 0

    def observe(env, agent, x, obs):
        obs[env, agent, 0] = x[env, agent]
        obs[env, agent, 1] = speed
''')


def variant(name, old, new):
    assert old in BASE, old
    wb.register(name, BASE.replace(old, new))


def refused(name, old, new) -> str:
    with pytest.raises(wb.EnvDefinitionError) as info:
        variant(name, old, new)
    return str(info.value)


def test_float_of_float32_state_is_float64_as_in_python(target):
    """Before: numba typed float(float32) as float32 on cpu and GPUs (np.hypot gave 2.915475845 for
    2.5 and -1.5), while the CUDA simulator, which runs the Python, gave numpy's 2.9154759474226504.
    float('inf') stays Python's float (numba builds it from a string with float alone)."""
    wb.register("float_widens", BASE)
    env = wb.make("float_widens", num_envs=3, target=target)
    u = np.array([2.5, 0.1, -7.3], dtype=np.float32)
    w = np.array([-1.5, 3.3, 0.7], dtype=np.float32)
    env.data["u"].copy_(torch.as_tensor(u))
    env.data["w"].copy_(torch.as_tensor(w))
    env.step()
    got = env.data["out"].cpu().numpy()
    # (a GPU's float64 hypot is within an ulp of numpy's; float32 arithmetic would be 1e-8 off)
    np.testing.assert_allclose(got[:, 0], np.hypot(u.astype(np.float64), w.astype(np.float64)), rtol=1e-15, atol=0)
    assert got[:, 1].tolist() == (u.astype(np.float64) / 3.0).tolist()


@pytest.mark.parametrize("old, new, line, text", [
    ("reward[env, agent] = near(x[env, agent], 1.0)", "reward = near(x[env, agent], 1.0)",
     "line 21: reward = near(x[env, agent], 1.0)",
     "'reward' is an array (per agent, shape [E, A] (float32)): assigning to the name rebinds it inside step() and "
     "stores nothing; write reward[env, agent] = ..."),
    ("terminated[env] = 0", "terminated = 1", "line 22: terminated = 1",
     "'terminated' is an array (per replica, shape [E] (uint8)): assigning to the name rebinds it inside step() "
     "and stores nothing; write terminated[env] = ..."),
    ("obs[env, agent, 1] = speed", "obs[env, 1] = speed", "line 26: obs[env, 1] = speed",
     "'obs' takes 3 indices (per agent, shape [E, A, 2] (float32)), given 2: this writes the whole row obs[env, 1] "
     "from each agent (a race on a GPU); write obs[env, agent, i] = ..."),
    ("terminated[env] = 0", "terminated[env] = len(f'{speed}')", "line 22: terminated[env] = len(f'{speed}')",
     "an f-string does not compile on target(s) cuda (a GPU kernel has no lists, dicts, sets, formatted strings, "
     "generators or exceptions); use numbers only: store the value into a state array and format it on the host"),
    ("near(x[env, agent], 1.0)", "near(x[env, agent])", "line 21: reward[env, agent] = near(x[env, agent])",
     "near() (line 11) takes 2 to 3 arguments (a, b, scale), given 1"),
    ("near(x[env, agent], 1.0)", "near(x[env, agent], 1.0, scal=2.0)",
     "line 21: reward[env, agent] = near(x[env, agent], 1.0, scal=2.0)",
     "near() (line 11) has no argument 'scal'; did you mean 'scale'?"),
    ("out[env, 1] = min(float(u[env]) / 3.0, float('inf'))", "out[env, 1] = np.heaviside(u[env], 0.5)",
     "line 20: out[env, 1] = np.heaviside(u[env], 0.5)",
     "np.heaviside does not compile on target(s) cuda, cuda-c; use np.where(x > 0.0, 1.0, np.where(x == 0.0, h, "
     "0.0))"),
])
def test_a_phase_mistake_that_compiled_is_refused_at_its_line(old, new, line, text):
    assert refused("phase_mistake", old, new) == f"phase_mistake: {line}\n    {text}"


def test_an_array_read_into_its_own_name_still_compiles():
    variant("rebound_read", "out[env, 1] = min(float(u[env]) / 3.0, float('inf'))", "u = u[env]\n    out[env, 1] = u")
    env = wb.make("rebound_read", num_envs=2, target="cpu")
    env.data["u"].fill_(1.5)
    env.step()
    assert env.data["out"][:, 1].tolist() == [1.5, 1.5]


@pytest.mark.parametrize("signature, text", [
    ("def observe(e, agent, x, obs):", "takes 'e', which is neither env/agent/key, an entity of ENTITIES nor an array "
                                       "(arrays: ['action', 'done', 'episode', 'final_obs', 'last_length', "
                                       "'last_return', 'obs', 'out', 'reward', 't', 'terminated', 'truncated', 'u', "
                                       "'w', 'x']); did you mean 'env'? (the framework's name for that index)"),
    ("def observe(env, agent, x, obs, speed):", "takes 'speed', which is a parameter (PARAMS): phases read parameters "
                                                "as global names; drop it from the arguments"),
    ("def observe(env, agent, x, obs, k=2):", "gives 'k' a default (k=2): phase arguments bind to arrays by name and "
                                              "take no defaults; for a constant, add it to PARAMS (PARAMS = "
                                              "dict(..., k=2)) and read it as a global name"),
    ("def observe(env, agent, *x, obs):", "takes *x as variadic positional: phases take plain arguments, each named "
                                          "after what it binds; write x"),
])
def test_a_phase_argument_the_kernels_cannot_bind_names_the_fix(signature, text):
    message = refused("phase_argument", "def observe(env, agent, x, obs):", signature)
    assert message == f"phase_argument: observe() (line 24) {text}"


def test_names_where_functions_belong_and_one_dimension_shapes():
    source = BASE.replace("def step(", "def move(").replace("STATE = dict(", 'STEP = ["move", "scroe"]\nSTATE = dict(')
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("step_names", source)
    assert str(info.value) == ("step_names: STEP must hold functions, got 'move'; list the functions themselves, not "
                               "their names: STEP = [move, scroe]")
    wb.register("one_dimension", BASE.replace('per_env("float64", (2,))', 'per_env("float64", 2)'))
    assert wb.make("one_dimension", num_envs=2, target="cpu").data["out"].shape == (2, 2)


def test_an_unknown_target_suggests_the_close_one():
    with pytest.raises(wb.TargetUnavailableError, match=r"unknown target 'cdua'; targets are \['cpu', 'cuda', "
                                                        r"'cuda-c'\]; did you mean 'cuda'\?"):
        wb.make("cartpole", num_envs=2, target="cdua")
    with pytest.raises(wb.TargetUnavailableError, match=r"unknown target 'gpu'; .* for the GPU: 'cuda' \(numba-cuda\) "
                                                        r"or 'cuda-c'"):  # (before: did you mean 'cpu'?)
        wb.make("cartpole", num_envs=2, target="gpu")


def test_a_compiler_name_error_is_not_called_the_env_own():
    """Before: an f-string on a GPU failed in numba-cuda with "name 'resolve_getattr' is not defined", which
    the message called a name of the env's that nothing defines."""
    text = "NameError: name 'resolve_getattr' is not defined"
    assert _numba._reason(text, "def step(env, x):\n    x[env] = 1.0\n") == [text]
    assert _numba._reason("NameError: name 'sped' is not defined", "x[env] = sped")[0] == (
        "name 'sped' is not defined (not a parameter, array, local or function of the env)")


def test_a_short_name_one_letter_off_gets_a_suggestion():
    """Before: difflib's ratio left 'ss' for the local 's' without one (below its cutoff)."""
    message = refused("short_name", "out[env, 1] = min(float(u[env]) / 3.0, float('inf'))",
                      "s = u[env]\n    out[env, 1] = ss")
    assert message.endswith("name 'ss' is not defined (not a parameter, array, local or function of the env); "
                            "did you mean 's'?")


def test_legitimate_forms_near_the_refused_ones_still_compile():
    """A per-agent phase filling its own row (x[env, agent] = 0.0 for a vector a agent), a default on an
    array argument (never used: the kernels pass every array), float('inf')."""
    source = BASE.replace("x=per_agent())", "x=per_agent(), v=per_agent(\"float32\", (3,)))").replace(
        "def reset(env, agent, x):\n    x[env, agent] = 0.0",
        "def reset(env, agent, x, v):\n    x[env, agent] = 0.0\n    v[env, agent] = 0.5").replace(
        "def observe(env, agent, x, obs):", "def observe(env, agent, x, obs=None):")
    wb.register("near_refused", source)
    env = wb.make("near_refused", num_envs=2, target="cpu")
    env.reset()
    assert env.data["v"].flatten().tolist() == [0.5] * 12


def test_an_array_name_assigned_after_it_was_indexed_is_refused_too():
    message = refused("late_rebind", "reward[env, agent] = near(x[env, agent], 1.0)",
                      "reward[env, agent] = 0.0\n    if x[env, agent] > 1.0:\n        reward = -1.0")
    assert message.startswith("late_rebind: line 23: reward = -1.0\n    'reward' is an array"), message
