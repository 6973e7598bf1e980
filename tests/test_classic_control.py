"""Acrobot, MountainCar, MountainCarContinuous and Pendulum against Gymnasium's own implementations,
step by step from the same states and actions.

Each step some replicas are moved to states that reach the rarer paths (goal, wall, speed limits,
angle wrapping) and some to just before the time limit, so terminations and truncations are
compared too, not only the common case.
"""
import math
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

import workbench as wb
from conftest import tiny
from workbench.interop.spaces import gymnasium_space
from workbench.runtime.registry import definition

PI = math.pi


def _write(env, name, index, values):
    env.data[name][index] = torch.as_tensor(np.asarray(values, dtype=np.float32), device=env.device)


def _scramble_acrobot(env, rng, rows):
    near, anywhere = rows[0::2], rows[1::2]
    # link 1 nearly upright with link 2 in line: the tip is above the target, so the goal path runs
    _write(env, "theta1", near, rng.uniform(2.8, PI, len(near)))
    _write(env, "theta2", near, rng.uniform(-0.4, 0.4, len(near)))
    _write(env, "dtheta1", near, rng.uniform(-1.0, 1.0, len(near)))
    _write(env, "dtheta2", near, rng.uniform(-1.0, 1.0, len(near)))
    # the whole state space: angles wrap across +-pi, velocities hit their bounds
    _write(env, "theta1", anywhere, rng.uniform(-PI, PI, len(anywhere)))
    _write(env, "theta2", anywhere, rng.uniform(-PI, PI, len(anywhere)))
    _write(env, "dtheta1", anywhere, rng.uniform(-4 * PI, 4 * PI, len(anywhere)))
    _write(env, "dtheta2", anywhere, rng.uniform(-9 * PI, 9 * PI, len(anywhere)))


def _scramble_car(goal):
    def scramble(env, rng, rows):
        near, wall, anywhere = rows[0::3], rows[1::3], rows[2::3]
        # on both sides of the goal position and of the goal velocity
        _write(env, "position", near, goal + rng.uniform(-0.015, 0.015, len(near)))
        _write(env, "velocity", near, rng.uniform(-0.004, 0.012, len(near)))
        # moving into the left wall, where the car stops dead
        _write(env, "position", wall, rng.uniform(-1.2, -1.15, len(wall)))
        _write(env, "velocity", wall, rng.uniform(-0.07, 0.0, len(wall)))
        # the whole state space: the speed limit and the right edge
        _write(env, "position", anywhere, rng.uniform(-1.2, 0.6, len(anywhere)))
        _write(env, "velocity", anywhere, rng.uniform(-0.07, 0.07, len(anywhere)))
    return scramble


def _scramble_pendulum(env, rng, rows):
    wide, clip = rows[0::2], rows[1::2]
    # far from [-pi, pi) both ways, where angle_normalize matters
    _write(env, "theta", wide, rng.uniform(-20.0, 20.0, len(wide)))
    _write(env, "thetadot", wide, rng.uniform(-8.0, 8.0, len(wide)))
    # at top speed with gravity pulling the same way, whatever the torque: the speed clip must act
    sign = rng.choice([-1.0, 1.0], len(clip))
    _write(env, "theta", clip, sign * rng.uniform(0.5, 2.5, len(clip)) + 2 * PI * rng.integers(-3, 4, len(clip)))
    _write(env, "thetadot", clip, sign * rng.uniform(7.95, 8.0, len(clip)))


def _at_speed_bound(obs):
    return (np.abs(obs[:, 4]) == np.float32(4 * PI)) | (np.abs(obs[:, 5]) == np.float32(9 * PI))


def _at_wall(obs):
    return (obs[:, 0] == np.float32(-1.2)) & (obs[:, 1] == 0.0)


def _in_bounds(values, low, high):
    return bool(np.all((values >= np.float32(low)) & (values <= np.float32(high))))


@dataclass(frozen=True)
class Case:
    gym_id: str
    state: tuple  # our state arrays, in the order of Gymnasium's `state`
    gym_dtype: type  # what Gymnasium's `state` holds between steps
    actions: Callable  # (rng, n) -> host actions, continuous ones partly outside the bounds
    scramble: Callable  # (env, rng, rows) -> None
    terminates: bool
    reset_bounds: tuple  # per state array: (low, high) of the initial distribution
    edge: Callable  # Gymnasium's next observations [n, O] -> which of them took a rare path


