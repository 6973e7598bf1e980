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


def plot_learning_curve(history: list, path, title: str = "") -> Path:
    """Mean return per policy against env-steps (and throughput), saved as a PNG."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = [m["env_steps"] for m in history]
    keys = list(dict.fromkeys(k for m in history for k in m if k.startswith("return/")))
    for index, key in enumerate(keys):
        name = key.split("/", 1)[1]
        pts = [(s, m[key]) for s, m in zip(steps, history) if key in m and not math.isnan(m[key])]
        if pts:
            label = "policy" if name == "shared" and len(keys) == 1 else name
            ax.plot(*zip(*pts), label=label, color=team_colour(name, index))
    ax.set_xlabel("env-steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(title or "learning curve")
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    rates = [float(m.get("env_steps_per_s", math.nan)) for m in history]
    scale, unit = rate_unit(max((r for r in rates if math.isfinite(r)), default=0.0))
    ax2.plot(steps, [r / scale for r in rates], color="0.2")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("env-steps")
    ax2.set_ylabel(f"{unit + ' ' if unit else ''}env-steps/s (learning included)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def returns_text(metrics: dict) -> str:
    """"mean return 21.30" for one policy, "returns taggers 1.20, runners -1.20" for several (their
    mean says nothing when teams play against each other); "" before any episode ended."""
    teams = [(k.split("/", 1)[1], float(v)) for k, v in metrics.items()
             if k.startswith("return/") and isinstance(v, (int, float)) and math.isfinite(v)]
    if len(teams) == 1:
        return f"mean return {teams[0][1]:.2f}"
    return "returns " + ", ".join(f"{name} {value:.2f}" for name, value in teams) if teams else ""
