"""Pendulum-v1: swing a pendulum up and hold it there with limited torque; the same dynamics as Gymnasium's.

State (theta, thetadot), theta = 0 upright and not wrapped. Action: one torque in [-2, 2]
(clipped). Observation (cos theta, sin theta, thetadot). Reward -(angle_normalize(theta)^2 +
0.1 thetadot^2 + 0.001 torque^2) of the state before the step; never terminates, truncated at
200 steps. Starts with theta uniform in [-init_theta, init_theta] and thetadot in
[-init_thetadot, init_thetadot] (Gymnasium's reset options x_init and y_init).
"""
import math

import numpy as np

from workbench.envdef import Box, check_ranges, per_env
from workbench.render import Drawer
from workbench.rng import uniform_range

PARAMS = dict(max_speed=8.0, max_torque=2.0, dt=0.05, g=10.0, m=1.0, l=1.0, init_theta=math.pi,
              init_thetadot=1.0, max_steps=200)
PARAM_DOCS = dict(
    max_speed="Angular speed cap (rad/s).", max_torque="Greatest torque, either way.", dt="Seconds per step.",
    g="Gravitational acceleration (m/s^2).", m="Mass of the pendulum (kg).", l="Length of the rod (m).",
    init_theta="Start angle drawn uniformly in [-init_theta, init_theta] (0: upright).",
    init_thetadot="Start angular speed drawn uniformly in [-init_thetadot, init_thetadot].",
    max_steps="Steps before truncation.",
)

NUM_AGENTS = 1
MAX_STEPS = "max_steps"
# bounds follow the parameters: wb.make("pendulum", max_torque=3.0) acts in [-3, 3]
OBSERVATION = Box(low=(-1.0, -1.0, lambda p: -p.max_speed), high=(1.0, 1.0, lambda p: p.max_speed), shape=(3,))
ACTION = Box(low=lambda p: -p.max_torque, high=lambda p: p.max_torque, shape=(1,))
STATE = dict(theta=per_env(), thetadot=per_env())
PARAM_RANGES = dict(max_speed="(0, inf)", max_torque="[0, inf)", dt="(0, inf)", g="[0, inf)", m="(0, inf)",
                    l="(0, inf)", init_theta="[0, inf)", init_thetadot="[0, inf)", max_steps="int [1, inf)")


def validate_params(p):
    return check_ranges(p, PARAM_RANGES)


def angle_normalize(x):
    return ((x + math.pi) % (2 * math.pi)) - math.pi


def reset(env, key, theta, thetadot):
    theta[env] = uniform_range(key, 0, -init_theta, init_theta)
    thetadot[env] = uniform_range(key, 1, -init_thetadot, init_thetadot)


def step(env, agent, action, theta, thetadot, reward):
    th = np.float64(theta[env])
    thdot = np.float64(thetadot[env])
    u = min(max(np.float64(action[env, agent, 0]), -max_torque), max_torque)
    costs = angle_normalize(th) ** 2 + 0.1 * thdot ** 2 + 0.001 * (u ** 2)
    newthdot = thdot + (3 * g / (2 * l) * math.sin(th) + 3.0 / (m * l ** 2) * u) * dt
    newthdot = min(max(newthdot, -max_speed), max_speed)
    theta[env] = th + newthdot * dt
    thetadot[env] = newthdot
    reward[env, agent] = -costs


def observe(env, agent, theta, thetadot, obs):
    obs[env, agent, 0] = math.cos(theta[env])
    obs[env, agent, 1] = math.sin(theta[env])
    obs[env, agent, 2] = thetadot[env]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

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


RENDER = PendulumDrawer
