"""The terminal frame: a recorded episode ends with the state that ended it, which the step kernel
copies for recorded replicas only (before the same-step auto-reset overwrites it), alike on the cpu
target, the cuda target (the CUDA simulator without a GPU) and the CUDA C driver (its host build);
the recorder keeps the last finished episode whole."""
import math

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.notebook import render
from workbench.runtime.env import Env

STATE = ("x", "x_dot", "theta", "theta_dot")


def cartpole_step(state, action, p):
    """CartPole's Euler step in closed form (Gymnasium's equations), from a float32 state."""
    x, x_dot, theta, theta_dot = (float(v) for v in state)
    total_mass, polemass_length = p["masspole"] + p["masscart"], p["masspole"] * p["length"]
    force = p["force_mag"] if action == 1 else -p["force_mag"]
    cos, sin = math.cos(theta), math.sin(theta)
    temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
    thetaacc = (p["gravity"] * sin - cos * temp) / (p["length"] * (4.0 / 3.0 - p["masspole"] * cos ** 2 / total_mass))
    xacc = temp - polemass_length * thetaacc * cos / total_mass
    return np.array([x + p["tau"] * x_dot, x_dot + p["tau"] * xacc, theta + p["tau"] * theta_dot,
                     theta_dot + p["tau"] * thetaacc], np.float32)


def run(env, steps, seed=0, until_done=None):
    """Step with random actions drawn from `seed` (the same on every target); stop early once every
    replica of `until_done` has finished an episode."""
    g = torch.Generator().manual_seed(seed)
    finished = set()
    for _ in range(steps):
        env.step(torch.randint(0, 2, tuple(env.store["action"].shape), generator=g, dtype=torch.int32).to(env.device))
        finished |= {int(r) for r in torch.nonzero(env.store["done"].cpu()).flatten()}
        if until_done is not None and set(until_done) <= finished:
            break


def recorded_cartpole(target, **params):
    env = wb.make("cartpole", num_envs=3, target=target, seed=5, **params)
    env.record(replicas=[1, 2])
    run(env, 300, until_done=[1, 2])
    return env, env.pull_trajectories()


def test_cartpole_episodes_end_with_the_state_that_ended_them(target):
    env, episodes = recorded_cartpole(target)
    p = env.definition.params
    for ep in episodes:
        assert ep["terminal_frame"] and ep["complete"] and bool(ep["terminated"][-1])
        state = np.stack([ep[n] for n in STATE], axis=1)
        steps = len(ep["t"]) - 1
        assert list(ep["t"]) == list(range(steps + 1))
        x, theta = state[:, 0], state[:, 2]
        # every frame before the last is a state the pole was still up in; the last is past a threshold
        assert (np.abs(x[:-1]) <= p["x_threshold"]).all() and (np.abs(theta[:-1]) <= p["theta_threshold"]).all()
        assert abs(theta[-1]) > p["theta_threshold"] or abs(x[-1]) > p["x_threshold"]
        reference = cartpole_step(state[-2], int(ep["action"][-2, 0]), p)
        np.testing.assert_allclose(state[-1], reference, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ep["obs"][-1, 0], state[-1])  # the observation it ended with
        assert ep["reward"][-1, 0] == 0 and ep["reward"][:-1].sum() == steps


