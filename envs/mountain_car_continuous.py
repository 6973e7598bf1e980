"""MountainCarContinuous-v0: the mountain car with a continuous engine; the same dynamics as Gymnasium's.

Action: one force in [-1, 1] (clipped), scaled by power. Observation (position, velocity).
Reward -0.1 * action^2 every step (of the action as given, before clipping, as in Gymnasium),
plus 100 on reaching position >= goal_position (0.45) with velocity >= goal_velocity, which
terminates the episode; truncated at 999 steps.
"""
import math

import numpy as np

from workbench.envdef import Box, check_ranges, per_env
from workbench.envs.mountain_car import MountainCarDrawer
from workbench.rng import uniform_range

PARAMS = dict(min_action=-1.0, max_action=1.0, min_position=-1.2, max_position=0.6, max_speed=0.07,
              goal_position=0.45, goal_velocity=0.0, power=0.0015, gravity=0.0025, reset_low=-0.6,
              reset_high=-0.4, max_steps=999)
PARAM_DOCS = dict(
    min_action="Least force.", max_action="Greatest force.", min_position="Left end of the valley.",
    max_position="Right end of the valley.", max_speed="Speed cap.",
    goal_position="Position of the flag: reaching it ends the episode.",
    goal_velocity="Least speed at the flag for the goal to count.", power="Push per unit of force.",
    gravity="Pull of the slope.", reset_low="Lower bound of the uniform start position.",
    reset_high="Upper bound of the uniform start position.", max_steps="Steps before truncation.",
)

NUM_AGENTS = 1
MAX_STEPS = "max_steps"
OBSERVATION = Box(low=(lambda p: p.min_position, lambda p: -p.max_speed),
                  high=(lambda p: p.max_position, lambda p: p.max_speed), shape=(2,))
ACTION = Box(low=lambda p: p.min_action, high=lambda p: p.max_action, shape=(1,))
STATE = dict(position=per_env(), velocity=per_env())
PARAM_RANGES = dict(min_action="(-inf, inf)", max_action="(-inf, inf)", min_position="(-inf, inf)",
                    max_position="(-inf, inf)", max_speed="(0, inf)", goal_position="(-inf, inf)",
                    goal_velocity="(-inf, inf)", power="[0, inf)", gravity="[0, inf)",
                    reset_low="(-inf, inf)", reset_high="(-inf, inf)", max_steps="int [1, inf)")


def validate_params(p):
    message = check_ranges(p, PARAM_RANGES)
    if message:
        return message
    if not p.min_position < p.max_position:
        return f"min_position ({p.min_position}) must be below max_position ({p.max_position})"
    if p.reset_low > p.reset_high:
        return f"reset_low ({p.reset_low}) must not exceed reset_high ({p.reset_high})"
    if p.min_action > p.max_action:
        return f"min_action ({p.min_action}) must not exceed max_action ({p.max_action})"
    return None


def reset(env, key, position, velocity):
    position[env] = uniform_range(key, 0, reset_low, reset_high)
    velocity[env] = 0.0


def step(env, agent, action, position, velocity, reward, terminated):
    a = np.float64(action[env, agent, 0])
    p = np.float64(position[env])
    v = np.float64(velocity[env])
    force = min(max(a, min_action), max_action)
    v += force * power - gravity * math.cos(3 * p)
    v = min(max(v, -max_speed), max_speed)
    p += v
    p = min(max(p, min_position), max_position)
    if p == min_position and v < 0:
        v = 0.0
    position[env] = p
    velocity[env] = v
    done = p >= goal_position and v >= goal_velocity
    reward[env, agent] = (100.0 if done else 0.0) - a * a * 0.1
    terminated[env] = 1 if done else 0


def observe(env, agent, position, velocity, obs):
    obs[env, agent, 0] = position[env]
    obs[env, agent, 1] = velocity[env]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

class MountainCarContinuousDrawer(MountainCarDrawer):
    """The mountain car's drawing (envs/mountain_car.py), the force applied in the caption."""

    def caption(self, k):
        action = self.traj.get("action")
        return f" force={float(action[k].reshape(-1)[0]):+.2f}" if action is not None else ""


RENDER = MountainCarContinuousDrawer
