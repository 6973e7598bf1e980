"""Rollout viewer: pulled trajectories drawn per env, played in the notebook by a small HTML/JS
player with a frame slider, or written to mp4 through ffmpeg.

A trajectory is one entry of `env.pull_trajectories()`: host arrays [T, ...] of the env's state
(per-env arrays [T], per-agent arrays [T, A]) before each step, plus obs, t, action, reward, done.
Each env family has a `Drawer` that makes its artists once and moves them with `set_data` (agents
of a group share ONE Line2D with point markers: thousands of agents stay cheap); frames are drawn
by blitting onto a fixed background.

    anim = render.show(env.pull_trajectories(), env)     # displays in a notebook (_repr_html_)
    anim.save_html("run.html"); anim.save_mp4("run.mp4")
    render.record_policy_animation(trainer, "policy.html")
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import shutil
import types
import uuid
import warnings
from pathlib import Path

import numpy as np

from .errors import WorkbenchError

GROUP_COLOURS = {"taggers": "tab:red", "runners": "tab:blue"}
_CYCLE = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


class FFmpegNotFoundError(WorkbenchError, RuntimeError):
    """Neither imageio-ffmpeg's binary nor a system ffmpeg is present (or ffmpeg-python is missing)."""


class EmbedLimitError(WorkbenchError, ValueError):
    """The frames of an animation exceed the embed limit and on_limit="raise" was asked for."""


class EmbedLimitWarning(UserWarning):
    """An animation shows every k-th step only, to stay under the embed limit."""


# ---- drawers -------------------------------------------------------------------------------------

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
        self.team_returns = ({name: np.cumsum(reward[:, ids].mean(axis=1)) for name, ids in teams.items()}
                             if len(teams) > 1 else {})
        self.returns = np.cumsum(reward.mean(axis=1))
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

    def set_info(self, k: int, extra: str = ""):
        if self.team_returns:
            ret = "return " + " ".join(f"{name}={values[k]:+.2f}" for name, values in self.team_returns.items())
        else:
            ret = f"return={self.returns[k]:.2f}"
        self.captions[k] = f"t={int(self.traj['t'][k])} {ret}{extra}"
        if self.info is not None and self.info.get_visible():
            self.info.set_text(self.captions[k])


class CartPoleDrawer(Drawer):
    """Cart (a rectangle on a track) and pole (a line of length 2 * length)."""
    figsize = (7.2, 2.9)  # the aspect of the track and pole: no blank bands around them

    def setup(self, ax):
        from matplotlib.patches import Rectangle
        lim = getattr(self.p, "x_threshold", 2.4) * 1.12
        pole = 2 * getattr(self.p, "length", 0.5)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-0.25, pole + 0.35)
        ax.set_aspect("equal")
        ax.plot([-lim, lim], [0, 0], color="0.3", lw=1)
        for edge in (-self.p.x_threshold, self.p.x_threshold):
            ax.axvline(edge, color="tab:red", lw=0.8, ls=":")
        self.cart = Rectangle((0, -0.1), 0.5, 0.3, color="0.25")
        ax.add_patch(self.cart)
        (self.pole,) = ax.plot([], [], color="tab:orange", lw=4, solid_capstyle="round")
        self.pole_len = pole
        return [self.cart, self.pole, self.make_info(ax)]

    def update(self, k):
        x, th = float(self.traj["x"][k]), float(self.traj["theta"][k])
        self.cart.set_xy((x - 0.25, -0.1))
        self.pole.set_data([x, x + self.pole_len * math.sin(th)], [0.2, 0.2 + self.pole_len * math.cos(th)])
        self.set_info(k)