CASES = {
    "acrobot": Case("Acrobot-v1", ("theta1", "theta2", "dtheta1", "dtheta2"), np.float64,
                    lambda rng, n: rng.integers(0, 3, n).astype(np.int32), _scramble_acrobot, True,
                    ((-0.1, 0.1),) * 4, _at_speed_bound),
    "mountain_car": Case("MountainCar-v0", ("position", "velocity"), np.float64,
                         lambda rng, n: rng.integers(0, 3, n).astype(np.int32), _scramble_car(0.5), True,
                         ((-0.6, -0.4), (0.0, 0.0)), _at_wall),
    "mountain_car_continuous": Case("MountainCarContinuous-v0", ("position", "velocity"), np.float32,
                                    lambda rng, n: rng.uniform(-1.5, 1.5, (n, 1)).astype(np.float32),
                                    _scramble_car(0.45), True, ((-0.6, -0.4), (0.0, 0.0)), _at_wall),
    "pendulum": Case("Pendulum-v1", ("theta", "thetadot"), np.float64,
                     lambda rng, n: rng.uniform(-3.0, 3.0, (n, 1)).astype(np.float32), _scramble_pendulum, False,
                     ((-PI, PI), (-1.0, 1.0)), lambda o: np.abs(o[:, 2]) == 8.0),
}
NAMES = sorted(CASES)


def _state(env, case):
    return torch.stack([env.data[k] for k in case.state], 1).cpu().numpy().copy()


def _reference_step(ref, case, state, action):
    ref.state = state.astype(case.gym_dtype)
    gym_action = int(action) if np.ndim(action) == 0 else np.array(action, dtype=np.float32)
    obs, reward, terminated, truncated, _ = ref.step(gym_action)
    assert not truncated  # the unwrapped env has no time limit: that is the framework's job
    return obs, reward, terminated, np.array(ref.state, dtype=np.float64)


