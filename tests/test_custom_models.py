"""A user's own policy network: the contract (policies.py's docstring) checked when the trainer is
built, each break named with the fix; a Box model without log_std plays with a std of 1; the probe
leaves the model's buffers alone."""
import math

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.learn.algorithms.ddpg import DDPGAgent
from workbench.learn.groups import PolicyMapError
from workbench.learn.policies import DeterministicActor, QCritic


def cartpole_config(**kw):
    return wb.PPOConfig(**{"env": "cartpole", "num_envs": 8, "rollout_length": 8, "num_minibatches": 2,
                           "update_epochs": 1, "target": "cpu", "cpu_threads": 1, "progress": False, **kw})


class Returns(nn.Module):
    """forward(obs) -> whatever `shape_out(logits, value)` makes of a correct pair."""

    def __init__(self, shape_out, obs_dim=4, actions=2):
        super().__init__()
        self.pi, self.v = nn.Linear(obs_dim, actions), nn.Linear(obs_dim, 1)
        self.shape_out = shape_out

    def forward(self, obs):
        return self.shape_out(self.pi(obs), self.v(obs))


@pytest.fixture(scope="module")
def cartpole():
    return wb.make("cartpole", num_envs=8, target="cpu")


@pytest.mark.parametrize("shape_out, words", [
    (lambda pi, v: (pi, v), r"the value is \[3, 1\] for 3 observations, not \[3\] \(value.squeeze\(-1\)\)"),
    (lambda pi, v: {"logits": pi, "value": v}, r"returned dict; the trainer calls forward\(obs \[N, O\]\) -> "
                                                r"\(head_out \[N, K\], value \[N\]\)"),
    (lambda pi, v: pi, r"returned Tensor; the trainer calls forward"),
    (lambda pi, v: (pi, v.squeeze(-1), v), r"returned a tuple of 3; the trainer calls forward"),
    (lambda pi, v: (pi, None), r"the value is NoneType for 3 observations"),
    (lambda pi, v: (pi.sum(-1), v.squeeze(-1)), r"action output is \[3\] for 3 observations, not \[3, 2\]"),
])
def test_a_model_that_breaks_the_contract_is_named_with_the_fix(cartpole, shape_out, words):
    """Before: a [N, 1] value trained without an error, its loss broadcast to [N, N] (value loss 679
    against 21.7); the others failed deep in the rollout with torch's words."""
    with pytest.raises(PolicyMapError, match=words):
        wb.Trainer(cartpole, cartpole_config(), models={"shared": Returns(shape_out)})


def test_a_forward_that_fails_is_named_with_what_the_trainer_gives(cartpole):
    with pytest.raises(PolicyMapError, match=r"failed on observations \[3, 4\] float32 on cpu \(RuntimeError: .*"
                                             r"O the observation's \(4,\) flattened \(C order\) and float32"):
        wb.Trainer(cartpole, cartpole_config(), models={"shared": Returns(lambda pi, v: (pi, v.squeeze(-1))).double()})


def test_layers_named_head_or_value_are_named(cartpole):
    class WithHead(Returns):
        def __init__(self):
            super().__init__(lambda pi, v: (pi, v.squeeze(-1)))
            self.head = nn.Linear(4, 2)

    class WithValueLayer(nn.Module):  # (value is called as the value function: value(obs) -> [N])
        def __init__(self):
            super().__init__()
            self.body, self.pi, self.value = nn.Linear(4, 8), nn.Linear(8, 2), nn.Linear(8, 1)

        def forward(self, obs):
            h = self.body(obs)
            return self.pi(h), self.value(h).squeeze(-1)

    with pytest.raises(PolicyMapError, match="a submodule named `head`, the name the trainer gives"):
        wb.Trainer(cartpole, cartpole_config(), models={"shared": WithHead()})
    with pytest.raises(PolicyMapError, match=r"value\(obs\) -> \[N\] where the model has a `value` attribute"):
        wb.Trainer(cartpole, cartpole_config(), models={"shared": WithValueLayer()})


