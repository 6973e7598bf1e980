"""EpisodeStats: per-policy sums over finished episodes kept on the device, checked against the
same statistics computed on the host step by step from the store."""
import math

import numpy as np
import pytest

import workbench as wb
from workbench.learn.config import replace
from workbench.learn.config_files import default_config
from workbench.learn.episode_stats import EpisodeStats
from workbench.runtime.env_metrics import TAG_METRICS

from test_tag import GRID as GRID_SMALL  # the small Tag variant test_tag compiles anyway

STEPS = 40


def host_expectation(env, groups, steps, metrics=()):
    """Step `env` with random actions, feeding `stats` and summing the same values on the host."""
    stats = EpisodeStats(env, groups)
    sums = {f"return/{n}": 0.0 for n in groups}
    sums.update({"episode_length": 0.0, **{m: 0.0 for m in metrics}})
    episodes = 0.0
    for _ in range(steps):
        env.step(env.sample_actions())
        stats.after_step()
        store = env.store
        done = store["done"].cpu().numpy().astype(bool)
        episodes += done.sum()
        last_return = store["last_return"].cpu().numpy()
        for name, ids in groups.items():
            sums[f"return/{name}"] += last_return[done][:, ids].mean(axis=1).sum()
        sums["episode_length"] += store["last_length"].cpu().numpy()[done].sum()
        for key in metrics:
            value = {"tag_rate": TAG_METRICS["tag_rate"], "survival": TAG_METRICS["runner_survival"]}[key](
                store, env.definition.params).cpu().numpy()
            sums[key] += value[done].sum()
    return stats, {k: v / episodes for k, v in sums.items()}, episodes


def test_single_policy_returns_and_lengths_match_the_host():
    env = wb.make("cartpole", num_envs=16, target="cpu", seed=5)
    stats, expected, episodes = host_expectation(env, {"policy": [0]}, STEPS)
    assert episodes > 0
    pulled = stats.pull()
    assert pulled["episodes"] == episodes
    for key, value in expected.items():
        assert pulled[key] == pytest.approx(value, rel=1e-5), key
    again = stats.pull()  # the sums were reset: nothing finished since
    assert again["episodes"] == 0 and math.isnan(again["return/policy"]) and math.isnan(again["episode_length"])


