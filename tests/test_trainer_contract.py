"""The trainer's contract with the env, the config and its checkpoints: a trainer given an env
records how that env was made (so a checkpoint rebuilds it) and refuses a config that disagrees with
it; config constructors and validation refuse settings that would be silently ignored or never
learn; a checkpoint of another network is refused by name; what the reports and rates count."""
from __future__ import annotations

import dataclasses
import math
import pickle
import types

import pytest
import torch

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn import trainer_state
from workbench.learn.checkpoint import CheckpointError
from workbench.learn.runs import load_policy

SMALL = dict(num_envs=4, rollout_length=8, num_minibatches=2, update_epochs=1, target="cpu", cpu_threads=1,
             total_env_steps=4 * 8)


@pytest.fixture(scope="module")
def cartpole_env():
    return wb.make("cartpole", num_envs=4, target="cpu", seed=0)


# -- 1. the env given to a trainer ------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"env": "acrobot"}, ["PPOConfig.env is 'acrobot'", "'cartpole'", "replace(config, env='cartpole')"]),
    ({"target": "cuda"}, ["PPOConfig.target is 'cuda'", "target 'cpu'"]),
    ({"env_params": {"max_steps": 7}}, ["env_params['max_steps'] is 7", "max_steps=500"]),
    ({"env_params": {"max_step": 7}}, ["env_params names 'max_step'", "did you mean 'max_steps'"]),
])
def test_a_trainer_refuses_a_config_that_disagrees_with_its_env(cartpole_env, changes, message):
    with pytest.raises(cfg.ConfigError) as info:
        wb.Trainer(cartpole_env, wb.PPOConfig(**{"env": "cartpole", **SMALL, **changes}))
    for part in message:
        assert part in str(info.value)


def test_a_config_left_at_the_default_env_takes_the_env_given():
    env = wb.make("pendulum", num_envs=4, target="cpu")
    assert wb.Trainer(env, wb.PPOConfig(**SMALL)).config.env == "pendulum"


def test_the_checkpoint_rebuilds_the_env_the_trainer_was_given(tmp_path):
    env = wb.make("cartpole", num_envs=4, target="cpu", max_steps=10)
    trainer = wb.Trainer(env, wb.PPOConfig(env="cartpole", **SMALL))
    assert trainer.config.env_params == {"max_steps": 10}
    repeated = wb.PPOConfig(env="cartpole", **{**SMALL, "target": "auto", "env_params": {"max_steps": 10},
                                               "activation": "tanh"})
    assert wb.Trainer(env, repeated).config is repeated  # (nothing to add: "auto" and the env's own values agree)
    trainer.train()
    trainer.save(tmp_path / "cartpole.pt")
    loaded = load_policy(tmp_path / "cartpole.pt", num_envs=2, target="cpu")
    assert loaded.env.definition.params["max_steps"] == 10
    assert loaded.config.env_params == {"max_steps": 10}


def test_a_multi_agent_checkpoint_loads_with_its_env_parameters(tmp_path):
    tag = dict(num_taggers=2, num_runners=3, episode_length=10, grid_length=4.0)
    env = wb.make("tag_continuous", num_envs=4, target="cpu", **tag)
    trainer = wb.Trainer(env, wb.PPOConfig(env="tag_continuous", **SMALL),
                         policies={"tagger": env.taggers, "runner": env.runners})
    trainer.train()
    trainer.save(tmp_path / "tag.pt")
    loaded = load_policy(tmp_path / "tag.pt", num_envs=4, target="cpu")
    assert loaded.env.num_agents == 5 and loaded.config.env_params == tag


