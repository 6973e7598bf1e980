"""Run folders: resume continues a run to the same parameters as an uninterrupted one; bad resumes name
what is missing; replay turns a run folder into an animation and an mp4; the default run folder name."""
import csv
import re

import pytest
import torch

import workbench as wb
from workbench import cli
from workbench.learn import config as cfg
from workbench.learn import runs as runs_module
from workbench.learn.runs import ResumeError, default_run_dir, load_policy, resume_config
from workbench.learn.trainer import make_trainer

E, T = 8, 8
SMALL = dict(env="cartpole", target="cpu", num_envs=E, rollout_length=T, total_env_steps=4 * E * T,
             update_epochs=2, num_minibatches=2, hidden_sizes=[16, 16], seed=4, normalize_obs=True,
             cpu_threads=1)  # bit-identical runs need the same thread counts (a measured count can differ)


def _config(run_dir):
    return cfg.from_dict({**SMALL, "run_dir": str(run_dir)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run 'split': 2 iterations, then `train --resume` for the other 2; run 'whole': 4 at once."""
    root = tmp_path_factory.mktemp("runs")
    split, whole = root / "split", root / "whole"
    config = _config(split)
    split.mkdir()
    cfg.save_yaml(config, split / "config.yaml")
    first = make_trainer(config)
    first.train(num_iterations=2)
    assert first.iteration == 2 and (split / "checkpoint.pt").is_file()
    assert cli.main(["train", "--resume", str(split)]) == 0
    uninterrupted = make_trainer(_config(whole))
    uninterrupted.train()
    return split, whole, uninterrupted


def test_resume_equals_an_uninterrupted_run(runs):
    split, _, uninterrupted = runs
    resumed = load_policy(split, num_envs=E)
    payload = torch.load(split / "checkpoint.pt", weights_only=False)
    assert payload["iteration"] == 4 and payload["env_steps"] == 4 * E * T
    for name, state in payload["models"].items():
        for key, value in uninterrupted.models[name].state_dict().items():
            assert torch.equal(state[key], value), f"{name}.{key} differs after resume"
    for key, value in uninterrupted.norms["shared"].state_dict().items():
        assert torch.equal(torch.as_tensor(payload["norms"]["shared"][key]), torch.as_tensor(value))
    assert resumed.iteration == 4
    for key, value in uninterrupted.models["shared"].state_dict().items():
        assert torch.equal(resumed.models["shared"].state_dict()[key], value)


def test_resume_appends_to_the_same_metrics_csv(runs):
    split, whole, _ = runs
    with open(split / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4]
    with open(whole / "metrics.csv") as fh:
        reference = list(csv.DictReader(fh))
    assert [r["return/shared"] for r in rows] == [r["return/shared"] for r in reference]


def test_resume_errors_name_what_is_missing(runs, tmp_path, capsys):
    split, _, _ = runs
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["train", "--resume", str(empty)]) == 2
    assert "has no checkpoint.pt" in capsys.readouterr().err
    with pytest.raises(ResumeError, match=r"env='pendulum'.*trained env='cartpole'"):
        cli.cmd_train(cli.build_parser().parse_args(["train", "pendulum", "--resume", str(split)]))
    with pytest.raises(ResumeError, match="algorithm='a2c'"):
        a2c = {k: v for k, v in SMALL.items() if k not in ("update_epochs", "num_minibatches")}
        resume_config(split, requested=cfg.from_dict({**a2c, "algorithm": "a2c"}))
    assert cli.main(["train", "--resume", str(split), "--num-envs", "16"]) == 2
    assert "num_envs cannot change" in capsys.readouterr().err
    done = 4 * E * T  # (the run has spent its whole budget)
    for flags in ([], ["--total-env-steps", str(done // 2)]):
        assert cli.main(["train", "--resume", str(split), *flags]) == 2
        assert f"has trained {done} env-steps" in capsys.readouterr().err


def test_a_budget_of_few_updates_gets_a_note_before_training(tmp_path, capsys):
    """(wb.train("cartpole", num_envs=4096) once trained 2 iterations and replayed a random policy)"""
    wb.train(cfg.from_dict({**SMALL, "total_env_steps": 3 * E * T}), run_dir=str(tmp_path / "few"), progress=False)
    out = capsys.readouterr().out
    assert f"at {E * T} env-steps an iteration (num_envs x rollout_length) gives 3 update(s) in all" in out
    assert f"--total-env-steps {50 * E * T} for 50" in out and "x 1 agent;" in out
    wb.train(cfg.from_dict({**SMALL, "total_env_steps": 12 * E * T}), run_dir=str(tmp_path / "enough"), progress=False)
    assert "note: total_env_steps" not in capsys.readouterr().out


def test_replay_returns_an_animation_and_writes_mp4(runs, tmp_path):
    split, _, _ = runs
    animation = wb.replay(split, max_steps=12, mp4=tmp_path / "policy.mp4", dpi=40)
    assert "<img" in animation.to_html() or "data:image/png" in animation.to_html()
    assert 1 <= animation.total_steps <= 12
    assert (tmp_path / "policy.mp4").stat().st_size > 0
    with pytest.raises(ResumeError, match="no checkpoint.pt"):
        wb.replay(tmp_path)


def test_replay_with_a_seed_plays_the_same_episode_and_without_one_others(runs):
    split, _, _ = runs
    frames = [wb.replay(split, seed=s, max_steps=40, dpi=30).frames for s in (5, 5, 6)]
    assert frames[0] == frames[1] and frames[0] != frames[2]
    assert wb.replay(split, max_steps=40, dpi=30).frames != wb.replay(split, max_steps=40, dpi=30).frames


def test_a_stochastic_replay_with_a_seed_samples_the_same_actions(runs):
    """Before: the policy's samples came from torch's global stream, so the same seed played other moves."""
    from workbench.notebook.render import record_episode
    split, _, _ = runs
    trainer = load_policy(split, num_envs=4)
    played = [record_episode(trainer.env, trainer, replicas=[0, 1, 2, 3], seed=s, max_steps=30,
                             deterministic=False) for s in (3, 3, 4)]
    actions = [[episode["action"].tolist() for episode in run] for run in played]
    assert actions[0] == actions[1] and actions[0] != actions[2]


@pytest.mark.parametrize("options, words", [
    (dict(max_steps=-3), "max_steps must be an int >= 1"), (dict(max_steps=0), "max_steps must be an int >= 1"),
    (dict(max_frames=0), "max_frames must be an int > 0"), (dict(fps=0), "fps must be a number > 0"),
    (dict(fps=-5.0), "fps must be a number > 0"), (dict(embed_limit_mb=0), "embed_limit_mb must be a number > 0"),
    (dict(replica=-1), "replica must be an int >= 0, got -1"), (dict(num_envs=0), "num_envs must be an int >= 1"),
    (dict(replica=1.5), "replica must be an int >= 0, got 1.5"),
    (dict(member=1), r"is not a population's run: it has no member 1 \(play or evaluate its one policy"),
])
def test_replay_refuses_bad_arguments_by_name(runs, options, words):
    split, _, _ = runs
    with pytest.raises(wb.WorkbenchError, match=words):
        wb.replay(split, **{"max_steps": 5, **options})


@pytest.mark.parametrize("name, words", [("policy.avi", r"name the file .mp4, .mov, .mkv or .gif .+, not .avi"),
                                         ("/proc/policy.mp4", "failed writing /proc/policy.mp4: .+"),
                                         ("/proc/nope/policy.mp4", "its folder '/proc/nope' cannot be made")])
def test_an_mp4_ffmpeg_cannot_write_says_why(runs, tmp_path, name, words):
    """(not a bare BrokenPipeError from the frames' pipe)"""
    split, _, _ = runs
    with pytest.raises(wb.WorkbenchError, match=words):
        wb.replay(split, max_steps=5, dpi=30, mp4=tmp_path / name)


def test_default_run_dir_names_env_and_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = cfg.from_dict(SMALL)
    first = default_run_dir(config.env)
    assert re.fullmatch(r"runs/cartpole-\d{8}-\d{6}", first)
    assert (tmp_path / first).is_dir()  # made at once: a run started in the same second takes the next name
    monkeypatch.setattr(runs_module.time, "strftime", lambda fmt: first.split("-", 1)[1])
    assert default_run_dir(config.env) == first + "-2" and default_run_dir(config.env) == first + "-3"


def test_train_from_python_keeps_a_run_folder_and_resumes_it(tmp_path, monkeypatch):
    """wb.train is the CLI's train from Python: a shipped config's name plus overrides, a run folder by
    default, and resume=RUN_DIR continuing the same run (iteration count, metrics.csv)."""
    monkeypatch.chdir(tmp_path)
    small = {k: v for k, v in SMALL.items() if k != "env"}
    trainer, result = wb.train("cartpole", progress=False, **{**small, "total_env_steps": 2 * E * T})
    (folder,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"cartpole-\d{8}-\d{6}", folder.name) and trainer.config.run_dir == f"runs/{folder.name}"
    assert {"config.yaml", "metrics.csv", "checkpoint.pt", "learning_curve.png"} <= {p.name for p in folder.iterdir()}
    assert result.iterations == trainer.iteration == 2
    rows = len((folder / "metrics.csv").read_text().splitlines())
    resumed, again = wb.train(resume=folder, progress=False, total_env_steps=4 * E * T)
    assert resumed.iteration == again.iterations == 4 and again.env_steps == 4 * E * T
    assert len((folder / "metrics.csv").read_text().splitlines()) > rows
    assert list((tmp_path / "runs").iterdir()) == [folder]
    with pytest.raises(ResumeError, match=r"num_envs cannot change \(8 -> 16\)"):
        wb.train(resume=folder, num_envs=16)
    with pytest.raises(cfg.ConfigError, match="train needs a config"):
        wb.train()


@pytest.mark.parametrize("algorithm, change", [("a2c", {"lr": 0.05}), ("ppo", {"lr": 0.05, "anneal_lr": False}),
                                               ("ddpg", {"actor_lr": 0.05, "critic_lr": 0.07})])
def test_a_resume_learns_at_the_learning_rate_it_is_given(tmp_path, algorithm, change):
    """Not at the one the checkpoint's optimiser state holds (anneal_lr, which sets the rate every
    iteration from the config, hid this where it is on)."""
    env = "pendulum" if algorithm == "ddpg" else "cartpole"
    extra = dict(batch_size=16, buffer_size=256, learning_starts=16) if algorithm == "ddpg" else {}
    if algorithm == "ppo":
        extra.update(update_epochs=1, num_minibatches=1, anneal_lr=False)
    config = cfg.from_dict({"env": env, "algorithm": algorithm, "target": "cpu", "num_envs": 4, "rollout_length": 4,
                            "total_env_steps": 32, "cpu_threads": 1, "run_dir": str(tmp_path / "run"), **extra})
    wb.train(config, progress=False)
    trainer, _ = wb.train(config, resume=tmp_path / "run", run_dir=str(tmp_path / "fork"), total_env_steps=64,
                          progress=False, **change)
    names = ("actor_lr", "critic_lr") if algorithm == "ddpg" else ("lr",)
    optimisers = [o for opt in trainer.optimizers.values() for o in (opt if isinstance(opt, tuple) else (opt,))]
    for name, optimiser in zip(names * len(trainer.optimizers), optimisers):
        rates = optimiser.lr if hasattr(optimiser, "members") else [g["lr"] for g in optimiser.param_groups]
        assert [float(r) for r in torch.as_tensor(rates).reshape(-1)] == pytest.approx([change[name]]), name


def test_a_resume_with_longer_iterations_stops_at_the_budget_in_env_steps(tmp_path):
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path / "run"), "total_env_steps": 2 * E * T})
    wb.train(config, progress=False)
    trainer, result = wb.train(config, resume=tmp_path / "run", run_dir=str(tmp_path / "fork"),
                               rollout_length=4 * T, total_env_steps=6 * E * T, progress=False)
    assert trainer.env_steps == 6 * E * T and result.iterations == 3  # 2 short iterations, then 1 of 4 x T


