"""What training reports: the update statistics summed on the device between reports, one host read
per report (with the episode statistics), the run folder's metrics.csv, and the checks a report is
judged by (non-finite losses or weights, divergence, the target return).
"""
from __future__ import annotations

import csv
import io
import math
import warnings
from pathlib import Path

import torch

from ..errors import NonFiniteError, WorkbenchWarning


class Metrics:
    """stat_names: the algorithm's STATS; groups: the trainer's agent groups; members: a population's
    members (population.Member; None or one: a run without members); frozen: the policies that do not
    learn (no update statistics; mean_return and the target leave them out). `sums[policy][stat]` are
    device tensors [M] the algorithms add to; `pull` reads them (and the episode sums) once and zeroes them."""

    def __init__(self, stat_names, groups, episode_stats, device, sync=None, world_size: int = 1, members=None,
                 ranks=None, rank_by: str = "mean_return", frozen=()):
        self.groups, self.episode_stats, self.sync, self.world_size = groups, episode_stats, sync, world_size
        self.ranks = ranks  # a population split over ranks: every rank's members' reports are gathered
        self.rank_by = rank_by  # (a population's reports name the statistic that ranks its members)
        self.members = list(members) if members and len(members) > 1 else [None]
        M = len(self.members)
        self.trained = [g.name for g in groups if g.name not in frozen]
        self.sums = {name: {k: torch.zeros(M, device=device) for k in stat_names} for name in self.trained}
        self.iterations = 0  # since the last pull, that updated the policies (the statistics' divisor)
        self._first: dict = {}  # each policy's first report, for the divergence check

    def pull(self, base: dict, learning: bool = True, learning_rates=None) -> dict:
        """base (iteration, env_steps, rate, time) plus, per policy, the update statistics averaged
        over the iterations since the last pull that updated the policies (DDPG's first ones only fill
        its buffers), and over ranks (left out when not `learning`), learning_rate (each member's, from
        `learning_rates`, when given) and the
        episode statistics; mean_return over the policies that learn; nonfinite: a loss was NaN or inf. For a
        population: each value is the median over the members (returns with their quartiles), and
        `members` one such dict per member (with member, seed and the swept values)."""
        names = [g.name for g in self.groups]
        keys = [(n, k) for n in self.trained for k in sorted(self.sums[n])]
        stacked = torch.stack([self.sums[n][k].float() for n, k in keys])  # [K, M]
        if self.sync is not None:  # losses average over ranks; episode sums add up
            stacked = self.sync.sum(stacked) / self.world_size
            self.episode_stats.sums.copy_(self.sync.sum(self.episode_stats.sums))
        host = stacked.t().cpu().tolist()  # [M][K]
        episodes = self.episode_stats.pull_members()
        iterations = max(self.iterations, 1)
        reports = []
        for k, (member, values, member_episodes) in enumerate(zip(self.members, host, episodes)):
            metrics = dict(base)
            if member is not None:
                metrics.update({"member": member.index, "seed": member.seed, **member.values})
            if learning_rates is not None:
                metrics["learning_rate"] = learning_rates[k]
            nonfinite = 0.0
            for n in names:
                metrics[f"return/{n}"] = member_episodes[f"return/{n}"]
                for (owner, k), value in zip(keys, values):
                    if owner != n:
                        continue
                    if k == "nonfinite":
                        nonfinite += value
                    elif learning:
                        metrics[f"{k}/{n}"] = value / iterations
            metrics.update({k: v for k, v in member_episodes.items() if not k.startswith("return/")})
            finite = [metrics[f"return/{n}"] for n in self.trained if not math.isnan(metrics[f"return/{n}"])]
            metrics["mean_return"] = sum(finite) / len(finite) if finite else float("nan")
            metrics["nonfinite"] = nonfinite > 0
            reports.append(metrics)
        for sums in self.sums.values():
            for stat in sums.values():
                stat.zero_()
        self.iterations = 0
        if self.members == [None]:
            return reports[0]
        if self.ranks is not None:  # every rank's members, in member order; the job's rate is the ranks' sum
            parts = self.ranks.gather((base.get("env_steps_per_s", math.nan), reports))
            base = {**base, "env_steps_per_s": sum(rate for rate, _ in parts)}
            reports = [{**r, "env_steps_per_s": base["env_steps_per_s"]} for _, part in parts for r in part]
        return population_report(base, reports, names, swept=tuple(self.members[0].values), rank_by=self.rank_by)

    def warn_divergence(self, metrics: dict, lr: tuple, loss_key: str, discrete: bool):
        """Warn once per policy when a report shows divergence: on its own values (PPO's approx_kl far
        past its trust region, a value loss far above the returns' scale) or against the policy's
        first report (a loss grown by orders of magnitude, a discrete policy's entropy collapsed within
        a few iterations). Almost always a learning rate that is too high: `lr` is (its name, its value)."""
        iteration = metrics.get("iteration", 0)
        name = loss_key.replace("_", " ")
        for g in self.groups:
            loss = metrics.get(f"{loss_key}/{g.name}")
            entropy = metrics.get(f"entropy/{g.name}")
            kl = metrics.get(f"approx_kl/{g.name}")
            ret = metrics.get(f"return/{g.name}")
            first = self._first.setdefault(g.name, {"loss": loss, "entropy": entropy, "iteration": iteration,
                                                    "warned": False})
            if first["warned"] or loss is None:
                continue
            scale = max(1.0, abs(ret) if ret is not None and math.isfinite(ret) else 1.0) ** 2
            message = None
            if kl is not None and kl > 1.0:
                message = f"approx_kl is {kl:.3g} (a PPO update moves the policy by about 0.01 to 0.05)"
            elif loss > 1e6 * scale:
                message = f"the {name} is {loss:.3g}, far above the returns' scale"
            elif first["loss"] is not None and loss > 1e3 * max(first["loss"], 1e-2):
                message = f"the {name} grew from {first['loss']:.3g} to {loss:.3g}"
            elif (entropy is not None and discrete and first["entropy"] and first["entropy"] > 0
                  and entropy < 1e-3 * first["entropy"] and iteration - first["iteration"] <= 50):
                message = (f"the policy's entropy collapsed from {first['entropy']:.3g} to {entropy:.2g} in "
                           f"{iteration - first['iteration']} iterations")
            if message:
                first["warned"] = True
                warnings.warn(f"policy '{g.name}' looks divergent: {message} by iteration {iteration}; the "
                              f"likely cause is a learning rate too high for this problem ({lr[0]}={lr[1]:g}): try 10x "
                              f"lower, or normalize_obs / smaller rewards", WorkbenchWarning, stacklevel=4)


