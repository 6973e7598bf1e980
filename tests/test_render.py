"""The rollout viewer: frames of real recorded episodes of every shipped env, the drawing follows
the state, every agent is drawn, mp4 export decodes, and nothing is dropped silently at the
embed limit."""
import math
import shutil
import sys
import time
import warnings

import numpy as np
import pytest

import workbench as wb
from workbench.runtime import registry
from workbench.notebook import render

from test_tag import GRID as GRID_SMALL  # the small variants test_tag uses: a full run compiles them once
from test_tag import SMALL as TAG_SMALL

ENVS = {"cartpole": {}, "acrobot": {}, "mountain_car": {}, "mountain_car_continuous": {}, "pendulum": {},
        "tag_grid": GRID_SMALL, "tag_continuous": TAG_SMALL}
REPLICAS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def recorded():
    """{name: (env, trajectories)}: one real recorded episode (at most 40 steps) per replica, random actions."""
    out = {}
    for name, params in ENVS.items():
        env = wb.make(name, num_envs=len(REPLICAS), target="cpu", seed=3, **params)
        out[name] = (env, render.record_episode(env, replicas=REPLICAS, max_steps=40))
    return out


def test_every_shipped_env_has_a_drawer_and_is_tested_here():
    from importlib import resources
    shipped = {p.name[:-3] for p in resources.files("workbench.envs").iterdir()
               if p.name.endswith(".py") and not p.name.startswith("_")}
    assert shipped == set(ENVS)


@pytest.mark.parametrize("name", list(ENVS))
def test_a_shipped_env_declares_its_drawer_in_its_source(recorded, name):
    """Shipped envs use the hook of any env source (RENDER), found through the definition; none
    is drawn by a generic drawer or registered by name."""
    env, (traj, *_) = recorded[name]
    cls = env.definition.namespace.get("RENDER")
    assert isinstance(cls, type) and issubclass(cls, render.Drawer)
    assert cls not in (render.PointsDrawer, render.StripDrawer, render.FunctionDrawer)
    assert name not in render.DRAWERS
    assert type(render.drawer_for(traj, env)) is cls


def test_a_registered_drawer_wins_over_the_sources(recorded):
    env, (traj, *_) = recorded["pendulum"]
    render.register_drawer("pendulum", render.StripDrawer)
    try:
        assert type(render.drawer_for(traj, env)) is render.StripDrawer
    finally:
        del render.DRAWERS["pendulum"]
    assert type(render.drawer_for(traj, env)).__name__ == "PendulumDrawer"


@pytest.mark.parametrize("name", list(ENVS))
def test_frames_of_a_real_episode(recorded, name):
    env, trajectories = recorded[name]
    traj = trajectories[0]
    assert len(traj["t"]) >= 2
    frames = render.render_frames(traj, env)
    assert len(frames) == len(traj["t"])
    h, w = frames[0].shape[:2]
    assert frames[0].dtype == np.uint8 and frames[0].shape == (h, w, 3) and h > 100 and w > 100
    assert all(f.shape == frames[0].shape for f in frames)
    # the system moves: some frames differ from the first
    assert any(not np.array_equal(frames[0], f) for f in frames[1:])
    # stride keeps every k-th frame
    assert len(render.render_frames(traj, env, stride=3)) == math.ceil(len(traj["t"]) / 3)


@pytest.mark.parametrize("name", ["tag_grid", "tag_continuous"])
def test_every_agent_is_drawn_in_every_frame(recorded, name):
    env, trajectories = recorded[name]
    for traj in trajectories:
        source = render.FrameSource(traj, env)
        drawer = source.drawer
        assert isinstance(drawer, render.PointsDrawer)
        for k in range(len(source)):
            source.rgb(k)
            assert drawer.drawn_agents() == env.num_agents
            taggers = next(line for line, _ in drawer.lines if line.get_label().startswith("taggers"))
            runners = next(line for line, _ in drawer.lines if line.get_label().startswith("runners"))
            in_game = traj["in_game"][k] != 0
            assert len(taggers.get_xdata()) == len(env.taggers)  # taggers never leave the game
            assert len(runners.get_xdata()) == int(in_game[env.runners].sum())
            # (on the grid, agents sharing a cell are drawn a quarter cell around it)
            np.testing.assert_allclose(taggers.get_xdata(), traj["x"][k][env.taggers],
                                       atol=0.26 if drawer.grid else 1e-9)
        # one Line2D per group (plus crosses and rings), never a scatter collection per agent
        assert len(source.fig.axes[0].collections) == 0
        moving = [line for line in source.fig.axes[0].lines if line.get_animated()]
        assert len(moving) == len(drawer.lines) + 2  # + crosses (out of the game) and rings (tags)