class AcrobotDrawer(Drawer):
    """Two links hanging from a pivot; the dashed line is the height the tip must reach."""
    figsize = (3.6, 3.6)

    def setup(self, ax):
        reach = self.p.link_length_1 + self.p.link_length_2 + 0.2
        ax.set_xlim(-reach, reach)
        ax.set_ylim(-reach, reach)
        ax.set_aspect("equal")
        ax.axhline(1.0, color="0.5", ls="--", lw=0.8)
        (self.links,) = ax.plot([], [], "-o", color="tab:blue", lw=4, ms=6, mfc="tab:orange")
        return [self.links, self.make_info(ax)]

    def update(self, k):
        t1, t2 = float(self.traj["theta1"][k]), float(self.traj["theta2"][k])
        x1, y1 = self.p.link_length_1 * math.sin(t1), -self.p.link_length_1 * math.cos(t1)
        x2, y2 = x1 + self.p.link_length_2 * math.sin(t1 + t2), y1 - self.p.link_length_2 * math.cos(t1 + t2)
        self.links.set_data([0.0, x1, x2], [0.0, y1, y2])
        self.set_info(k)


class MountainCarDrawer(Drawer):
    """The hill y = 0.45 sin(3x) + 0.55, the car on it and the goal flag."""
    figsize = (4.8, 3.2)

    @staticmethod
    def height(x):
        return np.sin(3 * np.asarray(x)) * 0.45 + 0.55

    def setup(self, ax):
        xs = np.linspace(self.p.min_position, self.p.max_position, 200)
        ax.set_xlim(self.p.min_position, self.p.max_position)
        ax.set_ylim(0.0, 1.15)
        ax.plot(xs, self.height(xs), color="0.3")
        goal = self.p.goal_position
        ax.plot([goal, goal], [self.height(goal), self.height(goal) + 0.12], color="0.2")
        ax.plot([goal], [self.height(goal) + 0.12], ">", color="gold", ms=10)
        (self.car,) = ax.plot([], [], "s", color="tab:blue", ms=10)
        return [self.car, self.make_info(ax)]

    def update(self, k):
        x = float(self.traj["position"][k])
        self.car.set_data([x], [float(self.height(x)) + 0.03])
        action = self.traj.get("action")
        extra = ""
        if action is not None and action.ndim >= 3:  # continuous: [T, 1, 1]
            extra = f" force={float(action[k].reshape(-1)[0]):+.2f}"
        self.set_info(k, extra)


class PendulumDrawer(Drawer):
    """A rod from the pivot (theta = 0 is upright) and the applied torque."""
    figsize = (3.6, 3.6)

    def setup(self, ax):
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_aspect("equal")
        ax.plot([0], [0], "o", color="0.2")
        (self.rod,) = ax.plot([], [], color="tab:red", lw=5, solid_capstyle="round")
        return [self.rod, self.make_info(ax)]

    def update(self, k):
        th = float(self.traj["theta"][k])
        self.rod.set_data([0.0, math.sin(th)], [0.0, math.cos(th)])
        action = self.traj.get("action")
        self.set_info(k, f" torque={float(action[k].reshape(-1)[0]):+.2f}" if action is not None else "")


