"""Observation normalisation: a running mean and variance of each policy's observations, updated once
per rollout (PPO, A2C and DDPG alike).
"""
from __future__ import annotations

import torch


class RunningNorm:
    """Running mean and variance of observations, updated in place once per rollout."""

    def __init__(self, shape, device, eps=1e-8):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), eps, device=device)
        self.sum = torch.zeros(shape, device=device)
        self.sumsq = torch.zeros(shape, device=device)
        self.n = torch.zeros((), device=device)

    def accumulate(self, obs, live=None):
        """Add observations obs [..., O] to the batch; live [...] (1 in the game, 0 out of it) leaves
        out agents whose observations mean nothing."""
        flat = obs.reshape(-1, obs.shape[-1])
        if live is None:
            self.sum.add_(flat.sum(0))
            self.sumsq.add_((flat * flat).sum(0))
            self.n.add_(flat.shape[0])
            return
        weight = live.reshape(-1, 1).to(flat.dtype)
        self.sum.add_((flat * weight).sum(0))
        self.sumsq.add_((flat * flat * weight).sum(0))
        self.n.add_(weight.sum())

    def commit(self, sync=None):
        """Fold the accumulated batch into the running statistics; with `sync` (data-parallel
        training) the batch is the sum over ranks, so every rank keeps the same statistics."""
        if sync is not None:
            for stat in (self.sum, self.sumsq, self.n):
                stat.copy_(sync.sum(stat))
        n = self.n.clamp_min(1)  # a batch with no live agent leaves the statistics as they are
        batch_mean = self.sum / n
        batch_var = (self.sumsq / n - batch_mean ** 2).clamp_min(0)
        total = self.count + self.n
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * self.n / total
        m2 = self.var * self.count + batch_var * self.n + delta ** 2 * self.count * self.n / total
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
        self.sum.zero_(), self.sumsq.zero_(), self.n.zero_()

    def __call__(self, obs):
        return ((obs - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10, 10)

    def state_dict(self):
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state):
        for k, v in state.items():
            getattr(self, k).copy_(v)