def test_tag_teams_tag_rate_and_survival_match_the_host():
    env = wb.make("tag_grid", num_envs=8, target="cpu", seed=2, **GRID_SMALL)
    groups = {"taggers": list(env.taggers), "runners": list(env.runners)}
    stats, expected, episodes = host_expectation(env, groups, 3 * GRID_SMALL["episode_length"],
                                                 metrics=("tag_rate", "survival"))
    assert episodes >= env.num_envs
    pulled = stats.pull()
    assert {"return/taggers", "return/runners", "episode_length", "tag_rate", "survival"} <= set(pulled)
    for key, value in expected.items():
        assert pulled[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert pulled["tag_rate"] + pulled["survival"] == pytest.approx(1.0)


def test_one_policy_over_both_tag_teams_reports_each_teams_return_apart():
    env = wb.make("tag_grid", num_envs=8, target="cpu", seed=3, **GRID_SMALL)
    teams = {"taggers": list(env.taggers), "runners": list(env.runners)}
    shared = {"shared": teams["taggers"] + teams["runners"]}
    stats, expected, episodes = host_expectation(env, {**shared, **teams}, 3 * GRID_SMALL["episode_length"])
    assert episodes >= env.num_envs
    env.reset(seed=3)
    alone = EpisodeStats(env, shared)  # (what a trainer with the policy map {shared: [taggers, runners]} keeps)
    for _ in range(3 * GRID_SMALL["episode_length"]):
        env.step(env.sample_actions())
        alone.after_step()
    pulled = alone.pull()
    assert alone.names == ["shared"] and list(alone.agent_groups) == ["taggers", "runners"]
    assert pulled["episodes"] == episodes
    assert pulled["return/shared"] == pytest.approx(expected["return/shared"], rel=1e-5)
    for team in teams:
        assert pulled[f"group_return/{team}"] == pytest.approx(expected[f"return/{team}"], rel=1e-5, abs=1e-6)
    assert pulled["group_return/taggers"] != pytest.approx(pulled["group_return/runners"])
    # by agents, not names: policies that each play one group under other names report no group apart
    assert EpisodeStats(env, {"chasers": teams["taggers"], "fleeing": teams["runners"]}).agent_groups == {}
    assert list(EpisodeStats(env, {"runners": shared["shared"]}).agent_groups) == ["taggers", "runners"]


def test_after_step_allocates_nothing_it_keeps_and_never_reads_the_host(monkeypatch):
    env = wb.make("cartpole", num_envs=8, target="cpu", seed=1)
    stats = EpisodeStats(env)
    buffers = [stats.sums.data_ptr(), stats.rows.data_ptr(), stats.done.data_ptr()]
    import torch

    def forbidden(*_a, **_k):
        raise AssertionError("after_step read a value on the host")

    monkeypatch.setattr(torch.Tensor, "item", forbidden)
    monkeypatch.setattr(torch.Tensor, "tolist", forbidden)
    monkeypatch.setattr(torch.Tensor, "__bool__", forbidden)
    dones = []
    for _ in range(30):
        dones.append(env.step(env.sample_actions())[2].clone())
        stats.after_step()
    monkeypatch.undo()
    assert [stats.sums.data_ptr(), stats.rows.data_ptr(), stats.done.data_ptr()] == buffers
    ended = int(torch.stack(dones).sum())
    assert ended > 0 and stats.pull()["episodes"] == ended  # (random CartPole ends about every 22 steps)
    assert np.isfinite(stats.sums.cpu().numpy()).all()


def test_the_running_return_counts_every_step_and_ends_with_the_episode(target):
    """last_return is each replica's return so far, the step's reward included: where done, the finished
    episode's (CartPole: its length, as last_length says); a replica done at the last step starts from its
    first reward."""
    env = wb.make("cartpole", num_envs=6, target=target, seed=3)
    running = np.zeros(6)
    ended = 0
    for _ in range(60):
        _, reward, done, info = env.step(env.sample_actions())
        running += reward[:, 0].cpu().numpy()
        np.testing.assert_allclose(info["episode_return"][:, 0].cpu().numpy(), running)
        d = done.cpu().numpy()
        np.testing.assert_array_equal(info["episode_length"].cpu().numpy()[d], running[d])
        ended += int(d.sum())
        running[d] = 0.0
    assert ended >= 6


def test_a_snapshot_from_before_the_running_return_loads():
    """A checkpoint's env_state written when the running return had its own array (episode_return, 0 where
    done) loads: where done last_return keeps the finished episode's return, elsewhere takes the running one."""
    env = wb.make("cartpole", num_envs=3, target="cpu", seed=0)
    snap = {k: v.clone() for k, v in env.store.items()}
    snap["done"] = np.array([1, 0, 0], dtype=np.uint8)
    snap["last_return"] = np.array([[21.0], [9.0], [30.0]], dtype=np.float32)
    snap["episode_return"] = np.array([[0.0], [4.0], [7.0]], dtype=np.float32)
    env.store.load_snapshot(snap)
    assert env.store["last_return"][:, 0].tolist() == [21.0, 4.0, 7.0]
    assert "episode_return" not in env.store


METRIC_ENV = '''
from workbench.compiler.envdef import Box, Discrete, per_env
PARAMS = dict(goal=3.0)
NUM_AGENTS = 2
MAX_STEPS = 5
OBSERVATION = Box(shape=(1,))
ACTION = Discrete(2)
STATE = dict(x=per_env())
EVAL_METRICS = dict(reached=THE_METRIC)

def reset(env, agent, x):
    x[env] = 0.0

def step(env, agent, action, x, reward):
    atomic_add(x, env, 1.0 * action[env, agent])
    reward[env, agent] = x[env]

def observe(env, agent, x, obs):
    obs[env, agent, 0] = x[env]
'''


@pytest.mark.parametrize("metric, problem", [
    ("lambda store, p: store['final_obs'][:, :, 0].max(1).values >= p.goal", None),  # (p.name and p['name'] alike)
    ("lambda store, p: store['final_obs'][:, :, 0] >= p['goal']", "returned shape (4, 2) where 4 replicas need [4]"),
    ("lambda store, p: store['final_obs'][:, 0, 0] >= p.gaol", "AttributeError: the env has no parameter 'gaol'; "
                                                               "did you mean 'goal'?"),
    ("lambda store, p: 1.0", "returned float, not a tensor"),
])
def test_env_metrics_are_checked_before_anything_steps(metric, problem):
    wb.register("metric_env", METRIC_ENV.replace("THE_METRIC", metric))
    config = replace(default_config("metric_env"), num_envs=4, rollout_length=5, target="cpu", total_env_steps=40,
                     progress=False)
    if problem is None:
        report = wb.check_env("metric_env", targets=("cpu",), num_envs=4, steps=12)
        assert report.episodes_finished == 8
        result = wb.make_trainer(config).train()
        assert 0.0 <= result.history[-1]["reached"] <= 1.0
        return
    for attempt in (lambda: wb.check_env("metric_env", targets=("cpu",), num_envs=4, steps=6),
                    lambda: wb.make_trainer(config)):
        with pytest.raises(wb.EnvDefinitionError) as info:
            attempt()
        assert "metric_env: EVAL_METRICS['reached']" in str(info.value)
        assert problem in str(info.value)
        assert "takes (store, params) and returns a tensor [E]" in str(info.value)
