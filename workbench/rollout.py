"""Agent groups (policy name -> agent ids), on-policy rollout buffers, observation normalisation, GAE.

Shared by A2C and PPO (and, for groups and normalisation, by DDPG).
"""
from __future__ import annotations

import torch

from .errors import WorkbenchError


class PolicyMapError(WorkbenchError, ValueError):
    pass


class AgentGroup:
    """The agents one policy controls. Contiguous ids are served as zero-copy slices."""

    def __init__(self, name: str, agent_ids, num_agents: int, device):
        ids = [int(i) for i in agent_ids]
        if not ids:
            raise PolicyMapError(f"policy '{name}' controls no agents")
        self.name = name
        self.ids = ids
        self.n = len(ids)
        contiguous = ids == list(range(ids[0], ids[0] + len(ids)))
        self.slice = slice(ids[0], ids[0] + len(ids)) if contiguous else None
        self.index = torch.tensor(ids, dtype=torch.long, device=device)

    def gather(self, tensor):
        """tensor [E, A, ...] -> [E, n, ...] (a view when the ids are contiguous)."""
        if self.slice is not None:
            return tensor[:, self.slice]
        return tensor.index_select(1, self.index)

    def scatter(self, dest, values):
        """dest[:, ids] = values, in place."""
        if self.slice is not None:
            dest[:, self.slice].copy_(values)
        else:
            dest.index_copy_(1, self.index, values.to(dest.dtype))


def build_groups(policies, num_agents: int, device) -> list:
    """Check a policy map covers every agent exactly once and build its groups."""
    if policies is None:
        policies = {"shared": list(range(num_agents))}
    seen = {}
    for name, ids in policies.items():
        for i in ids:
            i = int(i)
            if not 0 <= i < num_agents:
                raise PolicyMapError(f"policy '{name}' names agent {i}, but the env has agents 0..{num_agents - 1}")
            if i in seen:
                raise PolicyMapError(f"agent {i} is named by policy '{seen[i]}' and by policy '{name}'; "
                                     f"each agent belongs to exactly one policy")
            seen[i] = name
    missing = sorted(set(range(num_agents)) - set(seen))
    if missing:
        shown = missing[:10]
        raise PolicyMapError(f"agents {shown}{' ...' if len(missing) > 10 else ''} belong to no policy; "
                             f"add them to the policy map")
    return [AgentGroup(name, ids, num_agents, device) for name, ids in policies.items()]


class RunningNorm:
    """Running mean and variance of observations, updated in place once per rollout."""

    def __init__(self, shape, device, eps=1e-8):
        self.mean = torch.zeros(shape, device=device)
        self.var = torch.ones(shape, device=device)
        self.count = torch.full((), eps, device=device)
        self.sum = torch.zeros(shape, device=device)
        self.sumsq = torch.zeros(shape, device=device)
        self.n = torch.zeros((), device=device)

    def accumulate(self, obs):
        flat = obs.reshape(-1, obs.shape[-1])
        self.sum.add_(flat.sum(0))
        self.sumsq.add_((flat * flat).sum(0))
        self.n.add_(flat.shape[0])

    def commit(self, sync=None):
        """Fold the accumulated batch into the running statistics; with `sync` (data-parallel
        training) the batch is the sum over ranks, so every rank keeps the same statistics."""
        if sync is not None:
            for stat in (self.sum, self.sumsq, self.n):
                stat.copy_(sync.sum(stat))
        batch_mean = self.sum / self.n
        batch_var = (self.sumsq / self.n - batch_mean ** 2).clamp_min(0)
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


class RolloutBuffer:
    """T steps of one group's experience, [T, E, n, ...], allocated once."""

    def __init__(self, T, E, n, obs_shape, act_shape, act_dtype, device):
        self.obs = torch.zeros((T, E, n, *obs_shape), device=device)
        self.final_obs = torch.zeros((T, E, n, *obs_shape), device=device)
        self.actions = torch.zeros((T, E, n, *act_shape), dtype=act_dtype, device=device)
        self.logp = torch.zeros((T, E, n), device=device)
        self.values = torch.zeros((T, E, n), device=device)
        self.rewards = torch.zeros((T, E, n), device=device)
        self.terminated = torch.zeros((T, E), device=device)
        self.truncated = torch.zeros((T, E), device=device)


def truncation_values(buffer: RolloutBuffer, value_fn) -> torch.Tensor:
    """V(final_obs) where a replica was truncated (and not terminated), else 0: [T, E, n]."""
    out = torch.zeros_like(buffer.values)
    mask = (buffer.truncated > 0) & (buffer.terminated == 0)
    if bool(mask.any()):
        selected = buffer.final_obs[mask]  # [M, n, O]
        with torch.no_grad():
            values = value_fn(selected.reshape(-1, selected.shape[-1])).reshape(selected.shape[:2])
        out[mask] = values
    return out


def gae(rewards, values, next_value, terminated, truncated, final_values, gamma: float, lam: float):
    """Generalised advantage estimation over [T, E, n]; returns (advantages, returns).

    An episode that ends at step t stops the recursion there. Termination bootstraps nothing;
    a time-limit truncation bootstraps from V(final observation) (`final_values`).
    """
    T = rewards.shape[0]
    done = ((terminated + truncated) > 0).float().unsqueeze(-1)
    term = terminated.unsqueeze(-1)
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        v_next = next_value if t == T - 1 else values[t + 1]
        bootstrap = (1 - done[t]) * v_next + done[t] * (1 - term[t]) * final_values[t]
        delta = rewards[t] + gamma * bootstrap - values[t]
        last = delta + gamma * lam * (1 - done[t]) * last
        advantages[t] = last
    return advantages, advantages + values
