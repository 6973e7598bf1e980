"""A trajectory's frames: which drawer draws an env (`drawer_for`: one registered for its name, its
source's RENDER or draw, else points or a strip) and `FrameSource`, the drawer's frames as RGB
arrays or PNG bytes, which render.py's players and mp4 export show."""
from __future__ import annotations

import io
import textwrap

import numpy as np

from .drawers import Drawer, FunctionDrawer, PointsDrawer, StripDrawer
from ..errors import WorkbenchError


class EmptyTrajectoryError(WorkbenchError, ValueError):
    """A trajectory with no frames: the env was not stepped while it was recorded."""


# ---- which drawer --------------------------------------------------------------------------------

DRAWERS: dict = {}  # env name -> Drawer subclass, from register_drawer: wins over what the env's source declares


def register_drawer(name: str, drawer: type) -> None:
    """Draw env `name` with `drawer` (a Drawer subclass) instead of the drawer its source declares."""
    DRAWERS[name] = drawer


def _definition(env):
    """EnvDefinition of an Env, an EnvDefinition or a registered env name."""
    from ..compiler.envdef import EnvDefinition
    if isinstance(env, EnvDefinition):
        return env
    if isinstance(env, str):
        from ..runtime.registry import definition
        return definition(env)
    return env.definition


def drawer_for(trajectory: dict, env) -> Drawer:
    """The drawer of `env`, bound to `trajectory`: one registered for its name, else its source's
    RENDER class or draw(frame, ax) function, else points (per-agent positions) or a strip of its
    state arrays."""
    defn = _definition(env)
    groups = defn.agent_groups()
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

DEFAULT_STEPS_PER_SECOND = 30.0  # the rate of an env that does not say how long a step lasts
MAX_STEPS_PER_SECOND = 60.0


def steps_per_second(env) -> float:
    """Real time for `env`: 1 / its seconds per step, the PARAMS entry `dt` (or `tau`, CartPole's
    name for it), at most MAX_STEPS_PER_SECOND; DEFAULT_STEPS_PER_SECOND when it declares neither."""
    params = _definition(env).params
    for name in ("dt", "tau"):
        value = params.get(name)
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and value > 0:
            return min(1.0 / float(value), MAX_STEPS_PER_SECOND)
    return DEFAULT_STEPS_PER_SECOND


def _partial_note(trajectory: dict) -> str:
    if trajectory.get("complete", True):
        return ""
    missing = int(trajectory.get("steps_missing", 0))
    return f"  (its first {missing} steps not recorded)" if missing else "  (episode still running)"


def _replica_label(trajectory: dict, env) -> str:
    """'replica r'; in a population's env (member k's replicas are its k-th seed block) also the member
    and the replica's index among the member's own."""
    replica, block = int(trajectory.get("replica", 0)), getattr(env, "replicas_per_seed", None)
    if trajectory.get("member"):  # (a replay of a population's member: which one, population.member_label)
        return f"{trajectory['member']}, replica {replica}"
    if isinstance(block, int) and 0 < block < getattr(env, "num_envs", 0):
        return f"member {replica // block} replica {replica % block} (env replica {replica})"
    return f"replica {replica}"


class FrameSource:
    """RGB frames [H, W, 3] uint8 of one trajectory, drawn by blitting the moving artists onto a
    background rendered once."""

    def __init__(self, trajectory: dict, env, dpi: int = 80, caption: bool = True):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        if len(trajectory.get("t", ())) == 0:
            raise EmptyTrajectoryError(f"no frames recorded for {_replica_label(trajectory, env)}: step the env after "
                                       f"env.record(...) and before env.pull_trajectories() (or let "
                                       f"render.record_episode(env, policy) do all three)")
        self.drawer = drawer_for(trajectory, env)
        self.fig = Figure(figsize=self.drawer.figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        ax = self.fig.add_subplot()
        ax.set_autoscale_on(False)
        self.artists = self.drawer.setup(ax)
        label = f"{self.drawer.name}  {_replica_label(trajectory, env)}" + _partial_note(trajectory)
        size = 8 if ax.get_title() else 9
        # wrapped to the figure's width (a population member's label runs long): about 0.55 em a character
        label = textwrap.fill(label, width=max(20, int(self.fig.get_figwidth() * 72 / (0.55 * size))))
        if ax.get_title():
            # the drawer's own title stays, redrawn every frame (a draw() may change it per frame)
            self.fig.suptitle(label, fontsize=size)
            self.artists = list(self.artists) + [ax.title]
        else:
            ax.set_title(label, fontsize=size)
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