def test_a_run_killed_after_its_checkpoint_resumes_without_repeating_rows(tmp_path):
    """A hard kill (no Ctrl-C handler runs) leaves metrics.csv rows past the last checkpoint, the
    last one maybe cut short; the resumed run logs those iterations again, once, in whole rows."""
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path), "total_env_steps": 6 * E * T, "log_every": 1})
    trainer = make_trainer(config)
    trainer.train(num_iterations=2)  # the checkpoint: iteration 2
    with (tmp_path / "metrics.csv").open() as fh:
        rows = list(csv.reader(fh))
    with (tmp_path / "metrics.csv").open("a", newline="") as fh:  # iterations 3 and 4, logged before the kill
        for i in (3, 4):
            csv.writer(fh).writerow([str(i) if name == "iteration" else value
                                     for name, value in zip(rows[0], rows[-1])])
        fh.write(",".join(["2"] + rows[-1][1:3]))  # a row the kill cut short (its iteration no help)
    assert cli.main(["train", "--resume", str(tmp_path)]) == 0
    with (tmp_path / "metrics.csv").open() as fh:
        iterations = [int(r["iteration"]) for r in csv.DictReader(fh)]
    assert iterations == [1, 2, 3, 4, 5, 6]
    with (tmp_path / "metrics.csv").open() as fh:
        assert len({len(r) for r in csv.reader(fh)}) == 1


