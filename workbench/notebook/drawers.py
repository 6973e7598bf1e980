"""How the rollout viewer draws one trajectory: the `Drawer` base class, and the drawers of envs
that bring none of their own.

An env draws itself through its source (a shipped env in envs/, a `%%warpenv` cell or a registered
source alike): `RENDER = MyDrawer`, a Drawer subclass that makes its artists once in `setup(ax)` and
moves them in `update(k)` with set_data (the fast path; every shipped env has one, beside its
phases), or a `draw(frame, ax)` function, called once per frame (`FunctionDrawer`). An env with
neither is drawn as points when it has per-agent positions (`PointsDrawer`), else as a strip of
its state arrays (`StripDrawer`). workbench.notebook.render picks the drawer and turns it into frames.
"""
from __future__ import annotations

import math
import types

import numpy as np

from ..learn.report import GROUP_COLOURS, team_colour  # noqa: F401 - one colour per team in every figure

_CYCLE = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _before_each(rewards: np.ndarray) -> np.ndarray:
    """Return so far at each frame: frame k shows the state before step k, after steps 0 .. k-1."""
    return np.concatenate([[0.0], np.cumsum(rewards)[:-1]]) if len(rewards) else np.zeros(0)


class Drawer:
    """Draws one env's frames: `setup(ax)` makes the artists once (fixed limits, no autoscale),
    `update(k)` moves them to frame k of the trajectory with set_data/set_xy only."""
    figsize = (4.8, 3.6)

    def __init__(self, trajectory: dict, params: dict, groups: dict | None = None, name: str = ""):
        self.traj = trajectory
        self.p = types.SimpleNamespace(**params)
        self.groups = groups or {}
        self.name = name
        reward = np.asarray(trajectory.get("reward", np.zeros((len(self),))), dtype=np.float64)
        reward = reward.reshape(len(reward), -1) if reward.size else np.zeros((len(self), 1))
        # the return so far of each team (mean over its agents): averaging taggers with runners hides both
        teams = {name: np.asarray(list(ids), dtype=np.int64) for name, ids in self.groups.items()
                 if len(ids) and max(ids) < reward.shape[1]}
        self.team_returns = ({name: _before_each(reward[:, ids].mean(axis=1)) for name, ids in teams.items()}
                             if len(teams) > 1 else {})
        self.returns = _before_each(reward.mean(axis=1))
        self.info = None
        self.captions = [""] * len(self)

    def __len__(self):
        return len(self.traj["t"])

    def setup(self, ax) -> list:
        raise NotImplementedError

    def update(self, k: int) -> None:
        raise NotImplementedError

    def make_info(self, ax):
        """The per-frame caption as a text artist (for mp4; the HTML player shows it beside the image,
        as drawing glyphs costs more than the rest of a frame)."""
        self.info = ax.text(0.02, 0.97, "", transform=ax.transAxes, va="top", ha="left", fontsize=8,
                            family="monospace")
        return self.info

    def _ending(self, k: int) -> str:
        """How the episode ended, on its terminal frame (the state after its last step)."""
        if not self.traj.get("terminal_frame") or k != len(self) - 1:
            return ""
        if "terminated" in self.traj and bool(np.any(self.traj["terminated"][k])):
            return "  (terminated)"
        return "  (truncated: time limit)" if "truncated" in self.traj and bool(np.any(self.traj["truncated"][k])) \
            else ""

    def set_info(self, k: int, extra: str = ""):
        """Frame k's caption: t, the return of the steps before frame k (each team's when there are
        several; the whole episode's on the frame of the state it ended in), then `extra`."""
        if self.team_returns:
            ret = "return " + " ".join(f"{name}={values[k]:+.2f}" for name, values in self.team_returns.items())
        else:
            ret = f"return={self.returns[k]:.2f}"
        self.captions[k] = f"t={int(self.traj['t'][k])} {ret}{extra}{self._ending(k)}"
        if self.info is not None and self.info.get_visible():
            self.info.set_text(self.captions[k])


