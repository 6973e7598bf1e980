"""normalize_reward: rewards divided by the running std of the discounted return, against a float64
reference written from the definition (returns running across rollouts, restarting where an episode
ends, the variance over the agents in the game, per member); and in training, checkpoints and resumes."""
import math

import pytest
import torch

import workbench as wb
from workbench.learn.reward_scale import REWARD_CLIP, RewardScale
from workbench.learn.rollout import RolloutBuffer
from workbench.learn.trainer import make_trainer

from conftest import gpu_only


def rollout(T, E, n, generator, scale=5.0):
    buf = RolloutBuffer(T, E, n, (1,), (), torch.int64, "cpu")
    buf.rewards.copy_(scale * torch.randn(T, E, n, generator=generator) + 2.0)
    buf.terminated.copy_((torch.rand(T, E, generator=generator) < 0.1).float())
    buf.truncated.copy_((torch.rand(T, E, generator=generator) < 0.05).float())
    buf.mask.copy_((torch.rand(T + 1, E, n, generator=generator) < 0.8).float())
    return buf


def reference(rollouts, gamma, members):
    """The scaled rewards of each rollout: loops over steps, replicas and agents in float64."""
    T, E, n = rollouts[0].rewards.shape
    per = E // members
    running = torch.zeros(E, n, dtype=torch.float64)
    seen = [[] for _ in range(members)]
    out = []
    for buf in rollouts:
        returns = torch.zeros(T, E, n, dtype=torch.float64)
        for t in range(T):
            for e in range(E):
                g = gamma[e] if isinstance(gamma, list) else gamma
                for a in range(n):
                    running[e, a] = g * running[e, a] + float(buf.rewards[t, e, a])
                    returns[t, e, a] = running[e, a]
                    if buf.mask[t, e, a] > 0:
                        seen[e // per].append(float(running[e, a]))
                    ended = buf.terminated[t, e] + buf.truncated[t, e] > 0 or (buf.mask[t, e, a] > 0
                                                                               and buf.mask[t + 1, e, a] == 0)
                    if ended:
                        running[e, a] = 0.0
        scaled = buf.rewards.double().clone()
        for k in range(members):
            std = math.sqrt(torch.tensor(seen[k], dtype=torch.float64).var(unbiased=False).item() + 1e-8)
            scaled[:, k * per:(k + 1) * per] /= std
        out.append(scaled.clamp(-REWARD_CLIP, REWARD_CLIP))
    return out


@pytest.mark.parametrize("members, gamma", [(1, 0.9), (3, 0.99), (2, [0.9] * 3 + [0.5] * 3)])
def test_rewards_are_divided_by_the_running_std_of_the_discounted_return(members, gamma):
    g = torch.Generator().manual_seed(1)
    T, E, n = 12, 6, 2
    rollouts = [rollout(T, E, n, g) for _ in range(3)]
    want = reference(rollouts, gamma, members)
    rates = torch.tensor(gamma).reshape(-1, 1) if isinstance(gamma, list) else gamma
    scale = RewardScale(E, n, members, rates, "cpu")
    for buf, expected in zip(rollouts, want):
        scale(buf)
        torch.testing.assert_close(buf.rewards.double(), expected, rtol=2e-5, atol=1e-6)
    assert 0.1 < float(want[-1].std()) < 2  # (the reference itself scaled rewards of std 5 near 1)


def test_a_rare_large_reward_is_clipped_after_scaling():
    g = torch.Generator().manual_seed(0)
    scale = RewardScale(256, 1, 1, 0.0, "cpu")  # (gamma 0: each return is its reward)
    for big in (0.0, 1000.0):
        buf = rollout(4, 256, 1, g, scale=1.0)
        buf.mask.fill_(1)
        buf.rewards[2, 7, 0] = big
        scale(buf)
    assert float(buf.rewards[2, 7, 0]) == REWARD_CLIP  # (1000 / about 22)
    assert float(buf.rewards.abs().max()) == REWARD_CLIP and float(buf.rewards.abs().median()) < 0.3


def config(**changes):
    settings = dict(env="pendulum", num_envs=4, rollout_length=16, target="cpu", normalize_reward=True,
                    normalize_obs=True, total_env_steps=4 * 16 * 4, seed=3, cpu_threads=1, env_params={"max_steps": 20})
    return wb.PPOConfig(**{**settings, **changes})


def test_the_values_learn_scaled_returns_while_the_reports_keep_the_envs():
    tr = make_trainer(config())
    result = tr.train(num_iterations=2)
    assert result.metrics["mean_return"] < -20  # (Pendulum's returns, -1 to -16 a step: not scaled)
    assert float(tr.buffers["shared"].rewards.abs().mean()) < 1  # (the env's: about 5 a step)
    assert float(tr.reward_scales["shared"].stats.var) > 100  # (the variance of returns near -30 .. -100)


def test_a_resumed_run_scales_as_the_uninterrupted_one(tmp_path):
    first = make_trainer(config())
    first.train(num_iterations=2)
    first.save(tmp_path / "checkpoint.pt")
    saved = first.reward_scales["shared"].returns.clone()
    on = first.train(num_iterations=2).history[-1]
    resumed = make_trainer(config()).load(tmp_path / "checkpoint.pt")
    assert bool((saved != 0).any())
    torch.testing.assert_close(resumed.reward_scales["shared"].returns, saved)
    again = resumed.train(num_iterations=2).history[-1]
    for key in ("value_loss/shared", "policy_loss/shared", "mean_return"):
        assert again[key] == pytest.approx(on[key], rel=1e-5), key


def test_a_resume_keeps_the_runs_reward_scaling(tmp_path):
    from workbench.learn.runs import ResumeError
    wb.train(config(run_dir=str(tmp_path / "run"), normalize_reward=False), progress=False)
    with pytest.raises(ResumeError, match=r"normalize_reward cannot change \(False -> True\)"):
        wb.train(resume=tmp_path / "run", normalize_reward=True, total_env_steps=10_000, progress=False)


def test_acting_elsewhere_starts_fresh_returns_and_an_old_checkpoint_loads(tmp_path):
    trained = make_trainer(config())
    trained.train(num_iterations=2)
    trained.save(tmp_path / "checkpoint.pt")
    acting = wb.load_policy(tmp_path / "checkpoint.pt", num_envs=1)  # (another env: none of the run's episodes)
    assert acting.reward_scales["shared"].returns.shape == (1, 1) and float(acting.reward_scales["shared"].returns) == 0
    torch.testing.assert_close(acting.reward_scales["shared"].stats.var, trained.reward_scales["shared"].stats.var)
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    del payload["reward_scales"], payload["reward_returns"]  # (as written before normalize_reward existed)
    torch.save(payload, tmp_path / "old.pt")
    resumed = make_trainer(config()).load(tmp_path / "old.pt")
    assert float(resumed.reward_scales["shared"].stats.var) == 1.0  # (starts as a new run's)
    resumed.train(num_iterations=1)


def test_ddpg_has_no_reward_scaling_and_says_so():
    from workbench.learn.config import ConfigError
    with pytest.raises(ConfigError, match="normalize_reward"):
        wb.DDPGConfig(env="pendulum", normalize_reward=True)


@gpu_only
@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_a_run_replayed_from_cuda_graphs_scales_as_an_eager_one(env):
    """The scaling, its statistics and the running returns inside the captured iteration (fused GAE
    and step records for CartPole) give what eager iterations give, in fp32."""
    runs = []
    for graph in (True, False):
        tr = make_trainer(wb.PPOConfig(env=env, num_envs=64, rollout_length=16, target="cuda", precision="fp32",
                                       normalize_reward=True, cuda_graph=graph, seed=5))
        history = tr.train(num_iterations=5).history
        runs.append((tr, history))
    (graphed, on_graph), (eager, on_eager) = runs
    assert graphed.graph.state == "replay" and eager.why_not_graphed() == "off"
    scale, reference = graphed.reward_scales["shared"], eager.reward_scales["shared"]
    torch.testing.assert_close(scale.stats.var, reference.stats.var, rtol=1e-4, atol=0)
    torch.testing.assert_close(scale.returns, reference.returns, rtol=1e-4, atol=1e-4)
    for key in ("value_loss/shared", "policy_loss/shared"):
        assert on_graph[-1][key] == pytest.approx(on_eager[-1][key], rel=1e-3, abs=1e-5), key


def test_a_policy_started_from_a_run_takes_its_reward_scale_or_is_warned(tmp_path):
    source = tmp_path / "source"
    wb.train(config(run_dir=str(source)), progress=False)
    saved = torch.load(source / "checkpoint.pt", weights_only=False)["reward_scales"]["shared"]
    started = make_trainer(config(init_from={"shared": str(source)}, seeds=2))
    for k in range(2):  # (every member starts from the source's statistics)
        assert float(started.reward_scales["shared"].stats.var[k]) == pytest.approx(float(saved["var"]))
    with pytest.warns(wb.WorkbenchWarning, match=r"trained with normalize_reward=True, this run has False: the "
                                                 r"critic starts with values in the other units"):
        make_trainer(config(init_from={"shared": str(source)}, normalize_reward=False))