@pytest.mark.parametrize("edit, words", [("seed: 4", "seed=7"), ("num_envs: 8", "num_envs=32")])
def test_a_config_yaml_edited_in_a_field_a_resume_keeps_is_refused(tmp_path, edit, words):
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path)})
    wb.train(config, progress=False)
    path = tmp_path / "config.yaml"
    changed = edit.replace("4", "7") if "seed" in edit else edit.replace("8", "32")
    text = path.read_text()
    assert edit in text
    path.write_text(text.replace(edit, changed))
    with pytest.raises(ResumeError, match=rf"says {words} but the checkpoint was trained with .*put .* back in "
                                          r"config.yaml"):
        wb.train(config, resume=tmp_path, total_env_steps=8 * E * T, progress=False)


def test_a_checkpoint_is_readable_as_the_other_run_files_are(tmp_path):
    import os
    import stat
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path), "total_env_steps": E * T})
    wb.train(config, progress=False)
    mode = lambda name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)  # noqa: E731
    assert mode("checkpoint.pt") == mode("metrics.csv") == mode("config.yaml")


def test_wb_train_takes_a_callback_whose_false_stops_the_run_and_resume_continues_it(tmp_path):
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path)})
    seen = []
    trainer, result = wb.train(config, progress=False, callback=lambda i, m: seen.append(i) or i < 2)
    assert seen == [1, 2] and result.stopped_by == "callback" and trainer.iteration == 2
    trainer, result = wb.train(config, resume=tmp_path, progress=False)
    assert trainer.iteration == 4 and result.stopped_by == "budget"


