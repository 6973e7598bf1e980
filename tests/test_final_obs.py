"""Where final observations are kept: at every episode end by default, only where an episode was
truncated (and for recorded replicas) with `keep_final_obs` False, which the trainer sets unless the
env's metrics read them; alike on the cpu target, the cuda target (the CUDA simulator without a GPU)
and the CUDA C driver (its host build). Nothing else a step writes depends on it."""
import numpy as np
import pytest
import torch

import test_cuda_c
import workbench as wb
from workbench.compiler import envdef
from workbench.compiler.codegen import gpu_layout
from workbench.runtime.env import Env


def clock_env(target, keep):
    """The clock env (test_cuda_c): 6-step episodes, some terminated before the time limit; its
    observation shows the clock, so a final observation written there shows the episode's length."""
    env = Env(envdef.parse("clock", test_cuda_c.CLOCK_PY, "clock.py", {}), num_envs=6, target=target, seed=4)
    env.keep_final_obs = keep
    return env


def snapshot(env):
    return {k: v.cpu().numpy().copy() for k, v in env.store.items()}


def check_truncated_only(frames):
    """Between frames, final_obs rows change only where the episode was truncated (to the episode's
    length); returns (truncated, terminated) counts."""
    truncated = terminated = 0
    for before, after in zip(frames, frames[1:]):
        done, cut = after["done"].astype(bool), after["truncated"].astype(bool)
        np.testing.assert_array_equal(after["final_obs"][cut, 0, 0], after["last_length"][cut])
        np.testing.assert_array_equal(after["final_obs"][~cut], before["final_obs"][~cut])
        truncated += int(cut.sum())
        terminated += int((done & ~cut).sum())
    return truncated, terminated


def test_final_observations_where_truncated_only_when_asked(target):
    kept, lean = clock_env(target, True), clock_env(target, False)
    assert kept.keep_final_obs and not lean.keep_final_obs
    g = torch.Generator().manual_seed(0)
    frames = [snapshot(lean)]
    for _ in range(30):
        actions = torch.randint(0, 3, (6, 1), generator=g, dtype=torch.int32)
        for env in (kept, lean):
            env.step(actions.to(env.device))
        for name in kept.store:  # the same step in every other respect
            if name != "final_obs":
                assert torch.equal(kept.store[name], lean.store[name]), name
        frames.append(snapshot(lean))
        ended = kept.store["done"].bool().cpu()
        np.testing.assert_array_equal(kept.store["final_obs"].cpu()[ended, 0, 0], kept.store["last_length"].cpu()[ended])
    truncated, terminated = check_truncated_only(frames)
    assert truncated > 3 and terminated > 3


def test_recording_keeps_every_final_observation_until_it_is_detached(target):
    env = clock_env(target, False)
    env.record(replicas=[1])
    g = torch.Generator().manual_seed(1)
    ended = 0
    for _ in range(20):
        env.step(torch.randint(0, 3, (6, 1), generator=g, dtype=torch.int32).to(env.device))
        done = env.store["done"].bool().cpu()
        final = env.store["final_obs"].cpu()
        np.testing.assert_array_equal(final[done, 0, 0], env.store["last_length"].cpu()[done])
        ended += int((done & ~env.store["truncated"].bool().cpu()).sum())
    assert ended > 3
    env.recorder = None  # detached: back to where truncated only
    frames = [snapshot(env)]
    for _ in range(20):
        env.step(torch.randint(0, 3, (6, 1), generator=g, dtype=torch.int32).to(env.device))
        frames.append(snapshot(env))
    assert check_truncated_only(frames)[1] > 3


def test_the_flag_is_checked():
    env = clock_env("cpu", True)
    with pytest.raises(wb.WorkbenchError, match="keep_final_obs must be True or False, got 'no'"):
        env.keep_final_obs = "no"
    assert env.keep_final_obs


@test_cuda_c.needs_gxx
def test_host_build_keeps_final_observations_where_truncated_only_when_asked(tmp_path):
    frames = test_cuda_c._compare_with_cpu(tmp_path, test_cuda_c.clock_definition(), gpu_layout(1), n_envs=6,
                                           steps=30, keep_final_obs=False)
    truncated, terminated = check_truncated_only(frames)
    assert truncated > 3 and terminated > 3