class PointsDrawer(Drawer):
    """Agents as points at per-agent (x, y), one Line2D per agent group; agents whose in_game
    flag is 0 are drawn as grey crosses (Tag's tagged runners), and a runner tagged in the last
    few steps is circled in black (the tag itself)."""
    figsize = (4.6, 5.0)
    grid = False
    tag_mark_frames = 4  # a tag stays circled this many frames, so it is seen while playing

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
        n = self.xs.shape[1]
        (x0, x1), (y0, y1) = self.limits(self.xs, self.ys)
        margin = 0.5 if self.grid else 0.03 * max(x1 - x0, y1 - y0)  # half a cell: edge squares stay whole
        ax.set_xlim(x0 - margin, x1 + margin)
        ax.set_ylim(y0 - margin, y1 + margin)
        ax.set_aspect("equal")
        if self.grid and x1 - x0 <= 40:
            for v in range(int(x0), int(x1) + 1):
                ax.axvline(v, color="0.9", lw=0.6, zorder=0)
                ax.axhline(v, color="0.9", lw=0.6, zorder=0)
        groups = {k: np.asarray(list(v), dtype=np.int64) for k, v in self.groups.items()} or {"agents": np.arange(n)}
        size = float(np.clip(40.0 / math.sqrt(n), 1.5, 9.0))
        self.in_game = np.asarray(self.traj["in_game"]) != 0 if "in_game" in self.traj else None
        self.lines = []
        marker = "s" if self.grid else "o"
        for i, (gname, ids) in enumerate(groups.items()):
            colour = GROUP_COLOURS.get(gname, _CYCLE[i % len(_CYCLE)])
            # no marker edges and no alpha: Agg stamps one cached marker per agent, the cheapest path
            (line,) = ax.plot([], [], marker, ls="none", ms=size, color=colour, label=f"{gname} ({len(ids)})",
                              mew=0.0)
            self.lines.append((line, ids))
        # taggers are few: drawn last (blitting draws in list order) and larger, so runners never hide them
        artists = sorted((line for line, _ in self.lines), key=lambda line: line.get_label().startswith("taggers"))
        for line in artists:
            if line.get_label().startswith("taggers"):
                line.set_markersize(max(1.8 * size, 5.0))
        self.out = self.tag_ring = None
        if self.in_game is not None:
            (self.out,) = ax.plot([], [], "x", ls="none", ms=size, color="0.55", label="out of the game")
            # tagged[k, a]: agent a left the game between frames k - 1 and k (frame k is the first without it)
            left = np.zeros_like(self.in_game)
            left[1:] = self.in_game[:-1] & ~self.in_game[1:]
            self.tag_step = np.where(left.any(axis=0), left.argmax(axis=0), -1)
            self.tags_so_far = np.cumsum(left.sum(axis=1))
            (self.tag_ring,) = ax.plot([], [], "o", ls="none", ms=max(2.2 * size, 7.0), mfc="none", mec="black",
                                       mew=1.2, label="tagged")
            artists += [self.out, self.tag_ring]
        artists.sort(key=lambda a: (a is self.tag_ring and a is not None, a.get_label().startswith("taggers")))
        legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.03), ncol=2, fontsize=9, frameon=False,
                           handletextpad=0.3, columnspacing=1.2)
        for handle in getattr(legend, "legend_handles", None) or legend.legendHandles:
            handle.set_markersize(7.0)  # legible whatever the agents' marker size
        return artists + [self.make_info(ax)]

    def drawn_agents(self) -> int:
        """Agents drawn in the frame last set by `update` (in the game plus crossed out)."""
        count = sum(len(line.get_xdata()) for line, _ in self.lines)
        return count + (len(self.out.get_xdata()) if self.out is not None else 0)

    def update(self, k):
        xs, ys = self.xs[k], self.ys[k]
        playing = self.in_game[k] if self.in_game is not None else None
        for line, ids in self.lines:
            keep = ids if playing is None else ids[playing[ids]]
            line.set_data(xs[keep], ys[keep])
        extra = ""
        if self.out is not None:
            gone = np.flatnonzero(~playing)
            self.out.set_data(xs[gone], ys[gone])
            recent = np.flatnonzero((self.tag_step >= 0) & (self.tag_step <= k) & (k - self.tag_step < self.tag_mark_frames))
            self.tag_ring.set_data(xs[recent], ys[recent])
            extra = f" tagged={int(self.tags_so_far[k])} out={len(gone)}"
        self.set_info(k, extra)


class TagGridDrawer(PointsDrawer):
    """Tag on the integer grid: taggers (red squares) and runners (blue), tagged runners as crosses."""
    grid = True


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


DRAWERS = {"cartpole": CartPoleDrawer, "acrobot": AcrobotDrawer, "mountain_car": MountainCarDrawer,
           "mountain_car_continuous": MountainCarDrawer, "pendulum": PendulumDrawer,
           "tag_grid": TagGridDrawer, "tag_continuous": PointsDrawer}


def register_drawer(name: str, drawer: type) -> None:
    """Draw env `name` with `drawer` (a Drawer subclass)."""
    DRAWERS[name] = drawer


def _definition(env):
    """EnvDefinition of an Env, an EnvDefinition or a registered env name."""
    from .envdef import EnvDefinition
    if isinstance(env, EnvDefinition):
        return env
    if isinstance(env, str):
        from .registry import definition
        return definition(env)
    return env.definition