def test_the_terminal_frame_agrees_between_targets():
    cpu = recorded_cartpole("cpu")[1]
    cuda = recorded_cartpole("cuda")[1]
    for a, b in zip(cpu, cuda):
        assert a.keys() == b.keys() and a["terminal_frame"] and b["terminal_frame"]
        for name, value in a.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(b[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_time_limit_ends_with_the_state_after_the_last_step(target):
    env = wb.make("cartpole", num_envs=2, target=target, seed=1, max_steps=8)
    env.record(replicas=[0], max_steps=8)
    for k in range(8):  # pushes alternate: the pole stays up
        env.step(torch.full((2, 1), k % 2, dtype=torch.int32).to(env.device))
    (ep,) = env.pull_trajectories()
    assert ep["complete"] and ep["terminal_frame"] and bool(ep["truncated"][-1]) and not ep["terminated"][-1]
    assert list(ep["t"]) == list(range(9))
    state = np.stack([ep[n] for n in STATE], axis=1)
    np.testing.assert_allclose(state[-1], cartpole_step(state[-2], 1, env.definition.params), rtol=1e-5, atol=1e-6)


def test_multi_agent_terminal_copies_match_the_next_state_of_a_longer_run(target):
    """Per-agent arrays with a trailing shape, uint8, float64, int32 and int64 per-env arrays: the state a
    time limit of 6 steps ends in is the state before step 6 of the same run limited at 7."""
    test_cuda_c = pytest.importorskip("test_cuda_c")
    actions = torch.zeros((2, 3, 2))  # the walls stay far: time limits end these episodes
    trajectories = {}
    for limit in (6, 7):
        env = Env(test_cuda_c.probe_definition(max_steps=limit), num_envs=2, target=target, seed=4)
        env.record(replicas=[1, 0], max_steps=limit)
        for _ in range(limit):
            env.step(actions.to(env.device))
        trajectories[limit] = env.pull_trajectories()
    for ended, longer in zip(trajectories[6], trajectories[7]):
        assert ended["terminal_frame"] and bool(ended["truncated"][-1]) and not longer["done"][:6].any()
        for name in ("pos", "energy", "tag", "hits", "ticks"):
            assert ended[name].dtype == longer[name].dtype
            np.testing.assert_array_equal(ended[name][6], longer[name][6], err_msg=name)
            np.testing.assert_array_equal(ended[name][:6], longer[name][:6], err_msg=name)


def test_the_cuda_c_driver_copies_the_terminal_state_as_the_cpu_target_does(tmp_path):
    test_cuda_c = pytest.importorskip("test_cuda_c")
    if test_cuda_c.GXX is None:
        pytest.skip("needs g++ for the host build of the C runtime")
    from workbench.compiler.codegen import gpu_layout
    for defn in (wb.registry.definition("cartpole"), test_cuda_c.probe_definition()):
        (tmp_path / defn.name).mkdir()
        frames = test_cuda_c._compare_with_cpu(tmp_path / defn.name, defn, gpu_layout(defn.num_agents), n_envs=4,
                                               steps=30, recorded=(3, 0))
        copies = [k for k in frames[-1] if k.startswith("wb_final_")]
        assert copies and any(frames[-1][k].any() for k in copies)  # episodes ended and were copied


def test_recording_nothing_copies_nothing(target):
    env = wb.make("cartpole", num_envs=4, target=target, seed=2)
    assert env.terminal.rows == 1 and env.terminal.slot.dtype == torch.int32 and not env.terminal.slot.any()
    run(env, 60)
    assert int(env.store["episode"].sum()) > 4  # episodes ended ...
    assert not any(b.any() for b in env.terminal.buffers.values())  # ... and the kernels copied none
    env.record(replicas=[3])
    assert env.terminal.slot.tolist() == [0, 0, 0, 1]
    run(env, 80, seed=1, until_done=[3])
    assert env.terminal.buffers["theta"].abs().sum() > 0
    env.recorder = None  # detached: the kernels stop copying
    assert not env.terminal.slot.any()
    kept = {n: b.clone() for n, b in env.terminal.buffers.items()}
    run(env, 60, seed=2)
    assert all(torch.equal(kept[n], b) for n, b in env.terminal.buffers.items())


def test_more_replicas_get_more_rows_which_the_kernels_write():
    env = wb.make("cartpole", num_envs=4, target="cpu", seed=2)
    old = env.terminal.tensors()[0]  # the slots, then the flags: recording, final observations at every end
    env.record(replicas=[2, 0, 2, 1])  # a replica asked twice has one row
    assert env.terminal.rows == 3 and env.terminal.slot.tolist() == [2, 3, 1, 0]
    assert env.terminal.retired == [old] and old.tolist() == [0, 0, 0, 0, 0, 1]  # a graph captured before copies nothing
    env.keep_final_obs = False  # ... and follows the flag
    assert old.tolist() == [0] * 6 and env.terminal.tensors()[0].tolist() == [2, 3, 1, 0, 1, 0]
    env.keep_final_obs = True
    run(env, 200, until_done=[0, 1, 2])
    episodes = env.pull_trajectories()
    assert [e["replica"] for e in episodes] == [2, 0, 2, 1] and all(e["terminal_frame"] for e in episodes)
    np.testing.assert_array_equal(episodes[0]["theta"], episodes[2]["theta"])
    p = env.definition.params
    for ep in episodes:  # each ends past a threshold: the copies reached the new rows
        assert abs(ep["theta"][-1]) > p["theta_threshold"] or abs(ep["x"][-1]) > p["x_threshold"]


def test_the_last_finished_episode_stays_whole_while_the_next_runs():
    env = wb.make("cartpole", num_envs=1, target="cpu", seed=0, max_steps=20)
    env.record(replicas=[0], max_steps=20)
    for k in range(20 + 15):  # a whole 20-step episode, then 15 steps of the next
        env.step(torch.full((1, 1), k % 2, dtype=torch.int32))
    (ep,) = env.pull_trajectories()
    assert ep["complete"] and ep["steps_missing"] == 0 and len(ep["t"]) == 21 and ep["t"][-1] == 20


def test_a_detached_recording_goes_on_if_the_env_has_not_moved():
    env = wb.make("cartpole", num_envs=1, target="cpu", seed=0, max_steps=20)
    recorder = env.record(replicas=[0], max_steps=20)
    for k in range(25):
        env.step(torch.full((1, 1), k % 2, dtype=torch.int32))
    env.recorder = None  # a run stopped ...
    assert env.record(replicas=[0], max_steps=20) is recorder  # ... and continues: the episodes stay
    (ep,) = env.pull_trajectories()
    assert ep["complete"] and len(ep["t"]) == 21
    env.recorder = None
    env.step()
    assert env.record(replicas=[0], max_steps=20) is not recorder  # the env moved: a new recording


def test_the_viewer_shows_how_the_episode_ended():
    env, (ep, _) = recorded_cartpole("cpu")
    source = render.FrameSource(ep, env)
    last = len(source) - 1
    source.rgb(last)
    x, th, pole = float(ep["x"][-1]), float(ep["theta"][-1]), 2 * env.definition.params["length"]
    px, _ = source.drawer.pole.get_data()
    assert px[1] == pytest.approx(x + pole * math.sin(th))
    source.rgb(0)
    steps = last
    assert source.drawer.captions[0] == "t=0 return=0.00"
    assert ep["terminated"][-1]
    assert source.drawer.captions[last] == f"t={steps} return={steps:.2f}  (terminated)"
    assert "(" not in source.drawer.captions[last - 1]
    timed_out = wb.make("cartpole", num_envs=1, target="cpu", seed=0, max_steps=20)
    timed_out.record(replicas=[0], max_steps=20)
    for k in range(25):  # balanced for 20 steps: the time limit ends the episode
        timed_out.step(torch.full((1, 1), k % 2, dtype=torch.int32))
    (truncated,) = timed_out.pull_trajectories()
    frames = render.FrameSource(truncated, timed_out)
    frames.rgb(20)
    assert truncated["truncated"][-1] and frames.drawer.captions[20] == "t=20 return=20.00  (truncated: time limit)"
    anim = render.Animation(ep, env)
    assert len(anim.frames) == steps + 1 and anim.total_steps == steps
    assert f"step 0 / {steps}" in anim.to_html()


def test_an_observation_of_the_clock_sees_the_episode_length_then_zero(target):
    """The one-agent drivers store the clock one past the step before the final observation only for
    an env whose observe takes `t` (test_cuda_c.CLOCK_PY): here it does."""
    from test_cuda_c import CLOCK_PY, check_clock_frames
    wb.register("clock_observed", CLOCK_PY)
    env = wb.make("clock_observed", num_envs=5, target=target, seed=4)
    rng = np.random.default_rng(0)
    frames = []
    for _ in range(20):
        env.step(torch.from_numpy(rng.integers(0, 3, size=(5, 1), dtype=np.int32)).to(env.device))
        frames.append({k: v.cpu().numpy().copy() for k, v in env.store.items()})
    assert check_clock_frames([None] + frames) > 5
