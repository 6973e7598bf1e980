"""The env compiler: its on-disk cache, source checks at parse time, condensed compiler errors,
bounds-checked debug kernels and the random key of every phase (issue 13's problems, each reproduced)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import workbench as wb
from workbench.compiler import vocabulary
from workbench.compiler.helpers import clip, rint, round_half_even, sign
from workbench.runtime.registry import definition

# A per-replica counter env: one agent per replica draws in its step phase and in observe.
KEYS = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    from workbench.compiler.rng import uniform
    NUM_AGENTS = 1
    MAX_STEPS = 50
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(drawn=per_env())

    def reset(env, agent, drawn):
        drawn[env] = 0.0

    def step(env, agent, key, drawn):
        drawn[env] = uniform(key, 0)

    def observe(env, agent, key, obs):
        obs[env, agent, 0] = uniform(key, 0)
''')


def test_observe_draws_from_its_own_key_stream(target):
    wb.register("observe_keys", KEYS)
    env = wb.make("observe_keys", num_envs=4 if target == "cuda" else 64, target=target)
    obs_before = env.reset().clone()
    env.step()
    # observe after reset and the first step's phase ran at the same t: they must not share draws
    assert not torch.equal(obs_before[:, 0, 0], env.data["drawn"])
    obs_after, _, _, _ = env.step()
    assert not torch.equal(obs_after[:, 0, 0], env.data["drawn"])


# The action's largest category comes back as the reward: the action array's narrow dtype holds it.
ECHO = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, MultiDiscrete, per_env
    NUM_AGENTS = 2
    MAX_STEPS = 9
    OBSERVATION = Box(shape=(1,))
    ACTION = SPACE
    STATE = dict(seen=per_env())

    def reset(env, seen):
        seen[env] = 0.0

    def step(env, agent, action, seen, reward, terminated):
        a = ACTION_READ
        reward[env, agent] = a * 1.0
        seen[env] = a * 1.0
        terminated[env] = 0

    def observe(env, agent, seen, obs):
        obs[env, agent, 0] = seen[env]
''')


@pytest.mark.parametrize("space, dims, dtype", [("Discrete(2)", 0, torch.int8), ("Discrete(128)", 0, torch.int8),
                                                ("Discrete(129)", 0, torch.int16),
                                                ("Discrete(40000)", 0, torch.int32),
                                                ("MultiDiscrete((3, 300))", 2, torch.int16)])
def test_actions_are_the_smallest_integer_that_holds_them(target, space, dims, dtype):
    name = f"echo_{dtype}_{dims}".replace("torch.", "")
    read = f"action[env, agent, {dims - 1}]" if dims else "action[env, agent]"
    wb.register(name, ECHO.replace("SPACE", space).replace("ACTION_READ", read))
    env = wb.make(name, num_envs=3, target=target)
    top = env.action_space.nvec[-1] - 1 if dims else env.action_space.n - 1
    assert env.data["action"].dtype == dtype
    shape = tuple(env.data["action"].shape)
    highest = torch.tensor(env.action_space.nvec) - 1 if dims else torch.tensor(top)
    actions = highest.expand(shape).to(torch.int64)  # any integer dtype is taken
    _obs, reward, _done, _info = env.step(actions.to(env.device))
    assert reward.cpu().eq(float(top)).all(), (space, reward)


# One agent writing a 6-wide observation; the variants below break it one way each. (One agent: with
# several, x[env] = x[env] + 1.0 in a per-agent phase would be a race the parse refuses.)
SIX = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    NUM_AGENTS = 1
    MAX_STEPS = 20
    OBSERVATION = Box(shape=(6,))
    ACTION = Discrete(2)
    STATE = dict(x=per_env())

    def reset(env, agent, x):
        x[env] = 0.0

    def step(env, agent, action, x, reward, terminated):
        x[env] = x[env] + 1.0
        reward[env, agent] = 1.0
        terminated[env] = 0

    def observe(env, agent, x, obs):
        for i in range(6):
            obs[env, agent, i] = x[env]
''')


def make_variant(name, old, new, target="cpu", **kwargs):
    assert old in SIX
    wb.register(name, SIX.replace(old, new))
    return wb.make(name, num_envs=3, target=target, **kwargs)


def test_out_of_bounds_write_is_named_by_array_index_and_line(target):
    # the index is computed, so only a bounds-checked kernel sees it (no check at parse time); replica 0's
    # alone, so that the unchecked kernel's store lands inside the tensor (replica 1's first entry)
    if target == "cuda" and not torch.cuda.is_available():  # the simulator's arrays check bounds: make finds it
        with pytest.raises(wb.EnvIndexError) as info:
            make_variant("oob_dynamic", "for i in range(6):", "for i in range(7 if env == 0 else 6):",
                         target=target)
    else:
        env = make_variant("oob_dynamic", "for i in range(6):", "for i in range(7 if env == 0 else 6):",
                           target=target)  # unchecked
        assert env.num_envs == 3
        with pytest.raises(wb.EnvIndexError) as info:  # on a GPU, the cpu target beside it finds the access
            wb.check_env("oob_dynamic", targets=("cpu", target) if target == "cuda" else (target,), num_envs=3,
                         steps=2)
    text = str(info.value)
    assert "at line 19:\n    obs[env, agent, i] = x[env]" in text
    assert "obs[0, 0, 6] is out of bounds: index 6 on axis 2 of shape (3, 1, 6)" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CUDA simulator's behaviour (a GPU does not raise)")
def test_a_python_error_in_the_cuda_simulator_names_the_env_line():
    """Before: ValueError: tid=[0, 0, 0] ctaid=[0, 0, 0]: math domain error, with no env or line."""
    source = SIX.replace("x[env] = x[env] + 1.0", "x[env] = math.sqrt(x[env] - 5.0)").replace(
        "from workbench.compiler", "import math\nfrom workbench.compiler")
    wb.register("domain_error", source)
    with pytest.raises(wb.WorkbenchError) as info:
        wb.make("domain_error", num_envs=2, target="cuda").step()
    assert isinstance(info.value, wb.EnvRuntimeError)
    assert str(info.value).startswith("env 'domain_error' raised in numba's CUDA simulator at line 14:\n    x[env] = "
                                      "math.sqrt(x[env] - 5.0)\n  ValueError: math domain error (tid=")
    assert "Keep the value in its domain (math.sqrt(max(x, 0.0))" in str(info.value)


def test_an_index_from_small_integers_is_named_as_the_kernel_computes_it():
    source = SIX.replace("ACTION = Discrete(2)", "ACTION = Discrete(3)").replace(
        "x[env] = x[env] + 1.0", "x[env + action[env, agent] * 100] = 1.0")
    wb.register("wide_index", source)
    env = wb.make("wide_index", num_envs=3, target="cpu", debug=True)
    with pytest.raises(wb.EnvIndexError) as info:
        env.step(torch.full((3, 1), 2, dtype=torch.int64))
    assert "x[200] is out of bounds: index 200 on axis 0 of shape (3,)" in str(info.value)  # (int8 math: -56)


def test_constant_index_past_the_shape_is_a_definition_error():
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("oob_constant", "obs[env, agent, i] = x[env]", "obs[env, agent, 6] = x[env]")
    assert str(info.value) == ("oob_constant: line 19: obs[env, agent, 6] = x[env]\n    index 6 is out of bounds for "
                               "axis 2 of 'obs' (per agent, shape [E, A, 6] (float32))")


def test_per_agent_index_into_a_per_replica_array_names_its_shape():
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("wrong_scope", "terminated[env] = 0", "terminated[env, agent] = 1")
    assert str(info.value) == ("wrong_scope: line 15: terminated[env, agent] = 1\n    'terminated' takes 1 index "
                               "(per replica, shape [E] (uint8)), given 2: write terminated[env]")


def test_undefined_name_names_the_env_line(target):
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("undefined", "x[env] + 1.0", "x[env] + speed", target=target)
    assert str(info.value).startswith("undefined: line 13: x[env] = x[env] + speed\n    name 'speed' is not defined")
    assert "<workbench driver" not in str(info.value)


@pytest.mark.parametrize("old, new, words", [
    ("x[env] = x[env] + 1.0", "x[env] = x[env] + 1.0\n    energy[env, agent] = 1.0",
     ["name 'energy' is not defined", "declare it in STATE, e.g. STATE = dict(..., energy=per_agent())",
      "(def step(env, agent, action, x, reward, terminated, energy))"]),
    ("def step(env, agent, action, x, reward, terminated):", "def step(agent, action, x, reward, terminated):",
     ["'env' is the index of the replica the phase runs for", "(def step(env, agent, action, x, reward, terminated))"]),
    ("def observe(env, agent, x, obs):", "def observe(env, x, obs):",
     ["'agent' is the index of the agent the phase runs for", "(def observe(env, agent, x, obs))"]),
    ("def step(env, agent, action, x, reward, terminated):", "def step(env, agent, action, x, reward, terminated, fuel):",
     ["takes 'fuel'", "a new array: declare it in STATE, e.g. STATE = dict(..., fuel=per_agent())"]),
    ("x[env] = x[env] + 1.0", "x[env] = torch.sqrt(x[env])",
     ["torch.sqrt: torch does not compile in a phase", "use np.sqrt"]),
    ("ACTION = Discrete(2)", "ACTION = Discrete(2))", ["named_env: syntax error at line 7: unmatched ')'"]),
])
def test_a_mistake_in_a_source_gets_the_fix(old, new, words):
    source = SIX.replace(old, new).replace("from workbench.compiler", "import torch\nfrom workbench.compiler")
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("named_env", source)
    for word in words:
        assert word in str(info.value)


def test_compiler_error_is_condensed_and_keeps_the_details():
    with pytest.raises(wb.EnvCompileError) as info:
        make_variant("typing_error", "x[env] + 1.0", "x[env] + (1.0, 2.0)")
    lines = str(info.value).splitlines()
    assert lines[:2] == ["env 'typing_error' failed to compile for target 'cpu' at line 13:",
                         "    x[env] = x[env] + (1.0, 2.0)"]
    assert 3 <= len(lines) <= 4 and "add(float32, UniTuple(float64 x 2))" in str(info.value)
    assert "No implementation of function" in info.value.details and len(info.value.details) > len(str(info.value))


@pytest.mark.parametrize("call, alternative", [("np.sum(x[env])", "a loop accumulating"),
                                               ("np.linspace(0, 1, 3)[0]", "a STATE array"),
                                               ("math.frexp(x[env])", "portable list")])
def test_call_no_target_compiles_everywhere_is_refused_at_parse(call, alternative):
    with pytest.raises(wb.EnvDefinitionError) as info:  # (refused when registered)
        wb.register("unportable", SIX.replace("x[env] + 1.0", call).replace(
            "from workbench.compiler.envdef", "import math, numpy as np; from workbench.compiler.envdef"))
    text = str(info.value)
    assert text.startswith(f"unportable: line 13: x[env] = {call}\n")
    assert "does not compile on target(s) cuda, cuda-c" in text and alternative in text


@pytest.mark.parametrize("statement, refused, alternative", [
    ("x[env] = [1.0, 2.0][0]", "a list does not compile on target(s) cuda", "a tuple (a, b)"),
    ("x[env] = {0: 1.0}[0]", "a dict does not compile on target(s) cuda", "locals"),
    ("x[env] = [v for v in (1.0, 2.0)][0]", "a list comprehension does not compile", "a for loop over range(n)"),
    ("assert x[env] >= 0.0", "assert does not mean the same on every target", "store a flag"),
    ("import math", "an import inside a function does not compile on target(s) cpu, cuda", "import at the top"),
])
def test_constructs_a_gpu_kernel_lacks_are_refused_at_parse(statement, refused, alternative):
    """The cpu target and the CUDA simulator run these; a GPU fails to compile them (or ignores them)."""
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("gpu_unportable", SIX.replace("x[env] = x[env] + 1.0", statement))
    text = str(info.value)
    assert text.startswith(f"gpu_unportable: line 13: {statement}\n") and refused in text and alternative in text


def test_a_loop_over_a_list_of_constants_compiles(target):
    """numba-cuda compiles `for v in [...]` (the docs' "small constant lists"), not a list kept in a name."""
    env = make_variant("constant_list_loop", "x[env] = x[env] + 1.0", "total = 0.0\n    for v in [1.0, 2.0]:\n        total += v\n    x[env] = total",
                       target=target)
    env.step()
    assert env.data["x"].tolist() == [3.0, 3.0, 3.0]


def test_try_in_a_function_a_phase_calls_is_refused_at_parse():
    source = SIX.replace("x[env] = x[env] + 1.0", "x[env] = safe_inverse(x[env])").replace(
        "\ndef reset(", "\ndef safe_inverse(v):\n    try:\n        return 1.0 / v\n    except ZeroDivisionError:"
        "\n        return 0.0\n\ndef reset(")
    with pytest.raises(wb.EnvDefinitionError) as info:  # (refused when registered)
        wb.register("gpu_unportable_helper", source)
    assert str(info.value).startswith("gpu_unportable_helper: line 10: try:\n    try/except does not compile on target(s) "
                                      "cuda") and "an if on the condition" in str(info.value)


def test_portable_helpers_compile_on_every_numba_target(target):
    env = make_variant("helpers", "x[env] + 1.0", "clip(rint(x[env] + 0.5) + sign(-2.0), -1.0, 3.0)", target=target)
    env.step()
    env.step()
    assert env.data["x"].tolist() == [-1.0, -1.0, -1.0]  # rint(0.5) = 0, sign(-2) = -1, then rint(-0.5) = 0


def test_helpers_in_python():
    assert [rint(v) for v in (0.5, 1.5, 2.5, -0.5, -1.5, 2.4)] == [0.0, 2.0, 2.0, 0.0, -2.0, 2.0]
    assert round_half_even(3.5) == 4.0 and clip(5, 0, 3) == 3 and sign(-0.5) == -1.0 and sign(0) == 0


def test_shipped_envs_use_only_the_portable_vocabulary():
    from importlib import resources
    from workbench.runtime import registry
    shipped = [p.name[:-3] for p in resources.files("workbench.envs").iterdir()
               if p.name.endswith(".py") and not p.name.startswith("_")]
    assert len(shipped) >= 7
    for name in shipped:
        registry.definition(name)  # parse runs vocabulary.check_source


PROBE = """
import json, sys
import workbench as wb
env = wb.make("cartpole", num_envs=2, target="cpu", tau=0.0123)
print(json.dumps({"from_cache": env.kernels.loaded_from_cache, "dir": str(env.kernels.module.directory)}))
"""


def test_second_process_loads_compiled_kernels_from_the_cache(tmp_path):
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                                      check=True, timeout=600).stdout.splitlines()[-1]) for _ in range(2)]
    assert [r["from_cache"] for r in runs] == [False, True]
    assert runs[0]["dir"] == runs[1]["dir"] and runs[0]["dir"].startswith(str(tmp_path))
    files = {p.name for p in (tmp_path / os.path.basename(runs[0]["dir"])).iterdir()}
    assert {"kernels.py", "compiled", "__pycache__"} <= files
    assert not [p for p in tmp_path.rglob(".tmp-*")]