def test_tags_are_marked(recorded):
    env, trajectories = recorded["tag_continuous"]
    traj = dict(trajectories[0])
    in_game = np.ones_like(traj["in_game"])
    runner = env.runners[0]
    in_game[2:, runner] = 0  # tagged during step 1: out of the game from frame 2 on
    traj["in_game"] = in_game
    source = render.FrameSource(traj, env)
    drawer = source.drawer
    source.rgb(1)
    assert len(drawer.tag_ring.get_xdata()) == 0 and len(drawer.out.get_xdata()) == 0
    source.rgb(2)
    assert list(drawer.tag_ring.get_xdata()) == [traj["x"][2][runner]]
    assert list(drawer.out.get_xdata()) == [traj["x"][2][runner]]
    assert "tagged=1" in drawer.captions[2] and "out=1" in drawer.captions[2]


def test_real_tags_show_as_crosses(recorded):
    env, trajectories = recorded["tag_continuous"]
    tagged = [t for t in trajectories if (t["in_game"][:, env.runners] == 0).any()]
    assert tagged, "seed 3 tags at least one runner within these episodes"
    traj = tagged[0]
    source = render.FrameSource(traj, env)
    k = int(np.flatnonzero((traj["in_game"][:, env.runners] == 0).any(axis=1))[0])
    source.rgb(k)
    assert len(source.drawer.out.get_xdata()) == int((traj["in_game"][k] == 0).sum()) >= 1
    assert len(source.drawer.tag_ring.get_xdata()) >= 1


def test_classic_control_drawings_follow_the_state(recorded):
    env, (traj, *_) = recorded["cartpole"]
    source = render.FrameSource(traj, env)
    k = len(source) - 1
    source.rgb(k)
    x, th, pole = float(traj["x"][k]), float(traj["theta"][k]), 2 * env.definition.params["length"]
    px, py = source.drawer.pole.get_data()
    assert px[0] == pytest.approx(x) and px[1] == pytest.approx(x + pole * math.sin(th))
    assert py[1] == pytest.approx(0.2 + pole * math.cos(th))

    env, (traj, *_) = recorded["acrobot"]
    source = render.FrameSource(traj, env)
    source.rgb(5)
    p = env.definition.params
    t1, t2 = float(traj["theta1"][5]), float(traj["theta2"][5])
    xs, ys = source.drawer.links.get_data()
    tip = (p["link_length_1"] * math.sin(t1) + p["link_length_2"] * math.sin(t1 + t2),
           -p["link_length_1"] * math.cos(t1) - p["link_length_2"] * math.cos(t1 + t2))
    assert (xs[2], ys[2]) == pytest.approx(tip, abs=1e-6)

    for name in ("mountain_car", "mountain_car_continuous"):
        env, (traj, *_) = recorded[name]
        source = render.FrameSource(traj, env)
        source.rgb(7)
        cx, cy = source.drawer.car.get_data()
        assert cx[0] == pytest.approx(float(traj["position"][7]))

    env, (traj, *_) = recorded["pendulum"]
    source = render.FrameSource(traj, env)
    source.rgb(3)
    rx, ry = source.drawer.rod.get_data()
    th = float(traj["theta"][3])
    assert (rx[1], ry[1]) == pytest.approx((math.sin(th), math.cos(th)), abs=1e-6)
    assert "torque=" in source.drawer.captions[3]