def test_a_box_model_without_log_std_plays_with_a_std_of_one_and_batch_norm_keeps_its_statistics():
    """Before: a Gaussian model without log_std failed with 'NoneType' object has no attribute 'exp'
    (the docstring promised a std of 1); the contract's probe ran a BatchNorm in training mode."""
    env = wb.make("pendulum", num_envs=8, target="cpu")

    class Gaussian(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.mu, self.v = nn.BatchNorm1d(3), nn.Linear(3, 1), nn.Linear(3, 1)

        def forward(self, obs):
            h = self.norm(obs)
            return self.mu(h), self.v(h).squeeze(-1)

    model = Gaussian()
    trainer = wb.Trainer(env, cartpole_config(env="pendulum"), models={"shared": model})
    assert int(model.norm.num_batches_tracked) == 0 and torch.equal(model.norm.running_var, torch.ones(3))
    result = trainer.train(num_iterations=2)
    assert result.metrics["entropy/shared"] == pytest.approx(1.4189, abs=1e-3)  # (a unit Gaussian's entropy)


def test_ddpg_takes_a_ddpg_agent_and_names_a_q_of_the_wrong_shape():
    env = wb.make("pendulum", num_envs=8, target="cpu")
    config = wb.DDPGConfig(env="pendulum", num_envs=8, target="cpu", cpu_threads=1, hidden_sizes=[16],
                           learning_starts=64, batch_size=16, buffer_size=256, progress=False)
    with pytest.raises(PolicyMapError, match=r"DDPG's model is a workbench.learn.algorithms.ddpg.DDPGAgent\(actor, "
                                             r"critic\).*got a DeterministicActor"):
        wb.Trainer(env, config, models={"shared": DeterministicActor(3, env.action_space, (16,))})

    class WideQ(QCritic):
        def forward(self, obs, actions):
            return super().forward(obs, actions).unsqueeze(-1)

    with pytest.raises(PolicyMapError, match=r"the critic's Q is \[3, 1\] for 3 transitions, not \[3\] "
                                             r"\(q.squeeze\(-1\)\)"):
        wb.Trainer(env, config, models={"shared": DDPGAgent(DeterministicActor(3, env.action_space, (16,)),
                                                            WideQ(3, 1, (16,)))})
    agent = DDPGAgent(DeterministicActor(3, env.action_space, (16,)), QCritic(3, 1, (16,)))
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    trainer = wb.Trainer(env, config, models={"shared": agent})
    metrics = trainer.train(num_iterations=10).metrics
    assert math.isfinite(metrics["critic_loss/shared"]) and trainer.models["shared"] is agent
    changed = [k for k, v in agent.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("actor.") for k in changed) and any(k.startswith("critic.") for k in changed)


class LayerNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.LayerNorm(16), nn.Tanh())
        self.pi, self.v = nn.Linear(16, 2), nn.Linear(16, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def test_a_run_of_a_model_of_one_s_own_is_trained_resumed_loaded_and_replayed_from_its_folder(tmp_path):
    """Before: wb.train took no models, and load_policy, replay and resume rebuilt the default MLP
    (an error naming hidden_sizes, which the run never used)."""
    from workbench.learn.checkpoint import CheckpointError
    config = cartpole_config(run_dir=str(tmp_path), total_env_steps=8 * 8 * 4)
    first, _ = wb.train(config, models={"shared": LayerNormMLP()}, callback=lambda i, m: i < 2)
    trainer, result = wb.train(resume=tmp_path, models={"shared": LayerNormMLP()}, progress=False)
    assert result.iterations == 4 and isinstance(trainer.models["shared"], LayerNormMLP)
    loaded = wb.load_policy(tmp_path, models={"shared": LayerNormMLP()})
    for (key, mine), theirs in zip(loaded.models["shared"].state_dict().items(),
                                   trainer.models["shared"].state_dict().values()):
        assert torch.equal(mine, theirs), key
    assert wb.replay(tmp_path, models={"shared": LayerNormMLP()}, max_steps=5, dpi=30).total_steps >= 1
    with pytest.raises(CheckpointError, match=r"for a run of a model of your own, pass the same models= again"):
        wb.load_policy(tmp_path)


def test_a_population_refuses_models_of_one_s_own_before_its_env_compiles(monkeypatch):
    from workbench.learn.members import PopulationError
    from workbench.runtime import env as env_module

    def compile_refused(*args, **kwargs):
        raise AssertionError("the env compiled before the refusal")
    monkeypatch.setattr(env_module, "Env", compile_refused)
    with pytest.raises(PopulationError, match=r"a population \(seeds/sweep\) trains the default MLP policies; models "
                                              r"were given for \['shared'\]"):
        wb.make_trainer(cartpole_config(seeds=2), models={"shared": LayerNormMLP()})


class DropoutNet(nn.Module):
    """A PPO model with Dropout that records the mode of every forward."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Dropout(0.5))
        self.pi, self.v = nn.Linear(32, 2), nn.Linear(32, 1)
        self.modes = []

    def forward(self, obs):
        self.modes.append(self.training)
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def test_the_rollout_acts_in_eval_mode_and_the_update_learns_in_training_mode(cartpole):
    """As Stable-Baselines3: acting in eval mode (Dropout off: the rollout's log-probabilities are the
    model's own, repeatable), learning in training mode. Before, the model stayed in training mode
    throughout: the rollout acted with Dropout's random masks."""
    model = DropoutNet()
    trainer = wb.Trainer(cartpole, cartpole_config(), models={"shared": model})
    model.modes.clear()
    with torch.no_grad():
        trainer.collector.rollout()
    assert model.modes and not any(model.modes)  # (every policy step and value in eval mode)
    batch = trainer.buffers["shared"].batch()
    with torch.no_grad():
        logp = model.head.log_prob(model(batch["obs"])[0], None, batch["actions"])
    torch.testing.assert_close(logp, batch["logp_old"])  # (eval mode is deterministic: the same numbers again)
    model.modes.clear()
    trainer.train(num_iterations=1)
    rollout = model.modes.index(True)
    assert rollout > 0 and not any(model.modes[:rollout]) and all(model.modes[rollout:])
    trainer.act(deterministic=False)
    assert model.modes[-1] is False
