"""Observation normalisation: a running mean and variance of each policy's observations, updated once
per rollout (PPO, A2C and DDPG alike).

A rollout's sums are taken about a shift, the running mean (before the first update: the first
observations' mean). A float32 sum of squares about zero loses the variance of a feature with a
large mean and a small spread (1000 + 0.1 N(0, 1)) to cancellation; about its mean it keeps it.
"""
from __future__ import annotations

import torch


def normalised(obs, mean, var):
    """Observations obs [..., O] under statistics mean, var [O]: centred, scaled and clipped to [-10, 10]."""
    return ((obs - mean) / torch.sqrt(var + 1e-8)).clamp(-10, 10)


class RunningNorm:
    """Running mean and variance of observations, updated in place once per rollout."""

    def __init__(self, shape, device, eps=1e-8):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), eps, device=device)
        self.sum = torch.zeros(shape, device=device)
        self.sumsq = torch.zeros(shape, device=device)
        self.n = torch.zeros((), device=device)
        self.shift = torch.zeros(shape, device=device)
        self.shifted = False  # (set from the first observations accumulated, or by a trained state)
        self.shared_shift = False  # (every rank's: after a commit or a load; a rank's own before)

    def _add(self, rows, weight):
        """Add rows [..., B, O] (weight [..., B, 1], or None for all) about the shift [..., O]."""
        if not self.shifted:
            self.shifted = True
            first = rows.mean(-2) if weight is None else (rows * weight).sum(-2) / weight.sum(-2).clamp_min(1)
            self.shift.copy_(first)
        centred = rows - self.shift.unsqueeze(-2)
        weighted = centred if weight is None else centred * weight
        self.sum.add_(weighted.sum(-2))
        self.sumsq.add_((weighted * centred).sum(-2))
        self.n.add_(rows.shape[-2] if weight is None else weight.sum(-2).reshape(self.n.shape))

    def accumulate(self, obs, live=None):
        """Add observations obs [..., O] to the batch; live [...] (1 in the game, 0 out of it) leaves
        out agents whose observations mean nothing."""
        flat = obs.reshape(-1, obs.shape[-1])
        self._add(flat, None if live is None else live.reshape(-1, 1).to(flat.dtype))

    def commit(self, sync=None):
        """Fold the accumulated batch into the running statistics; with `sync` (data-parallel
        training) the batch is the sum over ranks, so every rank keeps the same statistics."""
        if sync is not None and not self.shared_shift:
            # each rank's sums moved onto one shift (they differ only before the first update)
            common = sync.sum(self.shift * self.n) / sync.sum(self.n).clamp_min(1)
            offset = self.shift - common
            self.sumsq.add_(2 * offset * self.sum + self.n * offset * offset)
            self.sum.add_(self.n * offset)
            self.shift.copy_(common)
        if sync is not None:
            for stat in (self.sum, self.sumsq, self.n):
                stat.copy_(sync.sum(stat))
        n = self.n.clamp_min(1)  # a batch with no live agent leaves the statistics as they are
        centred_mean = self.sum / n
        batch_mean = self.shift + centred_mean
        batch_var = (self.sumsq / n - centred_mean ** 2).clamp_min(0)
        total = self.count + self.n
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * self.n / total
        m2 = self.var * self.count + batch_var * self.n + delta ** 2 * self.count * self.n / total
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
        self.shift.copy_(new_mean)
        self.shifted = self.shared_shift = True
        self.sum.zero_(), self.sumsq.zero_(), self.n.zero_()

    def __call__(self, obs):
        return normalised(obs, self.mean, self.var)

    def state_dict(self):
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state):
        for k, v in state.items():
            getattr(self, k).copy_(v)
        self.shift.copy_(self.mean)
        self.shifted = self.shared_shift = bool(self.count.min() >= 1)  # (untrained: the first observations')
