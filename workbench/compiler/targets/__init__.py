"""Kernel targets: each compiles an EnvDefinition into reset/step launches over the data store.

A target is one small object (see `Target`); env code never names a target, so a new backend
(for example numba-cuda's successor) replaces one module here and nothing else.
"""
from __future__ import annotations

import importlib
from typing import Protocol

import torch

from ...errors import TargetUnavailableError, did_you_mean


class Kernels(Protocol):
    """Launches over replicas [0, n_envs): replica e draws the random numbers of replica e % span
    of the env seeded seed + e // span (span divides n_envs; span == n_envs: one seed)."""

    def reset(self, n_envs: int, seed: int, span: int, views: list) -> None:
        """Write every replica's start state (views: the store's arrays in the definition's order)."""

    def step(self, n_envs: int, seed: int, span: int, views: list) -> None:
        """One step of every replica, auto-resetting those whose episode ended."""


class Target(Protocol):
    name: str

    def availability(self) -> str | None:
        """None when usable here, else the reason it is not."""

    @property
    def device(self) -> torch.device:
        """Where the store's tensors live."""

    def view(self, tensor: torch.Tensor):
        """Zero-copy array the kernels take for `tensor` (made once per tensor and cached)."""

    def compile(self, defn) -> Kernels:
        """The env definition's kernels for this target (from the compile cache when there)."""


# name -> (module, class): a target's module is imported when the target is first asked for (the
# cpu target's numba machinery costs a GPU run's start-up about 0.4 s it has no use for)
_CLASSES = {"cpu": (".cpu", "CpuTarget"), "cuda": (".cuda", "CudaTarget"), "cuda-c": (".cuda_c", "CudaCTarget")}
_TARGETS: dict = {}


def target_named(name: str) -> Target:
    """The target object `name` (one of _CLASSES), made on first use; no availability check."""
    if name not in _TARGETS:
        module, cls = _CLASSES[name]
        _TARGETS[name] = getattr(importlib.import_module(module, __package__), cls)()
    return _TARGETS[name]


def all_targets() -> dict:
    return {name: target_named(name) for name in _CLASSES}


def available_targets() -> list:
    return [name for name, t in all_targets().items() if t.availability() is None]


def get_target(name: str) -> Target:
    """The target called `name`, or a clear error naming the ones usable here."""
    if name not in _CLASSES:
        gpu = str(name).lower() in ("gpu", "cuda:0", "nvidia", "cuda_c", "cudac", "c")
        raise TargetUnavailableError(f"unknown target '{name}'; targets are {list(_CLASSES)}" + (
            "; for the GPU: 'cuda' (numba-cuda) or 'cuda-c' (CUDA C; a config's 'auto' picks the best)" if gpu
            else did_you_mean(str(name), list(_CLASSES), repr)))
    reason = target_named(name).availability()
    if reason is not None:
        simulator = (" (numba's CUDA simulator runs the cuda target without a GPU, slowly, for tests and checks: "
                     "set NUMBA_ENABLE_CUDASIM=1 before the process imports numba)" if name == "cuda" else "")
        raise TargetUnavailableError(f"target '{name}' is not available: {reason}. "
                                     f"Available here: {available_targets()}{simulator}")
    return target_named(name)


def best_target(env=None) -> str:
    """The fastest target usable here for `env` (an EnvDefinition or a registry entry, anything with
    `c_source`; None: any env): 'cuda-c' for an env with CUDA C phases where NVRTC loads, else 'cuda'
    where a real GPU is present, else 'cpu'. (Tag continuous at 1000 x 110 on an H100: 122 us a step
    from its C phases against 266 from the numba-cuda ones.) `wb.best_target` also takes a name."""
    from .cuda import simulator_enabled
    if simulator_enabled() or target_named("cuda").availability() is not None:
        return "cpu"
    if getattr(env, "c_source", None) is not None and target_named("cuda-c").availability() is None:
        return "cuda-c"
    return "cuda"
