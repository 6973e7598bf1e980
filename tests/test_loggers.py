"""--logger: TensorBoard event files read back hold the metrics.csv names and values and the
hyperparameters; wandb writes an offline run without a key; bad names and missing extras are named."""
import csv
import os
import subprocess
import sys

import pytest

import workbench as wb
from workbench import cli
from workbench.learn import trainer as trainer_module
from workbench.learn import config as cfg
from workbench.learn.config import ConfigError
from workbench.extras import MissingExtraError
from workbench.learn.loggers import compose, make_logger

SMALL = ["--set", "env=cartpole", "--target", "cpu", "--num-envs", "8", "--rollout-length", "8",
         "--total-env-steps", "192", "--set", "update_epochs=1", "--set", "hidden_sizes=[8]"]


def _csv(run_dir):
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_tensorboard_event_file_holds_the_csv_metrics_and_hparams(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = tmp_path / "tb"
    assert cli.main(["train", "cartpole", "--run-dir", str(run), "--logger", "tensorboard", *SMALL]) == 0
    rows = _csv(run)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    numeric = [k for k, v in rows[0].items() if k != "nonfinite"]
    assert set(numeric) <= tags, set(numeric) - tags
    returns = events.Scalars("return/shared")
    assert [e.step for e in returns] == [int(r["env_steps"]) for r in rows]
    assert [e.value for e in returns] == pytest.approx([float(r["return/shared"]) for r in rows], nan_ok=True)
    assert "config/text_summary" in events.Tags()["tensors"]
    plugins = events.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in plugins
    assert b"rollout_length" in plugins["_hparams_/session_start_info"]


def test_wandb_runs_offline_without_a_key(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "wb"
    assert cli.main(["train", "cartpole", "--run-dir", str(run), "--logger", "wandb", *SMALL]) == 0
    offline = list((run / "wandb").glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb")), "an offline run file to sync later"


class _RecordingWandb:
    """Stands in for the wandb module: records what the logger asks of a run."""

    def __init__(self):
        self.metrics, self.logged = {}, []

    def init(self, **kwargs):
        return self

    def define_metric(self, name, step_metric=None):
        self.metrics[name] = step_metric

    def log(self, row, step):
        self.logged.append((step, row))

    def finish(self):
        pass


def test_wandb_charts_follow_env_steps_as_tensorboard_does(tmp_path, monkeypatch):
    fake = _RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run = tmp_path / "wb"
    assert cli.main(["train", "cartpole", "--run-dir", str(run), "--logger", "wandb", *SMALL]) == 0
    assert fake.metrics == {"env_steps": None, "*": "env_steps"}
    rows = _csv(run)
    assert [step for step, _ in fake.logged] == [int(r["iteration"]) for r in rows]
    assert [row["env_steps"] for _, row in fake.logged] == [float(r["env_steps"]) for r in rows]


def test_bad_logger_and_missing_extra_are_named(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"PPOConfig.logger must be one of \['csv', 'tensorboard', 'wandb'\], "
                                          r"got 'mlflow'"):
        cfg.from_dict({"env": "cartpole", "run_dir": str(tmp_path), "logger": "mlflow"})
    config = cfg.from_dict({"env": "cartpole", "run_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="set run_dir"):
        make_logger(cfg.replace(config, logger="tensorboard", run_dir=None))
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(MissingExtraError, match=r'pip install "warp-workbench\[wandb\]"'):
        make_logger(cfg.replace(config, logger="wandb"))
    # a run names the missing extra before it builds anything (before: after the env's compile)
    monkeypatch.setattr(trainer_module, "make_trainer", lambda *a, **k: pytest.fail("built the trainer first"))
    with pytest.raises(MissingExtraError, match=r"wandb is needed for logger='wandb' \(--logger wandb on the command line\)"):
        wb.train(cfg.replace(config, logger="wandb", target="cpu"), progress=False)


def test_compose_stops_when_any_callback_says_false():
    seen = []
    both = compose(lambda i, m: seen.append(i), None, lambda i, m: i < 2)
    assert both(1, {}) is True and both(2, {}) is False and seen == [1, 2]


def test_a_wandb_setting_it_refuses_is_one_line_naming_the_setting(tmp_path):
    """In a fresh process, as a user meets it: wandb reads its settings once a process."""
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    done = subprocess.run([sys.executable, "-m", "workbench", "train", "cartpole", "--run-dir", str(tmp_path / "run"),
                           "--logger", "wandb", *SMALL], env={**env, "WANDB_MODE": "bogus"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr  # (before: pydantic's traceback)
    assert err.startswith("error: logger='wandb' could not start its run (") and err.count("\n") == 1, err
    assert "{'WANDB_MODE': 'bogus'} (WANDB_MODE takes online, offline or disabled)" in err
