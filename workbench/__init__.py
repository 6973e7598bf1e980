"""warp-workbench: end-to-end multi-agent reinforcement learning on the device."""
from __future__ import annotations

import importlib

from .config import A2CConfig, DDPGConfig, PPOConfig
from .errors import (ActionError, ConsistencyError, EnvCompileError, EnvDefinitionError, EnvIndexError, NonFiniteError,
                     TargetUnavailableError, UnknownEnvError, WorkbenchError)

# Loaded on first use, so that `python -m workbench --help` and `import workbench.config` need no
# torch or numba.
_LAZY = {"Env": ("env", "Env"), "Box": ("envdef", "Box"), "Discrete": ("envdef", "Discrete"),
         "MultiDiscrete": ("envdef", "MultiDiscrete"), "per_agent": ("envdef", "per_agent"),
         "per_env": ("envdef", "per_env"), "env_names": ("registry", "names"), "register": ("registry", "register"),
         "available_targets": ("targets", "available_targets"), "best_target": ("targets", "best_target"),
         "Trainer": ("trainer", "Trainer"), "TrainResult": ("trainer", "TrainResult"),
         "make_trainer": ("trainer", "make_trainer"), "train": ("runs", "train")}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")  # submodules as attributes (wb.targets)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"


def make(name: str, num_envs: int = 1, *, target: str | None = None, seed: int = 0, debug: bool = False,
         **params) -> Env:
    """All `num_envs` replicas of env `name` on `target` ("cpu", "cuda", "cuda-c"; default: the
    best present). Extra keyword arguments override the env's PARAMS."""
    from .env import Env
    from .registry import definition
    from .targets import best_target
    defn = definition(name, **params)
    return Env(defn, num_envs=num_envs, target=target or best_target(), seed=seed, debug=debug)


def check_env(name_or_env, targets=None, **kwargs):
    """Cross-target and contract check; see workbench.check.check_env."""
    from .check import check_env as _check
    return _check(name_or_env, targets=targets, **kwargs)


def replay(run_or_checkpoint, **kwargs):
    """A run's trained policy playing one episode, as an Animation; see workbench.runs.replay."""
    from .runs import replay as _replay
    return _replay(run_or_checkpoint, **kwargs)


def load_ipython_extension(ipython):
    from .magic import load_ipython_extension as _load
    _load(ipython)


__all__ = ["A2CConfig", "DDPGConfig", "PPOConfig", "Trainer", "TrainResult", "make_trainer", "make", "check_env", "replay", "Env", "register", "env_names", "available_targets", "best_target", "Box",
           "Discrete", "MultiDiscrete", "per_env", "per_agent", "ActionError", "ConsistencyError",
           "EnvCompileError", "EnvDefinitionError", "EnvIndexError", "NonFiniteError", "TargetUnavailableError",
           "UnknownEnvError", "WorkbenchError"]