def test_a_failed_write_of_metrics_csv_keeps_the_iteration(tmp_path, monkeypatch):
    """Before: a full disk (or a folder made read-only) at a report ended the run with no checkpoint."""
    import errno
    from workbench.learn import trainer as trainer_module
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path / "full"), "log_every": 1})
    real = trainer_module.append_csv

    def fill_the_disk(path, metrics):
        if metrics["iteration"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, metrics)
    monkeypatch.setattr(trainer_module, "append_csv", fill_the_disk)
    with pytest.warns(UserWarning, match="writing metrics.csv raised OSError after iteration 2: that iteration's "
                                         "checkpoint is saved"), pytest.raises(OSError, match="No space left"):
        wb.train(config, progress=False)
    monkeypatch.undo()
    trainer, _ = wb.train(config, resume=tmp_path / "full", progress=False)
    assert trainer.iteration == 4
    with (tmp_path / "full" / "metrics.csv").open() as fh:
        assert [int(r["iteration"]) for r in csv.DictReader(fh)] == [1, 2, 3, 4]  # (2's from the checkpoint)


def test_a_callback_that_raises_keeps_the_iteration_and_cannot_change_the_report(tmp_path):
    """Before: a raising callback left metrics.csv and no checkpoint (the folder could be neither
    resumed nor reused), and a callback writing into the report changed the trainer's history and
    its target_return stop."""
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path / "raised")})

    def boom(iteration, metrics):
        if iteration == 2:
            raise RuntimeError("boom in callback")
        return True

    with pytest.warns(UserWarning, match="a callback raised RuntimeError after iteration 2: that iteration's "
                                         "checkpoint is saved"), pytest.raises(RuntimeError, match="boom"):
        wb.train(config, progress=False, callback=boom)
    trainer, result = wb.train(config, resume=tmp_path / "raised", progress=False)
    assert trainer.iteration == 4 and result.stopped_by == "budget"

    def meddle(iteration, metrics):
        metrics["return/shared"] = metrics["mean_return"] = 12345.0
        return True

    _, result = wb.train(cfg.replace(config, run_dir=str(tmp_path / "meddled"), target_return=1000.0), progress=False,
                         callback=meddle)
    assert result.stopped_by == "budget" and result.history[-1]["mean_return"] < 1000.0


