"""Rollout viewer: pulled trajectories drawn per env, played in the notebook by a small HTML/JS
player with a frame slider, or written to mp4 through ffmpeg. A trajectory is one entry of
`env.pull_trajectories()`: host arrays [T, ...] of the env's state (per-env arrays [T], per-agent
arrays [T, A]) before each step, plus obs, t, action, reward, done; an episode that ended has one
frame more, the state it ended in. The player plays in real time: one step per `dt` seconds of the
env (`steps_per_second`).
An env is drawn by the drawer its source declares (`RENDER = MyDrawer` or `draw(frame, ax)`:
shipped envs and `%%warpenv` cells alike), found through its definition by `drawer_for`
(frames.py, with `FrameSource`, the frames themselves); workbench.notebook.drawers holds the
Drawer base class and the drawers of envs that declare none. A drawer makes its artists once and
moves them with `set_data` (agents of a group share ONE Line2D with point markers: thousands of
agents stay cheap); frames are drawn by blitting onto a fixed background.

    anim = render.show(env.pull_trajectories(), env)     # displays in a notebook (_repr_html_)
    anim.save_html("run.html"); anim.save_mp4("run.mp4")
    render.record_policy_animation(trainer, "policy.html")
"""
from __future__ import annotations

import base64
import contextlib
import html
import itertools
import json
import math
import numbers
import shutil
import uuid
import warnings
from pathlib import Path

import numpy as np

# the drawer classes are part of this module's interface (an env's RENDER subclasses render.Drawer)
from .drawers import GROUP_COLOURS, Drawer, FunctionDrawer, PointsDrawer, StripDrawer  # noqa: F401
from ..errors import WorkbenchError
from .frames import (DEFAULT_STEPS_PER_SECOND, DRAWERS, MAX_STEPS_PER_SECOND, EmptyTrajectoryError,  # noqa: F401
                     FrameSource, drawer_for, register_drawer, render_frames, steps_per_second)


class FFmpegNotFoundError(WorkbenchError, RuntimeError):
    """Neither imageio-ffmpeg's binary nor a system ffmpeg is present (or ffmpeg-python is missing)."""


class EmbedLimitError(WorkbenchError, ValueError):
    """The frames of an animation exceed the embed limit and on_limit="raise" was asked for."""


class EmbedLimitWarning(UserWarning):
    """An animation shows every k-th step only, to stay under the embed limit."""


# ---- the HTML/JS player --------------------------------------------------------------------------

def _embed_limit_bytes(embed_limit_mb) -> float:
    if embed_limit_mb is None:
        import matplotlib
        embed_limit_mb = matplotlib.rcParams["animation.embed_limit"]
    return float(embed_limit_mb) * 1024 * 1024