def test_building_a_trainer_leaves_the_global_random_stream_alone(cartpole_env, tmp_path):
    config = wb.PPOConfig(env="cartpole", **SMALL)
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    first = wb.Trainer(cartpole_env, config)
    assert torch.equal(torch.get_rng_state(), state)
    second = wb.Trainer(cartpole_env, config)  # the weights still come from config.seed
    for key, value in first.models["shared"].state_dict().items():
        assert torch.equal(value, second.models["shared"].state_dict()[key]), key
    first.save(tmp_path / "c.pt")
    second.load(tmp_path / "c.pt")
    assert torch.equal(torch.get_rng_state(), state)
    second.train(num_iterations=1)
    assert torch.equal(torch.get_rng_state(), state)
    sampled = [second.act(deterministic=False, generator=torch.Generator().manual_seed(5)).clone() for _ in range(2)]
    assert torch.equal(sampled[0], sampled[1]) and torch.equal(torch.get_rng_state(), state)
    modes = second.act().clone()
    assert any(not torch.equal(second.act(deterministic=False, generator=torch.Generator().manual_seed(k)), modes)
               for k in range(4))  # (a sample, not the mode)


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "ddpg"])
def test_a_second_trainer_on_an_env_learns_as_on_a_new_env(algorithm):
    """Episodes the env began before (another trainer's, or the user's own steps) are not the new
    trainer's: it starts the env afresh, so its reports equal those of a trainer given a new env."""
    extra = dict(batch_size=16, buffer_size=64, learning_starts=16) if algorithm == "ddpg" else {}
    name = "pendulum" if algorithm == "ddpg" else "cartpole"
    small = {k: v for k, v in SMALL.items() if algorithm == "ppo" or k not in ("num_minibatches", "update_epochs")}
    config = cfg.replace(cfg.ALGORITHMS[algorithm](env=name, **small, **extra), total_env_steps=4 * 8 * 3, log_every=1)
    short = dict(max_steps=8) if algorithm == "ddpg" else {}  # (Pendulum's episodes end within the run too)
    used = wb.make(name, num_envs=4, target="cpu", seed=5, **short)
    wb.Trainer(used, config).train()
    used.step(used.sample_actions())  # mid-episode, the clock and the running returns not zero
    again = wb.Trainer(used, config).train()
    fresh = wb.Trainer(wb.make(name, num_envs=4, target="cpu", seed=5, **short), config).train()
    assert len(again.history) == len(fresh.history) == 3
    assert any(math.isfinite(m["mean_return"]) for m in fresh.history)  # (returns are compared, not only NaNs)
    for ours, theirs in zip(again.history, fresh.history):
        assert ours.keys() == theirs.keys()
        for key in set(ours) - {"env_steps_per_s", "time_s"}:
            assert ours[key] == pytest.approx(theirs[key], nan_ok=True, rel=1e-6), key


# -- 2, 4, 6, 7. configs ----------------------------------------------------------------------------

def test_ddpg_refuses_learning_starts_past_its_buffer():
    with pytest.raises(cfg.ConfigError, match=r"learning_starts must be <= buffer_size=1000.*raise buffer_size"):
        wb.DDPGConfig(env="pendulum", buffer_size=1000, learning_starts=5000)
    with pytest.raises(cfg.ConfigError, match="learning_starts"):
        cfg.from_dict({"algorithm": "ddpg", "buffer_size": 100, "batch_size": 32, "learning_starts": 101})
    assert wb.DDPGConfig(buffer_size=1000, learning_starts=1000).learning_starts == 1000


def test_ddpg_refuses_an_lr_it_would_not_read_but_loads_runs_that_stored_one(tmp_path):
    for build in (lambda: wb.DDPGConfig(lr=0.5), lambda: cfg.from_dict({"algorithm": "ddpg", "lr": 0.5}),
                  lambda: cfg.replace(wb.DDPGConfig(), lr=0.5)):
        with pytest.raises(cfg.ConfigError, match="DDPGConfig.lr is not read by DDPG.*actor_lr and critic_lr"):
            build()
    path = tmp_path / "ddpg.yaml"
    path.write_text("algorithm: ddpg\nlr: 0.001\n")
    with pytest.raises(cfg.ConfigError, match="ddpg.yaml.*lr"):
        cfg.load_yaml(path)
    assert wb.DDPGConfig(lr=3e-4).lr == 3e-4  # the default, as every DDPG config.yaml and checkpoint stored it
    path.write_text(cfg.yaml.safe_dump(cfg.to_dict(wb.DDPGConfig())))
    assert cfg.load_yaml(path) == wb.DDPGConfig()
    # a checkpoint's config from before the refusal, with an lr DDPG never read
    assert cfg.from_saved({"algorithm": "ddpg", "lr": 0.5}) == wb.DDPGConfig()
    assert cfg.replace(wb.PPOConfig(lr=1e-3), algorithm="ddpg").lr == wb.DDPGConfig().lr  # (not carried over)


def test_the_exploration_noise_is_documented_as_the_code_scales_it():
    doc = {name: text for name, _, _, text in cfg.describe(wb.DDPGConfig)}["exploration_noise"]
    assert "half the action range" in doc


def test_config_constructors_name_an_unknown_key_and_the_one_meant():
    with pytest.raises(cfg.ConfigError, match="did you mean 'lr' for 'learning_rate'"):
        wb.PPOConfig(learning_rate=1e-3)
    with pytest.raises(cfg.ConfigError, match="did you mean 'num_envs' for 'n_envs'"):
        wb.DDPGConfig(n_envs=4)
    with pytest.raises(cfg.ConfigError, match=r"unknown key\(s\) \['bogus'\] for A2CConfig"):
        wb.A2CConfig(bogus=1)
    config = wb.PPOConfig(lr=1e-3, hidden_sizes=(32,))
    assert pickle.loads(pickle.dumps(config)) == config
    assert dataclasses.replace(config, lr=2e-3).lr == 2e-3
    with pytest.raises(cfg.ConfigError, match="did you mean 'total_env_steps'"):
        dataclasses.replace(config, total_timesteps=10)