def test_a_long_run_keeps_a_bounded_evenly_spaced_history_and_every_csv_row(tmp_path, monkeypatch):
    """Before: every report stayed in memory and went into every checkpoint (a checkpoint of 4.5 MB and
    saves 3x slower per iteration after 12000 iterations; memory growing 1.4 KB an iteration)."""
    from workbench.learn import metrics as metrics_module
    history = []
    for i in range(5, 100_001, 5):
        metrics_module.keep_report(history, {"iteration": i}, log_every=5)
    steps = [b["iteration"] - a["iteration"] for a, b in zip(history[1:-1], history[2:-1])]
    assert len(history) <= metrics_module.HISTORY_REPORTS + 2 and len(set(steps)) == 1  # (even: every 80th)
    assert history[0]["iteration"] == 5 and history[-1]["iteration"] == 100_000
    population = []
    for i in range(1, 10_001):
        metrics_module.keep_report(population, {"iteration": i}, log_every=1, members=64)
    assert 32 <= len(population) <= 66  # (each report holds 64 members': at least 64 reports are kept)

    monkeypatch.setattr(metrics_module, "HISTORY_REPORTS", 64)
    config = cfg.from_dict({**SMALL, "run_dir": str(tmp_path), "log_every": 1, "total_env_steps": 150 * E * T})
    trainer, _ = wb.train(config, progress=False)
    assert len(trainer.history) <= 66 and trainer.history[-1]["iteration"] == 150
    assert len(torch.load(tmp_path / "checkpoint.pt", weights_only=False)["history"]) == len(trainer.history)
    trainer, _ = wb.train(config, resume=tmp_path, progress=False, total_env_steps=170 * E * T)
    with (tmp_path / "metrics.csv").open() as fh:  # (kept in place on resume, not rebuilt from the history)
        assert [int(r["iteration"]) for r in csv.DictReader(fh)] == list(range(1, 171))


def test_a_run_folder_records_what_it_was_trained_with(runs):
    """config.yaml ends with the versions, target, device, precision and every env parameter as comments
    (its config stays portable: "auto" and the parameters set away from defaults); the checkpoint keeps
    the same record."""
    import numba
    split, _, _ = runs
    text = (split / "config.yaml").read_text()
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0].startswith("# trained with workbench ") and f"numba {numba.__version__}" in comments[0]
    assert "on target cpu" in comments[1] and "precision fp32" in comments[1]
    assert "gravity=9.8" in comments[2] and "max_steps=500" in comments[2]
    loaded = cfg.load_yaml(split / "config.yaml")  # (the comments are left out)
    assert (loaded.target, loaded.seed, loaded.env_params) == ("cpu", 4, None)
    record = torch.load(split / "checkpoint.pt", weights_only=False)["provenance"]
    assert record["torch"] == torch.__version__ and record["env_params"]["masscart"] == 1.0


def test_the_summary_of_a_resumed_run_says_where_its_time_counts_from(tmp_path, capsys):
    """Before: "after 4 iterations ... 0.1 s of training" counted the run's iterations and this process's time."""
    first = make_trainer(_config(tmp_path))
    first.train(num_iterations=2)
    assert cli.main(["train", "--resume", str(tmp_path)]) == 0
    summary = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("stopped by budget"))
    assert "after 4 iterations" in summary and "s of training since the resume at iteration 2 (" in summary


def test_provenance_names_the_source_s_own_commit_or_none(monkeypatch):
    """From its own checkout, the checkout's commit (a GIT_DIR pointing elsewhere does not change it)."""
    import os
    import subprocess
    from pathlib import Path
    from workbench.learn import provenance
    root = Path(provenance.__file__).resolve().parents[2]
    provenance.source_commit.cache_clear()
    monkeypatch.setenv("GIT_DIR", "/nonexistent")
    commit = provenance.source_commit()
    provenance.source_commit.cache_clear()
    if not (root / ".git").exists():
        assert commit is None
        return
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "GIT_DIR"})
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", commit) and commit.split("-")[0] == head.stdout.strip()


def test_a_shipped_config_is_found_by_its_path_in_the_docs_from_any_folder(tmp_path, monkeypatch):
    from workbench.learn.config_files import config_file, load_config
    monkeypatch.chdir(tmp_path)  # (no configs/ folder here)
    assert config_file("configs/cartpole.yaml") == config_file("cartpole") == config_file("cartpole.yaml")
    assert load_config("configs/cartpole.yaml").env == "cartpole"
    assert config_file("configs/no_such.yaml") is None
