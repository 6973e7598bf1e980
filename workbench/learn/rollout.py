"""The on-policy rollout buffer (A2C, PPO) and what the updates read from it: batches, their
minibatches and chunks, masked moments and the critic's explained variance.
"""
from __future__ import annotations

import math

import torch


class RolloutBuffer:
    """T steps of one group's experience, [T, E, n, ...], allocated once (fixed addresses, so a CUDA
    graph can replay the rollout and the update that read and write them).

    mask [T + 1, E, n] is 1 where an agent is in the game before step t (mask[T]: after the last
    step); agents out of the game (a tagged runner) are left out of every loss and statistic.
    final_values [T, E, n] holds V(final observation) of replicas truncated at step t, else 0 (and 0
    for an agent out of the game in that final state: it left the game in the episode's last step).
    state [T, E, S] is the replica's joint observation, kept only for a centralised critic.
    """

    def __init__(self, T, E, n, obs_shape, act_shape, act_dtype, device, obs_dtype=torch.float32, state_dim=0):
        self.obs = torch.zeros((T, E, n, *obs_shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((T, E, n, *act_shape), dtype=act_dtype, device=device)
        self.logp_old = torch.zeros((T, E, n), device=device)
        self.values = torch.zeros((T, E, n), device=device)
        self.rewards = torch.zeros((T, E, n), device=device)
        self.final_values = torch.zeros((T, E, n), device=device)
        self.mask = torch.ones((T + 1, E, n), device=device)
        self.state = torch.zeros((T, E, state_dim), dtype=obs_dtype, device=device) if state_dim else None
        self.terminated = torch.zeros((T, E), device=device)  # the trainer shares one pair across groups
        self.truncated = torch.zeros((T, E), device=device)
        self.advantages = torch.zeros((T, E, n), device=device)
        self.returns = torch.zeros((T, E, n), device=device)

    @property
    def shape(self):
        return tuple(self.values.shape)

    def batch(self) -> "Batch":
        """The rollout flattened to B = T * E * n samples (views, no copies)."""
        T, E, n = self.shape
        fields = {"obs": self.obs.reshape(T * E * n, -1),
                  "actions": self.actions.reshape((T * E * n,) + self.actions.shape[3:]),
                  "logp_old": self.logp_old.reshape(-1), "values": self.values.reshape(-1),
                  "advantages": self.advantages.reshape(-1), "returns": self.returns.reshape(-1),
                  "mask": self.mask[:T].reshape(-1)}
        state = self.state.reshape(T * E, -1) if self.state is not None else None
        return Batch(fields, state, n)


class Batch:
    """Flat samples [B, ...] of a rollout; `take(idx)` gathers a minibatch (idx: a slice or index tensor).

    With a centralised critic, `state` [T * E, S] is stored once per replica-step and gathered per
    sample (sample i belongs to replica-step i // n and is agent i % n of its group).
    """

    def __init__(self, fields: dict, state=None, agents_per_replica: int = 1):
        self.fields, self.state, self.n = fields, state, agents_per_replica
        self.size = fields["values"].shape[0]

    def __getitem__(self, key):
        return self.fields[key]

    def take(self, idx) -> dict:
        return take(self.fields, self.state, self.n, idx)


def take(fields: dict, state, n: int, idx) -> dict:
    """Samples idx (a slice or index tensor) of flat rollout fields {name: [B, ...]}; with a
    centralised critic also each sample's joint state (state [T * E, S], sample i belongs to
    replica-step i // n) and its agent index within the group (i % n)."""
    out = {k: v[idx] for k, v in fields.items()}
    if state is not None:
        values = fields["values"]
        sample = torch.arange(values.shape[0], device=values.device)[idx] if isinstance(idx, slice) else idx
        out["state"] = state[sample // n]
        out["agent"] = sample % n
    return out


def chunks(size: int, chunk: int) -> list:
    """Static slices covering range(size) in pieces of at most `chunk` (the learner's memory bound)."""
    chunk = max(1, min(int(chunk), size))
    return [slice(s, min(s + chunk, size)) for s in range(0, size, chunk)]


def wide_sum(x):
    """x.sum() in two stages ([rows, k] summed over k, then over rows) when x divides evenly: a
    compiled loss's reduction of a minibatch to one number otherwise runs in one thread block."""
    n = x.numel()
    for rows in (512, 256, 128, 64, 32):
        if n % rows == 0 and n // rows >= 16:
            return x.reshape(rows, n // rows).sum(1).sum()
    return x.sum()


def masked_moments(x, mask, dim=None, sync=None, moments: bool = True):
    """Count, mean and (unbiased) std of x over the entries where mask is 1: over all of x, or per
    slice along `dim` (x [k, b], dim=1 -> [k]). With `sync` (data parallel) over every rank's entries,
    so a rank with fewer live agents weighs each sample no more than the others. moments=False
    returns (count, None, None). count is at least 1."""
    dims = tuple(range(x.dim())) if dim is None else (dim,)

    def total(v):
        v = v.sum(dims, keepdim=True)
        return sync.sum(v) if sync is not None else v

    count = total(mask).clamp_min(1)
    if not moments:
        return count.squeeze(dims), None, None
    mean = total(x * mask) / count
    var = total(((x - mean) * mask) ** 2) / (count - 1).clamp_min(1)
    return count.squeeze(dims), mean.squeeze(dims), var.sqrt().squeeze(dims)


def explained_variance(batch: Batch, samples=None):
    """1 - Var[returns - values] / Var[returns] over each member's live samples -> [M] (NaN where the
    returns do not vary): how much of the returns' variance the critic explains (1: all of it, 0: no
    more than their mean, below 0: less). samples: a population's members.MemberSamples (None: one
    member)."""
    members = samples.members if samples is not None else 1

    def by_member(x):
        return (samples.rows(x) if members > 1 else x).float().reshape(members, -1)

    values, returns, mask = (by_member(batch[k]) for k in ("values", "returns", "mask"))
    _, _, returns_std = masked_moments(returns, mask, dim=1)
    _, _, error_std = masked_moments(returns - values, mask, dim=1)
    returns_var = returns_std.square()
    return torch.where(returns_var > 0, 1 - error_std.square() / returns_var, torch.full_like(returns_var, math.nan))
