import pytest

import workbench as wb
from conftest import tiny


@pytest.mark.parametrize("name", ["cartpole"])
def test_cpu_and_cuda_agree(name):
    report = wb.check_env(name, targets=("cpu", "cuda"), num_envs=tiny(1024, 3), steps=tiny(200, 12))
    assert report.targets == ("cpu", "cuda")
    assert "passed" in str(report)


def test_check_env_catches_a_target_that_disagrees(monkeypatch):
    original = wb.Env.step

    def corrupted(self, actions=None):
        out = original(self, actions)
        if self.target.name == "cuda":
            self.data["x_dot"][1] += 0.5
        return out

    monkeypatch.setattr(wb.Env, "step", corrupted)
    with pytest.raises(wb.ConsistencyError, match="'x_dot' differs between cpu and cuda after step 1") as info:
        wb.check_env("cartpole", targets=("cpu", "cuda"), num_envs=3, steps=3)
    # the phases that store the array, at their lines, and what most often makes targets differ there
    assert "\n  stored by:\n    reset() line 39: x_dot[env] = uniform_range(key, 1, -0.05, 0.05)\n    step() " \
           "line 61: x_dot[env] = x_dot0 + tau * xacc\n  (most often: a comparison or a branch on a float32 value" \
        in str(info.value)


def test_check_report_keeps_the_largest_difference_per_array():
    """The report (and the magic's --verbose line, which prints it per array) is keyed by array name."""
    env = wb.make("cartpole", num_envs=4, target="cpu")
    report = wb.check_env("cartpole", targets=("cpu", "cpu"), num_envs=4, steps=20)
    floats = {name for name, tensor in env.store.items() if tensor.dtype.is_floating_point}
    assert set(report.max_abs_diff) == floats
    assert all(value == 0.0 for value in report.max_abs_diff.values())
    assert "theta: 0.00e+00" in str(report)


def test_a_check_in_which_no_episode_ended_says_what_it_could_not_compare():
    short = wb.check_env("cartpole", targets=("cpu",), num_envs=4, steps=3)
    assert short.episodes_finished == 0
    assert "but no episode ended, so the reset and the final observations were not compared" in str(short)
    assert "MAX_STEPS is 500: steps=508 would" in str(short)
    assert wb.check_env("cartpole", targets=("cpu",), num_envs=4, steps=60).caveat == ""


WIDE = """from workbench.compiler.envdef import Box, Discrete, per_agent

PARAMS = dict(max_steps=4)
NUM_AGENTS = 2
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(3,))
ACTION = Discrete(3)
STATE = dict(pos=per_agent())


def reset(env, agent, pos):
    pos[env, agent] = agent + 1


def step(env, agent, action, pos, reward):
    pos[env, agent] += action[env, agent] - 1
    reward[env, agent] = pos[env, agent]


def observe(env, agent, pos, obs):
    obs[env, agent, 0] = pos[env, agent]
    obs[env, agent, 1] = agent + 1
"""


def test_an_observation_entry_that_observe_never_writes_is_pointed_out():
    """OBSERVATION declares 3 numbers, observe fills 2: obs[..., 2] stays 0, which the report names."""
    wb.register("check_wide_obs", WIDE)
    report = wb.check_env("check_wide_obs", targets=("cpu",), num_envs=3, steps=10)
    assert report.zero_obs == (2,) and "obs[..., 2] stayed 0 for every agent at every step" in str(report)
    assert wb.check_env("cartpole", targets=("cpu",), num_envs=4, steps=60).zero_obs == ()


def test_check_env_seeds_replicas_in_blocks_as_a_population_does(monkeypatch):
    from workbench.runtime import env as env_module
    made = []
    original = env_module.Env.__init__

    def recording(self, *args, **kwargs):
        made.append(kwargs.get("replicas_per_seed"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(env_module.Env, "__init__", recording)
    # blocks of 2 seeded apart, stepped past several auto-resets on both targets
    report = wb.check_env("cartpole", targets=("cpu", "cuda"), num_envs=4, steps=tiny(60, 30), replicas_per_seed=2)
    assert "passed" in str(report) and made == [2, 2, 2]  # (the third: the first target's twin)
    made.clear()
    population_env = wb.make("cartpole", num_envs=6, target="cpu", replicas_per_seed=3)
    made.clear()
    wb.check_env(population_env, targets=("cpu", "cpu"), num_envs=6, steps=5)
    assert made == [3, 3, 3]  # a given env's own blocks
    with pytest.raises(wb.WorkbenchError, match="replicas_per_seed must divide num_envs=4"):
        wb.check_env("cartpole", targets=("cpu",), num_envs=4, steps=2, replicas_per_seed=3)


OBSERVE_COUNTS = '''
from workbench.envdef import Box, Discrete, per_env
from workbench.rng import uniform_range

PARAMS = dict(max_steps=50)
NUM_AGENTS = 1
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(2,))
ACTION = Discrete(2)
STATE = dict(position=per_env(), looks=per_env("int32"))


def reset(env, agent, key, position):
    position[env] = uniform_range(key, 0, -1.0, 1.0)


def step(env, agent, action, position, terminated, reward):
    position[env] += 0.5 if action[env, agent] == 1 else -0.5
    reward[env, agent] = 1.0
    if abs(position[env]) > 2.0:
        terminated[env] = 1


def observe(env, agent, position, looks, obs):
    looks[env] += 1
    obs[env, agent, 0] = position[env]
    obs[env, agent, 1] = looks[env]
'''


def test_check_env_catches_an_observe_that_changes_state():
    """`looks` counts observe's calls, the final observation's among them: under the trainer, which takes no
    final observation where an episode terminates, it would count otherwise."""
    wb.register("observe_counts", OBSERVE_COUNTS)
    with pytest.raises(wb.ConsistencyError, match=r"observe changes 'looks' .*move the change into a STEP phase"):
        wb.check_env("observe_counts", targets=("cpu",), num_envs=4, steps=40)
