"""DDPG as a user drives it: what a run says where its last log window holds no episode end, and the
settings that would learn nothing or break a resumed run, refused or warned about by name."""
import pytest

import workbench as wb
from workbench.learn import config as cfg
from workbench.errors import BudgetWarning
from workbench.learn.runs import ResumeError
from workbench.learn.trainer import make_trainer

SMALL = dict(env="pendulum", target="cpu", num_envs=4, rollout_length=1, updates_per_rollout=1, batch_size=16,
             learning_starts=16, buffer_size=2048, hidden_sizes=[16, 16], log_every=50, cpu_threads=1)


def test_a_run_whose_last_window_had_no_episode_end_says_its_last_reported_return(tmp_path, capsys):
    """Pendulum's episodes end every 200 steps; with 50 iterations a window, a run of 250 iterations
    ends on a window without one: its closing line names the return reported at iteration 200."""
    run = tmp_path / "run"
    trainer, result = wb.train(wb.DDPGConfig(**SMALL, total_env_steps=4 * 250, run_dir=str(run)), progress=False)
    assert result.iterations == 250 and result.metrics["mean_return"] != result.metrics["mean_return"]  # NaN
    at_200 = next(m for m in trainer.history if m["iteration"] == 200)
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("stopped by")][-1]
    assert line.endswith(f"mean return {at_200['mean_return']:.2f} (the last reported, at iteration 200)")
    with pytest.raises(ResumeError, match=r"buffer_size cannot change \(2048 -> 4096\)"):
        wb.train(resume=run, buffer_size=4096, progress=False)
    with pytest.raises(ResumeError, match=r"a ddpg run: normalize_reward is a field of a2c and ppo only, and a "
                                          r"resume keeps the run's algorithm; drop normalize_reward"):
        wb.train(resume=run, normalize_reward=True, progress=False)


def test_a_buffer_smaller_than_one_step_of_every_replica_is_refused_by_name():
    config = wb.DDPGConfig(**{**SMALL, "num_envs": 64, "buffer_size": 32, "batch_size": 32, "learning_starts": 0})
    with pytest.raises(cfg.ConfigError, match=r"buffer_size=32 holds less than one step of every replica of policy "
                                              r"'shared' \(64 replicas x 1 agent\(s\) = 64 transitions a step\): "
                                              r"raise buffer_size to at least 64"):
        make_trainer(config)


def test_a_budget_of_few_gradient_steps_warns_and_the_shipped_config_does_not(recwarn):
    """DDPGConfig's field defaults at 1024 replicas of Pendulum give 1936 gradient steps over 1M env-steps
    (245 iterations, 242 of them learning, 8 steps each), which learned nothing without a word."""
    from workbench.learn.config_files import load_config
    from workbench.learn.learners import ddpg_gradient_steps
    config = wb.DDPGConfig(env="pendulum", target="cpu", num_envs=1024)
    assert ddpg_gradient_steps(config, agents=1) == (245 - 3) * 8
    with pytest.warns(UserWarning, match=r"gives policy 'shared' 1936 gradient steps in all: too few to learn most "
                                         r"tasks .* raise total_env_steps or updates_per_rollout, or lower num_envs"):
        make_trainer(config)
    recwarn.clear()
    make_trainer(cfg.replace(load_config("pendulum"), target="cpu"))
    assert not [w for w in recwarn if "gradient steps" in str(w.message)]


def test_a_run_loaded_to_act_does_not_warn_of_its_training_budget(tmp_path, recwarn):
    """wb.policy, evaluate and replay build a trainer of the run's config: the budget warnings were the
    training's to give (before: every load warned again, with the load's replica count)."""
    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="gradient steps in all"):
        wb.train(wb.DDPGConfig(**SMALL, total_env_steps=4 * 60, run_dir=str(run)), progress=False)
    recwarn.clear()
    wb.policy(run)
    wb.evaluate_run(run, num_envs=2, steps=4, random_policies=())
    assert not [w for w in recwarn if issubclass(w.category, BudgetWarning)]


def test_a_budget_that_ends_before_learning_starts_warns():
    config = wb.DDPGConfig(**{**SMALL, "learning_starts": 1000, "total_env_steps": 400})
    with pytest.warns(UserWarning, match=r"total_env_steps=400 collects 400 transitions of policy 'shared', fewer "
                                         r"than learning_starts=1000: the run would end before it learns anything"):
        make_trainer(config)


def test_algorithm_names_are_read_in_any_case():
    from workbench.learn.config_files import default_config, load_config
    assert type(cfg.from_dict({"algorithm": "DDPG", "env": "pendulum"})) is wb.DDPGConfig
    assert type(cfg.from_dict({"algorithm": "Ppo", "env": "cartpole"})) is wb.PPOConfig
    assert type(cfg.replace(wb.PPOConfig(env="pendulum"), algorithm="DDPG")) is wb.DDPGConfig
    assert type(load_config("pendulum", "PPO")) is wb.PPOConfig  # (wb.train(env, algorithm=), --set algorithm=)
    assert type(default_config("cartpole", "A2C")) is wb.A2CConfig