def _check_positive(name: str, value, meaning: str, integer: bool = False) -> None:
    """WorkbenchError unless `value` is None or a number (an int where `integer`) above 0."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kinds) or not value > 0
                              or not math.isfinite(value)):
        raise WorkbenchError(f"{name} must be {'an int' if integer else 'a number'} > 0 ({meaning}), got {value!r}")


def _with_last(steps: list, total: int) -> list:
    """Strided steps whose last is the episode's last frame (how it ended): it takes the place of the
    last strided step, so the count stays."""
    if steps and steps[-1] != total - 1:
        steps = steps[:-1] + [total - 1] if len(steps) > 1 else steps + [total - 1]
    return steps


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 21st, 231st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


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
    `fps`: steps per second at 1x, whatever the episode's length (default `steps_per_second(env)`,
    real time); a player showing every k-th step shows fps / k frames a second.
    """

    def __init__(self, trajectory: dict, env, *, fps: float | None = None, embed_limit_mb: float | None = None,
                 dpi: int = 80, max_frames: int | None = None, on_limit: str = "stride"):
        if on_limit not in ("stride", "raise"):
            raise ValueError(f"on_limit must be 'stride' or 'raise', got {on_limit!r}")
        _check_positive("fps", fps, "steps a second at 1x; None: the env's real time")
        _check_positive("max_frames", max_frames, "None: every step, up to the embed limit", integer=True)
        _check_positive("embed_limit_mb", embed_limit_mb, "None: matplotlib's animation.embed_limit")
        self.trajectory = trajectory
        self.env = env
        self.fps = float(fps) if fps else steps_per_second(env)  # steps per second at 1x
        self.dpi = dpi
        source = FrameSource(trajectory, env, dpi, caption=False)
        self.drawer = source.drawer
        total = len(source)
        # an ended episode's last frame is the state after its last step
        self.total_steps = total - 1 if trajectory.get("terminal_frame") else total
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
        steps = _with_last(list(range(0, total, stride)), total)
        drawn = {k: probe[k] if k in probe else base64.b64encode(source.png(k)).decode() for k in steps}
        frames = [drawn[k] for k in steps]
        if on_limit == "raise" and sum(map(len, frames)) > limit:  # frames grew past the estimate
            raise EmbedLimitError(self._limit_message(total, stride, sum(map(len, frames)) / len(frames), limit))
        limited = over_limit
        while len(frames) > 1 and sum(map(len, frames)) > limit:
            steps, stride, limited = _with_last(steps[:-1][::2], total), stride * 2, True
            frames = [drawn[k] for k in steps]
        self.frames, self.steps, self.stride = frames, steps, stride
        self.captions = [source.drawer.captions[k] for k in steps]
        self.note = ""
        if stride > 1:
            why = (f"the frames exceed the embed limit of {limit / 2**20:.3g} MB; raise it with "
                   f"embed_limit_mb=... (or matplotlib.rcParams['animation.embed_limit']) to keep every step, "
                   f"or save_mp4() for all of them"
                   if limited else f"max_frames={max_frames}")
            self.note = f"Showing every {_ordinal(stride)} step ({len(steps)} of {total} frames): {why}."
            if limited:
                warnings.warn(self.note, EmbedLimitWarning, stacklevel=2)

    @staticmethod
    def _limit_message(total, stride, per_frame, limit) -> str:
        need = per_frame * math.ceil(total / stride)
        return (f"{math.ceil(total / stride)} frames of about {per_frame / 1024:.0f} KB need {need / 2**20:.1f} MB, "
                f"over the embed limit of {limit / 2**20:.3g} MB: pass embed_limit_mb={math.ceil(need * 1.1 / 2**20)} "
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
<span id="{pid}-label" style="font-size:12px;font-family:monospace;min-width:22em"
>step 0 / {self.total_steps}  {html.escape(self.captions[0] if self.captions else '')}</span>
<select id="{pid}-speed"><option value="0.25">0.25x</option><option value="0.5">0.5x</option>
<option value="1" selected>1x</option><option value="2">2x</option><option value="4">4x</option></select>
</div>{note}
<script>(function(){{
var frames={json.dumps(self.frames)}, steps={json.dumps(self.steps)}, fps={self.fps:g}, total={self.total_steps},
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

    def save_mp4(self, path, fps: float | None = None) -> Path:
        """Every step (not only the embedded frames) as H.264 mp4, `fps` steps a second (default the player's)."""
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

    def save_mp4(self, path, fps: float | None = None) -> list:
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
    if not isinstance(trajectories, dict) and not len(trajectories):
        raise EmptyTrajectoryError("show() got no trajectories: record some with env.record(replicas=[...]), step "
                                   "the env, then pass env.pull_trajectories() (or render.record_episode(env))")
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


VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".gif")


def to_mp4(trajectory: dict, env, path, *, fps: float | None = None, dpi: int = 80) -> Path:
    """Write every step of `trajectory` to `path` as H.264 video (.mp4, .mov, .mkv) or an animated
    .gif (ffmpeg-python over a raw pipe), `fps` steps a second (default `steps_per_second(env)`, real
    time)."""
    _check_positive("fps", fps, "steps a second; None: the env's real time")
    path = Path(path)
    _check_video_suffix(path, f"cannot write {path}")
    exe = find_ffmpeg()
    fps = float(fps) if fps else steps_per_second(env)
    try:
        import ffmpeg
    except ImportError:
        raise FFmpegNotFoundError("mp4 export needs the ffmpeg-python package: pip install ffmpeg-python "
                                  "(the HTML player needs neither it nor ffmpeg)") from None
    source = FrameSource(trajectory, env, dpi)
    first = source.rgb(0)
    h, w = first.shape[0] - first.shape[0] % 2, first.shape[1] - first.shape[1] % 2  # yuv420p needs even sides
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkbenchError(f"cannot write {path}: its folder {str(path.parent)!r} cannot be made "
                             f"({exc.strerror}); name a file in a folder you can write") from None
    frames = ffmpeg.input("pipe:", format="rawvideo", pix_fmt="rgb24", s=f"{w}x{h}", framerate=fps)
    if path.suffix.lower() == ".gif":  # one palette made from every frame: GIF's 256 colours chosen well
        both = frames.split()
        output = ffmpeg.filter([both[0], both[1].filter("palettegen")], "paletteuse").output(str(path),
                                                                                         loglevel="error")
    else:
        output = frames.output(str(path), pix_fmt="yuv420p", vcodec="libx264", loglevel="error")
    process = output.overwrite_output().run_async(pipe_stdin=True, pipe_stderr=True, cmd=exe)
    try:
        for k in range(len(source)):
            frame = first if k == 0 else source.rgb(k)
            process.stdin.write(np.ascontiguousarray(frame[:h, :w]).tobytes())
    except BrokenPipeError:  # ffmpeg quit (a folder it cannot write, a format it cannot make): its words follow
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
        err = process.stderr.read().decode(errors="replace")
        code = process.wait()
    if code != 0:
        path.unlink(missing_ok=True)  # not a partial file that looks like a video
        raise WorkbenchError(f"ffmpeg ({exe}) failed writing {path}: {err.strip()[-500:] or f'exit {code}'}")
    return path


# ---- recording episodes ----------------------------------------------------------------------------


_RECORDINGS = itertools.count(1)  # record_episode's calls: each resets the env with a seed of its own


def record_episode(env, policy=None, *, replicas=(0,), max_steps: int | None = None, reset: bool = True,
                   deterministic: bool = False, seed: int | None = None) -> list:
    """Step `env` until every replica in `replicas` finished an episode (or `max_steps` steps) and return
    their trajectories (an episode that ended ends with the state it ended in). policy: None
    (uniformly random actions), a Trainer (its `act`), or a callable `policy(env)` that writes or
    returns the actions. reset: start new episodes, from `seed` (the same seed, the same starts, and a
    Trainer's same samples when not deterministic) or, without one, drawn afresh at each call
    (reset=False: go on from the env's state). The env is
    left as it was found (its state, seed, random streams and any recording, such as a panel's), as
    learn.evaluate leaves it: a run continued afterwards is the same run."""
    replicas = [int(r) for r in replicas]
    bad = [r for r in replicas if not 0 <= r < env.num_envs]
    if bad:
        raise WorkbenchError(f"replicas {bad} are out of range: the env has {env.num_envs} replicas (0 .. "
                             f"{env.num_envs - 1}; in a population's, member k's start at k * config.num_envs)")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise WorkbenchError(f"max_steps must be an int >= 1 (or None: the env's episode bound), got {max_steps!r}")
    limit = int(max_steps or min(env.definition.max_steps, 2000))
    found = (env.store.snapshot(), env.seed, env._generator.get_state(), env._clock, env.recorder, env._detached,
             {n: t.clone() for n, t in env.terminal.buffers.items()})
    env.recorder, env._detached = None, None  # a recording of its own: the one found is put back untouched
    try:
        recorder = env.record(replicas=replicas, max_steps=limit)
        episode_seed = (seed if seed is not None
                        else (env.seed + next(_RECORDINGS) * 0x9E3779B97F4A7C15) & 0x7FFFFFFFFFFFFFFF)
        if reset:
            env.reset(seed=episode_seed)
        import torch  # (the env's: this module draws frames without it)
        draws = torch.Generator(device=env.device).manual_seed(episode_seed)  # (a stochastic policy's samples)
        finished = np.zeros(len(replicas), dtype=bool)
        for _ in range(limit):
            if policy is None:
                actions = env.sample_actions()
            elif hasattr(policy, "act"):
                actions = policy.act(deterministic=deterministic, generator=draws)
            else:
                actions = policy(env)
            env.step(actions if actions is not None else env.store["action"])
            finished |= env.store["done"].index_select(0, recorder.index).cpu().numpy().astype(bool)
            if finished.all():
                break
        return env.pull_trajectories()
    finally:
        env.recorder = found[4]
        env._clock, env._detached, env.seed = found[3], found[5], found[1]
        env.store.load_snapshot(found[0])
        env._generator.set_state(found[2])
        for name, rows in found[6].items():
            env.terminal.buffers[name][:len(rows)].copy_(rows)


def record_policy_animation(trainer, path, *, replica: int = 0, fps: float | None = None, mp4: bool = True) -> Path:
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


def replay(run_or_checkpoint, *, replica: int = 0, num_envs: int = 1, mp4=None, html=None, target: str | None = None,
           seed: int | None = None, deterministic: bool = True, max_steps: int | None = None, fps: float | None = None,
           member=None, env_params: dict | None = None, models=None, **kwargs):
    """Load a run's trained policy, play one episode of `replica` and return its Animation
    (displayed by a notebook); also written as mp4 to `mp4` and as an HTML player to `html` if given.
    seed: the episode's starts (the same seed, the same episode; None: drawn afresh at each call).
    member: of a population's run, the member to replay (an index, or "best", the default).
    env_params: changes of the run's env parameters (a longer episode, other speeds), keeping its
    agents, observations and actions. models: a run's own policy models (as load_policy). Extra
    keyword arguments go to the Animation (dpi, max_frames, embed_limit_mb)."""
    from ..learn.runs import load_policy
    from ..learn.config import ConfigError
    if member == "all":
        raise ConfigError("replay plays one member: member=K (an index) or 'best', not 'all'")
    _check_replay(replica, num_envs, mp4, max_steps)  # (before the run's env is compiled)
    trainer = load_policy(run_or_checkpoint, num_envs=max(num_envs, replica + 1), target=target, seed=seed,
                          member=member, env_params=env_params, models=models)
    episodes = record_episode(trainer.env, trainer, replicas=[replica], max_steps=max_steps,
                              deterministic=deterministic, seed=seed)
    episodes[0]["member"] = trainer.member_label  # (the title names a population's member)
    animation = animate(episodes[0], trainer.env, fps=fps, **kwargs)
    if mp4 is not None:
        animation.save_mp4(mp4)
    if html is not None:
        animation.save_html(html)
    return animation


def _check_replay(replica, num_envs, mp4, max_steps):
    for name, value, least in (("replica", replica, 0), ("num_envs", num_envs, 1), ("max_steps", max_steps, 1)):
        integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if value is not None and (not integer or value < least):
            raise WorkbenchError(f"wb.replay: {name} must be an int >= {least}, got {value!r}")
    if mp4 is not None:
        _check_video_suffix(Path(mp4), f"wb.replay: cannot write mp4={str(mp4)!r}")


def _check_video_suffix(path: Path, what: str) -> None:
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise WorkbenchError(f"{what}: name the file {', '.join(VIDEO_SUFFIXES[:-1])} or {VIDEO_SUFFIXES[-1]} "
                             f"(H.264 video, or an animated GIF), not {path.suffix or 'no suffix'}")
