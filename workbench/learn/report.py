"""Run-folder outputs: the learning curve as a PNG."""
from __future__ import annotations

import math
from pathlib import Path


def plot_learning_curve(history: list, path, title: str = "") -> Path:
    """Mean return per policy against env-steps (and throughput), saved as a PNG."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = [m["env_steps"] for m in history]
    keys = sorted({k for m in history for k in m if k.startswith("return/")})
    for key in keys:
        pts = [(s, m[key]) for s, m in zip(steps, history) if key in m and not math.isnan(m[key])]
        if pts:
            ax.plot(*zip(*pts), label=key.split("/", 1)[1])
    ax.set_xlabel("env-steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(title or "learning curve")
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    ax2.plot(steps, [m["env_steps_per_s"] / 1e6 for m in history], color="tab:green")
    ax2.set_xlabel("env-steps")
    ax2.set_ylabel("M env-steps/s (learning included)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
