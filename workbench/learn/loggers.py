"""Experiment loggers as training callbacks `(iteration, metrics) -> True`.

csv: the trainer's own metrics.csv (nothing more); tensorboard: event files in RUN_DIR/tensorboard
through torch.utils.tensorboard; wandb: a run in RUN_DIR/wandb, offline when no API key is set.
Every logger records the same metric names as metrics.csv, and the run's config as hyperparameters.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from .config import LOGGERS, ConfigError, to_dict  # noqa: F401 - LOGGERS importable from here too
from ..extras import require


def _scalars(metrics: dict) -> dict:
    """The numeric entries of a metrics row (bools as 0/1), as written to metrics.csv."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


def _hparams(config) -> dict:
    """Config values as TensorBoard/wandb accept them: scalars and strings, others as text."""
    out = {}
    for k, v in to_dict(config).items():
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


class CSVLogger:
    """metrics.csv is written by the trainer itself; this logger only completes the interface."""

    def __call__(self, iteration, metrics) -> bool:
        return True

    def close(self, final_metrics: dict | None = None):
        pass


class TensorBoardLogger:
    """Scalars per metric at global step = env_steps; hparams (with the final metrics) at close."""

    def __init__(self, config, run_dir):
        require("tensorboard", "tensorboard", _purpose("tensorboard"))
        from torch.utils.tensorboard import SummaryWriter
        self.config = config
        self.log_dir = Path(run_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in to_dict(config).items()))

    def __call__(self, iteration, metrics) -> bool:
        step = int(metrics.get("env_steps", iteration))
        for name, value in _scalars(metrics).items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()
        return True

    def close(self, final_metrics: dict | None = None):
        final = {f"final/{k}": v for k, v in _scalars(final_metrics or {}).items() if not math.isnan(v)}
        self.writer.add_hparams(_hparams(self.config), final or {"final/iteration": 0.0}, run_name=".")
        self.writer.close()


class WandbLogger:
    """wandb.log of every metrics row, the config as wandb.config. Charts are drawn against env_steps,
    as TensorBoard's are (wandb's own step stays the iteration, which it needs to increase)."""

    def __init__(self, config, run_dir):
        wandb = require("wandb", "wandb", _purpose("wandb"))
        self.wandb = wandb
        offline = not os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") != "online"
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "warp-workbench"), name=Path(run_dir).name,
                                  dir=str(run_dir), config=to_dict(config), mode="offline" if offline else None,
                                  reinit=True)
        except Exception as exc:  # noqa: BLE001 - wandb's settings raise pydantic's errors, among others
            settings = {k: v for k, v in os.environ.items() if k.startswith("WANDB_")}
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(f"logger='wandb' could not start its run ({type(exc).__name__}: {first}); the WANDB_* "
                              f"settings of this process: {settings or 'none'} (WANDB_MODE takes online, offline or "
                              f"disabled), or choose --logger csv or tensorboard") from None
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def __call__(self, iteration, metrics) -> bool:
        self.run.log(_scalars(metrics), step=int(iteration))
        return True

    def close(self, final_metrics: dict | None = None):
        self.run.finish()


def check_logger(config) -> str:
    """The logger `config.logger` names, refused (unknown, or its extra not installed) before a run
    builds its env and learner; make_logger makes it."""
    name = _logger_name(config)
    if name != "csv":
        require(name, name, _purpose(name))
    return name


def _purpose(name: str) -> str:
    return f"logger={name!r} (--logger {name} on the command line)"


def _logger_name(config) -> str:
    name = getattr(config, "logger", "csv") or "csv"
    if name not in LOGGERS:
        raise ConfigError(f"logger must be one of {list(LOGGERS)}, got {name!r} (set logger: or --logger)")
    return name


def make_logger(config, run_dir=None):
    """The logger named by `config.logger`; tensorboard and wandb need a run_dir."""
    name = _logger_name(config)
    if name == "csv":
        return CSVLogger()
    run_dir = run_dir or config.run_dir
    if not run_dir:
        raise ConfigError(f"logger {name!r} writes into the run folder: set run_dir (or --run-dir)")
    return TensorBoardLogger(config, run_dir) if name == "tensorboard" else WandbLogger(config, run_dir)


def compose(*callbacks):
    """One callback calling each given one in turn (None skipped); False from any stops training. It
    passes the trainer's `phase(description)` on to those that have one."""
    active = [c for c in callbacks if c is not None]

    def callback(iteration, metrics) -> bool:
        keep = True
        for c in active:
            keep = (c(iteration, metrics) is not False) and keep
        return keep

    phases = [c.phase for c in active if callable(getattr(c, "phase", None))]
    if phases:
        def phase(description: str) -> None:
            for tell in phases:
                tell(description)
        callback.phase = phase
    return callback
