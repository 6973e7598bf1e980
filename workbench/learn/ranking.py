"""A population's results: its sweep settings ranked by the members' final value of the statistic the
run ranks by (config.rank_by, mean_return by default; as rows, a fixed-width table and a CSV), and
the population's returns said in one line (median and quartiles over the members)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .config_sweep import SWEEPABLE

HYPERPARAMETERS = tuple(dict.fromkeys(name for names in SWEEPABLE.values() for name in names))


def split_rank_by(rank_by: str | None) -> tuple:
    """config.rank_by -> (the statistic, lower_first): "-episode_length" ranks the lowest first;
    None (a report written before runs recorded it) is mean_return."""
    rank_by = rank_by or "mean_return"
    return (rank_by[1:], True) if rank_by.startswith("-") else (rank_by, False)


def rank_key(report: dict) -> str:
    """The statistic that ranks a population report's members: its rank_by (config.rank_by) without
    the sign, or mean_return for a report written before runs recorded it."""
    return split_rank_by(report.get("rank_by"))[0]


def lower_first(report: dict) -> bool:
    """Whether a population report's members rank lowest first (config.rank_by "-NAME")."""
    return split_rank_by(report.get("rank_by"))[1]


def statistic_name(key: str) -> str:
    """How tables and CSV columns call a ranking statistic: "return" for mean_return, else the key."""
    return "return" if key == "mean_return" else key


def swept_names(report: dict) -> list:
    """The swept hyperparameters of a population report: the sweepable names (config_sweep.SWEEPABLE) that
    every member carries, in the members' order; [] without a sweep or without members."""
    members = report.get("members") or []
    if not members:
        return []
    return [k for k in members[0] if k in HYPERPARAMETERS and all(k in m for m in members)]


def settings_of(members: list, swept: list) -> dict:
    """{setting values as a tuple: [member dicts]} in the members' order (one setting () without a sweep)."""
    groups: dict = {}
    for m in members:
        groups.setdefault(tuple(m[k] for k in swept), []).append(m)
    return groups


# Student's t at 0.975 for 1..30 degrees of freedom (a 95% interval of a mean over n = df + 1 seeds)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """Student's t quantile at 0.975 (df >= 1); past 30 the Cornish-Fisher expansion about 1.96 (error < 1e-3)."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def quartiles(values) -> tuple:
    """(q25, median, q75) of the finite values (linear interpolation), NaNs when none is finite."""
    finite = [float(v) for v in values if _finite(v)]
    if not finite:
        return (math.nan,) * 3
    return tuple(float(q) for q in np.percentile(finite, [25, 50, 75]))


def population_curves(history: list, thin_up_to: int = 8, key: str | None = None) -> dict:
    """The curves of a population's history (reports with "members"), from the members' values at
    each report (NaN members left out, reports where none has a value skipped): {num_members,
    swept (names), settings (count), curves: [{label, team (policy name, None with a sweep), key,
    steps, q25, median, q75 (lists of one length), members: {member: (steps, values)} (each member's
    own finite points; only without a sweep and at most `thin_up_to` members)}]}. Without a sweep
    one curve per team of return/NAME, labelled "NAME median (M members), IQR band"; with a sweep
    one curve per setting over its seeds of `key` (default: the run's rank_by, rank_key), labelled by
    the setting ("lr=0.001", and the statistic unless it is mean_return: "lr=0.001 (tag_rate)")."""
    history = [m for m in history if m.get("members")]
    final = history[-1]
    key = key or rank_key(final)
    M = int(final.get("num_members", len(final["members"])))
    swept = swept_names(final)
    members = [dict(m, member=m.get("member", i)) for i, m in enumerate(final["members"])]
    settings = settings_of(members, swept)
    if swept:
        shown = "" if key == "mean_return" else f" ({key})"
        series = [(key, [m["member"] for m in group], None, setting_label(dict(zip(swept, values))) + shown)
                  for values, group in settings.items()]
    else:
        teams = list(dict.fromkeys(k.split("/", 1)[1] for m in members for k in m if k.startswith("return/")))
        series = [(f"return/{name}", [m["member"] for m in members], name,
                   f"{'policy' if name == 'shared' and len(teams) == 1 else name} median ({M} members), IQR band")
                  for name in teams]
    reports = [(m["env_steps"], {r.get("member", i): r for i, r in enumerate(m["members"])}) for m in history]
    curves = []
    for stat, group, team, label in series:
        points = [(s, *quartiles([by[k].get(stat, math.nan) for k in group if k in by])) for s, by in reports]
        points = [p for p in points if not math.isnan(p[2])]
        if not points:
            continue
        steps, q25, median, q75 = (list(column) for column in zip(*points))
        own = {}
        if not swept and M <= thin_up_to:
            for k in group:
                finite = [(s, float(by[k][stat])) for s, by in reports if k in by and _finite(by[k].get(stat))]
                if finite:
                    own[k] = tuple(list(column) for column in zip(*finite))
        curves.append({"label": label, "team": team, "key": stat, "steps": steps, "q25": q25, "median": median,
                       "q75": q75, "members": own})
    return {"num_members": M, "swept": swept, "settings": len(settings), "curves": curves}


