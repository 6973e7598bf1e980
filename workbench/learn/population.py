"""A population: the members a config asks for (`seeds` times the settings of `sweep`) and the
hyperparameters each member learns with.

Members are numbered setting-major: with settings s = 0..G-1 of the sweep's grid (the first swept
name varying slowest) and seeds i = 0..seeds-1, member k = s * seeds + i trains with seed + k and the
values of setting s. Member k of a population learns exactly what a standalone run of
`member_config(config, k)` learns (tests/test_population.py checks it).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from . import config as cfg


@dataclass(frozen=True)
class Member:
    index: int
    seed: int
    setting: int  # index of its sweep setting
    values: dict  # the swept hyperparameters' values (empty without a sweep)


def members_of(config) -> list:
    """The members of `config`'s population (one member without seeds or sweep)."""
    sweep = dict(config.sweep or {})
    names = list(sweep)
    grid = list(itertools.product(*(sweep[n] for n in names))) if names else [()]
    out = []
    for s, values in enumerate(grid):
        for i in range(config.seeds):
            k = s * config.seeds + i
            out.append(Member(k, config.seed + k, s, {n: float(v) for n, v in zip(names, values)}))
    return out


def size(config) -> int:
    """How many members `config` trains."""
    return config.seeds * max(1, len(list(itertools.product(*(config.sweep or {}).values()))))


def member_config(config, k: int):
    """The standalone config member k of `config`'s population learns as."""
    member = members_of(config)[k]
    return cfg.replace(config, seed=member.seed, seeds=1, sweep=None, **member.values)


class Hyper:
    """The hyperparameters the learner reads per member: each a float when every member shares it,
    else a float32 device tensor [M] (lr is always [M] for a population: each member's optimiser
    step scales by its own)."""

    NAMES = ("lr", "ent_coef", "clip_coef", "gamma", "gae_lambda", "vf_coef", "max_grad_norm",
             "actor_lr", "critic_lr", "tau", "exploration_noise")

    def __init__(self, config, members: list, device):
        self.members = len(members)
        self._rows: dict = {}
        swept = set(config.sweep or {})
        for name in self.NAMES:
            if not hasattr(config, name):
                setattr(self, name, None)
                continue
            if name in swept:
                value = torch.tensor([m.values[name] for m in members], dtype=torch.float32, device=device)
            else:
                value = float(getattr(config, name))
            setattr(self, name, value)

    def per_member(self, name: str, device=None):
        """[M] float32 tensor of a hyperparameter, whether swept or shared."""
        value = getattr(self, name)
        if isinstance(value, torch.Tensor):
            return value
        return torch.full((self.members,), float(value), dtype=torch.float32, device=device)

    def per_replica(self, name: str, replicas_per_member: int):
        """A float, or for a swept hyperparameter [M * replicas_per_member, 1] (one value per replica,
        broadcasting against per-agent tensors [E, n])."""
        value = getattr(self, name)
        if not isinstance(value, torch.Tensor):
            return value
        key = (name, replicas_per_member)
        if key not in self._rows:  # built once (before a CUDA graph captures the iteration that reads it)
            self._rows[key] = value.repeat_interleave(replicas_per_member).reshape(-1, 1)
        return self._rows[key]
