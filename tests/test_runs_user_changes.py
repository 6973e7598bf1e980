"""What a user changes on the way into a run: env parameters given beside a config file add to the
file's, a resume keeps the run's own policy map, and an env parameter YAML read as one key says why."""
from __future__ import annotations

import warnings

import pytest

import workbench as wb
from workbench.cli import main
from workbench.learn import runs

TINY = {"num_envs": 8, "rollout_length": 8, "total_env_steps": 128, "target": "cpu", "cpu_threads": 1}


def test_env_params_given_beside_a_config_add_to_its_own():
    shipped = runs.load_config("tag_grid").env_params
    config, _ = runs.run_config(runs.load_config("tag_grid"),
                                changes={"env_params": {"num_runners": 3}, "run_dir": None})
    assert config.env_params == {**shipped, "num_runners": 3}  # the file's grid_length, episode_length... stay
    config, _ = runs.run_config(runs.load_config("tag_grid"), changes={"env_params": {"grid_length": None},
                                                                       "run_dir": None})
    assert config.env_params == {k: v for k, v in shipped.items() if k != "grid_length"}  # null: the env's default


def test_a_run_trained_with_its_own_policy_map_resumes_from_the_cli(tmp_path, capsys):
    warnings.simplefilter("ignore")
    run = tmp_path / "run"
    trainer, _ = wb.train("cartpole", progress=False, run_dir=str(run), policies={"pole": [0]}, **TINY)
    assert [g.name for g in trainer.groups] == ["pole"]
    assert main(["train", "--resume", str(run), "--total-env-steps", "256"]) == 0
    assert "continuing" in capsys.readouterr().out
    resumed = runs.load_policy(run)
    assert [g.name for g in resumed.groups] == ["pole"] and resumed.iteration == 4


def test_an_env_parameter_yaml_read_as_one_key_says_to_put_a_space(tmp_path, capsys):
    assert main(["train", "cartpole", "--target", "cpu", "--run-dir", str(tmp_path / "r"),
                 "--set", "env_params={length:0.6}"]) == 2
    assert "YAML reads 'key:value' as one key: put a space after the colon" in capsys.readouterr().err
    with pytest.raises(wb.EnvDefinitionError, match="did you mean 'length'"):
        wb.make("cartpole", num_envs=2, target="cpu", **{"length:0.6": None})
    with pytest.raises(wb.EnvDefinitionError, match="did you mean 'length' for 'lenght:0.6'.*space after the colon"):
        wb.make("cartpole", num_envs=2, target="cpu", **{"lenght:0.6": None})  # (both mistakes: both hints)


def test_rollouts_of_the_envs_named(capsys):
    assert main(["rollouts", "cartpole", "--num-envs", "16", "--steps", "3", "--target", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "rollouts of cartpole on target 'cpu' (16 replicas, 3 steps)" and len(out) == 2
    assert out[1].split()[0] == "cartpole" and float(out[1].split()[1]) > 0
    assert main(["rollouts", "cartpol", "--num-envs", "16", "--target", "cpu"]) == 2
    assert "unknown env 'cartpol'; did you mean 'cartpole'?" in capsys.readouterr().err