def test_html_player_holds_every_frame_and_a_slider(recorded):
    env, trajectories = recorded["cartpole"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no embed-limit warning for a short episode
        anim = render.show(trajectories[0], env)
    n = len(trajectories[0]["t"])
    assert len(anim.frames) == n and anim.steps == list(range(n)) and anim.note == ""
    page = anim.to_html()
    assert f'type="range" min="0" max="{n - 1}"' in page
    assert page.count("iVBOR") == n + 1  # every PNG frame in the script, the first also in the <img>
    group = render.show(trajectories[:2], env)
    assert isinstance(group, render.AnimationGroup) and len(group) == 2
    assert group.to_html().count("wb-player") == 2


def test_embed_limit_strides_with_a_warning_and_a_note(recorded):
    env, (traj, *_) = recorded["acrobot"]  # 40 steps: the episode is still running
    total = len(traj["t"])
    full = render.Animation(traj, env)
    limit_mb = full.nbytes / 3.5 / 2**20
    with pytest.warns(render.EmbedLimitWarning, match="embed limit"):
        anim = render.Animation(traj, env, embed_limit_mb=limit_mb)
    assert anim.stride >= 4 and len(anim.frames) == math.ceil(total / anim.stride) < total
    # every stride-th step, the last (how the episode ended) in place of the last strided one
    assert anim.steps == list(range(0, total, anim.stride))[:-1] + [total - 1]
    assert anim.nbytes <= limit_mb * 2**20
    assert f"every {render._ordinal(anim.stride)} step ({len(anim.frames)} of {total} frames)" in anim.note
    assert anim.note in anim.to_html().replace("&#x27;", "'")
    # the player advances `stride` steps per frame at the same speed: a longer interval
    assert f"1000*{anim.stride}/(fps*" in anim.to_html()


def test_embed_limit_can_raise_instead(recorded):
    env, (traj, *_) = recorded["acrobot"]
    with pytest.raises(render.EmbedLimitError, match=r"over the embed limit of 0\.01 MB: pass embed_limit_mb="):
        render.Animation(traj, env, embed_limit_mb=0.01, on_limit="raise")
    with pytest.raises(ValueError, match="on_limit"):
        render.Animation(traj, env, on_limit="drop")


def test_max_frames_caps_without_a_warning(recorded):
    env, (traj, *_) = recorded["acrobot"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        anim = render.Animation(traj, env, max_frames=10)
    assert len(anim.frames) <= 10 and "max_frames=10" in anim.note
    assert anim.steps[-1] == len(traj["t"]) - 1  # before: the strided steps alone, the episode's end left out


def test_mp4_is_written_and_decodes(recorded, tmp_path):
    import imageio_ffmpeg
    env, (traj, *_) = recorded["cartpole"]
    path = render.show(traj, env).save_mp4(tmp_path / "cartpole.mp4")
    head = path.read_bytes()[:12]
    assert head[4:8] == b"ftyp"
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = reader.__next__()
    frame_bytes = [len(f) for f in reader]
    w, h = meta["size"]
    first = render.render_frames(traj, env)[0]
    assert (h, w) == (first.shape[0] - first.shape[0] % 2, first.shape[1] - first.shape[1] % 2)
    assert len(frame_bytes) == len(traj["t"]) and set(frame_bytes) == {w * h * 3}

    env, (traj, *_) = recorded["tag_grid"]
    path = render.to_mp4(traj, env, tmp_path / "tag.mp4", fps=10)
    frames = list(imageio_ffmpeg.read_frames(str(path)))[1:]
    assert len(frames) == len(traj["t"])


def test_gif_is_written_and_another_suffix_is_refused_before_drawing(recorded, tmp_path, monkeypatch):
    """Before: .gif drew every frame, then failed in ffmpeg and left a 0-byte file."""
    import imageio_ffmpeg
    env, (traj, *_) = recorded["cartpole"]
    path = render.to_mp4(traj, env, tmp_path / "cartpole.gif")
    assert path.read_bytes()[:6] == b"GIF89a"
    assert len(list(imageio_ffmpeg.read_frames(str(path)))[1:]) == len(traj["t"])
    monkeypatch.setattr(render.FrameSource, "rgb", lambda *a: pytest.fail("drew a frame for a file it cannot write"))
    with pytest.raises(render.WorkbenchError, match=r"cannot write .*cartpole.avi: name the file .mp4, .mov, .mkv or "
                                                    r".gif \(H.264 video, or an animated GIF\), not .avi"):
        render.to_mp4(traj, env, tmp_path / "cartpole.avi")
    assert not (tmp_path / "cartpole.avi").exists()


def test_missing_ffmpeg_says_how_to_get_it(recorded, tmp_path, monkeypatch):
    import imageio_ffmpeg

    def no_binary():
        raise RuntimeError("no ffmpeg exe could be found")

    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", no_binary)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    env, (traj, *_) = recorded["cartpole"]
    with pytest.raises(render.FFmpegNotFoundError, match=r"pip install imageio-ffmpeg.*apt-get install ffmpeg"):
        render.to_mp4(traj, env, tmp_path / "x.mp4")
    assert not (tmp_path / "x.mp4").exists()
    # the HTML player needs no ffmpeg
    assert render.show(traj, env).to_html().startswith("<div")


def test_missing_ffmpeg_python_says_so(recorded, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ffmpeg", None)  # import ffmpeg -> ImportError
    env, (traj, *_) = recorded["cartpole"]
    with pytest.raises(render.FFmpegNotFoundError, match="pip install ffmpeg-python"):
        render.to_mp4(traj, env, tmp_path / "x.mp4")


def test_thousands_of_agents_render_at_an_interactive_rate():
    n_taggers, n_runners, steps = 25, 2975, 30
    defn = registry.definition("tag_continuous", num_taggers=n_taggers, num_runners=n_runners, grid_length=50.0)
    rng = np.random.default_rng(0)
    n = n_taggers + n_runners
    in_game = np.ones((steps, n), np.int32)
    in_game[10:, n_taggers:n_taggers + 500] = 0
    traj = {"x": rng.uniform(0, 50, (steps, n)).astype(np.float32), "y": rng.uniform(0, 50, (steps, n)).astype(np.float32),
            "in_game": in_game, "t": np.arange(steps), "reward": np.zeros((steps, n), np.float32),
            "done": np.zeros(steps, bool)}
    source = render.FrameSource(traj, defn)
    source.rgb(0)
    start = time.perf_counter()
    for k in range(1, steps):
        source.rgb(k)
        assert source.drawer.drawn_agents() == n
    per_frame = (time.perf_counter() - start) / (steps - 1)
    assert per_frame < 0.15, f"{per_frame * 1000:.0f} ms per frame of {n} agents"
    ax = source.fig.axes[0]
    assert len(ax.collections) == 0 and len(ax.lines) == 4  # taggers, runners, crosses, rings
    assert all(line.get_animated() for line in ax.lines)
    assert len(source.drawer.out.get_xdata()) == 500


def test_record_episode_with_a_trained_policy_and_animation_files(tmp_path):
    config = wb.PPOConfig(env="cartpole", num_envs=4, rollout_length=8, num_minibatches=1, update_epochs=1,
                          total_env_steps=64, target="cpu")
    trainer = wb.make_trainer(config)
    trainer.train()
    path = render.record_policy_animation(trainer, tmp_path / "policy.html")
    assert path.exists() and "wb-player" in path.read_text()
    assert path.with_suffix(".mp4").stat().st_size > 1000
    assert trainer.env.recorder is None  # recording was detached again


def test_show_of_one_replica_is_indexable_and_saves_mp4(recorded, tmp_path):
    env, trajectories = recorded["cartpole"]
    anim = render.show(trajectories[:1], env)
    assert len(anim) == 1 and isinstance(anim[0], render.Animation)
    if shutil.which("ffmpeg") or _has_imageio_ffmpeg():
        (path,) = anim.save_mp4(tmp_path / "one.mp4")
        assert path.stat().st_size > 1000
        assert anim[0].save_mp4(tmp_path / "first.mp4").stat().st_size > 1000


def _has_imageio_ffmpeg():
    try:
        render.find_ffmpeg()
        return True
    except render.FFmpegNotFoundError:
        return False


def test_a_recording_begun_mid_episode_is_not_a_complete_episode():
    env = wb.make("cartpole", num_envs=2, target="cpu", seed=11)
    env.reset()
    for _ in range(5):
        env.step(env.sample_actions())
    env.record(replicas=[0], max_steps=500)
    steps = 0
    while not bool(env.store["done"][0]) and steps < 500:  # the episode that began before the recording
        env.step(env.sample_actions())
        steps += 1
    (tail,) = env.pull_trajectories()
    assert not tail["complete"] and tail["steps_missing"] == 5 and len(tail["t"]) == steps + 1  # + how it ended
    assert "first 5 steps not recorded" in render.FrameSource(tail, env).fig.axes[0].get_title()
    env.step(env.sample_actions())
    while not bool(env.store["done"][0]):  # a whole episode inside the recording
        env.step(env.sample_actions())
    (whole,) = env.pull_trajectories()
    assert whole["complete"] and whole["t"][0] == 0 and whole["steps_missing"] == 0
    env.recorder = None


def test_tag_captions_give_each_team_its_return(recorded):
    env, trajectories = recorded["tag_continuous"]
    traj = trajectories[0]
    source = render.FrameSource(traj, env)
    last = len(source) - 1
    source.rgb(last)
    caption = source.drawer.captions[last]
    taggers = traj["reward"][:last][:, env.taggers].mean(axis=1).sum()  # the steps before the last frame
    runners = traj["reward"][:last][:, env.runners].mean(axis=1).sum()
    assert f"taggers={taggers:+.2f}" in caption and f"runners={runners:+.2f}" in caption


CUSTOM_ENV = '''
import numpy as np
from workbench.compiler.envdef import Box, Discrete, per_agent

PARAMS = dict(n=3, side=4.0)
NUM_AGENTS = "n"
OBSERVATION = Box(shape=(2,))
ACTION = Discrete(2)
STATE = dict(px=per_agent(), py=per_agent())

def reset(env, agent, key, px, py):
    px[env, agent] = 0.0
    py[env, agent] = 0.0

def step(env, agent, action, px, py, reward):
    px[env, agent] += 1.0

def observe(env, agent, px, py, obs):
    obs[env, agent, 0] = px[env, agent]
    obs[env, agent, 1] = py[env, agent]

def draw(frame, ax):
    """Goal as a green star (static), agents as black squares."""
    if frame["static"]:
        ax.set_xlim(-1, frame["params"].side + 1)
        ax.set_ylim(-1, 1)
        ax.plot([frame["params"].side], [0], "*", color="tab:green", ms=14)
        return
    ax.plot(frame["px"], frame["py"], "s", color="black")
'''


PLAIN_ENV = '''
from workbench.compiler.envdef import Box, Discrete, per_agent

PARAMS = dict(n=3)
NUM_AGENTS = "n"
OBSERVATION = Box(shape=(1,))
ACTION = Discrete(2)
STATE = dict(x=per_agent(), y=per_agent())

def reset(env, agent, x, y):
    x[env, agent] = 0.0

def step(env, agent, x):
    x[env, agent] += 1.0

def observe(env, agent, x, obs):
    obs[env, agent, 0] = x[env, agent]
'''


def test_an_env_without_a_drawer_is_drawn_as_points_or_a_strip():
    from workbench.compiler import envdef
    defn = envdef.parse("plain_walkers", PLAIN_ENV)
    steps = 4
    traj = {"x": np.tile(np.arange(steps, dtype=np.float32)[:, None], (1, 3)), "y": np.zeros((steps, 3), np.float32),
            "t": np.arange(steps), "reward": np.zeros((steps, 3), np.float32), "done": np.zeros(steps, bool)}
    points = render.FrameSource(traj, defn)
    assert type(points.drawer) is render.PointsDrawer
    points.rgb(3)
    assert points.drawer.drawn_agents() == 3
    assert list(points.drawer.lines[0][0].get_xdata()) == [3.0, 3.0, 3.0]
    strip = render.FrameSource({k: v for k, v in traj.items() if k != "y"} | {"x": traj["x"][:, 0]}, defn)
    assert type(strip.drawer) is render.StripDrawer
    assert len(strip.rgb(3).shape) == 3


def test_a_custom_env_draws_itself_with_its_draw_function():
    from workbench.compiler import envdef
    defn = envdef.parse("walkers", CUSTOM_ENV)
    steps = 4
    traj = {"px": np.tile(np.arange(steps, dtype=np.float32)[:, None], (1, 3)), "py": np.zeros((steps, 3), np.float32),
            "t": np.arange(steps), "reward": np.zeros((steps, 3), np.float32), "done": np.zeros(steps, bool)}
    source = render.FrameSource(traj, defn)
    assert isinstance(source.drawer, render.FunctionDrawer)
    frames = [source.rgb(k) for k in range(steps)]
    ax = source.fig.axes[0]
    moving = source.drawer.current
    assert len(moving) == 1 and list(moving[0].get_xdata()) == [3.0, 3.0, 3.0]
    assert ax.get_xlim() == (-1.0, 5.0)  # fixed by the first (static) call
    assert len(ax.lines) == 2  # the goal and this frame's agents: earlier frames' artists were removed
    assert not np.array_equal(frames[0], frames[-1])
    black = (frames[-1].reshape(-1, 3).max(axis=1) < 40).sum()
    assert black > 20  # the agents' squares are drawn


TITLED_ENV = CUSTOM_ENV.replace('''    ax.plot(frame["px"], frame["py"], "s", color="black")''', '''    ax.plot(frame["px"], frame["py"], "s", color="black")
    ax.set_title(f"walkers at t={frame['t']}")''').replace('''        ax.plot([frame["params"].side], [0], "*", color="tab:green", ms=14)
        return''', '''        ax.plot([frame["params"].side], [0], "*", color="tab:green", ms=14)
        ax.set_title("walkers")
        return''')


def test_a_title_the_drawer_sets_is_kept_and_follows_the_frames():
    from workbench.compiler import envdef
    defn = envdef.parse("titled_walkers", TITLED_ENV)
    steps = 4
    traj = {"px": np.tile(np.arange(steps, dtype=np.float32)[:, None], (1, 3)), "py": np.zeros((steps, 3), np.float32),
            "t": np.arange(steps), "reward": np.zeros((steps, 3), np.float32), "done": np.zeros(steps, bool),
            "replica": 2, "complete": False, "steps_missing": 7}
    source = render.FrameSource(traj, defn)
    ax = source.fig.axes[0]
    assert ax.get_title() == "walkers"  # the static call's title, not the viewer's
    label = source.fig.get_suptitle()
    assert "replica 2" in label and "first 7 steps not recorded" in label  # the viewer's label moved above
    first, last = source.rgb(1), source.rgb(3)
    assert ax.get_title() == "walkers at t=3"
    title_rows = slice(0, int(first.shape[0] * 0.2))  # the title is drawn anew each frame, not kept in the background
    assert not np.array_equal(first[title_rows], last[title_rows])


def _synthetic_cartpole(steps):
    return {"x": np.zeros(steps, np.float32), "theta": np.linspace(-0.1, 0.1, steps).astype(np.float32),
            "t": np.arange(steps), "reward": np.ones((steps, 1), np.float32), "done": np.zeros(steps, bool)}


def test_the_player_plays_in_real_time_whatever_the_episode_length():
    cartpole = registry.definition("cartpole")  # tau = 0.02 s a step
    assert render.steps_per_second(cartpole) == pytest.approx(50.0)
    assert render.steps_per_second(registry.definition("acrobot")) == pytest.approx(5.0)  # dt = 0.2
    assert render.steps_per_second(registry.definition("pendulum")) == pytest.approx(20.0)  # dt = 0.05
    assert render.steps_per_second(registry.definition("mountain_car")) == render.DEFAULT_STEPS_PER_SECOND
    rates = []
    for steps in (10, 100, 500):
        anim = render.Animation(_synthetic_cartpole(steps), cartpole, max_frames=60, dpi=30)
        assert anim.fps == pytest.approx(50.0)
        page = anim.to_html()
        assert "fps=50," in page and f"1000*{anim.stride}/(fps*" in page
        rates.append(anim.fps)  # steps a second at 1x: a frame every 1000 * stride / fps ms
    assert rates == [50.0] * 3
    assert render.Animation(_synthetic_cartpole(10), cartpole, fps=12, dpi=30).fps == 12.0


def test_an_empty_recording_is_an_error_that_says_to_step_the_env():
    env = wb.make("cartpole", num_envs=2, target="cpu")
    env.reset()
    env.record([0])
    with pytest.raises(render.EmptyTrajectoryError, match=r"no frames recorded for replica 0: step the env after "
                                                          r"env\.record\(\.\.\.\)"):
        render.show(env.pull_trajectories(), env)
    with pytest.raises(wb.WorkbenchError, match="show\\(\\) got no trajectories"):
        render.show([], env)


def test_a_population_members_replica_is_named_in_the_title():
    env = wb.make("cartpole", num_envs=8, target="cpu", replicas_per_seed=4)  # two members of 4 replicas
    (episode,) = render.record_episode(env, replicas=[5], max_steps=5)
    source = render.FrameSource(episode, env)
    titles = [source.fig.axes[0].get_title()] + ([source.fig._suptitle.get_text()] if source.fig._suptitle else [])
    assert any("member 1 replica 1 (env replica 5)" in t for t in titles), titles
    with pytest.raises(wb.WorkbenchError, match=r"replicas \[8\] are out of range: the env has 8 replicas"):
        render.record_episode(env, replicas=[8])


def test_recording_an_episode_between_stop_and_continue_leaves_the_run_as_it_was():
    """A panel's Stop, render.record_episode(trainer.env, trainer), Continue: the continued run is the
    one it would have been, and the panel's own recording goes on."""
    import torch

    def trainer():
        config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", rollout_length=16, num_minibatches=2,
                              update_epochs=1, total_env_steps=8 * 16 * 100, log_every=1, seed=3, progress=False)
        return wb.make_trainer(config)

    watched, plain = trainer(), trainer()
    for tr in (watched, plain):
        tr.train(num_iterations=2)
        tr.env.record([0], max_steps=500)  # as the panel records, then detaches at Stop
        tr.env.recorder = None
    panels = watched.env._detached[0]
    kept = panels.count, {n: b.clone() for n, b in panels.buffers.items()}
    first = render.record_episode(watched.env, watched, replicas=[0])
    second = render.record_episode(watched.env, watched, replicas=[0])
    assert len(first[0]["t"]) > 1 and not np.array_equal(first[0]["obs"][:3], second[0]["obs"][:3])
    assert watched.env.record([0], max_steps=500) is panels and panels.count == kept[0]
    assert all(torch.equal(b, kept[1][n]) for n, b in panels.buffers.items())
    watched.env.recorder = None
    a, b = watched.train(num_iterations=2), plain.train(num_iterations=2)
    assert a.metrics["return/shared"] == b.metrics["return/shared"] and a.metrics["episodes"] == b.metrics["episodes"]
    assert all(torch.equal(watched.env.store[k], plain.env.store[k]) for k in plain.env.store)
    assert all(torch.equal(p, q) for p, q in zip(watched.models["shared"].parameters(),
                                                 plain.models["shared"].parameters()))


def test_ordinals_in_notes_read_as_english():
    assert [render._ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 231)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th", "231st"]


def test_agents_sharing_a_grid_cell_are_drawn_apart():
    from workbench.notebook.drawers import spread_stacked
    xs = np.array([[1.0, 1.0, 1.0, 4.0], [2.0, 3.0, 4.0, 5.0]])
    ys = np.array([[2.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    sx, sy = spread_stacked(xs, ys)
    assert (sx[0, 3], sy[0, 3]) == (4.0, 0.0) and np.array_equal(sx[1], xs[1]) and np.array_equal(sy[1], ys[1])
    drawn = {(round(x, 3), round(y, 3)) for x, y in zip(sx[0, :3], sy[0, :3])}
    assert len(drawn) == 3  # three markers, not one
    assert np.allclose(np.hypot(sx[0, :3] - 1.0, sy[0, :3] - 2.0), 0.25)


@pytest.mark.parametrize("name", ["tag_grid", "cartpole"])
def test_a_long_member_title_is_wrapped_inside_the_frame(recorded, name):
    """Before: a population member's label ran past both edges of a square Tag frame."""
    from workbench.notebook.frames import FrameSource
    env, trajectories = recorded[name]
    traj = dict(trajectories[0], member="member 4 of 8 (the best by return/taggers, in its last training report), "
                                       "seed 4, lr=0.003, ent_coef=0")
    source = FrameSource(traj, env)
    title = source.fig._suptitle or source.fig.axes[0].title
    box, frame = title.get_window_extent(source.canvas.get_renderer()), source.fig.bbox
    assert "\n" in title.get_text() or name == "cartpole"
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