def spread_stacked(xs: np.ndarray, ys: np.ndarray, radius: float = 0.25) -> tuple:
    """Positions [T, A] on a grid with the agents that share a cell in a frame moved onto a circle
    of `radius` cells around it (an agent alone on its cell stays where it is)."""
    xs, ys = xs.copy(), ys.copy()
    cells = np.rint(xs).astype(np.int64) * (2 ** 31) + np.rint(ys).astype(np.int64)
    for k in range(len(cells)):
        order = np.argsort(cells[k], kind="stable")
        sorted_cells = cells[k][order]
        starts = np.flatnonzero(np.r_[True, sorted_cells[1:] != sorted_cells[:-1]])
        counts = np.diff(np.r_[starts, len(order)])
        if counts.max(initial=1) == 1:
            continue
        rank = np.arange(len(order)) - np.repeat(starts, counts)
        count = np.repeat(counts, counts)
        angle = 2 * np.pi * rank / count + np.pi / 4
        shared = count > 1
        xs[k, order[shared]] += radius * np.cos(angle[shared])
        ys[k, order[shared]] += radius * np.sin(angle[shared])
    return xs, ys


class PointsDrawer(Drawer):
    """Agents as points at per-agent (x, y) (or any per-agent array of pairs), one Line2D per agent
    group: the drawing of an env with per-agent positions and no drawer of its own, and the base of
    drawers of agents on a plane (Tag's). `grid`: agents on integer cells (square markers, cell
    lines, the limits half a cell out, agents that share a cell drawn around it)."""
    figsize = (4.6, 5.0)
    grid = False

    def positions(self):
        if "x" in self.traj and "y" in self.traj:
            return np.asarray(self.traj["x"], np.float64), np.asarray(self.traj["y"], np.float64)
        pos = next(v for k, v in self.traj.items() if isinstance(v, np.ndarray) and v.ndim == 3 and v.shape[-1] == 2
                   and k not in ("obs", "action"))
        return np.asarray(pos[..., 0], np.float64), np.asarray(pos[..., 1], np.float64)

    def limits(self, xs, ys):
        side = getattr(self.p, "grid_length", None)
        if side is not None:
            return (0.0, float(side)), (0.0, float(side))
        pad = 0.05 * max(np.ptp(xs), np.ptp(ys), 1e-6)
        return (xs.min() - pad, xs.max() + pad), (ys.min() - pad, ys.max() + pad)

    def setup(self, ax):
        self.xs, self.ys = self.positions()
        if self.grid:  # agents sharing a cell drawn apart, around its centre, so each one shows
            self.xs, self.ys = spread_stacked(self.xs, self.ys)
        n = self.xs.shape[1]
        (x0, x1), (y0, y1) = self.limits(self.xs, self.ys)
        margin = 0.5 if self.grid else 0.03 * max(x1 - x0, y1 - y0)  # half a cell: edge squares stay whole
        ax.set_xlim(x0 - margin, x1 + margin)
        ax.set_ylim(y0 - margin, y1 + margin + 0.08 * (y1 - y0 + 2 * margin))  # (room for the caption)
        ax.set_aspect("equal")
        if self.grid and x1 - x0 <= 40:
            for v in range(int(x0), int(x1) + 1):
                ax.axvline(v, color="0.9", lw=0.6, zorder=0)
                ax.axhline(v, color="0.9", lw=0.6, zorder=0)
        groups = {k: np.asarray(list(v), dtype=np.int64) for k, v in self.groups.items()} or {"agents": np.arange(n)}
        self.size = float(np.clip(40.0 / math.sqrt(n), 1.5, 9.0))
        self.lines = []
        marker = "s" if self.grid else "o"
        for i, (gname, ids) in enumerate(groups.items()):
            colour = team_colour(gname, i)
            # no marker edges and no alpha: Agg stamps one cached marker per agent, the cheapest path
            (line,) = ax.plot([], [], marker, ls="none", ms=self.size, color=colour, label=f"{gname} ({len(ids)})",
                              mew=0.0)
            self.lines.append((line, ids))
        artists = self.moving_artists(ax)
        legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.03), ncol=2, fontsize=9, frameon=False,
                           handletextpad=0.3, columnspacing=1.2)
        for handle in getattr(legend, "legend_handles", None) or legend.legendHandles:
            handle.set_markersize(7.0)  # legible whatever the agents' marker size
        return artists + [self.make_info(ax)]

    def moving_artists(self, ax) -> list:
        """The artists that move, in drawing order (blitting draws them in list order): here the
        groups' lines; a subclass adds its own to `ax` (they join the legend)."""
        return [line for line, _ in self.lines]

    def drawn_agents(self) -> int:
        """Agents drawn in the frame last set by `update`."""
        return sum(len(line.get_xdata()) for line, _ in self.lines)

    def move_agents(self, k: int, shown=None) -> None:
        """Move each group's points to frame k; only the agents where `shown` [A] is true, when given."""
        xs, ys = self.xs[k], self.ys[k]
        for line, ids in self.lines:
            keep = ids if shown is None else ids[shown[ids]]
            line.set_data(xs[keep], ys[keep])

    def update(self, k):
        self.move_agents(k)
        self.set_info(k)