def test_the_trainer_keeps_final_observations_only_for_metrics_that_read_them():
    cartpole = wb.make_trainer(wb.PPOConfig(env="cartpole", num_envs=4, rollout_length=8, target="cpu"))
    assert not cartpole.keep_final_obs and cartpole.env.keep_final_obs  # the env's own until train()
    seen = []
    cartpole.train(num_iterations=2, callback=lambda i, m: seen.append(cartpole.env.keep_final_obs))
    assert seen == [False, False]  # while it trains: the trainer's
    assert cartpole.env.keep_final_obs  # then the env's own again
    cartpole.keep_final_obs = True  # the trainer's setting, and the user's own for the env, changed between trainings
    cartpole.env.keep_final_obs = False
    seen.clear()
    cartpole.train(num_iterations=1, callback=lambda i, m: seen.append(cartpole.env.keep_final_obs))
    assert seen == [True] and not cartpole.env.keep_final_obs
    tag = wb.make_trainer(wb.A2CConfig(env="tag_continuous", num_envs=2, rollout_length=4, target="cpu",
                                       env_params=dict(num_taggers=2, num_runners=3, episode_length=12,
                                                       num_other_agents_observed=2)))
    assert tag.env.keep_final_obs  # its runners-tagged metric reads the final observations


@pytest.mark.parametrize("adapter", ["as_gymnasium", "as_sb3", "as_pettingzoo", "as_torchrl"])
def test_an_adapter_keeps_every_final_observation_after_training(adapter):
    """Other ecosystems' APIs hand out the final observation of every ended episode: wrapping an env a
    trainer stepped (keep_final_obs off) turns it back on."""
    pytest.importorskip({"as_gymnasium": "gymnasium", "as_sb3": "stable_baselines3", "as_pettingzoo": "pettingzoo",
                         "as_torchrl": "torchrl"}[adapter])
    trainer = wb.make_trainer(wb.PPOConfig(env="cartpole", num_envs=4, rollout_length=8, target="cpu"))
    trainer.env.keep_final_obs = False  # (as while the trainer trains)
    getattr(trainer.env, adapter)()
    assert trainer.env.keep_final_obs


@pytest.mark.filterwarnings("ignore:policy .shared. looks divergent")  # (DDPG on a toy goal, 4 iterations)
@pytest.mark.parametrize("algorithm", ["ppo", "ddpg"])
def test_training_is_the_same_without_terminated_episodes_final_observations(algorithm):
    """The learners bootstrap only where an episode was truncated: keeping the others changes nothing
    (one thread: sums split over another count round differently)."""
    if algorithm == "ppo":
        config = wb.PPOConfig(env="cartpole", env_params={"max_steps": 20}, num_envs=8, rollout_length=16,
                              num_minibatches=2, update_epochs=2, target="cpu", seed=3, cpu_threads=1)
    else:
        near_the_goal = {"max_steps": 12, "goal_position": -0.5}  # starts on either side: episodes end both ways
        config = wb.DDPGConfig(env="mountain_car_continuous", env_params=near_the_goal, num_envs=8,
                               rollout_length=8, target="cpu", seed=3, learning_starts=16, batch_size=32,
                               cpu_threads=1)
    runs = []
    for keep in (False, True):
        trainer = wb.make_trainer(config)
        trainer.keep_final_obs = keep
        seen = []
        trainer.train(num_iterations=4, callback=lambda i, m: seen.append(trainer.env.keep_final_obs))
        assert seen == [keep] * 4
        history = [{k: v for k, v in row.items() if k not in ("env_steps_per_s", "time_s")} for row in trainer.history]
        weights = {k: v.clone() for k, v in trainer.models[trainer.groups[0].name].state_dict().items()}
        runs.append((history, weights))
    (lean, lean_weights), (kept, kept_weights) = runs
    np.testing.assert_equal(lean, kept)
    lengths = [row["episode_length"] for row in lean]
    assert np.nanmin(lengths) < config.env_params["max_steps"]  # some episodes terminated
    for name in lean_weights:
        assert torch.equal(lean_weights[name], kept_weights[name]), name