def test_load_policy_is_public():
    assert wb.load_policy is load_policy and "load_policy" in wb.__all__


# -- 5. a checkpoint of another network -------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint_64(cartpole_env, tmp_path_factory):
    path = tmp_path_factory.mktemp("net") / "h64.pt"
    trainer = wb.Trainer(cartpole_env, wb.PPOConfig(env="cartpole", **SMALL))
    trainer.train()
    trainer.save(path)
    return path


@pytest.mark.parametrize("changes, field", [({"hidden_sizes": (32, 32)}, "hidden_sizes"),
                                            ({"shared_body": True, "activation": "tanh"}, "shared_body"),
                                            ({"activation": "relu"}, "activation")])
def test_a_checkpoint_of_another_network_is_refused_by_name(cartpole_env, checkpoint_64, changes, field):
    trainer = wb.Trainer(cartpole_env, wb.PPOConfig(env="cartpole", **SMALL, **changes))
    with pytest.raises(CheckpointError, match=rf"written for {field}=.*this trainer has {field}=.*replace\(config"):
        trainer.load(checkpoint_64)


def test_an_old_checkpoint_without_the_network_loads_and_a_wrong_one_is_refused(cartpole_env, checkpoint_64):
    payload = torch.load(checkpoint_64, weights_only=False)
    for key in ("hidden_sizes", "activation", "shared_body"):
        payload["signature"].pop(key, None)
    same = wb.Trainer(cartpole_env, wb.PPOConfig(env="cartpole", **SMALL))
    trainer_state.restore(same, payload, "old.pt")
    assert same.iteration == 1
    other = wb.Trainer(cartpole_env, wb.PPOConfig(env="cartpole", **SMALL, hidden_sizes=(32, 32)))
    with pytest.raises(CheckpointError, match=r"policy 'shared' parameter 'actor.0.bias' is shape \[64\] there and "
                                              r"shape \[32\] in this trainer.*hidden_sizes"):
        trainer_state.restore(other, payload, "old.pt")


# -- 9. what reports count --------------------------------------------------------------------------

def test_ddpg_losses_average_over_the_iterations_that_learned(monkeypatch):
    """learning_starts reached in the middle of a report's window: its losses are the learning
    iterations' mean, not diluted by the iterations that only filled the buffer."""
    from workbench.learn import trainer as trainer_mod

    def one_per_iteration(agent, actor_opt, critic_opt, batch, config, *, stats, **kw):
        for key in ("critic_loss", "actor_loss", "q_mean"):
            stats[key] += 1.0 / config.updates_per_rollout

    monkeypatch.setattr(trainer_mod.ddpg, "update", one_per_iteration)
    # 4 replicas x 2 steps = 8 transitions an iteration: iterations 3 and 4 of the window of 4 learn
    config = wb.DDPGConfig(env="pendulum", num_envs=4, rollout_length=2, learning_starts=16, batch_size=8,
                           buffer_size=64, target="cpu", cpu_threads=1, log_every=4, total_env_steps=4 * 2 * 4)
    result = wb.make_trainer(config).train()
    assert len(result.history) == 1
    assert result.metrics["critic_loss/shared"] == pytest.approx(1.0)
    # a report of iterations that learned nothing has no losses (not zeros), though learning starts next
    first, second = wb.make_trainer(cfg.replace(config, learning_starts=8, log_every=1,
                                                total_env_steps=4 * 2 * 2)).train().history
    assert "critic_loss/shared" not in first and second["critic_loss/shared"] == pytest.approx(1.0)


def test_lightning_counts_every_members_env_steps(monkeypatch):
    pytest.importorskip("lightning")
    import lightning as L
    from workbench.interop import lightning as adapter
    clock = iter(range(10**6))
    monkeypatch.setattr(adapter, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    config = wb.PPOConfig(env="cartpole", **{**SMALL, "total_env_steps": 4 * 8 * 2}, seeds=2)
    trainer = wb.make_trainer(config)
    fit = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    fit.fit(adapter.RolloutModule(trainer, iterations_per_epoch=2))
    # one clock tick between reports: the rate is the window's env-steps, of both members
    assert [r["env_steps_per_s"] for r in trainer.history] == [2 * 4 * 8] * 2