def drawer_for(trajectory: dict, env) -> Drawer:
    """The Drawer of `env`'s family (by name, else by its state arrays), bound to `trajectory`."""
    defn = _definition(env)
    groups = None
    fn = defn.namespace.get("AGENT_GROUPS")
    if fn is not None:
        groups = {k: list(v) for k, v in fn(types.SimpleNamespace(**defn.params)).items()}
    cls = DRAWERS.get(defn.name) or defn.namespace.get("RENDER")
    draw = defn.namespace.get("draw")
    if cls is None and callable(draw):
        return FunctionDrawer(trajectory, defn.params, groups, defn.name, draw)
    if cls is None:
        per_agent_xy = "x" in trajectory and "y" in trajectory and np.ndim(trajectory["x"]) == 2
        pairs = any(isinstance(v, np.ndarray) and v.ndim == 3 and v.shape[-1] == 2 and k not in ("obs", "action")
                    for k, v in trajectory.items())
        cls = PointsDrawer if per_agent_xy or pairs else StripDrawer
    return cls(trajectory, defn.params, groups, defn.name)


# ---- frames --------------------------------------------------------------------------------------

def _partial_note(trajectory: dict) -> str:
    if trajectory.get("complete", True):
        return ""
    missing = int(trajectory.get("steps_missing", 0))
    return f"  (its first {missing} steps not recorded)" if missing else "  (episode still running)"


