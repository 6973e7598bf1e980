"""Resuming into another folder forks the run and leaves the original alone; a budget raised on resume
outruns a target return the run had reached; runs.py stands below cli.py (no import of it)."""
import ast
import csv
import inspect

import pytest
import torch

import workbench as wb
from workbench import cli
from workbench.learn import runs
from workbench.learn import config as cfg

E, T = 8, 8
SMALL = dict(target="cpu", num_envs=E, rollout_length=T, update_epochs=1, num_minibatches=1,
             hidden_sizes=[16, 16], seed=3, cpu_threads=1, log_every=1)


def _iterations(path):
    with open(path, newline="") as fh:
        return [int(row["iteration"]) for row in csv.DictReader(fh)]


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("form", ["checkpoint", "folder"])
def test_resume_with_run_dir_forks_into_that_folder(tmp_path, form, capsys):
    source, fork = tmp_path / "a", tmp_path / "b"
    wb.train("cartpole", run_dir=str(source), total_env_steps=2 * E * T, progress=False, **SMALL)
    before = _snapshot(source)
    resume = source / "checkpoint.pt" if form == "checkpoint" else source
    argv = ["train", "--resume", str(resume), "--run-dir", str(fork), "--total-env-steps", str(4 * E * T)]
    assert cli.main(argv) == 0
    assert _snapshot(source) == before
    payload = torch.load(fork / "checkpoint.pt", weights_only=False)
    assert payload["iteration"] == 4 and payload["env_steps"] == 4 * E * T
    assert _iterations(fork / "metrics.csv") == [1, 2, 3, 4]
    saved = cfg.load_yaml(fork / "config.yaml")
    assert saved.run_dir == str(fork) and saved.total_env_steps == 4 * E * T
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and f"--resume {fork}" in err
    assert torch.load(fork / "checkpoint.pt", weights_only=False)["iteration"] == 4


def test_raised_budget_wins_over_a_reached_target_return(tmp_path, capsys):
    run = tmp_path / "run"
    _, stopped = wb.train("cartpole", run_dir=str(run), total_env_steps=12 * E * T, target_return=1.0,
                          progress=False, **SMALL)
    assert stopped.stopped_by == "target_return" and stopped.iterations < 10
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--total-env-steps", str(12 * E * T)]) == 0
    assert "stopped by target_return" in capsys.readouterr().out  # the same budget: the target still stops it
    trainer, result = wb.train(resume=run, total_env_steps=14 * E * T, progress=False)
    out = capsys.readouterr().out
    assert result.stopped_by == "budget" and trainer.iteration == 14
    assert "target_return=1.0" in out and "no longer stops it" in out
    assert cfg.load_yaml(run / "config.yaml").target_return is None
    _, kept = wb.train(resume=run, total_env_steps=16 * E * T, target_return=1.0, progress=False)
    assert kept.stopped_by == "target_return" and kept.iterations == 15


def test_a_config_file_given_with_resume_applies_its_fields(tmp_path, capsys):
    """Before: `train FILE --resume RUN` kept only the file's env and algorithm; its budget, lr and
    log_every were dropped without a word (and the spent budget refused the resume)."""
    run = tmp_path / "run"
    wb.train("cartpole", run_dir=str(run), total_env_steps=2 * E * T, progress=False, **SMALL)
    more = tmp_path / "more.yaml"
    more.write_text(f"env: cartpole\ntotal_env_steps: {4 * E * T}\nlr: 0.01\nlog_every: 2\n")
    assert cli.main(["train", str(more), "--resume", str(run)]) == 0
    saved = cfg.load_yaml(run / "config.yaml")
    assert (saved.total_env_steps, saved.lr, saved.log_every) == (4 * E * T, 0.01, 2)
    assert _iterations(run / "metrics.csv") == [1, 2, 4]
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text("env: cartpole\nnum_envs: 16\ntotal_env_steps: 100000\n")
    capsys.readouterr()
    assert cli.main(["train", str(fixed), "--resume", str(run)]) == 2
    assert "num_envs cannot change" in capsys.readouterr().err


def test_runs_does_not_import_cli():
    tree = ast.parse(inspect.getsource(runs))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [m for m in imported if m and m.split(".")[-1] == "cli"], imported
    assert cli.run_training is runs.run_training and cli.resolve_config is runs.resolve_config
    assert runs.resolve_config("cartpole").name == "cartpole.yaml"


def test_a_gpu_written_generator_state_is_skipped_on_the_cpu():
    """A checkpoint written on a GPU holds a CUDA generator's state (seed and offset, 16 bytes): on a
    CPU machine evaluate and resume go on with a new stream instead of failing in set_state."""
    import torch
    from workbench.learn.trainer_state import _set_generator
    cpu = torch.Generator()
    cuda_like_state = torch.zeros(16, dtype=torch.uint8)
    before = cpu.get_state().clone()
    assert _set_generator(cpu, cuda_like_state) is False
    assert torch.equal(cpu.get_state(), before)
    other = torch.Generator().manual_seed(5)
    assert _set_generator(cpu, other.get_state()) is True
    assert torch.equal(cpu.get_state(), other.get_state())
