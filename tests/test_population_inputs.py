"""A population's inputs as users type them: sweep values read as numbers wherever they come from,
a value given for a swept field refused rather than ignored (new runs and resumes), sweep names
hinted as the config's keys are, and the member a replay or evaluate plays named."""
from __future__ import annotations

import warnings

import pytest
import torch

from workbench.learn import config as cfg
from workbench.learn import population
from workbench.learn.runs import ResumeError, run_config

TINY = {"num_envs": 8, "rollout_length": 8, "total_env_steps": 64, "target": "cpu", "cpu_threads": 1}


def test_sweep_values_written_as_text_read_as_numbers_as_a_fields_do(tmp_path):
    """YAML 1.1 reads 1e-3 as a string: in a sweep as in a field, it is the number."""
    path = tmp_path / "sweep.yaml"
    path.write_text("algorithm: ppo\nenv: cartpole\nlr: 1e-3\nsweep:\n  lr: [1e-3, 3e-3]\n  ent_coef: [0, 1e-2]\n")
    config = cfg.load_yaml(path)
    assert config.lr == 1e-3 and config.sweep == {"lr": [1e-3, 3e-3], "ent_coef": [0, 0.01]}
    assert cfg.from_dict({"sweep": {"lr": ["1e-3", "3e-3"]}}).sweep == {"lr": [0.001, 0.003]}  # (wb.train, --set)
    with pytest.raises(cfg.ConfigError, match=r"sweep\['lr'\] must be a non-empty list of numbers.*got \['fast'\]"):
        cfg.from_dict({"sweep": {"lr": ["fast"]}})


@pytest.mark.parametrize("sweep, algorithm, hint", [
    ({"learning_rate": [1e-3]}, "ppo", "did you mean 'lr'?"),
    ({"LR": [1e-3]}, "ppo", "did you mean 'lr'?"),
    ({"clip_range": [0.1]}, "ppo", "did you mean 'clip_coef'?"),
    ({"tau": [0.01]}, "ppo", r"'tau' is a hyperparameter of ddpg \(set algorithm: ddpg to sweep it\)"),
    ({"clip_coef": [0.1]}, "a2c", r"'clip_coef' is a hyperparameter of ppo"),
    ({"lr": [1e-3]}, "ddpg", "DDPG learns at actor_lr and critic_lr: sweep those"),
])
def test_a_sweep_name_the_algorithm_cannot_sweep_gets_the_hint_a_config_key_gets(sweep, algorithm, hint):
    with pytest.raises(cfg.ConfigError, match=f"sweep names .*members can differ in are .*; {hint}"):
        cfg.from_dict({"algorithm": algorithm, "sweep": sweep})


def test_a_value_listed_twice_in_a_sweep_is_refused_naming_seeds():
    with pytest.raises(cfg.ConfigError, match=r"sweep\['lr'\] lists 0.001 more than once .*seeds"):
        cfg.from_dict({"sweep": {"lr": [1e-3, 3e-3, 0.001]}})


def test_a_value_given_for_a_swept_field_is_refused_not_ignored():
    base = cfg.from_dict({"env": "cartpole", **TINY})
    with pytest.raises(cfg.ConfigError, match=r"lr is given \(0.005\) and swept \(lr: \[0.001, 0.003\]\).*drop lr "
                                              r"\(--lr\), or add 0.005 to the sweep"):
        run_config(base, changes={"lr": 5e-3, "sweep": {"lr": [1e-3, 3e-3]}})
    # a field the config file set, swept from the command line: the sweep is the override
    tuned = cfg.replace(base, lr=5e-3)
    config, _ = run_config(tuned, changes={"sweep": {"lr": [1e-3, 3e-3]}, "run_dir": None})
    assert config.sweep == {"lr": [1e-3, 3e-3]}


def test_a_resume_refuses_a_swept_fields_value_and_says_when_a_sweep_was_only_reordered(tmp_path):
    from workbench.learn.runs import train
    warnings.simplefilter("ignore")
    train("cartpole", progress=False, run_dir=str(tmp_path / "run"), sweep={"lr": [1e-3, 3e-3]}, **TINY)
    with pytest.raises(ResumeError, match=r"lr is swept in .* a resume keeps each member's value, so lr=0.1 would "
                                          r"change nothing"):
        run_config(resume=str(tmp_path / "run"), changes={"lr": 0.1})
    with pytest.raises(ResumeError, match="the same values in another order, which numbers the members otherwise"):
        run_config(resume=str(tmp_path / "run"), changes={"sweep": {"lr": [3e-3, 1e-3]}})
    config, _ = run_config(resume=str(tmp_path / "run"), changes={"ent_coef": 0.02, "total_env_steps": 10 ** 6})
    assert config.ent_coef == 0.02  # (an unswept field may change)


def test_replay_and_evaluate_name_the_member_they_play(tmp_path, capsys):
    import workbench as wb
    from workbench.cli import main
    from workbench.notebook.render import FrameSource
    warnings.simplefilter("ignore")
    run = tmp_path / "run"
    trainer, _ = wb.train("cartpole", progress=False, run_dir=str(run), seeds=2, sweep={"lr": [1e-3, 3e-3]},
                          **{**TINY, "total_env_steps": 512})  # (episodes end: a best member by mean_return)
    best = population.best_member(trainer.history)
    lr = [1e-3, 1e-3, 3e-3, 3e-3][best]
    animation = wb.replay(run, member="best", max_steps=5)
    label = f"member {best} of 4 (the best by mean_return, in its last training report), seed {trainer.config.seed + best}, lr={lr:g}"
    assert animation.trajectory["member"] == label
    title = FrameSource(animation.trajectory, animation.env).fig.axes[0].get_title()
    assert " ".join(title.split()).startswith(f"cartpole {label}, replica 0")  # (wrapped to the frame)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--steps", "4", "--num-envs", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == label
    for member in (2.0, "1", True):  # an index is an integer: not a float, a numeric string or a bool
        with pytest.raises(cfg.ConfigError, match=r"\(--member\) must be an index in 0..3 or 'best' \('all'.*, got"):
            wb.replay(run, member=member, max_steps=2)
    payload = torch.load(run / "checkpoint.pt", weights_only=False)
    assert population.member_payload(payload, 1)["member_of"] == {
        "members": 4, "member": 1, "seed": trainer.config.seed + 1, "values": {"lr": 1e-3}}


def test_a_name_swept_over_one_value_is_that_value_in_the_config():
    import workbench as wb
    """Before, `--sweep lr=1e-3` with one seed trained at 1e-3 while config.yaml said lr 0.0025 beside
    the sweep, and metrics.csv and ranking.csv had no lr column."""
    config = wb.PPOConfig(sweep={"lr": [1e-3], "ent_coef": [0.0, 0.01]}, seeds=2)
    assert config.lr == 1e-3 and config.sweep == {"ent_coef": [0.0, 0.01]}
    only = wb.PPOConfig(sweep={"lr": [1e-3]})
    assert only.lr == 1e-3 and only.sweep is None
