"""Kernel targets: each compiles an EnvDefinition into reset/step launches over the data store.

A target is one small object (see `Target`); env code never names a target, so a new backend
(for example numba-cuda's successor) replaces one module here and nothing else.
"""
from __future__ import annotations

from typing import Protocol

import torch

from ...errors import TargetUnavailableError


class Kernels(Protocol):
    """Launches over replicas [0, n_envs): replica e draws the random numbers of replica e % span
    of the env seeded seed + e // span (span divides n_envs; span == n_envs: one seed)."""

    def reset(self, n_envs: int, seed: int, span: int, views: list) -> None: ...
    def step(self, n_envs: int, seed: int, span: int, views: list) -> None: ...


class Target(Protocol):
    name: str

    def availability(self) -> str | None:
        """None when usable here, else the reason it is not."""

    @property
    def device(self) -> torch.device: ...

    def view(self, tensor: torch.Tensor):
        """Zero-copy array the kernels take for `tensor` (made once per tensor and cached)."""

    def compile(self, defn) -> Kernels: ...


def _registry() -> dict:
    from .cpu import CpuTarget
    from .cuda import CudaTarget
    from .cuda_c import CudaCTarget
    return {"cpu": CpuTarget(), "cuda": CudaTarget(), "cuda-c": CudaCTarget()}


_TARGETS: dict | None = None


def all_targets() -> dict:
    global _TARGETS
    if _TARGETS is None:
        _TARGETS = _registry()
    return _TARGETS


def available_targets() -> list:
    return [name for name, t in all_targets().items() if t.availability() is None]


def get_target(name: str) -> Target:
    """The target called `name`, or a clear error naming the ones usable here."""
    targets = all_targets()
    if name not in targets:
        raise TargetUnavailableError(f"unknown target '{name}'; targets are {list(targets)}")
    reason = targets[name].availability()
    if reason is not None:
        raise TargetUnavailableError(f"target '{name}' is not available: {reason}. "
                                     f"Available here: {available_targets()}")
    return targets[name]


def best_target() -> str:
    """'cuda' where a real GPU is present, else 'cpu'."""
    from .cuda import simulator_enabled
    if not simulator_enabled() and all_targets()["cuda"].availability() is None:
        return "cuda"
    return "cpu"