class FrameSource:
    """RGB frames [H, W, 3] uint8 of one trajectory, drawn by blitting the moving artists onto a
    background rendered once."""

    def __init__(self, trajectory: dict, env, dpi: int = 80, caption: bool = True):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self.drawer = drawer_for(trajectory, env)
        self.fig = Figure(figsize=self.drawer.figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        ax = self.fig.add_subplot()
        ax.set_autoscale_on(False)
        self.artists = self.drawer.setup(ax)
        ax.set_title(f"{self.drawer.name}  replica {trajectory.get('replica', 0)}"
                     + _partial_note(trajectory), fontsize=9)
        self.fig.tight_layout()
        if not caption and self.drawer.info is not None:
            self.drawer.info.set_visible(False)
            self.artists = [a for a in self.artists if a is not self.drawer.info]
        for artist in self.artists:
            artist.set_animated(True)
        self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(self.fig.bbox)

    def __len__(self):
        return len(self.drawer)

    def rgb(self, k: int) -> np.ndarray:
        """Frame k as a fresh [H, W, 3] uint8 array."""
        self.drawer.update(k)
        self.canvas.restore_region(self.background)
        for artist in getattr(self.drawer, "current", []) + self.artists:
            self.fig.draw_artist(artist)
        return np.array(np.asarray(self.canvas.buffer_rgba())[..., :3])

    def png(self, k: int) -> bytes:
        from PIL import Image
        buf = io.BytesIO()
        Image.fromarray(self.rgb(k)).save(buf, format="PNG", compress_level=3)
        return buf.getvalue()


def render_frames(trajectory: dict, env, *, stride: int = 1, dpi: int = 80) -> list:
    """RGB frames [H, W, 3] uint8 of every `stride`-th step of `trajectory`."""
    source = FrameSource(trajectory, env, dpi)
    return [source.rgb(k) for k in range(0, len(source), max(1, int(stride)))]


# ---- the HTML/JS player --------------------------------------------------------------------------

def _embed_limit_bytes(embed_limit_mb) -> float:
    if embed_limit_mb is None:
        import matplotlib
        embed_limit_mb = matplotlib.rcParams["animation.embed_limit"]
    return float(embed_limit_mb) * 1024 * 1024


class Animation:
    """One trajectory as PNG frames with its player; displays itself in a notebook.

    frames: base64 PNG strings; steps: the trajectory index of each frame; note: why frames were
    left out ('' when every step is shown).

    The embedded frames must fit under `embed_limit_mb` (default: matplotlib's
    rcParams["animation.embed_limit"], 20 MB), the limit matplotlib's own HTML animations obey by
    silently dropping the frames past it. Here nothing is dropped silently: with on_limit="stride"
    (the default) every k-th step is kept, spread over the whole episode, and an EmbedLimitWarning
    plus a note under the player say so; with on_limit="raise" an EmbedLimitError says by how much
    the limit is exceeded and how to raise it. `max_frames` caps the frame count the same way (a
    stride, with a note), for a quicker render of a long episode. save_mp4 always writes every step.
    """

    def __init__(self, trajectory: dict, env, *, fps: int = 30, embed_limit_mb: float | None = None,
                 dpi: int = 80, max_frames: int | None = None, on_limit: str = "stride"):
        if on_limit not in ("stride", "raise"):
            raise ValueError(f"on_limit must be 'stride' or 'raise', got {on_limit!r}")
        self.trajectory = trajectory
        self.env = env
        self.fps = int(fps)
        self.dpi = dpi
        source = FrameSource(trajectory, env, dpi, caption=False)
        self.drawer = source.drawer
        total = len(source)
        self.total_steps = total
        limit = _embed_limit_bytes(embed_limit_mb)
        stride = 1 if max_frames is None or total <= max_frames else math.ceil(total / max_frames)
        # the first frames estimate a frame's size, so the frames left out are never drawn
        probe = {k: base64.b64encode(source.png(k)).decode() for k in list(range(0, total, stride))[:3]}
        per_frame = max(map(len, probe.values())) if probe else 1
        over_limit = per_frame * math.ceil(total / stride) > limit
        if over_limit and on_limit == "raise":
            raise EmbedLimitError(self._limit_message(total, stride, per_frame, limit))
        if over_limit:
            stride = max(stride, math.ceil(total * per_frame * 1.1 / limit))
        steps = list(range(0, total, stride))
        frames = [probe[k] if k in probe else base64.b64encode(source.png(k)).decode() for k in steps]
        if on_limit == "raise" and sum(map(len, frames)) > limit:  # frames grew past the estimate
            raise EmbedLimitError(self._limit_message(total, stride, sum(map(len, frames)) / len(frames), limit))
        limited = over_limit
        while len(frames) > 1 and sum(map(len, frames)) > limit:
            frames, steps, stride, limited = frames[::2], steps[::2], stride * 2, True
        self.frames, self.steps, self.stride = frames, steps, stride
        self.captions = [source.drawer.captions[k] for k in steps]
        self.note = ""
        if stride > 1:
            why = (f"the frames exceed the embed limit of {limit / 2**20:.1f} MB; raise it with "
                   f"embed_limit_mb=... (or matplotlib.rcParams['animation.embed_limit']) to keep every step, "
                   f"or save_mp4() for all of them"
                   if limited else f"max_frames={max_frames}")
            self.note = f"Showing every {stride}th step ({len(steps)} of {total} frames): {why}."
            if limited:
                warnings.warn(self.note, EmbedLimitWarning, stacklevel=2)

    @staticmethod
    def _limit_message(total, stride, per_frame, limit) -> str:
        need = per_frame * math.ceil(total / stride)
        return (f"{math.ceil(total / stride)} frames of about {per_frame / 1024:.0f} KB need {need / 2**20:.1f} MB, "
                f"over the embed limit of {limit / 2**20:.1f} MB: pass embed_limit_mb={math.ceil(need * 1.1 / 2**20)} "
                f"(or set matplotlib.rcParams['animation.embed_limit']), max_frames=... or a lower dpi, "
                f"on_limit='stride' to keep every k-th step, or use save_mp4() for every step")

    @property
    def nbytes(self) -> int:
        return sum(len(f) for f in self.frames)

    def to_html(self) -> str:
        """A self-contained player: image, play/pause, frame slider, speed, and the note."""
        pid = "wbp" + uuid.uuid4().hex[:10]
        n = len(self.frames)
        note = f'<div style="color:#a15c00;font-size:12px">{html.escape(self.note)}</div>' if self.note else ""
        first = self.frames[0] if self.frames else ""
        return f"""<div id="{pid}" class="wb-player" style="display:inline-block;font-family:sans-serif">
<img id="{pid}-img" src="data:image/png;base64,{first}" style="display:block"/>
<div style="display:flex;align-items:center;gap:6px;margin-top:4px">
<button id="{pid}-play" style="width:3.2em">&#9654;</button>
<input id="{pid}-slider" class="wb-slider" type="range" min="0" max="{max(n - 1, 0)}" value="0" style="flex:1"/>
<span id="{pid}-label" style="font-size:12px;font-family:monospace;min-width:22em">step 0 / {self.total_steps}  {html.escape(self.captions[0] if self.captions else '')}</span>
<select id="{pid}-speed"><option value="0.25">0.25x</option><option value="0.5">0.5x</option>
<option value="1" selected>1x</option><option value="2">2x</option><option value="4">4x</option></select>
</div>{note}
<script>(function(){{
var frames={json.dumps(self.frames)}, steps={json.dumps(self.steps)}, fps={self.fps}, total={self.total_steps},
    captions={json.dumps(self.captions)};
var img=document.getElementById("{pid}-img"), slider=document.getElementById("{pid}-slider"),
    play=document.getElementById("{pid}-play"), label=document.getElementById("{pid}-label"),
    speed=document.getElementById("{pid}-speed"), timer=null, i=0;
function show(k){{ i=k; img.src="data:image/png;base64,"+frames[k]; slider.value=k;
  label.textContent="step "+steps[k]+" / "+total+"  "+captions[k]; }}
function tick(){{ show((i+1)%frames.length); }}
function stop(){{ if(timer){{clearInterval(timer); timer=null;}} play.innerHTML="&#9654;"; }}
function start(){{ stop(); timer=setInterval(tick, 1000*{self.stride}/(fps*parseFloat(speed.value)));
  play.innerHTML="&#10074;&#10074;"; }}
play.onclick=function(){{ if(timer) stop(); else start(); }};
slider.oninput=function(){{ stop(); show(parseInt(slider.value)); }};
speed.onchange=function(){{ if(timer) start(); }};
}})();</script></div>"""

    def _repr_html_(self) -> str:
        return self.to_html()

    def save_html(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(str(path.stem))}"
                        f"</title></head><body>{self.to_html()}</body></html>")
        return path

    def save_mp4(self, path, fps: int | None = None) -> Path:
        """Every step (not only the embedded frames) as H.264 mp4."""
        return to_mp4(self.trajectory, self.env, path, fps=fps or self.fps, dpi=self.dpi)