def sweep_settings(report: dict, swept: list | None = None, key: str | None = None) -> list:
    """One row per sweep setting of a population report's members, best first (NaN means last), by
    the statistic `key` (default: the run's rank_by, rank_key; higher is better unless the run's
    rank_by is "-NAME"): {rank, key, lower_first, values: {name: value}, members (count), missing
    (members whose value is NaN), mean, std (sample std of the finite values; NaN below two), stderr
    (std / sqrt(n)), ci95 (the 95% t interval's half-width; NaN below two values), episodes (the
    members' episodes behind their values), oldest (the earliest iteration a value comes from: a
    member's latest value, population.latest_report), best_member (its `member` index; None when all
    are missing), best_value}. `swept`: the names that tell settings apart (default `swept_names(report)`)."""
    members = report.get("members") or [dict(report, member=0)]
    swept = swept_names(report) if swept is None else list(swept)
    lower = lower_first(report) if key is None else False
    key = key or rank_key(report)
    sign = -1.0 if lower else 1.0
    rows = []
    for values, group in settings_of(members, swept).items():
        returns = [(m.get(key, math.nan), m.get("member", i)) for i, m in enumerate(group)]
        finite = [(float(r), k) for r, k in returns if _finite(r)]
        scores = np.array([r for r, _ in finite])
        best = max(finite, key=lambda rk: sign * rk[0]) if finite else (math.nan, None)
        n = len(finite)
        std = float(scores.std(ddof=1)) if n > 1 else math.nan  # (one value has no spread to state)
        counted = [m for m in group if _finite(m.get(key))]
        rows.append({"key": key, "lower_first": lower, "values": dict(zip(swept, values)), "members": len(group),
                     "missing": len(group) - n,
                     "mean": float(scores.mean()) if finite else math.nan, "std": std,
                     "stderr": std / math.sqrt(n) if n > 1 else math.nan,
                     "ci95": t975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan,
                     "episodes": sum(int(m.get("episodes") or 0) for m in counted),
                     "oldest": min((m["iteration"] for m in counted if "iteration" in m), default=None),
                     "best_member": best[1], "best_value": best[0]})
    rows.sort(key=lambda row: (math.isnan(row["mean"]), -sign * row["mean"] if not math.isnan(row["mean"]) else 0.0))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows


def _num(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if _finite(value) else "n/a"


def _value(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def setting_label(values: dict) -> str:
    """{"lr": 0.001, "ent_coef": 0.01} -> "lr=0.001, ent_coef=0.01"."""
    return ", ".join(f"{k}={_value(v)}" for k, v in values.items())


def ranking_text(rows: list, iteration: int | None = None) -> str:
    """`sweep_settings` rows as a fixed-width table: rank, the swept values, members (and missing
    ones, when any), mean ± std of the ranking statistic ("return mean ± std"), its 95% interval
    over seeds, the episodes behind it, best (member); and a line under it where a value comes from
    before `iteration` (the report's: a member whose last window ended no episode counts with its latest)."""
    names = list(dict.fromkeys(k for row in rows for k in row["values"]))
    missing = any(row["missing"] for row in rows)
    stat = statistic_name(rows[0]["key"] if rows else "mean_return")
    stat += " (lowest first)" if rows and rows[0].get("lower_first") else ""
    header = ["rank", *names, "members", *(["missing"] if missing else []), f"{stat} mean ± std", "95% interval",
              "episodes", "best (member)"]
    table = [[str(row["rank"]), *(_value(row["values"].get(n, "")) for n in names),
              str(row["members"]), *([str(row["missing"])] if missing else []),
              _spread(row), _interval(row), str(row.get("episodes", "")),
              f"{_num(row['best_value'])} (#{row['best_member']})" if row["best_member"] is not None else "n/a"]
             for row in rows]
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(len(header))]
    numeric = {0, len(names) + 1, len(header) - 2} | ({len(names) + 2} if missing else set())

    def fmt(line):
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        return "  ".join(cells).rstrip()
    lines = [fmt(line) for line in [header, *table]]
    oldest = min((row["oldest"] for row in rows if row.get("oldest") is not None), default=None)
    if iteration is not None and oldest is not None and oldest < iteration:
        lines.append(f"(a member whose last report ended no episode counts with its latest value: the oldest "
                     f"from iteration {oldest}, of {iteration})")
    return "\n".join(lines)


def _interval(row) -> str:
    """The 95% t interval of a setting's mean over its seeds ("412.10 to 470.30"), n/a below two values."""
    half = row.get("ci95", math.nan)
    return f"{_num(row['mean'] - half)} to {_num(row['mean'] + half)}" if _finite(half) else "n/a"


def _spread(row) -> str:
    """"mean ± std" over a setting's members; the mean alone where one member has a value."""
    return f"{_num(row['mean'])} ± {_num(row['std'])}" if row["members"] - row["missing"] > 1 else _num(row["mean"])


def write_ranking_csv(rows: list, path) -> Path:
    """`sweep_settings` rows as a CSV: rank, the swept names, members, missing, then the ranking
    statistic's STAT_mean, STAT_std, STAT_stderr, STAT_ci95 (the 95% interval's half-width), episodes,
    oldest_iteration, best_member, best_STAT and ranked_by (csv_fields; NaN as "nan", no best member
    as ""; ranked_by is the rank_by, "-NAME" where the lowest ranks first)."""
    names = list(dict.fromkeys(k for row in rows for k in row["values"]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["rank", *names, *csv_fields(rows[0]["key"] if rows else "mean_return")])
        for row in rows:
            writer.writerow([row["rank"], *(row["values"].get(n, "") for n in names), row["members"], row["missing"],
                             repr(row["mean"]), repr(row["std"]), repr(row["stderr"]), repr(row["ci95"]),
                             row["episodes"], "" if row["oldest"] is None else row["oldest"],
                             "" if row["best_member"] is None else row["best_member"], repr(row["best_value"]),
                             ("-" if row.get("lower_first") else "") + row["key"]])
    return path


def csv_fields(key: str) -> tuple:
    """The ranking CSV's columns after the swept names, for the ranking statistic `key` (mean_return:
    members, missing, return_mean, return_std, return_stderr, return_ci95, episodes, oldest_iteration,
    best_member, best_return, ranked_by)."""
    stat = statistic_name(key)
    return ("members", "missing", f"{stat}_mean", f"{stat}_std", f"{stat}_stderr", f"{stat}_ci95", "episodes",
            "oldest_iteration", "best_member", f"best_{stat}", "ranked_by")


def population_summary(report: dict, target: float | None = None) -> str:
    """A population report's returns in one line, from its members' returns: "median return 487.20
    (IQR 470.10 to 500.00) over 64 members", per team for several policies ("returns taggers median
    1.20 (IQR ...), runners median ..."); "; 58 of 64 reached 475" with a `target` (every policy at
    least `target`); with a sweep, the best setting by the mean over its members of the run's ranking
    statistic (rank_key). "" before any episode ended."""
    members = report.get("members") or []
    teams = list(dict.fromkeys(k.split("/", 1)[1] for m in members for k in m if k.startswith("return/")))
    parts, counted = [], set()
    for name in teams:
        values = [m.get(f"return/{name}", math.nan) for m in members]
        q25, median, q75 = quartiles(values)
        if math.isnan(median):
            continue
        counted.update(i for i, v in enumerate(values) if _finite(v))
        parts.append(f"{name + ' ' if len(teams) > 1 else ''}median {_num(median)} (IQR {_num(q25)} to {_num(q75)})")
    if not parts:
        return ""
    M = len(members)
    line = ("median return " + parts[0][len("median "):] if len(teams) == 1 else "returns " + ", ".join(parts))
    line += f" over {M} members" if len(counted) == M else f" over {len(counted)} of {M} members"
    if target is not None:
        reached = sum(all(_finite(m.get(f"return/{n}")) and m[f"return/{n}"] >= target for n in teams)
                      for m in members)
        line += f"; {reached} of {M} reached {target:g}"
    if swept_names(report):
        best = sweep_settings(report)[0]
        if not math.isnan(best["mean"]):
            by = "" if best["key"] == "mean_return" else f"{best['key']} "
            n = best["members"] - best["missing"]  # (the seeds behind the mean: NaN members are left out)
            seeds = f"{n} seed{'s' if n > 1 else ''}" + (f" of {best['members']}" if best["missing"] else "")
            line += (f"; best setting {setting_label(best['values'])} ({by}mean {_num(best['mean'])} over {seeds}"
                     f"{', the lowest ranking first' if best['lower_first'] else ''})")
    return line
