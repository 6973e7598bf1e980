"""Edge cases of the learner against closed forms: Box actions of several dimensions, the observation
normaliser on features with a large mean, an env that would write the time limit's flag itself, and
the last report with a finished episode."""
import math

import pytest
import torch

import workbench as wb
from workbench.learn import config as cfg
from workbench.errors import EnvDefinitionError
from workbench.learn.members import MemberNorm
from workbench.learn.normaliser import RunningNorm
from workbench.learn.trainer import make_trainer

# One agent reaches for a target of shape (2, 2), drawn at each reset and observed: reward minus the
# mean distance, so a policy that copies the observation into its action scores about 0, random about -0.67.
REACH = '''
from workbench.envdef import Box, per_agent
from workbench.rng import uniform_range

PARAMS = dict(max_steps=4)
NUM_AGENTS = 1
MAX_STEPS = "max_steps"
OBSERVATION = Box(shape=(4,))
ACTION = Box(low=-1.0, high=1.0, shape=(2, 2))
STATE = dict(goal=per_agent(shape=(4,)))


def reset(env, agent, key, goal):
    for i in range(4):
        goal[env, agent, i] = uniform_range(key, i, -0.5, 0.5)


def reach(env, agent, action, goal, reward):
    miss = 0.0
    for i in range(2):
        for j in range(2):
            miss += abs(action[env, agent, i, j] - goal[env, agent, 2 * i + j])
    reward[env, agent] = -0.25 * miss


STEP = [reach]


def observe(env, agent, goal, obs):
    for i in range(4):
        obs[env, agent, i] = goal[env, agent, i]
'''


@pytest.fixture(scope="module")
def reach_env():
    wb.register("reach_2x2", REACH)
    return "reach_2x2"


@pytest.mark.parametrize("config_type", [wb.PPOConfig, wb.A2CConfig])
def test_box_actions_of_two_dimensions_give_the_rollouts_log_probabilities_back(reach_env, config_type, target):
    tr = make_trainer(config_type(env=reach_env, num_envs=8, rollout_length=4, target=target))
    with torch.no_grad():
        tr.collector.rollout()
        buf, model = tr.buffers["shared"], tr.models["shared"]
        batch = buf.batch()
        assert tuple(batch["actions"].shape[1:]) == (2, 2)
        out, _ = model(batch["obs"].float())
        logp, entropy = model.head.log_prob_entropy(out, model.log_std, batch["actions"])
    assert logp.shape == entropy.shape == batch["logp_old"].shape
    torch.testing.assert_close(logp, batch["logp_old"], atol=1e-5, rtol=1e-5)  # the ratio at the rollout's weights is 1


@pytest.mark.parametrize("config_type", [wb.PPOConfig, wb.A2CConfig])
def test_box_actions_of_two_dimensions_learn_above_random(reach_env, config_type):
    config = config_type(env=reach_env, num_envs=32, rollout_length=8, target="cpu", seed=0, lr=3e-3,
                         total_env_steps=32 * 8 * 150, target_return=None, log_every=10)
    trainer = make_trainer(config)
    result = trainer.train()
    first, last = result.history[0]["mean_return"], result.history[-1]["mean_return"]
    assert first < -2.0  # (four steps of a random reach: about -2.7)
    assert last > first + 0.5, (first, last)


@pytest.mark.parametrize("members", [1, 3])
def test_normaliser_keeps_the_variance_of_a_feature_with_a_large_mean(members):
    g = torch.Generator().manual_seed(0)
    norm = RunningNorm(3, "cpu") if members == 1 else MemberNorm(members, 3, "cpu")
    mean, spread = torch.tensor([1000.0, 5000.0, 0.0]), torch.tensor([0.1, 0.5, 1.0])
    seen = []
    for _ in range(3):  # rollouts
        for _ in range(16):  # steps
            obs = mean + spread * torch.randn(members * 512, 3, generator=g)
            seen.append(obs.double().reshape(members, -1, 3))
            norm.accumulate(obs)
        norm.commit()
    want = torch.cat(seen, 1).var(1, unbiased=False)  # [members, 3], the float64 variance
    torch.testing.assert_close(norm.var.reshape(members, 3).double(), want, rtol=2e-3, atol=0)
    normalised = norm(mean + spread * torch.randn(members * 512, 3, generator=g))
    assert normalised.abs().max() < 6  # (not pinned at the clip of 10)


