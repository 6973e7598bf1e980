"""Run-folder outputs: the learning curve as a PNG, the colour of each team in every figure (the
panel's curves and the rollout viewer's agents use `team_colour` too), and the returns said in one line."""
from __future__ import annotations

import math
from pathlib import Path

# the colour of a policy group everywhere: the viewer's agents, the panel's curves, learning_curve.png
GROUP_COLOURS = {"taggers": "tab:red", "runners": "tab:blue", "tagger": "tab:red", "runner": "tab:blue"}
# other teams by their index; red is left out (taggers'), blue comes first (a single policy's)
TEAM_CYCLE = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def team_colour(name: str, index: int = 0) -> str:
    """The colour of team (policy group) `name`, the `index`-th of its run: taggers red, runners
    blue, a single policy blue, other teams by their index."""
    if name in GROUP_COLOURS:
        return GROUP_COLOURS[name]
    if name in ("shared", "policy", "agents"):
        return TEAM_CYCLE[0]
    return TEAM_CYCLE[index % len(TEAM_CYCLE)]


def rate_unit(top: float) -> tuple:
    """(scale, unit) for a throughput axis whose largest value is `top`: 28000 -> (1e3, "k")."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if top >= scale:
            return scale, unit
    return 1.0, ""


def plot_learning_curve(history: list, path, title: str = "", frozen=()) -> Path:
    """Mean return per policy against env-steps (and throughput), saved as a PNG; the policies in
    `frozen` marked so in the legend. A population's history (reports with "members"): medians over
    members with interquartile bands (`plot_population`)."""
    from matplotlib.figure import Figure  # (not pyplot: a notebook's backend and figures stay as they were)

    fig = Figure(figsize=(10, 3.6))
    ax, ax2 = fig.subplots(1, 2)
    steps = [m["env_steps"] for m in history]
    population = [m for m in history if m.get("members")]
    ylabel, per_member = "mean episode return", ""
    if population:
        title = f"{title or 'learning curve'} ({plot_population(ax, population, frozen)})"
        from .ranking import rank_key, swept_names
        swept = swept_names(population[-1])
        statistic = rank_key(population[-1]) if swept else "mean_return"
        ylabel = "mean episode return" if statistic == "mean_return" else statistic
        per_member = " per member"
        if ax.get_legend() is not None:
            ax.get_legend().set_title(f"median over {'seeds' if swept else 'members'}, IQR band",
                                      prop={"size": "small"})
    else:
        plot_returns(ax, history, frozen)
    for axis in (ax, ax2):
        axis.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))  # (1e6, not 1000000 run together)
    ax.set_xlabel("env-steps" + per_member)
    ax.set_ylabel(ylabel)
    ax.set_title(title or "learning curve")
    ax.grid(alpha=0.3)
    rates = [float(m.get("env_steps_per_s", math.nan)) for m in history]
    scale, unit = rate_unit(max((r for r in rates if math.isfinite(r)), default=0.0))
    ax2.plot(steps, [r / scale for r in rates], color="0.2")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("env-steps" + per_member)
    ax2.set_ylabel(f"{unit + ' ' if unit else ''}env-steps/s")
    ax2.set_title("throughput, learning included" + (", all members" if per_member else ""))
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def plot_returns(ax, history: list, frozen=()) -> None:
    """A single run's mean return per policy on `ax`, in its team's colour (a policy in `frozen`
    marked so in the legend), and dashed each agent group's that a policy over several groups plays
    (group_return/NAME); a note where no episode ended yet."""
    keys = list(dict.fromkeys(k for m in history for k in m if k.startswith("return/")))
    groups = list(dict.fromkeys(k for m in history for k in m if k.startswith("group_return/")))
    for index, key in enumerate(keys + groups):
        name = key.split("/", 1)[1]
        pts = [(m["env_steps"], m[key]) for m in history if key in m and not math.isnan(m[key])]
        if pts:
            label = "policy" if name == "shared" and len(keys) == 1 and not groups else name
            ax.plot(*zip(*pts), label=label + (" (frozen)" if name in frozen else ""), color=team_colour(name, index),
                    linestyle="--" if key in groups else "-")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    else:
        ax.text(0.5, 0.5, "no episode ended yet", ha="center", va="center", transform=ax.transAxes, color="0.4")


def plot_population(ax, history: list, frozen=()) -> str:
    """A population's returns on `ax` (`ranking.population_curves`): each curve's median with its
    interquartile band, in its team's colour (without a sweep; each member thin too when there are at
    most 8) or its setting's (tab10, with a sweep). Returns "M members" (", G settings") for the title."""
    from .ranking import population_curves

    curves = population_curves(history)
    tab10 = matplotlib_colours("tab10")
    handles, labels = [], []
    for index, curve in enumerate(curves["curves"]):
        colour = team_colour(curve["team"], index) if curve["team"] is not None else tab10[index % len(tab10)]
        band = ax.fill_between(curve["steps"], curve["q25"], curve["q75"], color=colour, alpha=0.25, linewidth=0)
        (line,) = ax.plot(curve["steps"], curve["median"], color=colour, linewidth=1.8)
        handles.append((band, line))
        labels.append(curve["label"] + (" (frozen)" if curve["team"] in frozen else ""))
        for xs, ys in curve["members"].values():
            ax.plot(xs, ys, color=colour, linewidth=0.6, alpha=0.4)
    if handles:
        ax.legend(handles, labels, loc="best", fontsize="small")
    M, settings = curves["num_members"], curves["settings"]
    return f"{M} members" + (f", {settings} settings" if curves["swept"] else "")


def matplotlib_colours(name: str) -> list:
    """The colours of matplotlib's qualitative colour map `name` ("tab10": 10 RGB tuples)."""
    import matplotlib
    return list(matplotlib.colormaps[name].colors)


def learning_returns(metrics: dict, frozen=()) -> list:
    """The return of every policy that learns (not in `frozen`) in each member's report (a single
    run's own): NaN where no episode ended yet."""
    return [v for report in metrics.get("members", [metrics]) for k, v in report.items()
            if k.startswith("return/") and k[len("return/"):] not in frozen]


def reached(metrics: dict, target: float, frozen=()) -> bool:
    """target_return's rule: every learning policy's return is at least `target`, in every member."""
    returns = learning_returns(metrics, frozen)
    return bool(returns) and all(isinstance(v, (int, float)) and v >= target for v in returns)  # (NaN: not)


def returns_text(metrics: dict, frozen=()) -> str:
    """"mean return 21.30" for one policy, "returns taggers 1.20, runners -1.20" for several (their
    mean says nothing when teams play against each other; a policy in `frozen` marked so); "" before
    any episode ended. A population report (with "members"): `ranking.population_summary`, the median
    and quartiles over its members."""
    if metrics.get("members"):
        from .ranking import population_summary
        return population_summary(metrics)
    teams = [(k.split("/", 1)[1], float(v)) for k, v in metrics.items()
             if k.startswith("return/") and isinstance(v, (int, float)) and math.isfinite(v)]
    if len(teams) == 1:
        return f"mean return {teams[0][1]:.2f}"
    return "returns " + ", ".join(f"{name} {value:.2f}" + (" (frozen)" if name in frozen else "")
                                  for name, value in teams) if teams else ""


def run_folder_contents(run_dir: Path) -> str:
    """What a run folder holds, read from the disk (the last line of train and demo)."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir()) if run_dir.is_dir() else []
    return f"run folder {run_dir}: {', '.join(names) or 'nothing'}"