class StripDrawer(Drawer):
    """Fallback for any env: every per-agent scalar state array as points on its own row (x = value),
    per-env scalars as diamonds on theirs; limits from the whole trajectory."""
    figsize = (4.8, 2.6)

    def setup(self, ax):
        skip = {"t", "done", "terminated", "truncated", "reward", "action", "obs", "episode"}
        rows = [(k, np.asarray(v, np.float64).reshape(len(self), -1)) for k, v in self.traj.items()
                if isinstance(v, np.ndarray) and k not in skip and v.ndim in (1, 2) and len(v) == len(self)]
        if not rows:  # nothing but obs: show agent 0's observation vector
            obs = np.asarray(self.traj["obs"], np.float64).reshape(len(self), -1)
            rows = [(f"obs[{i}]", obs[:, i:i + 1]) for i in range(min(obs.shape[1], 8))]
        self.rows = rows[:8]
        values = np.concatenate([v.reshape(-1) for _, v in self.rows])
        values = values[np.isfinite(values)]
        lo, hi = (values.min(), values.max()) if values.size else (-1.0, 1.0)
        pad = 0.05 * max(hi - lo, 1e-6)
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(-0.7, len(self.rows) - 0.3)
        ax.set_yticks(range(len(self.rows)), [k for k, _ in self.rows], fontsize=8)
        self.lines = []
        for i, (_, v) in enumerate(self.rows):
            (line,) = ax.plot([], [], "o" if v.shape[1] > 1 else "D", ls="none", color=_CYCLE[i % len(_CYCLE)],
                              ms=float(np.clip(40.0 / math.sqrt(v.shape[1]), 2.0, 8.0)))
            self.lines.append(line)
        return self.lines + [self.make_info(ax)]

    def update(self, k):
        for i, (line, (_, v)) in enumerate(zip(self.lines, self.rows)):
            line.set_data(v[k], np.full(v.shape[1], float(i)))
        self.set_info(k)


class FunctionDrawer(Drawer):
    """An env's own `draw(frame, ax)`: called once per frame with that step's arrays (per-env
    arrays as scalars, per-agent arrays [A, ...], plus t, obs, reward, action and `params`, the
    env's PARAMS as attributes); whatever artists it adds to `ax` are that frame's drawing. Its
    first call also fixes the axes (limits, aspect, static decorations such as goals or walls drawn
    with `frame["static"]` true): later changes to the limits are not shown."""
    figsize = (4.6, 4.6)
    dynamic = True

    def __init__(self, trajectory, params, groups, name, draw):
        super().__init__(trajectory, params, groups, name)
        self.draw = draw
        self.ax = None
        self.current: list = []

    def frame(self, k: int, static: bool = False) -> dict:
        out = {key: (v[k] if np.ndim(v) >= 1 and len(v) == len(self) else v) for key, v in self.traj.items()
               if isinstance(v, np.ndarray)}
        out.update(params=self.p, groups=self.groups, static=static, step=k)
        return {key: (v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v) for key, v in out.items()}

    def setup(self, ax):
        self.ax = ax
        self.draw(self.frame(0, static=True), ax)  # the static part stays in the background
        return [self.make_info(ax)]

    def _artists(self):
        ax = self.ax
        return set(ax.lines) | set(ax.patches) | set(ax.collections) | set(ax.texts) | set(ax.images)

    def update(self, k):
        for artist in self.current:
            artist.remove()
        before = self._artists()
        self.draw(self.frame(k), self.ax)
        self.current = [a for a in self._artists() - before]
        for artist in self.current:
            artist.set_animated(True)
        self.set_info(k)

