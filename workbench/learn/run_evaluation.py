"""A run folder's trained policies evaluated (`wb.evaluate`, `wb.evaluate_run`, `python -m workbench
evaluate`): a single run, one member of a population (an index, or the best in its last training
report), or every member at once ("all": the population's trainer, its members batched as in
training, each member's report with its seed and swept values); for a sweep, its settings ranked by
the evaluation, with each setting's mean, standard deviation and 95% interval over its seeds.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from .episode_stats import RENAMED
from .evaluate import NOT_STATISTICS, compare, evaluate, held_out_seed, random_label
from .ranking import ranking_text, sweep_settings


def evaluate_run(run_or_checkpoint, *, member=None, episodes: int = 1, steps: int | None = None,
                 deterministic: bool = False, seed: int | None = None, random_policies=None,
                 num_envs: int | None = None, target: str | None = None, env_params: dict | None = None,
                 models=None, per_episode: bool = False) -> dict:
    """{label: report} of a run folder's (or checkpoint's) policies (evaluate_trainer): member an index,
    "best" (the default for a population) or "all" (every member, batched: the report's `members`,
    member k playing seed + k, as k exported alone would with that seed); num_envs replicas (per
    member; None: the run's), target and env_params (changing only what keeps agents, observations
    and actions) as wb.load_policy takes them; per_episode: every counted episode's values in each
    report too (`evaluate`'s)."""
    from .runs import load_policy
    trainer = load_policy(run_or_checkpoint, num_envs=num_envs, target=target, member=member,
                          env_params=env_params, models=models)
    return evaluate_trainer(trainer, episodes=episodes, steps=steps, deterministic=deterministic, seed=seed,
                            random_policies=random_policies, per_episode=per_episode)


def evaluate_trainer(trainer, *, episodes: int = 1, steps: int | None = None, deterministic: bool = False,
                     seed: int | None = None, random_policies=None, per_episode: bool = False) -> dict:
    """{label: report} of a loaded run's trainer (wb.load_policy), each report as `evaluate` gives it
    with `settings`: what it played (seed, deterministic, episodes, steps, num_envs, env_params, the
    checkpoint's absolute path, member). random_policies None: the trained policies, then each
    replaced by random actions in turn (`compare`); a tuple: those replaced together ((): the trained
    only). seed None: the run's seed + 2**20, held out from training's starts."""
    seed = held_out_seed(trainer.config) if seed is None else seed
    options = dict(episodes=episodes, steps=steps, deterministic=deterministic, seed=seed, per_episode=per_episode)
    if random_policies is None:
        results = compare(trainer, **options)
    else:
        results = {"trained": evaluate(trainer, **options)}
        if random_policies:
            results[random_label(trainer, random_policies)] = evaluate(trainer, random_policies=random_policies,
                                                                       **options)
    settings = {"seed": seed, "deterministic": deterministic, "episodes": episodes,
                "steps": next(iter(results.values()))["steps"], "num_envs": trainer.config.num_envs,
                "env_params": trainer.config.env_params,
                "checkpoint": str(getattr(trainer, "checkpoint_path", None) or "") or None,
                "member": getattr(trainer, "member_label", None), "member_of": getattr(trainer, "member_of", None)}
    for report in results.values():
        report["settings"] = settings
    return results


def learning_value(report: dict, rank_by: str, frozen=()) -> tuple:
    """(statistic, value) that ranks an evaluated member: mean_return is the mean over the learning
    policies' returns; another rank_by where the evaluation reports it (episode_length, an env metric);
    else mean_return."""
    key = rank_by.lstrip("-")
    evaluated = {v: k for k, v in RENAMED.items()}.get(key, key)  # (training's survival: runner_survival here)
    if key != "mean_return" and evaluated in report:
        return key, report[evaluated]
    returns = [v for k, v in report.items() if k.startswith("return/") and k[len("return/"):] not in frozen]
    return "mean_return", (sum(returns) / len(returns) if returns else math.nan)


def members_ranked(report: dict, config) -> list:
    """A population's evaluation `report` -> sweep_settings rows of its settings ranked by the run's
    rank_by as evaluated (learning_value), with each setting's standard error and 95% interval."""
    rows, key = [], "mean_return"
    for m in report.get("members") or ():
        key, value = learning_value(m, config.rank_by or "mean_return", config.frozen)
        rows.append({**m, key: value})
    lower = (config.rank_by or "").startswith("-") and key == config.rank_by[1:]
    return sweep_settings({"members": rows, "rank_by": ("-" if lower else "") + key}, list(config.sweep or {}))


def members_text(results: dict, config) -> str:
    """Every member's evaluation as a table per report label (member, seed, swept values, each
    statistic ± its standard error), and for a sweep its settings ranked by the evaluation."""
    swept = list(config.sweep or {})
    lines = []
    for label, report in results.items():
        members = report.get("members") or []
        if not members:
            continue
        keys = [k for k in members[0] if k not in ("member", "seed", "evaluation_seed", "steps", *NOT_STATISTICS,
                                                   *swept)]
        header = ["member", "seed", *swept, *keys]
        table = [[str(m["member"]), str(m["seed"]), *(f"{m[n]:g}" for n in swept),
                  *(_cell(m[k], m["stderr"].get(k)) if k != "episodes" else str(m[k]) for k in keys)]
                 for m in members]
        widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
        lines.append(f"{label}, every member:")
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *table]]
    trained = results.get("trained", {})
    if swept and trained.get("members"):
        rows = members_ranked(trained, config)
        lines.append("sweep settings ranked by the evaluation (trained): mean ± std over each setting's seeds, "
                     "and the 95% t interval of that mean:")
        lines.append(ranking_text(rows))
    return "\n".join(lines)


def _cell(value, error) -> str:
    text = f"{value:.4f}" if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"
    return text + (f" ± {error:.4f}" if isinstance(error, float) and math.isfinite(error) else "")


def write_members_csv(results: dict, path, config) -> Path:
    """One row per report label and member (a single run or one member: one row per label): label,
    member, seed, evaluation_seed, the swept values, episodes, then each statistic and its STAT_stderr."""
    rows = []
    for label, report in results.items():
        one = report["settings"].get("member_of") or {"member": 0, "seed": config.seed, "values": {}}
        swept = list(config.sweep or {}) if report.get("members") else list(one["values"])
        for m in report.get("members") or [dict(report, member=one["member"], seed=one["seed"], **one["values"],
                                                evaluation_seed=report["settings"]["seed"])]:
            stats = [k for k in m if k not in ("member", "seed", "evaluation_seed", "steps", "episodes",
                                               *NOT_STATISTICS, *swept)]
            row = {"label": label, "member": m["member"], "seed": m["seed"], "evaluation_seed": m["evaluation_seed"],
                   **{n: m[n] for n in swept}, "episodes": m["episodes"]}
            for k in stats:
                row[k], row[f"{k}_stderr"] = m[k], m["stderr"].get(k, math.nan)
            rows.append(row)
    path = Path(path)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fields)
        writer.writeheader()
        writer.writerows(rows)
    return path
