"""Acrobot-v1: two links hanging from a pivot, torque on the middle joint; the same dynamics as Gymnasium's.

State (theta1, theta2, dtheta1, dtheta2), theta2 relative to link 1, integrated over dt by one
RK4 step; angles are wrapped to [-pi, pi] and velocities bounded. Actions 0, 1, 2 apply torque
-1, 0, +1 (plus uniform noise of up to torque_noise_max). Observation: cos/sin of both angles
and both velocities. Reward -1 per step, 0 on the step that lifts the tip above the target
height (terminated: -cos(theta1) - cos(theta1 + theta2) > 1); truncated at 500 steps.
book_or_nips picks the equations of Sutton and Barto's book (Gymnasium's default) or of the
NIPS paper.
"""
import math

import numpy as np

from workbench.envdef import Box, Discrete, check_ranges, per_env
from workbench.render import Drawer
from workbench.rng import uniform_range

PARAMS = dict(dt=0.2, link_length_1=1.0, link_length_2=1.0, link_mass_1=1.0, link_mass_2=1.0,
              link_com_pos_1=0.5, link_com_pos_2=0.5, link_moi=1.0, gravity=9.8,
              max_vel_1=4 * math.pi, max_vel_2=9 * math.pi, torque_noise_max=0.0, book_or_nips="book",
              reset_low=-0.1, reset_high=0.1, max_steps=500)
PARAM_DOCS = dict(
    dt="Seconds per step.", link_length_1="Length of the upper link (m).",
    link_length_2="Length of the lower link (m).",
    link_mass_1="Mass of the upper link (kg).", link_mass_2="Mass of the lower link (kg).",
    link_com_pos_1="Centre of mass of the upper link, from its pivot (m).",
    link_com_pos_2="Centre of mass of the lower link, from its pivot (m).", link_moi="Moment of inertia of each link.",
    gravity="Gravitational acceleration (m/s^2).", max_vel_1="Angular speed cap of the upper joint (rad/s).",
    max_vel_2="Angular speed cap of the lower joint (rad/s).",
    torque_noise_max="Uniform noise added to the torque, at most this much.",
    book_or_nips="Dynamics: 'book' (Sutton and Barto) or 'nips' (the NIPS paper's).",
    reset_low="Lower bound of the uniform start state.", reset_high="Upper bound of the uniform start state.",
    max_steps="Steps before truncation.",
)

NUM_AGENTS = 1
MAX_STEPS = "max_steps"
OBSERVATION = Box(low=(-1.0, -1.0, -1.0, -1.0, lambda p: -p.max_vel_1, lambda p: -p.max_vel_2),
                  high=(1.0, 1.0, 1.0, 1.0, lambda p: p.max_vel_1, lambda p: p.max_vel_2), shape=(6,))
ACTION = Discrete(3)
STATE = dict(theta1=per_env(), theta2=per_env(), dtheta1=per_env(), dtheta2=per_env())


PARAM_RANGES = dict(dt="(0, inf)", link_length_1="(0, inf)", link_length_2="(0, inf)", link_mass_1="(0, inf)",
                    link_mass_2="(0, inf)", link_com_pos_1="[0, inf)", link_com_pos_2="[0, inf)", link_moi="(0, inf)",
                    gravity="[0, inf)", max_vel_1="(0, inf)", max_vel_2="(0, inf)", torque_noise_max="[0, inf)",
                    reset_low="(-inf, inf)", reset_high="(-inf, inf)", max_steps="int [1, inf)")


def validate_params(p):
    if p.book_or_nips not in ("book", "nips"):
        return f"book_or_nips must be 'book' or 'nips', got {p.book_or_nips!r}"
    if p.reset_low > p.reset_high:
        return f"reset_low ({p.reset_low}) must not exceed reset_high ({p.reset_high})"
    return check_ranges(p, PARAM_RANGES)