class AnimationGroup:
    """Several animations shown side by side."""

    def __init__(self, animations: list):
        self.animations = animations

    def __getitem__(self, i):
        return self.animations[i]

    def __len__(self):
        return len(self.animations)

    def to_html(self) -> str:
        return '<div style="display:flex;flex-wrap:wrap;gap:12px">' + "".join(a.to_html() for a in self.animations) \
            + "</div>"

    def _repr_html_(self) -> str:
        return self.to_html()

    def save_html(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{self.to_html()}</body></html>")
        return path

    def save_mp4(self, path, fps: int | None = None) -> list:
        """Every step of each animation as mp4: `path` for one, else path-replicaN.mp4 per replica."""
        path = Path(path)
        if len(self.animations) == 1:
            return [self.animations[0].save_mp4(path, fps)]
        return [a.save_mp4(path.with_name(f"{path.stem}-replica{a.trajectory.get('replica', i)}{path.suffix}"), fps)
                for i, a in enumerate(self.animations)]


def animate(trajectory: dict, env, **kwargs) -> Animation:
    """Animation of one pulled trajectory of `env` (an Env, EnvDefinition or env name)."""
    return Animation(trajectory, env, **kwargs)


def show(trajectories, env, **kwargs):
    """Animation of one trajectory (a dict), or AnimationGroup of a list (such as
    env.pull_trajectories(), even of one replica: `show(...)[0]` is always its first Animation);
    notebooks display either."""
    if isinstance(trajectories, dict):
        return Animation(trajectories, env, **kwargs)
    return AnimationGroup([Animation(t, env, **kwargs) for t in trajectories])


# ---- mp4 -----------------------------------------------------------------------------------------

def find_ffmpeg() -> str:
    """Path of the ffmpeg binary shipped by the imageio-ffmpeg wheel, else a system ffmpeg."""
    try:
        import imageio_ffmpeg
        exe = imageio_ffmpeg.get_ffmpeg_exe()
        if exe and Path(exe).exists():
            return exe
    except Exception:  # noqa: BLE001 - missing wheel, or a wheel without a binary for this platform
        pass
    exe = shutil.which("ffmpeg")
    if exe:
        return exe
    raise FFmpegNotFoundError("mp4 export needs ffmpeg: pip install imageio-ffmpeg (its wheel ships the binary) "
                              "or install a system ffmpeg (apt-get install ffmpeg); the HTML player needs neither")


def to_mp4(trajectory: dict, env, path, *, fps: int = 30, dpi: int = 80) -> Path:
    """Write every step of `trajectory` to `path` as H.264 mp4 (ffmpeg-python over a raw pipe)."""
    exe = find_ffmpeg()
    try:
        import ffmpeg
    except ImportError:
        raise FFmpegNotFoundError("mp4 export needs the ffmpeg-python package: pip install ffmpeg-python "
                                  "(the HTML player needs neither it nor ffmpeg)") from None
    source = FrameSource(trajectory, env, dpi)
    first = source.rgb(0)
    h, w = first.shape[0] - first.shape[0] % 2, first.shape[1] - first.shape[1] % 2  # yuv420p needs even sides
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    process = (ffmpeg.input("pipe:", format="rawvideo", pix_fmt="rgb24", s=f"{w}x{h}", framerate=fps)
               .output(str(path), pix_fmt="yuv420p", vcodec="libx264", loglevel="error")
               .overwrite_output()
               .run_async(pipe_stdin=True, pipe_stderr=True, cmd=exe))
    try:
        for k in range(len(source)):
            frame = first if k == 0 else source.rgb(k)
            process.stdin.write(np.ascontiguousarray(frame[:h, :w]).tobytes())
    finally:
        process.stdin.close()
        err = process.stderr.read().decode(errors="replace")
        code = process.wait()
    if code != 0:
        raise WorkbenchError(f"ffmpeg ({exe}) failed writing {path}: {err.strip()[-500:]}")
    return path


# ---- recording episodes ----------------------------------------------------------------------------

def record_episode(env, policy=None, *, replicas=(0,), max_steps: int | None = None, reset: bool = True,
                   deterministic: bool = False) -> list:
    """Step `env` until every replica in `replicas` finished an episode (or `max_steps` steps) and
    return their trajectories. policy: None (uniformly random actions), a Trainer (its `act`), or a
    callable `policy(env)` that writes or returns the actions."""
    replicas = [int(r) for r in replicas]
    limit = int(max_steps or min(env.definition.max_steps, 2000))
    recorder = env.record(replicas=replicas, max_steps=limit)
    if reset:
        env.reset()
    index = recorder.index
    finished = np.zeros(len(replicas), dtype=bool)
    try:
        for _ in range(limit):
            if policy is None:
                actions = env.sample_actions()
            elif hasattr(policy, "act"):
                actions = policy.act(deterministic=deterministic)
            else:
                actions = policy(env)
            env.step(actions if actions is not None else env.store["action"])
            finished |= env.store["done"].index_select(0, index).cpu().numpy().astype(bool)
            if finished.all():
                break
        return env.pull_trajectories()
    finally:
        env.recorder = None


def record_policy_animation(trainer, path, *, replica: int = 0, fps: int = 30, mp4: bool = True) -> Path:
    """Run `trainer`'s policy for one episode of `replica` (all replicas step), write an HTML player
    to `path` and, when ffmpeg is present and `mp4`, the same episode as `path` with suffix .mp4.
    Returns the HTML path."""
    episodes = record_episode(trainer.env, trainer, replicas=[replica], deterministic=True)
    anim = Animation(episodes[0], trainer.env, fps=fps)
    path = anim.save_html(Path(path).with_suffix(".html"))
    if mp4:
        try:
            anim.save_mp4(path.with_suffix(".mp4"))
        except FFmpegNotFoundError:
            pass
    return path