def _run_parity(name, target, n, steps, params=None, gym_kwargs=None):
    case = CASES[name]
    params, gym_kwargs = params or {}, gym_kwargs or {}
    env = wb.make(name, num_envs=n, target=target, seed=5, **params)
    ref = gym.make(case.gym_id, **gym_kwargs).unwrapped
    max_steps = env.definition.max_steps
    if "max_steps" not in params:
        assert max_steps == gym.spec(case.gym_id).max_episode_steps
    rng = np.random.default_rng(11)
    scrambled = np.arange(max(2, n // 4))
    near_limit = np.arange(len(scrambled), len(scrambled) + max(1, n // 8))
    env.data["t"][near_limit] = max_steps - 3
    counts = dict(terminated=0, truncated=0, edge=0)
    for _ in range(steps):
        case.scramble(env, rng, scrambled)
        state = _state(env, case)
        t_before = env.data["t"].cpu().numpy().copy()
        actions = case.actions(rng, n)
        obs, reward, done, info = env.step(torch.from_numpy(actions).to(env.device))
        obs, reward, done = obs.cpu().numpy(), reward.cpu().numpy(), done.cpu().numpy()
        term, trunc = info["terminated"].cpu().numpy(), info["truncated"].cpu().numpy()
        final = info["final_obs"].cpu().numpy()
        refs = [_reference_step(ref, case, state[i], actions[i]) for i in range(n)]
        r_obs = np.stack([r[0] for r in refs])
        r_rew = np.array([r[1] for r in refs], dtype=np.float64)
        r_term = np.array([r[2] for r in refs])
        r_state = np.stack([r[3] for r in refs])
        seen = np.where(done[:, None], final[:, 0], obs[:, 0])
        np.testing.assert_allclose(seen, r_obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(reward[:, 0], r_rew, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(term, r_term)
        np.testing.assert_array_equal(trunc, t_before + 1 >= max_steps)
        np.testing.assert_array_equal(done, term | trunc)
        # the state itself too (angle wrapping, for one, does not show in cos/sin observations)
        np.testing.assert_allclose(_state(env, case)[~done], r_state[~done], rtol=1e-5, atol=1e-6)
        # finished replicas restarted in the same step: fresh state, t back to 0, obs of the fresh state
        fresh = _state(env, case)[done]
        for k, (low, high) in enumerate(case.reset_bounds):
            assert _in_bounds(fresh[:, k], low, high), (case.state[k], fresh[:, k])
        assert np.all(env.data["t"].cpu().numpy()[done] == 0)
        assert np.all(np.abs(obs[done, 0] - final[done, 0]).max(axis=1) > 0)
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int(trunc.sum())
        counts["edge"] += int(case.edge(r_obs).sum())
    assert counts["truncated"] >= len(near_limit)
    assert counts["edge"] > 0
    if case.terminates:
        assert counts["terminated"] > 0
    else:
        assert counts["terminated"] == 0
    return counts


@pytest.mark.parametrize("name", NAMES)
def test_matches_gymnasium_step_by_step(name, target):
    if target == "cuda":
        _run_parity(name, "cuda", tiny(256, 4), tiny(60, 10))
    else:
        _run_parity(name, "cpu", 256, 60)


def test_pendulum_time_limit_and_gravity_params():
    # on the simulator: another parameter set means another compile, which the cpu target pays in seconds
    n = tiny(64, 4)
    counts = _run_parity("pendulum", "cuda", n, 12, params=dict(max_steps=5, g=9.81), gym_kwargs=dict(g=9.81))
    assert counts["truncated"] == 2 * n  # every replica at steps 5 and 10, the near-limit ones at 3 and 8


GYMNASIUM_IDS = dict(acrobot="Acrobot-v1", cartpole="CartPole-v1", mountain_car="MountainCar-v0",
                     mountain_car_continuous="MountainCarContinuous-v0", pendulum="Pendulum-v1")


@pytest.mark.parametrize("name", sorted(GYMNASIUM_IDS))
def test_spaces_equal_gymnasiums(name):
    defn = definition(name)
    reference = gym.make(GYMNASIUM_IDS[name])
    assert gymnasium_space(defn.observation) == reference.observation_space
    assert gymnasium_space(defn.action) == reference.action_space


def test_space_bounds_follow_the_parameters():
    # a bound declared as a function of the parameters: DDPG scales its actions into ACTION's bounds
    pendulum = definition("pendulum", max_torque=3.0, max_speed=10.0)
    assert (pendulum.action.low, pendulum.action.high) == (-3.0, 3.0)
    assert pendulum.observation.high == (1.0, 1.0, 10.0)
    car = gymnasium_space(definition("mountain_car_continuous", min_action=-0.5, max_action=2.0).action)
    assert car == gym.spaces.Box(-0.5, 2.0, (1,), np.float32)
    high = np.array([6.0, np.inf, 0.6, np.inf], np.float32)
    assert gymnasium_space(definition("cartpole", x_threshold=3.0, theta_threshold=0.3).observation) == \
        gym.spaces.Box(-high, high, (4,), np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_check_env_cpu_and_cuda_agree(name):
    report = wb.check_env(name, targets=("cpu", "cuda"), num_envs=3, steps=10, max_steps=5)
    # (episodes cut at 5 steps: the time limit's reset and final observations are compared too)
    assert report.targets == ("cpu", "cuda") and report.episodes_finished > 0 and report.caveat == ""


@pytest.mark.parametrize("name", NAMES)
def test_reset_distribution(name):
    case = CASES[name]
    env = wb.make(name, num_envs=4096, target="cpu", seed=1)
    state = _state(env, case)
    for k, (low, high) in enumerate(case.reset_bounds):
        v = state[:, k]
        assert _in_bounds(v, low, high), case.state[k]
        if high > low:  # uniform: the mean's sd is (high - low) / sqrt(12 * 4096) < 0.005 (high - low)
            assert abs(v.mean() - (low + high) / 2) < 0.02 * (high - low)
            assert abs(v.std() - (high - low) / math.sqrt(12)) < 0.02 * (high - low)
            assert len(np.unique(v)) > 4000
    # the first observation is the fresh state's
    ref = gym.make(case.gym_id).unwrapped
    obs = env.data["obs"].cpu().numpy()[:, 0]
    for i in range(0, 4096, 512):
        ref.state = state[i].astype(case.gym_dtype)
        get_obs = getattr(ref, "_get_ob", None) or getattr(ref, "_get_obs", None)
        expected = get_obs() if get_obs else np.array(ref.state, dtype=np.float32)  # MountainCar: obs = state
        np.testing.assert_allclose(obs[i], expected, rtol=1e-6, atol=1e-6)


def test_acrobot_torque_noise_matches_gymnasium_with_the_same_draw():
    # the noise is the env's first uniform draw of the step's key; rebuilt on the host, Gymnasium
    # with that torque must give the same next state
    from workbench.compiler.rng import reference_uniform
    n, noise = 6, 0.5
    env = wb.make("acrobot", num_envs=n, target="cuda", seed=2, torque_noise_max=noise)
    case = CASES["acrobot"]
    ref = gym.make("Acrobot-v1").unwrapped
    rng = np.random.default_rng(3)
    moved = 0.0
    for _ in range(3):
        state = _state(env, case)
        episode, t = env.data["episode"].cpu().numpy().copy(), env.data["t"].cpu().numpy().copy()
        actions = rng.integers(0, 3, n).astype(np.int32)
        obs, _, done, info = env.step(torch.from_numpy(actions).to(env.device))
        seen = np.where(done.cpu().numpy()[:, None], info["final_obs"].cpu().numpy()[:, 0], obs.cpu().numpy()[:, 0])
        for i in range(n):
            u = np.float32(reference_uniform(2, i, 0, int(episode[i]), int(t[i]), 0))
            draw = float(np.float32(-noise) + (np.float32(noise) - np.float32(-noise)) * u)
            ref.AVAIL_TORQUE = [-1.0 + draw, draw, 1.0 + draw]
            r_obs = _reference_step(ref, case, state[i], actions[i])[0]
            np.testing.assert_allclose(seen[i], r_obs, rtol=1e-5, atol=1e-6)
            ref.AVAIL_TORQUE = [-1.0, 0.0, 1.0]
            moved = max(moved, float(np.abs(_reference_step(ref, case, state[i], actions[i])[0] - r_obs).max()))
    assert moved > 1e-3  # the noise changed the dynamics visibly
