"""A run folder's files as the panel writes and reads them: config.yaml (the run's config) and
metrics.csv (one row per metrics pull), the same files a Trainer and the CLI write."""
from __future__ import annotations

import csv
import os
import time
from pathlib import Path

from workbench.learn import config as cfg


def default_run_dir(env: str, root: str | os.PathLike = "runs") -> str:
    """A fresh folder name root/<env>-<YYYYmmdd-HHMMSS> (a suffix -2, -3 ... when taken)."""
    base = Path(root) / f"{env}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return str(path)


def write_config(config, overwrite: bool = False) -> None:
    """Write config.yaml into config.run_dir (when set, and not written yet unless `overwrite`)."""
    if config.run_dir:
        run_dir = Path(config.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if overwrite or not (run_dir / "config.yaml").exists():
            cfg.save_yaml(config, run_dir / "config.yaml")


def append_csv(path: Path, metrics: dict) -> None:
    """Append one metrics row to a CSV file (the header comes with the first row)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(metrics))
        if new:
            writer.writeheader()
        writer.writerow(metrics)


def read_run(run_dir) -> tuple:
    """(config dict or {}, metrics rows) of a run folder written by a panel run, the CLI or a Trainer."""
    import yaml
    run_dir = Path(run_dir)
    config = {}
    for name in ("config.yaml", "panel_config.yaml"):
        if (run_dir / name).exists():
            config = yaml.safe_load((run_dir / name).read_text()) or {}
            break
    return config, read_metrics(run_dir / "metrics.csv")


def read_metrics(path: Path) -> list:
    """The rows of a trainer's metrics.csv as dicts of numbers (an incomplete last line is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for row in csv.DictReader(text.splitlines()):
        parsed = {}
        for key, value in row.items():
            try:
                parsed[key] = float(value)
            except (TypeError, ValueError):
                parsed[key] = value
        for key in ("iteration", "env_steps"):
            if isinstance(parsed.get(key), float):
                parsed[key] = int(parsed[key])
        rows.append(parsed)
    return rows
