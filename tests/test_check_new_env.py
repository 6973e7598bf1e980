"""Before a registered env first trains, a bounds-checked run on the cpu target (runtime.check.check_new_env):
an index outside an array is an EnvIndexError, not memory the unchecked training kernels overwrite."""
import textwrap

import pytest

import workbench as wb
from workbench.errors import EnvIndexError
from workbench.learn.config import replace
from workbench.learn.config_files import default_config
from workbench.runtime import check

SOURCE = textwrap.dedent('''
    from workbench.compiler.envdef import Box, Discrete, per_env
    PARAMS = dict(max_steps=20)
    NUM_AGENTS = 2
    MAX_STEPS = "max_steps"
    OBSERVATION = Box(shape=(3,))
    ACTION = Discrete(2)
    STATE = dict(x=per_env())

    def reset(env, agent, x):
        x[env] = 0.0

    def step(env, agent, action, x, reward):
        atomic_add(x, env, 0.1 * action[env, agent])
        reward[env, agent] = x[env]

    def observe(env, agent, x, obs):
        for i in range(3):
            obs[env, agent, i + agent] = x[env]
''')
OUT_OF_BOUNDS = "obs[env, agent, i + agent]"  # agent 1 writes obs[..., 3]: a computed index, unseen at parse time


@pytest.fixture
def checking(monkeypatch, tmp_path):
    """The check on, as for a user (tests/conftest.py turns it off), with a cache of the test's own."""
    monkeypatch.setenv("WORKBENCH_CHECK_NEW_ENVS", "1")
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(check, "_CHECKED_IN_PROCESS", set())
    return tmp_path


def test_an_env_file_that_writes_out_of_bounds_is_refused_before_training(checking):
    path = checking / "oob_env.py"
    path.write_text(SOURCE)
    with pytest.raises(EnvIndexError) as info:
        wb.train(str(path), num_envs=4, total_env_steps=256, run_dir=str(checking / "run"), progress=False)
    text = str(info.value)
    assert f"at line 19:\n    {OUT_OF_BOUNDS} = x[env]" in text
    assert "obs[0, 1, 3] is out of bounds: index 3 on axis 2 of shape (4, 2, 3)" in text
    assert not (checking / "run").exists()


def test_a_checked_source_is_checked_once_per_machine(checking, monkeypatch):
    wb.register("fine_env", SOURCE.replace(OUT_OF_BOUNDS, "obs[env, agent, i]"))
    config = replace(default_config("fine_env"), num_envs=4, rollout_length=4, target="cpu")
    calls = []
    real = check.check_env
    monkeypatch.setattr(check, "check_env", lambda *a, **k: calls.append(a) or real(*a, **k))
    wb.make_trainer(config)
    assert len(calls) == 1
    assert len(list((checking / "cache" / "checked").iterdir())) == 1
    check._CHECKED_IN_PROCESS.clear()  # as a new process: the marker in the cache is what counts
    wb.make_trainer(config)
    assert len(calls) == 1
    wb.make_trainer(replace(config, env_params={"max_steps": 30}))  # other parameters: checked anew
    assert len(calls) == 2
    check._CHECKED_IN_PROCESS.clear()
    monkeypatch.setattr(check, "_compiler_digest", lambda: "another code generator")  # an edited install
    wb.make_trainer(config)
    assert len(calls) == 3


def test_check_env_on_the_cpu_counts_and_shipped_envs_are_not_checked(checking, monkeypatch):
    wb.register("fine_env2", SOURCE.replace(OUT_OF_BOUNDS, "obs[env, agent, i]"))
    wb.check_env("fine_env2", targets=("cpu",), num_envs=4, steps=4)  # too short to count: no marker
    assert not (checking / "cache" / "checked").exists()
    wb.check_env("fine_env2", targets=("cpu",), num_envs=4, steps=21)  # past MAX_STEPS (what a %%warpenv cell runs)

    def refuse(*args, **kwargs):
        raise AssertionError("checked again")
    monkeypatch.setattr(check, "check_env", refuse)
    wb.make_trainer(replace(default_config("fine_env2"), num_envs=4, rollout_length=4, target="cpu"))
    wb.make_trainer(replace(default_config("cartpole"), num_envs=4, rollout_length=4, target="cpu"))


def test_the_check_can_be_turned_off(checking, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_NEW_ENVS", "0")
    wb.register("unchecked_env", SOURCE.replace(OUT_OF_BOUNDS, "obs[env, agent, i]"))
    monkeypatch.setattr(check, "check_env", lambda *a, **k: pytest.fail("checked"))
    check.check_new_env(wb.make("unchecked_env", num_envs=1, target="cpu").definition, {})


def test_env_parameters_named_like_check_env_arguments_are_the_envs(checking):
    source = SOURCE.replace(OUT_OF_BOUNDS, "obs[env, agent, i]").replace("PARAMS = dict(max_steps=20)",
                                                                          "PARAMS = dict(max_steps=20, steps=3, seed=1)")
    wb.register("argument_named_env", source)
    config = replace(default_config("argument_named_env"), num_envs=4, rollout_length=4, target="cpu",
                     env_params={"steps": 5, "seed": 2})
    trainer = wb.make_trainer(config)  # (before: "got multiple values for keyword argument 'steps'")
    assert trainer.env.definition.params == {"max_steps": 20, "steps": 5, "seed": 2}
    assert len(list((checking / "cache" / "checked").iterdir())) == 1
