"""Run folders: the default name, resuming a run, and replaying a trained policy as an animation."""
from __future__ import annotations

import time
from pathlib import Path

from . import checkpoint as ckpt
from . import config as cfg
from .errors import WorkbenchError


class ResumeError(WorkbenchError, ValueError):
    """A run folder that cannot be resumed; the message names what is missing or different."""


def default_run_dir(config, root: str = "runs") -> str:
    """'runs/<env>-<YYYYmmdd-HHMMSS>' (with -2, -3, ... when that folder exists already)."""
    base = f"{root}/{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 2
    while Path(path).exists():
        path, k = f"{base}-{k}", k + 1
    return path


def checkpoint_in(run_or_checkpoint) -> Path:
    """The checkpoint file of a run folder (RUN_DIR/checkpoint.pt), or the file itself."""
    path = Path(run_or_checkpoint)
    if path.is_dir():
        found = path / "checkpoint.pt"
        if not found.is_file():
            raise ResumeError(f"run folder {str(path)!r} has no checkpoint.pt (a run writes it when training ends, "
                              f"and every checkpoint_every iterations); nothing to resume or replay")
        return found
    if not path.is_file():
        raise ResumeError(f"{str(path)!r} is neither a run folder nor a checkpoint file")
    return path


def resume_config(run_or_checkpoint, requested=None):
    """(config, checkpoint path) to continue a run: the run folder's config.yaml (else the config
    stored in its checkpoint), with run_dir pointing at that folder. `requested`, a config the
    user also named, must agree on env and algorithm."""
    path = checkpoint_in(run_or_checkpoint)
    run_dir = path.parent
    payload = ckpt.load(path)
    saved_file = run_dir / "config.yaml"
    config = cfg.load_yaml(saved_file) if saved_file.is_file() else cfg.from_dict(payload["config"])
    signature = payload["signature"]
    for key, theirs in (("env", signature["env"]), ("algorithm", signature["algorithm"])):
        if getattr(config, key) != theirs:
            raise ResumeError(f"{saved_file} names {key}={getattr(config, key)!r} but the checkpoint was trained "
                              f"with {key}={theirs!r}; the run folder is inconsistent")
        if requested is not None and getattr(requested, key) != theirs:
            raise ResumeError(f"cannot resume {str(run_dir)!r} with {key}={getattr(requested, key)!r}: that run "
                              f"trained {key}={theirs!r} (drop the config argument to continue the run as it was)")
    return cfg.replace(config, run_dir=str(run_dir)), path


FIXED_ON_RESUME = ("env", "algorithm", "num_envs", "env_params")


def run_config(config=None, *, resume=None, changes=None):
    """(config, checkpoint or None) of a run: `config` with `changes` and run_dir defaulting to
    runs/ENV-DATE; with `resume` (a run folder or checkpoint) the config the run was trained with,
    whose env, algorithm, num_envs and env_params `changes` may not alter."""
    changes = dict(changes or {})
    if resume:
        config, checkpoint = resume_config(resume, requested=config)
        for key in FIXED_ON_RESUME:
            if key in changes and changes[key] != getattr(config, key):
                raise ResumeError(f"resuming {config.run_dir!r} continues the run as trained; {key} cannot change "
                                  f"({getattr(config, key)!r} -> {changes[key]!r})")
        changes.pop("run_dir", None)
        return cfg.replace(config, **changes), checkpoint
    if config is None:
        raise cfg.ConfigError("train needs a config (a file or a shipped config's name), or a run to resume "
                              "(--resume RUN_DIR; resume=RUN_DIR from Python)")
    config = cfg.replace(config, **changes)
    if not config.run_dir:
        config = cfg.replace(config, run_dir=default_run_dir(config))
    return config, None


def train(config=None, *, resume=None, progress: bool = True, policies=None, **changes):
    """Train from Python as `python -m workbench train` does: `config` is a config, a YAML file or a
    shipped config's name ("cartpole"), `changes` override its fields (num_envs=..., seed=...), and
    `resume` (a run folder or checkpoint) continues that run instead. Every run keeps a folder
    (runs/ENV-DATE unless run_dir names one): config.yaml, metrics.csv, checkpoint.pt and
    learning_curve.png. Returns (trainer, TrainResult). `Trainer.train` alone writes only where
    run_dir says."""
    from .cli import resolve_config, run_training
    if isinstance(config, (str, Path)):
        config = cfg.load_yaml(resolve_config(str(config)))
    config, checkpoint = run_config(config, resume=resume, changes=changes)
    return run_training(config, resume=checkpoint, progress=progress, policies=policies)


def load_policy(run_or_checkpoint, *, num_envs: int = 1, target: str | None = None, seed: int | None = None):
    """A Trainer holding the trained policies of a run, on a fresh env of `num_envs` replicas."""
    from .trainer import make_trainer
    path = checkpoint_in(run_or_checkpoint)
    payload = ckpt.load(path)
    config = cfg.from_dict(payload["config"])
    config = cfg.replace(config, num_envs=num_envs, run_dir=None, target=target or config.target,
                         seed=config.seed if seed is None else seed)
    trainer = make_trainer(config, policies=payload["signature"]["policies"])
    trainer.load(path, restore_env=False)
    return trainer


def replay(run_or_checkpoint, *, replica: int = 0, num_envs: int = 1, mp4=None, html=None, target: str | None = None,
           seed: int | None = None, deterministic: bool = True, max_steps: int | None = None, fps: int = 30, **kwargs):
    """Load a run's trained policy, play one episode of `replica` and return its Animation
    (displayed by a notebook); also written as mp4 to `mp4` and as an HTML player to `html` if given.
    Extra keyword arguments go to the Animation (dpi, max_frames, embed_limit_mb)."""
    from . import render
    trainer = load_policy(run_or_checkpoint, num_envs=max(num_envs, replica + 1), target=target, seed=seed)
    episodes = render.record_episode(trainer.env, trainer, replicas=[replica], max_steps=max_steps,
                                     deterministic=deterministic)
    animation = render.animate(episodes[0], trainer.env, fps=fps, **kwargs)
    if mp4 is not None:
        animation.save_mp4(mp4)
    if html is not None:
        animation.save_html(html)
    return animation