RENAMED = """
import json, sys
import workbench as wb
from workbench.runtime.registry import definition
source = open(definition("cartpole").filename).read()
wb.register(sys.argv[1], source)
env = wb.make(sys.argv[1], num_envs=2, target="cpu", tau=0.0321)
env.step()
print(json.dumps({"from_cache": env.kernels.loaded_from_cache}))
"""


def test_one_source_under_two_env_names_shares_the_cache(tmp_path):
    """numba's cache entry names the kernel module: a name holding the env's would make the second
    name's process fail to load what the first compiled."""
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", RENAMED, name], env=env, capture_output=True, text=True,
                                      check=True, timeout=600).stdout.splitlines()[-1]) for name in ("pole_a", "pole_b")]
    assert [r["from_cache"] for r in runs] == [False, True]


def test_cache_key_changes_with_parameters_target_and_versions(monkeypatch):
    from workbench.compiler import kernel_cache
    a = kernel_cache.digest("text", "cpu")
    assert a != kernel_cache.digest("text", "cuda") and a != kernel_cache.digest("text2", "cpu")
    monkeypatch.setattr(kernel_cache, "versions", lambda: {"numba": "0.0"})
    assert kernel_cache.digest("text", "cpu") != a


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    from workbench.compiler import kernel_cache
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "k"))
    assert kernel_cache.cache_root() == tmp_path / "k"
    (tmp_path / "k" / "abc").mkdir(parents=True)
    assert kernel_cache.clear() == 1 and not (tmp_path / "k" / "abc").exists()
    monkeypatch.delenv("WORKBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert kernel_cache.cache_root() == tmp_path / "x" / "warp-workbench" / "kernels"


@pytest.mark.parametrize("state", ["a", "e", "lane", "_wb_done"])
def test_a_state_array_named_as_a_kernel_variable_is_refused(state):
    """The drivers' own variables would shadow it (before: numba's "Cannot unify array(float32, 1d, C) and int64")."""
    with pytest.raises(wb.EnvDefinitionError, match=f"STATE name '{state}' is one the generated kernels use.*rename"):
        wb.register("shadowed", KEYS.replace("drawn", state))


@pytest.mark.parametrize("old, new, line, words", [
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env())\ndef uniform(a, b):\n    return (a + b) / 2",
     "line 8: def uniform(a, b):", ["function 'uniform' has a reserved name",
                                    "the workbench's random draw uniform(key, i) (workbench.rng)"]),
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env())\nPARAMS = dict(speed=1.0, clip=0.2)",
     "line 8: PARAMS = dict(speed=1.0, clip=0.2)",
     ["parameter 'clip' has a reserved name", "numpy-like helper clip(x, low, high) (workbench.helpers)"]),
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env())\nPARAMS = dict(\n    sign=-1.0,\n)",
     "line 9: sign=-1.0,", ["parameter 'sign' has a reserved name", "numpy-like helper sign(x)"]),
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env())\ndef atomic_add(array, index, value):\n    return 0",
     "line 8: def atomic_add(", ["function 'atomic_add' has a reserved name"]),
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env())\nTPE = 4", "line 8: TPE = 4",
     ["global 'TPE' has a reserved name", "threads per replica"]),
])
def test_an_env_name_the_kernels_define_after_it_is_refused(old, new, line, words):
    """Before: the workbench's uniform/clip silently replaced the env's own (a wrong value, or a typing error)."""
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("reserved_name", old, new)
    text = str(info.value)
    assert text.startswith(f"reserved_name: {line}") and "rename it (e.g. 'my_" in text
    assert all(w in text for w in words), text


