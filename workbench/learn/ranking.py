"""A population's results: its sweep settings ranked by the members' final mean return (as rows, a
fixed-width table and a CSV), and the population's returns said in one line (median and quartiles
over the members)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .config import SWEEPABLE

HYPERPARAMETERS = tuple(dict.fromkeys(name for names in SWEEPABLE.values() for name in names))
CSV_FIELDS = ("members", "missing", "return_mean", "return_std", "best_member", "best_return")


def swept_names(report: dict) -> list:
    """The swept hyperparameters of a population report: the sweepable names (config.SWEEPABLE) that
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


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def quartiles(values) -> tuple:
    """(q25, median, q75) of the finite values (linear interpolation), NaNs when none is finite."""
    finite = [float(v) for v in values if _finite(v)]
    if not finite:
        return (math.nan,) * 3
    return tuple(float(q) for q in np.percentile(finite, [25, 50, 75]))


def population_curves(history: list, thin_up_to: int = 8) -> dict:
    """The curves of a population's history (reports with "members"), from the members' values at
    each report (NaN members left out, reports where none has a value skipped): {num_members,
    swept (names), settings (count), curves: [{label, team (policy name, None with a sweep), key,
    steps, q25, median, q75 (lists of one length), members: {member: (steps, values)} (each member's
    own finite points; only without a sweep and at most `thin_up_to` members)}]}. Without a sweep
    one curve per team of return/NAME, labelled "NAME median (M members), IQR band"; with a sweep
    one curve of mean_return per setting over its seeds, labelled by the setting ("lr=0.001")."""
    history = [m for m in history if m.get("members")]
    final = history[-1]
    M = int(final.get("num_members", len(final["members"])))
    swept = swept_names(final)
    members = [dict(m, member=m.get("member", i)) for i, m in enumerate(final["members"])]
    settings = settings_of(members, swept)
    if swept:
        series = [("mean_return", [m["member"] for m in group], None, setting_label(dict(zip(swept, values))))
                  for values, group in settings.items()]
    else:
        teams = list(dict.fromkeys(k.split("/", 1)[1] for m in members for k in m if k.startswith("return/")))
        series = [(f"return/{name}", [m["member"] for m in members], name,
                   f"{'policy' if name == 'shared' and len(teams) == 1 else name} median ({M} members), IQR band")
                  for name in teams]
    reports = [(m["env_steps"], {r.get("member", i): r for i, r in enumerate(m["members"])}) for m in history]
    curves = []
    for key, group, team, label in series:
        points = [(s, *quartiles([by[k].get(key, math.nan) for k in group if k in by])) for s, by in reports]
        points = [p for p in points if not math.isnan(p[2])]
        if not points:
            continue
        steps, q25, median, q75 = (list(column) for column in zip(*points))
        own = {}
        if not swept and M <= thin_up_to:
            for k in group:
                finite = [(s, float(by[k][key])) for s, by in reports if k in by and _finite(by[k].get(key))]
                if finite:
                    own[k] = tuple(list(column) for column in zip(*finite))
        curves.append({"label": label, "team": team, "key": key, "steps": steps, "q25": q25, "median": median,
                       "q75": q75, "members": own})
    return {"num_members": M, "swept": swept, "settings": len(settings), "curves": curves}


def sweep_settings(report: dict, swept: list | None = None) -> list:
    """One row per sweep setting of a population report's members, best first (NaN means last):
    {rank, values: {name: value}, members (count), missing (members whose mean_return is NaN), mean,
    std (sample std of the finite mean_returns; 0 for one), best_member (its `member` index; None
    when all are missing), best_return}. `swept`: the names that tell settings apart (default
    `swept_names(report)`)."""
    members = report.get("members") or [dict(report, member=0)]
    swept = swept_names(report) if swept is None else list(swept)
    rows = []
    for values, group in settings_of(members, swept).items():
        returns = [(m.get("mean_return", math.nan), m.get("member", i)) for i, m in enumerate(group)]
        finite = [(float(r), k) for r, k in returns if _finite(r)]
        scores = np.array([r for r, _ in finite])
        best = max(finite, key=lambda rk: rk[0]) if finite else (math.nan, None)
        rows.append({"values": dict(zip(swept, values)), "members": len(group), "missing": len(group) - len(finite),
                     "mean": float(scores.mean()) if finite else math.nan,
                     "std": float(scores.std(ddof=1)) if len(finite) > 1 else (0.0 if finite else math.nan),
                     "best_member": best[1], "best_return": best[0]})
    rows.sort(key=lambda row: (math.isnan(row["mean"]), -row["mean"] if not math.isnan(row["mean"]) else 0.0))
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


def ranking_text(rows: list) -> str:
    """`sweep_settings` rows as a fixed-width table: rank, the swept values, members (and missing
    ones, when any), return mean ± std, best (member)."""
    names = list(dict.fromkeys(k for row in rows for k in row["values"]))
    missing = any(row["missing"] for row in rows)
    header = ["rank", *names, "members", *(["missing"] if missing else []), "return mean ± std", "best (member)"]
    table = [[str(row["rank"]), *(_value(row["values"].get(n, "")) for n in names),
              str(row["members"]), *([str(row["missing"])] if missing else []),
              f"{_num(row['mean'])} ± {_num(row['std'])}",
              f"{_num(row['best_return'])} (#{row['best_member']})" if row["best_member"] is not None else "n/a"]
             for row in rows]
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(len(header))]
    numeric = {0, len(names) + 1} | ({len(names) + 2} if missing else set())

    def fmt(line):
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        return "  ".join(cells).rstrip()
    return "\n".join(fmt(line) for line in [header, *table])


def write_ranking_csv(rows: list, path) -> Path:
    """`sweep_settings` rows as a CSV: rank, the swept names, then CSV_FIELDS (NaN as "nan", no best
    member as "")."""
    names = list(dict.fromkeys(k for row in rows for k in row["values"]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["rank", *names, *CSV_FIELDS])
        for row in rows:
            writer.writerow([row["rank"], *(row["values"].get(n, "") for n in names), row["members"], row["missing"],
                             repr(row["mean"]), repr(row["std"]),
                             "" if row["best_member"] is None else row["best_member"], repr(row["best_return"])])
    return path


def population_summary(report: dict, target: float | None = None) -> str:
    """A population report's returns in one line, from its members' returns: "median return 487.20
    (IQR 470.10 to 500.00) over 64 members", per team for several policies ("returns taggers median
    1.20 (IQR ...), runners median ..."); "; 58 of 64 reached 475" with a `target` (every policy at
    least `target`); with a sweep, the best setting by mean over its members. "" before any episode
    ended."""
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
            line += (f"; best setting {setting_label(best['values'])} (mean {_num(best['mean'])} over "
                     f"{best['members']} seeds)")
    return line
