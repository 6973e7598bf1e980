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


# One agent writing a 6-wide observation; the variants below break it one way each.
SIX = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    NUM_AGENTS = 2
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
    # the index is computed, so only a bounds-checked kernel sees it (no check at parse time)
    if target == "cuda" and not torch.cuda.is_available():  # the simulator's arrays check bounds: make finds it
        with pytest.raises(wb.EnvIndexError) as info:
            make_variant("oob_dynamic", "for i in range(6):", "for i in range(7):", target=target)
    else:
        env = make_variant("oob_dynamic", "for i in range(6):", "for i in range(7):", target=target)  # unchecked
        assert env.num_envs == 3
        with pytest.raises(wb.EnvIndexError) as info:  # on a GPU, the cpu target beside it finds the access
            wb.check_env("oob_dynamic", targets=("cpu", target) if target == "cuda" else (target,), num_envs=3,
                         steps=2)
    text = str(info.value)
    assert "at line 19:\n    obs[env, agent, i] = x[env]" in text
    assert "obs[0, 0, 6] is out of bounds: index 6 on axis 2 of shape (3, 2, 6)" in text


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
    wb.register("unportable", SIX.replace("x[env] + 1.0", call).replace(
        "from workbench.compiler.envdef", "import math, numpy as np; from workbench.compiler.envdef"))
    with pytest.raises(wb.EnvDefinitionError) as info:
        wb.make("unportable", num_envs=3, target="cpu")
    text = str(info.value)
    assert text.startswith(f"unportable: line 13: x[env] = {call}\n")
    assert "does not compile on target(s) cuda, cuda-c" in text and alternative in text


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
    wb.register("shadowed", KEYS.replace("drawn", state))
    with pytest.raises(wb.EnvDefinitionError, match=f"STATE name '{state}' is one the generated kernels use.*rename"):
        wb.make("shadowed", num_envs=2, target="cpu")