def test_an_env_own_helper_and_imported_draws_still_compile():
    # an own `def sign` is kept by the kernels (the helper is left out), and an imported uniform is the same one
    wb.register("own_helper", SIX.replace("x[env] + 1.0", "sign(-1.0) + clip(9.0, 0.0, 1.0)").replace(
        "STATE = dict(x=per_env())", "STATE = dict(x=per_env())\nfrom workbench.rng import uniform\n"
        "from numpy import clip\ndef sign(v):\n    return 5.0"))
    env = wb.make("own_helper", num_envs=3, target="cpu")
    env.step()
    assert env.data["x"].tolist() == [6.0, 6.0, 6.0]


def test_a_row_store_into_a_per_agent_array_is_refused():
    """Before: reward[env] = ... in a per-agent phase wrote every agent's entry (a race on a GPU)."""
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("row_store", "reward[env, agent] = 1.0", "reward[env] = 1.0")
    assert str(info.value) == (
        "row_store: line 14: reward[env] = 1.0\n    'reward' takes 2 indices (per agent, shape [E, A] (float32)), "
        "given 1: this writes every agent's entry of the replica from each agent (a race on a GPU); "
        "write reward[env, agent] = ...")


def test_a_row_read_used_as_a_value_names_the_array():
    """Before: numba's "No implementation of function abs ... array(float32, 1d, C)", naming no array."""
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("row_read", "obs[env, agent, i] = x[env]", "obs[env, agent, i] = abs(obs[env, agent] - x[env])")
    assert str(info.value).startswith("row_read: line 19: obs[env, agent, i] = abs(obs[env, agent] - x[env])\n    "
                                      "'obs' takes 3 indices (per agent, shape [E, A, 6] (float32)), given 2: "
                                      "obs[env, agent] is a whole row of the array, not one value; "
                                      "write obs[env, agent, i]")