def dsdt(theta1, theta2, dtheta1, dtheta2, a):
    m1 = link_mass_1
    m2 = link_mass_2
    l1 = link_length_1
    lc1 = link_com_pos_1
    lc2 = link_com_pos_2
    i1 = link_moi
    i2 = link_moi
    d1 = m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * math.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2 ** 2 + l1 * lc2 * math.cos(theta2)) + i2
    phi2 = m2 * lc2 * gravity * math.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * dtheta2 ** 2 * math.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * math.sin(theta2)
            + (m1 * lc1 + m2 * l1) * gravity * math.cos(theta1 - math.pi / 2)
            + phi2)
    # a comparison of two constants: numba prunes the branch before typing, so no string reaches a kernel
    if book_or_nips == "nips":
        ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * lc2 ** 2 + i2 - d2 ** 2 / d1)
    else:
        ddtheta2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1 ** 2 * math.sin(theta2) - phi2)
                    / (m2 * lc2 ** 2 + i2 - d2 ** 2 / d1))
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def rk4(y0, y1, y2, y3, a):
    """One step of Gymnasium's rk4 over [0, dt], torque held constant."""
    h2 = dt / 2.0
    k10, k11, k12, k13 = dsdt(y0, y1, y2, y3, a)
    k20, k21, k22, k23 = dsdt(y0 + h2 * k10, y1 + h2 * k11, y2 + h2 * k12, y3 + h2 * k13, a)
    k30, k31, k32, k33 = dsdt(y0 + h2 * k20, y1 + h2 * k21, y2 + h2 * k22, y3 + h2 * k23, a)
    k40, k41, k42, k43 = dsdt(y0 + dt * k30, y1 + dt * k31, y2 + dt * k32, y3 + dt * k33, a)
    w = dt / 6.0
    return (y0 + w * (k10 + 2 * k20 + 2 * k30 + k40), y1 + w * (k11 + 2 * k21 + 2 * k31 + k41),
            y2 + w * (k12 + 2 * k22 + 2 * k32 + k42), y3 + w * (k13 + 2 * k23 + 2 * k33 + k43))


def wrap(x, low, high):
    diff = high - low
    while x > high:
        x = x - diff
    while x < low:
        x = x + diff
    return x


def bound(x, low, high):
    return min(max(x, low), high)


def reset(env, key, theta1, theta2, dtheta1, dtheta2):
    theta1[env] = uniform_range(key, 0, reset_low, reset_high)
    theta2[env] = uniform_range(key, 1, reset_low, reset_high)
    dtheta1[env] = uniform_range(key, 2, reset_low, reset_high)
    dtheta2[env] = uniform_range(key, 3, reset_low, reset_high)


def step(env, agent, key, action, theta1, theta2, dtheta1, dtheta2, reward, terminated):
    torque = np.float64(action[env, agent]) - 1.0
    if torque_noise_max > 0:
        torque += uniform_range(key, 0, -torque_noise_max, torque_noise_max)
    s0, s1, s2, s3 = rk4(np.float64(theta1[env]), np.float64(theta2[env]), np.float64(dtheta1[env]),
                         np.float64(dtheta2[env]), torque)
    s0 = wrap(s0, -math.pi, math.pi)
    s1 = wrap(s1, -math.pi, math.pi)
    s2 = bound(s2, -max_vel_1, max_vel_1)
    s3 = bound(s3, -max_vel_2, max_vel_2)
    theta1[env] = s0
    theta2[env] = s1
    dtheta1[env] = s2
    dtheta2[env] = s3
    # decided on the float64 state, as Gymnasium does, not on its float32 copy
    done = -math.cos(s0) - math.cos(s1 + s0) > 1.0
    reward[env, agent] = 0.0 if done else -1.0
    terminated[env] = 1 if done else 0


def observe(env, agent, theta1, theta2, dtheta1, dtheta2, obs):
    obs[env, agent, 0] = math.cos(theta1[env])
    obs[env, agent, 1] = math.sin(theta1[env])
    obs[env, agent, 2] = math.cos(theta2[env])
    obs[env, agent, 3] = math.sin(theta2[env])
    obs[env, agent, 4] = dtheta1[env]
    obs[env, agent, 5] = dtheta2[env]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

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


RENDER = AcrobotDrawer
