"""CartPole against Gymnasium's own implementation, step by step from the same states and actions."""
import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from conftest import tiny
from workbench.compiler import rng
from workbench.compiler.codegen import ACTION_STREAM


def test_matches_gymnasium_step_by_step(target):
    n = tiny(256, 4) if target == "cuda" else 256
    env = wb.make("cartpole", num_envs=n, target=target, seed=3)
    ref = gym.make("CartPole-v1").unwrapped
    rng = np.random.default_rng(0)
    checked_terminations = 0
    for _ in range(60 if target == "cpu" else 15):
        state = torch.stack([env.data[k] for k in ("x", "x_dot", "theta", "theta_dot")], 1).cpu().numpy()
        actions = rng.integers(0, 2, size=n).astype(np.int32)
        t_before = env.data["t"].cpu().numpy().copy()
        obs, reward, done, info = env.step(torch.from_numpy(actions).to(env.device))
        obs, reward = obs.cpu().numpy(), reward.cpu().numpy()
        term, trunc = info["terminated"].cpu().numpy(), info["truncated"].cpu().numpy()
        final = info["final_obs"].cpu().numpy()
        for i in range(n):
            ref.state = state[i].astype(np.float64)
            ref.steps_beyond_terminated = None
            r_obs, r_rew, r_term, _, _ = ref.step(int(actions[i]))
            seen = final[i, 0] if done[i] else obs[i, 0]
            np.testing.assert_allclose(seen, r_obs, rtol=1e-5, atol=1e-6)
            assert reward[i, 0] == pytest.approx(r_rew)
            assert bool(term[i]) == r_term
            assert bool(trunc[i]) == (t_before[i] + 1 >= 500)
            checked_terminations += int(r_term)
    assert checked_terminations > 0


def test_reset_distribution_and_time_limit():
    env = wb.make("cartpole", num_envs=4096, target="cpu", seed=1)
    for k in ("x", "x_dot", "theta", "theta_dot"):
        v = env.data[k]
        assert float(v.min()) >= -0.05 and float(v.max()) < 0.05
        assert abs(float(v.mean())) < 0.005  # uniform on [-0.05, 0.05): the mean's sd is 0.00045
    short = wb.make("cartpole", num_envs=8, target="cpu", max_steps=5)
    for k in range(5):
        _, _, done, info = short.step(torch.ones(8, 1, dtype=torch.int32) * (k % 2))
    assert bool(info["truncated"].all()) and not bool(info["terminated"].any())
    assert short.data["t"].tolist() == [0] * 8
    assert info["episode_length"].tolist() == [5] * 8
    assert info["episode_return"][:, 0].tolist() == [5.0] * 8


def test_same_seed_same_start_different_seed_differs():
    a = wb.make("cartpole", num_envs=16, target="cpu", seed=7)
    b = wb.make("cartpole", num_envs=16, target="cpu", seed=7)
    c = wb.make("cartpole", num_envs=16, target="cpu", seed=8)
    assert torch.equal(a.data["theta"], b.data["theta"])
    assert not torch.equal(a.data["theta"], c.data["theta"])
    assert len(set(a.data["theta"].tolist())) == 16  # every replica starts from its own state


def drawn_actions(env) -> torch.Tensor:
    """The actions a step of `env` with draw set takes (codegen.drawn_actions), from its arrays before the
    step: randint(make_key(seed + e // span, e % span, ACTION_STREAM + a, episode, t), head, categories)."""
    e = np.arange(env.num_envs, dtype=np.uint64)
    span = np.uint64(env.replicas_per_seed)
    episode = env.store["episode"].cpu().numpy().astype(np.uint64)
    t = env.store["t"].cpu().numpy().astype(np.uint64)
    space = env.action_space
    with np.errstate(over="ignore"):
        heads = []
        for a in range(env.num_agents):
            key = rng.make_key(np.uint64(env.seed) + e // span, e % span, np.uint64(ACTION_STREAM + a), episode, t)
            categories = [space.n] if isinstance(space, wb.Discrete) else list(space.nvec)
            heads.append(np.stack([rng.randint(key, h, n) for h, n in enumerate(categories)], -1))
    actions = np.stack(heads, 1)  # [E, A, heads]
    return torch.from_numpy(actions[..., 0] if isinstance(space, wb.Discrete) else actions)


@pytest.mark.parametrize("env_name", ["cartpole", "pendulum"])  # integer and continuous draws
def test_random_steps_take_the_steps_a_loop_takes(target, env_name):
    """Env.random_steps (on a GPU: blocks of steps replayed from one CUDA graph) leaves every array as
    a loop of steps does from the same seed: for discrete actions steps with the actions of the
    replicas' counter-based streams (drawn in the step kernel), for continuous ones step(sample_actions())."""
    n, steps = tiny(256, 4), wb.Env.RANDOM_BLOCK * 2 + 5
    mine = wb.make(env_name, num_envs=n, target=target, seed=3, replicas_per_seed=n // 2)
    theirs = wb.make(env_name, num_envs=n, target=target, seed=3, replicas_per_seed=n // 2)
    obs, reward, done, info = mine.random_steps(steps)
    for _ in range(steps):
        discrete = not isinstance(theirs.action_space, wb.Box)
        theirs.step(drawn_actions(theirs).to(theirs.device) if discrete else theirs.sample_actions())
    for key, value in mine.store.items():
        assert torch.equal(value, theirs.store[key]), key
    assert obs is mine.store["obs"] and done.dtype == torch.bool
    mine.random_steps(1)
    assert not torch.equal(mine.store["obs"], theirs.store["obs"])  # (it stepped)
    with pytest.raises(ValueError, match="random_steps: steps must be a positive integer, got 0"):
        mine.random_steps(0)


@pytest.mark.parametrize("env_name,params", [("cartpole", {}), ("tag_grid", dict(num_taggers=2, num_runners=1)),
                                             ("tag_continuous", dict(num_taggers=2, num_runners=3))])
def test_random_steps_draw_the_same_actions_on_every_target(env_name, params):
    """The step kernel's draws (Discrete, and MultiDiscrete for continuous Tag) are the counter-based
    stream's on the cpu target and the cuda one, and uniform over the categories."""
    n = tiny(64, 3)
    envs = [wb.make(env_name, num_envs=n, target=t, seed=5, **params) for t in ("cpu", "cuda")]
    for _ in range(3):
        for env in envs:
            env.random_steps(1)
        for key in ("action", "t", "episode"):
            assert torch.equal(envs[0].store[key].cpu(), envs[1].store[key].cpu()), key
    env = wb.make(env_name, num_envs=tiny(4096, 64), target="cpu", seed=1, **params)
    expected = drawn_actions(env)
    env.random_steps(1)
    assert torch.equal(env.store["action"].long(), expected.long())
    space = env.action_space
    categories = [space.n] if isinstance(space, wb.Discrete) else list(space.nvec)
    taken = env.store["action"].reshape(-1, len(categories)).long()
    for h, k in enumerate(categories):
        share = torch.bincount(taken[:, h], minlength=k).float() / taken.shape[0]
        assert share.min() > 0.5 / k and share.max() < 1.5 / k, share
