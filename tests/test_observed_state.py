"""An observation that only copies per-env state is that state (envdef.observed_state): the store lays the
arrays out as the observation's columns and no kernel writes a copy; every value a step returns is the
same as with the copy."""
import textwrap

import pytest
import torch

import workbench as wb
from workbench.runtime.registry import definition, lookup
from conftest import tiny

COPY = "obs[env, agent, 0] = x[env]"


def cartpole_source(observe_x: str = COPY) -> str:
    source = lookup("cartpole").source
    assert COPY in source
    return source.replace(COPY, observe_x)


@pytest.mark.parametrize("env,columns", [("cartpole", ("x", "x_dot", "theta", "theta_dot")),
                                         ("mountain_car", ("position", "velocity")),
                                         ("pendulum", ()), ("acrobot", ()), ("tag_continuous", ())])
def test_the_shipped_envs_whose_observation_is_their_state(env, columns):
    assert definition(env).obs_state == columns


@pytest.mark.parametrize("observe_x,why", [
    ("obs[env, agent, 0] = x[env] + 0.0", "arithmetic"),
    ("obs[env, agent, 0] = x_dot[env]", "a state array twice, x never"),
    ("obs[env, agent, 0] = min(x[env], 1e30)", "a call"),
    ("if x[env] > 0:\n        obs[env, agent, 0] = x[env]", "a branch"),
])
def test_an_observe_that_does_more_than_copy_keeps_its_own_array(observe_x, why):
    wb.register("cartpole_observed", cartpole_source(observe_x))
    assert definition("cartpole_observed").obs_state == (), why


def test_a_per_agent_or_integer_array_is_not_taken_for_state():
    source = textwrap.dedent('''
        from workbench.compiler.envdef import Box, Discrete, per_env
        NUM_AGENTS = 1
        OBSERVATION = Box(shape=(2,))
        ACTION = Discrete(2)
        STATE = dict(level=per_env(), count=per_env(dtype="int32"))

        def reset(env, level, count):
            level[env] = 0.5
            count[env] = 3

        def step(env, agent, action, level, reward):
            reward[env, agent] = level[env]

        def observe(env, agent, level, count, obs):
            obs[env, agent, 0] = level[env]
            obs[env, agent, 1] = count[env]
    ''')
    wb.register("int_observed", source)
    assert definition("int_observed").obs_state == ()
    env = wb.make("int_observed", num_envs=3, target="cpu")
    assert env.reset()[:, 0].tolist() == [[0.5, 3.0]] * 3


def test_the_observation_is_the_state_in_memory():
    env = wb.make("cartpole", num_envs=5, target="cpu", seed=1)
    obs = env.reset()
    for i, name in enumerate(("x", "x_dot", "theta", "theta_dot")):
        assert obs[:, 0, i].data_ptr() == env.data[name].data_ptr()
    env.data["theta"].fill_(0.125)
    assert (env.store["obs"][:, 0, 2] == 0.125).all()


def test_steps_return_what_the_copy_returned(target):
    """CartPole with its observation the state against the same env whose observe copies (x + 0.0 is x):
    observations, final observations, rewards, flags and returns equal bit for bit over many episodes."""
    wb.register("cartpole_copied", cartpole_source("obs[env, agent, 0] = x[env] + 0.0"))
    n, steps = tiny(512, 6), tiny(300, 40)
    envs = [wb.make(name, num_envs=n, target=target, seed=3) for name in ("cartpole", "cartpole_copied")]
    assert envs[0].definition.obs_state and not envs[1].definition.obs_state
    assert not envs[0].store["obs"].is_contiguous() and envs[1].store["obs"].is_contiguous()
    for env in envs:
        env.reset()
    g = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(steps):
        actions = torch.randint(0, 2, (n, 1), generator=g, dtype=torch.int8)
        out = [env.step(actions.to(env.device)) for env in envs]
        (obs_a, reward_a, done_a, info_a), (obs_b, reward_b, done_b, info_b) = out
        assert torch.equal(obs_a.cpu(), obs_b.cpu())
        assert torch.equal(reward_a.cpu(), reward_b.cpu()) and torch.equal(done_a.cpu(), done_b.cpu())
        for key in ("terminated", "truncated", "episode_return", "episode_length"):
            assert torch.equal(info_a[key].cpu(), info_b[key].cpu()), key
        ended_now = done_a.cpu().nonzero()[:, 0]
        assert torch.equal(info_a["final_obs"].cpu()[ended_now], info_b["final_obs"].cpu()[ended_now])
        ended += len(ended_now)
    assert ended > 0  # resets were compared too