class RateWindow:
    """Env-steps/s over a report's window of iterations, leaving out a GPU run's first ones, which
    warm up and capture the CUDA graph: their time is set-up, not stepping. A window of nothing else
    reports the last such iteration's own rate."""

    def __init__(self, now: float):
        self.start, self.steps, self.setup_rate = now, 0, math.nan

    def add(self, steps: int, started: float, now: float, setup: bool) -> None:
        """An iteration of `steps` env-steps that ran from `started` to `now`; `setup`: it captured."""
        if setup:
            self.setup_rate = steps / max(now - started, 1e-9)
            self.start, self.steps = now, 0
        else:
            self.steps += steps

    def pull(self, now: float) -> float:
        """The window's env-steps/s; the next window starts at `now`."""
        rate = self.steps / max(now - self.start, 1e-9) if self.steps else self.setup_rate
        self.start, self.steps = now, 0
        return rate


def _quantile(values: list, q: float) -> float:
    """The q-quantile (linear interpolation) of the finite values, NaN when there are none."""
    finite = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if not finite:
        return math.nan
    pos = q * (len(finite) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(finite) - 1)
    return finite[lo] + (finite[hi] - finite[lo]) * (pos - lo)


def population_report(base: dict, reports: list, policies: list, swept=(), rank_by: str = "mean_return") -> dict:
    """One report of a population: base, each numeric statistic's median over the members (not the
    swept hyperparameters'; returns
    with their quartiles: return_q25/NAME and return_q75/NAME, mean_return_q25 and mean_return_q75),
    num_members, rank_by (the statistic that ranks the members: config.rank_by), and `members`: the
    members' own reports."""
    out = dict(base)
    skip = set(base) | {"member", "seed", "nonfinite"} | set(swept)
    for key in reports[0]:
        if key in skip or isinstance(reports[0][key], bool):
            continue
        values = [r.get(key, math.nan) for r in reports]
        if not all(isinstance(v, (int, float)) for v in values):
            continue
        out[key] = _quantile(values, 0.5)
        if key.startswith("return/") or key == "mean_return":
            quartile = key.replace("return", "return_q{}", 1)
            out[quartile.format(25)], out[quartile.format(75)] = _quantile(values, 0.25), _quantile(values, 0.75)
    out["nonfinite"] = any(r["nonfinite"] for r in reports)
    out["num_members"] = len(reports)
    out["rank_by"] = rank_by
    out["members"] = reports
    return out


def weights_finite(models) -> bool:
    """One host read: every parameter of every model is finite."""
    flags = [torch.isfinite(p).all() for m in models for p in m.parameters()]
    return bool(torch.stack(flags).all())


