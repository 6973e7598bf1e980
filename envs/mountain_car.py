"""MountainCar-v0: an underpowered car in a valley must rock its way up the right hill; the same
dynamics as Gymnasium's.

Actions 0, 1, 2 push left, not at all, right. Observation (position, velocity). Reward -1 every
step; terminated when position >= goal_position with velocity >= goal_velocity; truncated at
200 steps. The car stops dead against the left wall.
"""
import math

import numpy as np

from workbench.envdef import Box, Discrete, check_ranges, per_env
from workbench.render import Drawer
from workbench.rng import uniform_range

PARAMS = dict(min_position=-1.2, max_position=0.6, max_speed=0.07, goal_position=0.5, goal_velocity=0.0,
              force=0.001, gravity=0.0025, reset_low=-0.6, reset_high=-0.4, max_steps=200)
PARAM_DOCS = dict(
    min_position="Left end of the valley.", max_position="Right end of the valley.", max_speed="Speed cap.",
    goal_position="Position of the flag: reaching it ends the episode.",
    goal_velocity="Least speed at the flag for the goal to count.", force="Push of one action.",
    gravity="Pull of the slope.", reset_low="Lower bound of the uniform start position.",
    reset_high="Upper bound of the uniform start position.", max_steps="Steps before truncation.",
)

NUM_AGENTS = 1
MAX_STEPS = "max_steps"
OBSERVATION = Box(low=(lambda p: p.min_position, lambda p: -p.max_speed),
                  high=(lambda p: p.max_position, lambda p: p.max_speed), shape=(2,))
ACTION = Discrete(3)
STATE = dict(position=per_env(), velocity=per_env())
PARAM_RANGES = dict(min_position="(-inf, inf)", max_position="(-inf, inf)", max_speed="(0, inf)",
                    goal_position="(-inf, inf)", goal_velocity="(-inf, inf)", force="[0, inf)", gravity="[0, inf)",
                    reset_low="(-inf, inf)", reset_high="(-inf, inf)", max_steps="int [1, inf)")


def validate_params(p):
    message = check_ranges(p, PARAM_RANGES)
    if message:
        return message
    if not p.min_position < p.max_position:
        return f"min_position ({p.min_position}) must be below max_position ({p.max_position})"
    if p.reset_low > p.reset_high:
        return f"reset_low ({p.reset_low}) must not exceed reset_high ({p.reset_high})"
    return None


def reset(env, key, position, velocity):
    position[env] = uniform_range(key, 0, reset_low, reset_high)
    velocity[env] = 0.0


def step(env, agent, action, position, velocity, reward, terminated):
    p = np.float64(position[env])
    v = np.float64(velocity[env])
    v += (action[env, agent] - 1) * force + math.cos(3 * p) * (-gravity)
    v = min(max(v, -max_speed), max_speed)
    p += v
    p = min(max(p, min_position), max_position)
    if p == min_position and v < 0:
        v = 0.0
    position[env] = p
    velocity[env] = v
    reward[env, agent] = -1.0
    # decided on the float64 values, as Gymnasium does, not on their float32 copies
    terminated[env] = 1 if (p >= goal_position and v >= goal_velocity) else 0


def observe(env, agent, position, velocity, obs):
    obs[env, agent, 0] = position[env]
    obs[env, agent, 1] = velocity[env]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

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
        self.set_info(k, self.caption(k))

    def caption(self, k: int) -> str:
        """What frame k's caption adds after the return."""
        return ""


RENDER = MountainCarDrawer
