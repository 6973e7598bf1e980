"""The rollout's bookkeeping after an env step in one launch per policy group (Triton, on GPUs),
where eager torch takes about ten kernels and a handful more per group (Collector.step_outcome with
EpisodeStats.after_step, and the rollout's masks, are the reference): terminations, truncations,
each group's rewards and in-game mask and the ended episodes' final observations into the rollout's
step, and the ended episodes' per-group return, length, count and Tag's runners tagged into the
episode statistics' sums. The kernel is fused_rollout_kernels.step_record.
"""
from __future__ import annotations

import torch

from ..runtime.env_metrics import _runners_tagged
from .fused import _pow2, _rollout_kernels

_STORE_ARRAYS = ("reward", "last_return", "final_obs", "done", "terminated", "truncated", "last_length")


class FusedStepRecord:
    """Serves runs whose policy groups are contiguous agent ranges and whose episode statistics need
    no torch function of the store but Tag's runners tagged (`applies` says whether a run is served).

    store: the env's arrays; stats: the run's EpisodeStats; groups: the trainer's policy groups (in
    the statistics' order); active: the env's ACTIVE array name or None; members: M."""
    BLOCK = 128

    def __init__(self, store, stats, groups, active: str | None, members: int):
        self.store, self.stats, self.members = store, stats, members
        E, A = store["reward"].shape[:2]
        self.E, self.A = E, A
        self.O = store["final_obs"][0].numel() // A
        self.sums_stride = stats.sums.shape[-1] if members > 1 else 0
        self.active = store[active] if active is not None else None
        self.masks = active is not None  # (then each call writes the groups' masks of the next step)
        self.groups = [(g.slice.start, g.n, stats.keys.index(f"return/{g.name}")) for g in groups]
        self.columns = dict(length_col=stats.keys.index("episode_length"), count_col=len(stats.keys))
        runners = stats.env_metrics.get("runners_tagged")
        self.metric = None
        if runners is not None:
            p = stats.params
            self.metric = dict(metric_col=stats.keys.index("runners_tagged"), metric_start=int(p["num_taggers"]),
                               METRIC_N=int(p["num_runners"]))
        # agent groups a policy over several plays (group_return/NAME): their sums in a few torch ops a step
        n_apart = len(stats.agent_groups)
        self.apart = stats.index[len(stats.names):], stats.gathered[len(stats.names):]
        self.apart_rows = torch.empty((n_apart, E), dtype=torch.float32, device=store["reward"].device)
        self.apart_sums = torch.empty((n_apart, members), dtype=torch.float32, device=store["reward"].device)
        first = stats.keys.index(f"group_return/{next(iter(stats.agent_groups))}") if n_apart else 0
        self.apart_cols = slice(first, first + n_apart)

    @staticmethod
    def applies(trainer, groups, stats, active: str | None) -> bool:
        store = trainer.env.store
        metrics_served = all(k == "runners_tagged" and fn is _runners_tagged for k, fn in stats.env_metrics.items())
        arrays = [store[k] for k in _STORE_ARRAYS] + ([store[active]] if active is not None else [])
        return (all(g.slice is not None for g in groups) and metrics_served
                and [g.name for g in groups] == stats.names
                and store["reward"].dtype == torch.float32 and store["last_return"].dtype == torch.float32
                and store["final_obs"].dtype == torch.float32 and all(a.is_contiguous() for a in arrays)
                and (active is None or tuple(store[active].shape) == tuple(store["reward"].shape)))

    def __call__(self, terminated, truncated, final_obs, rewards: list, masks: list):
        """terminated, truncated [E], final_obs [E, A, O] or None, rewards [[E, n]] (one per group): the
        rollout's step t; masks [[E, n]]: the groups' masks of step t + 1 (written when the env has ACTIVE)."""
        s = self.store
        per_member = self.E // self.members
        step_record = _rollout_kernels().step_record
        metric = self.metric or dict(metric_col=0, metric_start=0, METRIC_N=1)
        for k, ((start, n, return_col), reward) in enumerate(zip(self.groups, rewards)):
            mask = masks[k] if self.masks else reward
            step_record[(-(-per_member // self.BLOCK), self.members)](
                s["done"], s["terminated"], s["truncated"], s["final_obs"], s["reward"], s["last_return"],
                s["last_length"], self.active if self.masks else s["done"], terminated, truncated,
                final_obs if final_obs is not None else terminated, reward, mask, self.stats.sums, per_member,
                self.sums_stride, start, return_col, **self.columns, metric_col=metric["metric_col"],
                metric_start=metric["metric_start"], A=self.A, N=n, NP=_pow2(n, 1), O=self.O, OP=_pow2(self.O, 1),
                METRIC_N=metric["METRIC_N"], SHARED=k == 0, FINAL=k == 0 and final_obs is not None,
                MASK=self.masks, METRIC=k == 0 and self.metric is not None, BLOCK=self.BLOCK)
        if self.apart_rows.shape[0]:
            self._add_apart_groups()

    def _add_apart_groups(self) -> None:
        """Each apart group's mean return over its agents, where its replica's episode ended, into the sums."""
        s, rows = self.store, self.apart_rows
        for row, (index, gathered) in enumerate(zip(*self.apart)):
            torch.index_select(s["last_return"], 1, index, out=gathered)
            torch.mean(gathered, dim=1, out=rows[row])
        rows.mul_(s["done"])
        torch.sum(rows.view(rows.shape[0], self.members, -1), dim=2, out=self.apart_sums)
        self.stats.sums.view(self.members, -1)[:, self.apart_cols].add_(self.apart_sums.t())
