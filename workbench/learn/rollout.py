"""Agent groups (policy name -> agent ids), on-policy rollout buffers, observation normalisation, GAE.

Shared by A2C and PPO (and, for groups and normalisation, by DDPG).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping

import torch

from ..errors import WorkbenchError


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
    example = f"{{'shared': [0, ..., {num_agents - 1}]}}" if num_agents > 1 else "{'shared': [0]}"
    if not isinstance(policies, Mapping):
        raise PolicyMapError(f"policies must map a policy's name to its agents' ids, e.g. {example}; "
                             f"got {type(policies).__name__} {policies!r:.80}")
    seen = {}
    for name, ids in policies.items():
        if not isinstance(name, str) or not name or "/" in name:  # (metrics are named return/NAME, ...)
            raise PolicyMapError(f"a policy's name must be a non-empty string without '/', e.g. {example}; got "
                                 f"{name!r}")
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise PolicyMapError(f"policy '{name}' must list its agents' ids (a list of ints), e.g. {example}; "
                                 f"got {ids!r:.80}")
        for i in ids:
            if isinstance(i, torch.Tensor) and i.numel() == 1:
                i = i.item()
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise PolicyMapError(f"policy '{name}' lists {i!r}; agent ids are ints 0..{num_agents - 1}")
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
        self.logp = torch.zeros((T, E, n), device=device)
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
                  "logp": self.logp.reshape(-1), "values": self.values.reshape(-1),
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


def gae(buffer: RolloutBuffer, next_value, gamma: float, lam: float, advantage_fn=None):
    """Generalised advantage estimation over [T, E, n], written into buffer.advantages/returns.

    An episode that ends at step t stops the recursion there: the replica's termination
    bootstraps nothing, a time-limit truncation bootstraps from V(final observation)
    (buffer.final_values), and an agent leaving the game at step t (mask t -> t+1 drops to 0
    while its replica runs on; where the replica is truncated at t, its final value is 0) ends its
    own episode as a termination.
    """
    fn = advantage_fn or advantages
    adv = fn(buffer.rewards, buffer.values, buffer.final_values, buffer.mask, buffer.terminated, buffer.truncated,
             next_value, gamma, lam)
    buffer.advantages.copy_(adv)
    torch.add(adv, buffer.values, out=buffer.returns)
    return buffer.advantages, buffer.returns


def advantages(rewards, values, final_values, mask, terminated, truncated, next_value, gamma: float, lam: float):
    """GAE's recursion as a pure function of the rollout tensors ([T, E, n]; mask [T + 1, E, n];
    terminated/truncated [T, E]; next_value [E, n]) -> advantages [T, E, n]."""
    T = rewards.shape[0]
    replica_done = ((terminated + truncated) > 0).float().unsqueeze(-1)
    replica_term = terminated.unsqueeze(-1)
    left_game = mask[:T] * (1 - mask[1:]) * (1 - replica_done)
    done = (replica_done + left_game).clamp_max(1)
    term = (replica_term + left_game).clamp_max(1)
    last = torch.zeros_like(next_value)
    out = []
    for t in reversed(range(T)):
        v_next = next_value if t == T - 1 else values[t + 1]
        bootstrap = (1 - done[t]) * v_next + done[t] * (1 - term[t]) * final_values[t]
        delta = rewards[t] + gamma * bootstrap - values[t]
        last = delta + gamma * lam * (1 - done[t]) * last
        out.append(last)
    return torch.stack(out[::-1])
