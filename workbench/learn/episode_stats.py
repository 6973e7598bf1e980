"""Per-policy statistics of finished episodes, summed on the device between two log points.

    stats = EpisodeStats(env, {"taggers": [0], "runners": [1, 2, 3]})
    for _ in range(T):
        env.step(actions)
        stats.after_step()            # in-place device ops only: no host sync, capturable in a CUDA graph
    metrics.update(stats.pull())      # one host read; the sums start again from zero

After every step the episodes that just finished (store["done"]) add their values to running sums:
the mean per-agent return of each policy (store["last_return"]) and of each of the env's AGENT_GROUPS
whose agents are no one policy's (group_return/NAME: a team's return where one policy plays several),
the episode length (store["last_length"]) and the env's evaluation metrics (`runtime.env_metrics`:
EVAL_METRICS, or tag rate, runner survival and runners tagged for a Tag game). `pull` divides by the number of
finished episodes; with none finished every value is NaN and `episodes` is 0.
"""
from __future__ import annotations

import math

import torch

from ..runtime.env_metrics import DERIVED_METRICS, checked_metrics

# evaluate's names for Tag metrics -> the names the panel, CSV and captions use
RENAMED = {"runner_survival": "survival"}


def agent_groups_apart(definition, policies) -> dict:
    """{name: agent ids} of the env's AGENT_GROUPS whose agents are no policy's (a policy over several groups,
    as {shared: [taggers, runners]}): their returns are reported apart, as group_return/NAME. policies:
    {name: agent ids}, or names (of AGENT_GROUPS groups, or "shared": every agent)."""
    groups = definition.agent_groups() or {}
    if not isinstance(policies, dict):
        policies = {n: groups.get(n, range(definition.num_agents) if n == "shared" else ()) for n in policies}
    played = [sorted(int(i) for i in ids) for ids in policies.values()]
    return {name: list(ids) for name, ids in groups.items() if sorted(ids) not in played}


class EpisodeStats:
    """Running sums over the episodes finished since the last `pull`.

    env: an Env; groups: {policy name: agent ids} (or the trainer's groups, objects with .name and
    .ids; None: one policy "policy" over every agent). Buffers: rows [K, E] (one row per statistic,
    the last all ones to count episodes), sums [K].
    """

    def __init__(self, env, groups=None, members: int = 1):
        self.env, self.members = env, members
        store = env.store
        if groups is None:
            groups = {"policy": list(range(env.num_agents))}
        elif not isinstance(groups, dict):
            groups = {g.name: list(g.ids) for g in groups}
        self.names = list(groups)
        self.agent_groups = agent_groups_apart(env.definition, groups)
        device, E = env.device, env.num_envs
        returned = list(groups.values()) + list(self.agent_groups.values())
        self.index = [torch.as_tensor(list(ids), dtype=torch.long, device=device) for ids in returned]
        self.gathered = [torch.empty((E, len(ids)), dtype=store["last_return"].dtype, device=device)
                         for ids in returned]
        metrics, self.params = checked_metrics(env)
        # (Tag's tag rate and survival from its runners tagged: one pass over the final observations a step)
        self.derived = {RENAMED.get(k, k): (RENAMED.get(DERIVED_METRICS[k][0], DERIVED_METRICS[k][0]),
                                            DERIVED_METRICS[k][1])
                        for k in metrics if k in DERIVED_METRICS and DERIVED_METRICS[k][0] in metrics}
        self.env_metrics = {k: fn for k, fn in metrics.items() if RENAMED.get(k, k) not in self.derived}
        self.order = ([f"return/{n}" for n in self.names] + [f"group_return/{n}" for n in self.agent_groups]
                      + ["episode_length"]
                      + [RENAMED.get(k, k) for k in metrics])  # (the keys pull gives, in this order)
        self.keys = [k for k in self.order if k not in self.derived]
        self.rows = torch.zeros((len(self.keys) + 1, E), dtype=torch.float32, device=device)
        self.rows[-1].fill_(1.0)
        self.done = torch.zeros(E, dtype=torch.float32, device=device)
        # a population's sums are per member [M, K] (member k: replicas [k * E / M, (k + 1) * E / M))
        shape = (len(self.keys) + 1,) if members == 1 else (members, len(self.keys) + 1)
        self.step_sums = torch.zeros(shape + ((1,) if members > 1 else ()), dtype=torch.float32, device=device)
        self.sums = torch.zeros(shape, dtype=torch.float32, device=device)

    def after_step(self) -> None:
        """Add the episodes that finished in the last step; call once after every env step."""
        store = self.env.store
        self.done.copy_(store["done"])
        for row, (index, gathered) in enumerate(zip(self.index, self.gathered)):
            torch.index_select(store["last_return"], 1, index, out=gathered)
            torch.mean(gathered, dim=1, out=self.rows[row])
        row = len(self.index)
        self.rows[row].copy_(store["last_length"])
        for k, fn in enumerate(self.env_metrics.values()):
            self.rows[row + 1 + k].copy_(fn(store, self.params))
        if self.members == 1:
            torch.mv(self.rows, self.done, out=self.step_sums)
            self.sums.add_(self.step_sums)
        else:
            M = self.members
            torch.bmm(self.rows.view(len(self.keys) + 1, M, -1).transpose(0, 1), self.done.view(M, -1, 1),
                      out=self.step_sums)
            self.sums.add_(self.step_sums.squeeze(-1))

    def reset(self) -> None:
        self.sums.zero_()

    def pull(self) -> dict:
        """{return/NAME, episode_length, env metrics..., episodes} over the episodes finished since
        the last pull (NaN where none finished); resets the sums. One host read. (A population's
        first member; pull_members gives every member's.)"""
        return self.pull_members()[0]

    def pull_members(self) -> list:
        """`pull`'s dict for each member (one for a run without members)."""
        host = self.sums.cpu().tolist()
        self.sums.zero_()
        out = []
        for row in ([host] if self.members == 1 else host):
            episodes = row[-1]
            means = {key: (value / episodes if episodes > 0 else math.nan) for key, value in zip(self.keys, row)}
            for key, (source, fn) in self.derived.items():
                means[key] = fn(means[source], self.params) if episodes > 0 else math.nan
            stats = {key: means[key] for key in self.order}
            stats["episodes"] = episodes
            out.append(stats)
        return out