def test_a_resumed_normaliser_goes_on_as_the_uninterrupted_one():
    trained = RunningNorm(2, "cpu")
    for _ in range(2):
        trained.accumulate(torch.tensor([[1000.0, 3.0], [1000.2, 5.0]]))
        trained.commit()
    resumed = RunningNorm(2, "cpu")
    resumed.load_state_dict(trained.state_dict())
    for norm in (trained, resumed):
        norm.accumulate(torch.tensor([[1000.1, 4.0], [1000.3, 2.0]]))
        norm.commit()
    torch.testing.assert_close(resumed.var, trained.var)
    torch.testing.assert_close(resumed.mean, trained.mean)


def test_a_phase_that_writes_the_time_limits_flag_is_refused_with_the_fix():
    source = REACH.replace("def reach(env, agent, action, goal, reward):",
                           "def reach(env, agent, action, goal, reward, truncated):")
    with pytest.raises(EnvDefinitionError, match=r"reach\(\) \(line \d+\) takes 'truncated', which is the "
                                                 r"framework's.*declare MAX_STEPS.*terminated\[env\] = 1"):
        wb.register("reach_truncating", source)
        wb.make("reach_truncating", num_envs=2, target="cpu")


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a_time_limit_bootstraps_unless_the_run_says_it_ends_the_task(bootstrap):
    """Pendulum never terminates: every end is its time limit (here 4 steps). Bootstrapped, a truncated
    step's final value is V(final observation); with bootstrap_time_limit false it is 0, a termination."""
    config = wb.PPOConfig(env="pendulum", num_envs=4, rollout_length=8, target="cpu", env_params={"max_steps": 4},
                          bootstrap_time_limit=bootstrap)
    tr = make_trainer(config)
    with torch.no_grad():
        tr.collector.rollout()
    buf = tr.buffers["shared"]
    truncated = buf.truncated.bool() if buf.truncated.any() else tr.collector.truncated.bool()
    assert truncated.sum() == 8  # (steps 3 and 7 of every replica)
    final = buf.final_values[truncated]
    assert bool((final != 0).all()) if bootstrap else bool((final == 0).all())
    ddpg = make_trainer(wb.DDPGConfig(env="pendulum", num_envs=4, target="cpu", env_params={"max_steps": 4},
                                      bootstrap_time_limit=bootstrap, learning_starts=10_000))
    ddpg.train(num_iterations=4)
    replay = ddpg.buffers["shared"]
    ended = replay.terminated[:replay.fill.item() if torch.is_tensor(replay.fill) else replay.fill]
    assert float(ended.sum()) == (0.0 if bootstrap else ended.numel() / 4)  # (every fourth transition ends)


def test_an_evaluation_without_a_seed_leaves_torchs_global_stream_as_it_was():
    from workbench.learn.evaluate import evaluate
    tr = make_trainer(wb.PPOConfig(env="cartpole", num_envs=2, target="cpu"))
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    evaluate(tr, steps=3)
    torch.testing.assert_close(torch.rand(3), expected)


def test_last_reported_is_the_last_report_with_a_finished_episode():
    """Pendulum's episodes end at step 200: in rollouts of 32 steps the 7th iteration's window holds their
    ends and the 8th's none, whose mean_return (the run's final metrics) is NaN."""
    trainer = wb.make_trainer(wb.PPOConfig(env="pendulum", num_envs=4, rollout_length=32, num_minibatches=1,
                                           update_epochs=1, log_every=1, total_env_steps=4 * 32 * 8, target="cpu"))
    result = trainer.train()
    assert math.isnan(result.metrics["mean_return"])
    last = result.last_reported()
    assert last["iteration"] == 7 and math.isfinite(last["mean_return"]) and last["mean_return"] < 0


@pytest.mark.parametrize("algorithm, seeds", [("ppo", 1), ("a2c", 2)])
def test_log_std_init_sets_a_box_policys_starting_std(algorithm, seeds):
    """SB3's log_std_init: the Gaussian's log-std at the start, each member's and every dimension."""
    config = cfg.from_dict(dict(algorithm=algorithm, env="pendulum", num_envs=64, rollout_length=4, target="cpu",
                                seeds=seeds, log_std_init=-1.5))
    trainer = make_trainer(config)
    log_std = trainer.models["shared"].log_std
    assert log_std.shape == ((seeds, 1) if seeds > 1 else (1,)) and torch.all(log_std == -1.5)
    from workbench import cli
    assert cli._overrides(cli.build_parser().parse_args(["train", "pendulum", "--log-std-init", "-1"])) == \
        {"log_std_init": -1.0}
    with pytest.raises(cfg.ConfigError, match=r"log_std_init must be in \[-20, 5\]"):
        cfg.replace(config, log_std_init=30.0)
