"""warp-workbench: end-to-end multi-agent reinforcement learning on the device.

Layers, bottom up: compiler/ (env sources into kernels), runtime/ (envs on the device, sampling,
random streams), learn/ (trainer, algorithms, run folders), interop/ (other ecosystems' APIs),
notebook/ (the magic, drawing) and the widgets on top; cli.py is the shell's front end.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from .errors import (ActionError, BudgetWarning, ConsistencyError, EnvCompileError, EnvDefinitionError, EnvIndexError,
                     EnvRuntimeError, NonFiniteError, TargetUnavailableError, UnknownEnvError, WorkbenchError,
                     WorkbenchWarning)
from .learn.config import A2CConfig, DDPGConfig, PPOConfig

# The flat module names of earlier releases, each now in its layer's package. Env sources keep
# importing workbench.envdef, workbench.rng, workbench.helpers and workbench.render (the env author's
# names); user code and checkpoints naming the others keep working.
MOVED = {"envdef": "compiler.envdef", "vocabulary": "compiler.vocabulary",
         "codegen": "compiler.codegen", "codegen_c": "compiler.codegen_c", "kernel_cache": "compiler.kernel_cache",
         "helpers": "compiler.helpers", "targets": "compiler.targets",
         "env": "runtime.env", "store": "runtime.store", "rng": "compiler.rng",
         "registry": "runtime.registry", "check": "runtime.check", "recorder": "runtime.recorder",
         "magic": "notebook.magic", "render": "notebook.render", "drawers": "notebook.drawers",
         **{name: f"learn.{name}" for name in (
             "trainer", "rollout", "algorithms", "policies", "config", "checkpoint", "distributed",
             "loggers", "progress", "threads", "report", "runs", "episode_stats", "compiled", "autoscale")}}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import workbench.envdef` (and its submodules) gives the module now at workbench.compiler.envdef."""

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) > 1 and parts[0] == __name__ and parts[1] in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def __init__(self):
        self._specs = {}

    def create_module(self, spec):
        parts = spec.name.split(".")
        module = importlib.import_module(".".join([__name__, MOVED[parts[1]], *parts[2:]]))
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        # the module ran under its own name; importlib has just given it the alias's spec: put its own back
        module.__spec__ = self._specs[module.__name__]


sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy

# Loaded on first use, so that `python -m workbench --help` and `import workbench.learn.config` need no
# torch or numba.
_LAZY = {"Env": ("runtime.env", "Env"), "Box": ("compiler.envdef", "Box"), "Discrete": ("compiler.envdef", "Discrete"),
         "MultiDiscrete": ("compiler.envdef", "MultiDiscrete"), "per_agent": ("compiler.envdef", "per_agent"),
         "per_env": ("compiler.envdef", "per_env"), "env_names": ("runtime.registry", "names"),
         "register": ("runtime.registry", "register"),
         "available_targets": ("compiler.targets", "available_targets"),
         "best_target": ("runtime.env", "best_target"),
         "Trainer": ("learn.trainer", "Trainer"), "TrainResult": ("learn.trainer", "TrainResult"),
         "make_trainer": ("learn.trainer", "make_trainer"), "train": ("learn.runs", "train"),
         "load_policy": ("learn.runs", "load_policy"), "evaluate_run": ("learn.run_evaluation", "evaluate_run"),
         "policy": ("learn.policy_function", "policy")}


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
         replicas_per_seed: int | None = None, **params):
    """All `num_envs` replicas of env `name` on `target` ("cpu", "cuda", "cuda-c"; default: the
    best present), in blocks of `replicas_per_seed` seeded seed, seed + 1, ... (default: one block).
    Extra keyword arguments override the env's PARAMS. See workbench.runtime.env.make."""
    from .runtime.env import make as _make
    return _make(name, num_envs, target=target, seed=seed, debug=debug, replicas_per_seed=replicas_per_seed,
                 **params)


def check_env(name_or_env, targets=None, **kwargs):
    """Cross-target and contract check; see workbench.runtime.check.check_env."""
    from .runtime.check import check_env as _check
    return _check(name_or_env, targets=targets, **kwargs)


def replay(run_or_checkpoint, **kwargs):
    """A run's trained policy playing one episode, as an Animation; see workbench.notebook.render.replay."""
    from .notebook.render import replay as _replay
    return _replay(run_or_checkpoint, **kwargs)


def evaluate(run_or_trainer, **kwargs) -> dict:
    """{label: report} of a run folder's, a checkpoint's or a loaded trainer's policies on held-out starts;
    see workbench.learn.run_evaluation.evaluate_run (a run) and evaluate_trainer (a trainer)."""
    from .learn import run_evaluation
    if isinstance(run_or_trainer, (str, bytes)) or hasattr(run_or_trainer, "__fspath__"):
        return run_evaluation.evaluate_run(run_or_trainer, **kwargs)
    return run_evaluation.evaluate_trainer(run_or_trainer, **kwargs)


def load_ipython_extension(ipython):
    from .notebook.magic import load_ipython_extension as _load
    _load(ipython)


__all__ = ["A2CConfig", "DDPGConfig", "PPOConfig", "Trainer", "TrainResult", "make_trainer", "train", "load_policy",
           "make", "policy", "evaluate", "evaluate_run", "check_env",
           "replay", "Env", "register", "env_names", "available_targets", "best_target", "Box", "Discrete",
           "MultiDiscrete", "per_env", "per_agent", "ActionError", "ConsistencyError",
           "EnvCompileError", "EnvDefinitionError", "EnvIndexError", "EnvRuntimeError", "NonFiniteError",
           "TargetUnavailableError", "UnknownEnvError", "WorkbenchError", "WorkbenchWarning", "BudgetWarning"]