RESET_TWICE = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_agent, per_env
    NUM_AGENTS = 2
    MAX_STEPS = 3
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(x=per_agent(), total=per_env())

    def place(env, agent, x):
        x[env, agent] = agent + 1.0

    def clear(env, total):
        total[env] = 10.0

    RESET = [place, clear]

    def step(env, agent, x, total, reward):
        x[env, agent] += 1.0
        atomic_add(total, env, x[env, agent])
        reward[env, agent] = x[env, agent]

    def observe(env, agent, total, obs):
        obs[env, agent, 0] = total[env]
''')
RESET_ONCE = RESET_TWICE.replace("RESET = [place, clear]", '''
def reset(env, agent, x, total):
    x[env, agent] = agent + 1.0
    if agent == 0:
        total[env] = 10.0''')


def test_reset_list_steps_as_one_reset_function():
    """Before: RESET = [...] without a function named reset was refused ("does not define reset")."""
    wb.register("reset_list", RESET_TWICE)
    wb.register("reset_one", RESET_ONCE)
    listed, single = (wb.make(n, num_envs=2, target="cpu") for n in ("reset_list", "reset_one"))
    assert listed.reset()[:, :, 0].tolist() == [[10.0, 10.0]] * 2 == single.reset()[:, :, 0].tolist()
    for _ in range(7):  # MAX_STEPS 3: two resets on the way
        obs_l, reward_l, done_l, _ = listed.step()
        obs_s, reward_s, done_s, _ = single.step()
        assert torch.equal(obs_l, obs_s) and torch.equal(reward_l, reward_s) and torch.equal(done_l, done_s)
    assert listed.data["x"].tolist() == [[2.0, 3.0]] * 2  # reset after step 6, then one step: place ran
    assert listed.data["total"].tolist() == [15.0] * 2  # clear ran too: 10 + 2 + 3
    with pytest.raises(wb.EnvDefinitionError, match=r"no reset function \(define `reset` or `RESET = \[...\]`\)"):
        wb.register("no_reset", RESET_TWICE.replace("RESET = [place, clear]", ""))


@pytest.mark.parametrize("old, new, words", [
    ("ACTION = Discrete(2)", "ACTION = Discrete(0)", "Discrete(n) needs n >= 1 (the number of actions), got n=0"),
    ("ACTION = Discrete(2)", "ACTION = MultiDiscrete((3, 0))", "needs every count >= 1"),
    ("ACTION = Discrete(2)", "ACTION = MultiDiscrete(())", "MultiDiscrete(nvec) needs at least one action"),
    ("ACTION = Discrete(2)", "ACTION = Box(low=1.0, high=-1.0, shape=(1,))",
     "Box low=1.0 is above high=-1.0 (or NaN): give low <= high"),
    ("OBSERVATION = Box(shape=(6,))", "OBSERVATION = Box(shape=(-1,))",
     "Box shape (-1,) has a negative dimension: make every dimension >= 0"),
    ("STATE = dict(x=per_env())", "STATE = dict(x=per_env(), y=per_env(shape=(2, -3)))",
     "STATE['y'] has shape (2, -3): a dimension is negative; make every dimension >= 0"),
])
def test_an_invalid_space_or_shape_is_refused_at_its_declaration(old, new, words):
    """Before: accepted, then torch, numba or the trainer failed far from the declaration."""
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("bad_declaration", old, new.replace("MultiDiscrete(", "__import__('workbench').envdef."
                                                         "MultiDiscrete("))
    text = str(info.value)
    assert text.startswith(f"bad_declaration: line {SIX.splitlines().index(old) + 1}: ") and words in text, text


def test_box_bounds_may_be_functions_of_the_parameters():
    source = SIX.replace("MAX_STEPS = 20", "MAX_STEPS = 20\nPARAMS = dict(limit=2.0)").replace(
        "OBSERVATION = Box(shape=(6,))", "OBSERVATION = Box(low=lambda p: -p.limit, high=(1.0,) * 5 + (lambda p: p.limt,), "
        "shape=(6,))")
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("param_bounds", source)
        definition("param_bounds")
    assert str(info.value) == ("OBSERVATION.high: its function of the parameters raised AttributeError: "
                               "'types.SimpleNamespace' object has no attribute 'limt' (PARAMS has ['limit'])")
    wb.register("param_bounds", source.replace("p.limt", "p.limit"))
    assert definition("param_bounds", limit=3.0).observation.low == -3.0
    assert definition("param_bounds", limit=3.0).observation.high == (1.0,) * 5 + (3.0,)
    with pytest.raises(wb.EnvDefinitionError, match=r"param_bounds: line 6: .*\n    Box low=0.5 is above high="):
        definition("param_bounds", limit=-0.5)  # the resolved bounds are checked as constant ones are


def test_a_function_defined_inside_a_phase_is_told_to_move_out():
    with pytest.raises(wb.EnvDefinitionError) as info:
        make_variant("nested_def", "    x[env] = x[env] + 1.0",
                     "    def half(v):\n        return v * 0.5\n    x[env] = half(x[env])")
    assert str(info.value) == (
        "nested_def: line 15: x[env] = half(x[env])\n    'half' is defined inside step() (line 13); the kernels "
        "see only functions defined at the env source's top level: move `def half` out of step(), above it")


def test_a_draw_without_key_is_told_to_take_key():
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.register("no_key", KEYS.replace("def step(env, agent, key, drawn):", "def step(env, agent, drawn):"))
    assert "name 'key' is not defined" in str(info.value)
    assert str(info.value).endswith("'key' is the phase's random stream (what the random draws take): add it to "
                                    "the phase's parameters (def step(env, agent, drawn, key))")