def nonfinite_error(what: str, iteration: int, run_dir, trainer=None) -> NonFiniteError:
    """The error that stops a run whose `what` (the loss, the weights) is no longer finite; with the
    `trainer`, it says whether the env's own values were so first (then the learner only passed them on)."""
    saved = run_dir is not None and (Path(run_dir) / "checkpoint.pt").exists()
    stopped = (f"{what} became NaN or inf by iteration {iteration}; training stopped and no checkpoint was written "
               f"from this state" + (f" (the last good one is {Path(run_dir) / 'checkpoint.pt'})" if saved else ""))
    found = env_nonfinite(trainer) if trainer is not None else []
    if found:
        env = trainer.config.env
        return NonFiniteError(f"{stopped}. The env made them first: {', '.join(found)} hold NaN or inf. Find the "
                              f"step that makes them with wb.check_env({env!r}) or wb.make({env!r}, debug=True), "
                              f"whose steps stop at the first one")
    return NonFiniteError(f"{stopped}. Lower lr, enable normalize_obs, or check the env's values with "
                          f"wb.check_env(ENV) (the env's observations and rewards in the last rollout were finite)"
                          if trainer is not None else f"{stopped}. Lower lr, enable normalize_obs, or check the "
                          f"env's values with wb.check_env(ENV)")


def env_nonfinite(trainer) -> list:
    """Which of the env's values in the trainer's last rollout or replay (observations, rewards), its
    observation normalisers' statistics and the env's state arrays now hold NaN or inf, by name."""
    found = []
    for name, buffer in trainer.buffers.items():
        for field, label in (("obs", "the observations"), ("rewards", "the rewards")):
            values = getattr(buffer, field, None)
            if values is not None and values.is_floating_point() and not bool(torch.isfinite(values).all()):
                found.append(f"{label} of policy '{name}'")
    for name, norm in trainer.norms.items():
        if not (bool(torch.isfinite(norm.mean).all()) and bool(torch.isfinite(norm.var).all())):
            found.append(f"the observation normaliser of policy '{name}' (fed NaN or inf observations)")
    for name, scale in getattr(trainer, "reward_scales", {}).items():
        if not bool(torch.isfinite(scale.stats.var).all()):
            found.append(f"the reward scale of policy '{name}' (normalize_reward, fed NaN or inf rewards)")
    store = trainer.env.store
    for name, spec in trainer.env.definition.arrays.items():
        values = store[name] if spec.owner == "env" and name in store else None
        if values is not None and values.is_floating_point() and not bool(torch.isfinite(values).all()):
            found.append(f"the env's array '{name}'")
    return found


HISTORY_REPORTS = 2000  # the most reports a run keeps in memory and checkpoints (metrics.csv keeps every one)


def keep_report(history: list, report: dict, log_every: int, members: int = 1) -> None:
    """Append `report` to a run's `history` (in place), which keeps the reports on a grid of iterations
    that coarsens as the run grows: every (log_every * 2^k)-th, at most HISTORY_REPORTS of them (a
    population's fewer, HISTORY_REPORTS // members but at least 64: each report holds every member's),
    with the first report always first and the newest always last. A long run's memory and checkpoints
    stay bounded, its curve even."""
    limit = max(64, HISTORY_REPORTS // members)

    def grid(iteration: int) -> int:
        step = log_every
        while iteration / step > limit:
            step *= 2
        return step

    step = grid(report["iteration"])
    if len(history) > 1 and history[-1]["iteration"] % step:  # the newest so far, between the grid's points
        history.pop()
    if history and (grid(history[-1]["iteration"]) != step or len(history) > limit):  # a coarser grid now
        history[:] = history[:1] + [r for r in history[1:] if r["iteration"] % step == 0]
    history.append(report)


def append_csv(path: Path, metrics: dict):
    """One row per report (a population's report: one row per member, with its member, seed and swept
    values). Columns keep the header's order; a report with new columns (DDPG's losses once learning
    starts) rewrites the file once with the wider header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = metrics.get("members", [metrics])
    fields = list(dict.fromkeys(k for row in new for k in row if k != "members"))
    rows = []
    if path.exists():
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            if set(fields) <= set(header):
                fields, rows = header, None
            else:
                rows = list(reader)
                fields = header + [k for k in fields if k not in header]
    if rows is None:
        with path.open("a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore").writerows(new)
        return
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows + list(new))


def keep_rows_upto(source: Path, dest: Path, upto: int) -> list:
    """`dest` (a forked run's metrics.csv, or the source itself) holds the source's whole rows up to
    iteration `upto` (the checkpoint's): rows logged after it, and a row a killed run cut short, go.
    Returns the iterations of the reports kept, in order (a population's members' rows as one)."""
    if not source.is_file():
        return []
    text = source.read_text()
    rows = list(csv.reader(io.StringIO(text)))
    rows = rows if text.endswith("\n") else rows[:-1]  # (a last line without its end was cut short)
    if not rows or "iteration" not in rows[0]:
        return []
    col, width = rows[0].index("iteration"), len(rows[0])
    kept = [r for r in rows[1:] if len(r) == width and r[col].isdigit() and int(r[col]) <= upto]
    with dest.open("w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + kept)
    return list(dict.fromkeys(int(r[col]) for r in kept))


def write_reports(path: Path, reports: list):
    """A new run folder's metrics.csv from a checkpoint's reports (its history)."""
    for report in reports:
        append_csv(path, report)
