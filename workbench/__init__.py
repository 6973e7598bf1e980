"""warp-workbench: end-to-end multi-agent reinforcement learning on the device."""
from __future__ import annotations

from .env import Env
from .envdef import Box, Discrete, MultiDiscrete, per_agent, per_env
from .errors import (ActionError, ConsistencyError, EnvCompileError, EnvDefinitionError, EnvIndexError, NonFiniteError,
                     TargetUnavailableError, UnknownEnvError, WorkbenchError)
from .registry import names as env_names
from .registry import register
from .targets import available_targets, best_target
from .config import A2CConfig, DDPGConfig, PPOConfig
from .trainer import Trainer, TrainResult, make_trainer

__version__ = "0.1.0"


def make(name: str, num_envs: int = 1, *, target: str | None = None, seed: int = 0, debug: bool = False,
         **params) -> Env:
    """All `num_envs` replicas of env `name` on `target` ("cpu", "cuda", "cuda-c"; default: the
    best present). Extra keyword arguments override the env's PARAMS."""
    from .registry import definition
    defn = definition(name, **params)
    return Env(defn, num_envs=num_envs, target=target or best_target(), seed=seed, debug=debug)


def check_env(name_or_env, targets=None, **kwargs):
    """Cross-target and contract check; see workbench.check.check_env."""
    from .check import check_env as _check
    return _check(name_or_env, targets=targets, **kwargs)


def load_ipython_extension(ipython):
    from .magic import load_ipython_extension as _load
    _load(ipython)


__all__ = ["A2CConfig", "DDPGConfig", "PPOConfig", "Trainer", "TrainResult", "make_trainer", "make", "check_env", "Env", "register", "env_names", "available_targets", "best_target", "Box",
           "Discrete", "MultiDiscrete", "per_env", "per_agent", "ActionError", "ConsistencyError",
           "EnvCompileError", "EnvDefinitionError", "EnvIndexError", "NonFiniteError", "TargetUnavailableError",
           "UnknownEnvError", "WorkbenchError"]
