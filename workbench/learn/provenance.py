"""What a run was trained with beyond its config: the package versions, the source's commit, the
target and device, the precision resolved and every env parameter (the config keeps only those set
away from the env's defaults, and "auto" for target and precision, so that it runs anywhere).
Checkpoints keep it under "provenance"; config.yaml ends with it as comments, which a config read
back ignores."""
from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

from .config_env import plain_value


@functools.lru_cache(maxsize=1)
def source_commit() -> str | None:
    """The commit of the workbench source when it runs from its own git checkout ("-dirty" with edits
    to its tracked files), else None (an installed wheel, or a copy inside another project's repository)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # (no GIT_DIR pointing elsewhere)

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, env=env)
    try:
        top, head = git("rev-parse", "--show-toplevel"), git("rev-parse", "--short=12", "HEAD")
        if top.returncode or head.returncode or Path(top.stdout.strip()).resolve() != root:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "workbench", "widgets", "envs")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def device_name(device) -> str:
    """The GPU's name, or the CPU's with the process's core count."""
    import torch
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_name()


@functools.lru_cache(maxsize=1)
def _cpu_name() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = platform.processor() or platform.machine()
    try:  # (Linux names the model here; platform.processor() is often empty there)
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {cores} cores"


def provenance(trainer) -> dict:
    """The trainer's provenance record (plain values: YAML and torch.save keep it as it is)."""
    import numba
    import numpy
    import torch
    from .. import __version__
    env = trainer.env
    return {"workbench": __version__, "commit": source_commit(), "python": platform.python_version(),
            "torch": torch.__version__, "numba": numba.__version__, "numpy": numpy.__version__,
            "target": env.target.name, "device": device_name(trainer.device), "precision": trainer.precision,
            "threads": dict(trainer.threads) if trainer.threads else None,
            "env_params": {k: plain_value(v) for k, v in env.definition.params.items()}}


def as_comment(record: dict) -> str:
    """The record as YAML comment lines, to end a run's config.yaml."""
    commit = f" (commit {record['commit']})" if record.get("commit") else ""
    threads = record.get("threads") or {}
    lines = [f"# trained with workbench {record['workbench']}{commit}, python {record['python']}, torch "
             f"{record['torch']}, numba {record['numba']}, numpy {record['numpy']}",
             f"# on target {record['target']} ({record['device']}), precision {record['precision']}"
             + (f", threads env {threads.get('env')} / learner {threads.get('learner')}" if threads else ""),
             "# env parameters: " + ", ".join(f"{k}={v!r}" for k, v in record["env_params"].items())]
    return "\n".join(lines) + "\n"



def write_run_config(trainer, run_dir) -> None:
    """config.yaml in `run_dir`: the config the trainer keeps, then its provenance as comments; and for
    an env of the user's (registered, not shipped) a readable copy of its source (env_source.py, or .cu
    for CUDA C) beside it (the checkpoint holds the one that is loaded)."""
    from . import config as cfg
    from ..runtime import registry
    cfg.save_yaml(trainer.config, Path(run_dir) / "config.yaml", comment=as_comment(provenance(trainer)))
    kept = registry.stored(trainer.env.definition)
    if kept is not None:
        (Path(run_dir) / registry.SOURCE_COPIES.get(kept["language"], "env_source.py")).write_text(kept["source"])
