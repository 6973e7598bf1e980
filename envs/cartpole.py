"""CartPole-v1: a pole on a cart, pushed left or right; the same dynamics as Gymnasium's.

Reward 1 every step; terminated when |x| > 2.4 or |theta| > 12 degrees; truncated at 500 steps.
"""
import math

from workbench.envdef import Box, Discrete, check_ranges, per_env
from workbench.render import Drawer
from workbench.rng import uniform_range

PARAMS = dict(gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0, tau=0.02,
              theta_threshold=12 * 2 * math.pi / 360, x_threshold=2.4, max_steps=500)
PARAM_DOCS = dict(
    gravity="Gravitational acceleration (m/s^2).", masscart="Mass of the cart (kg).",
    masspole="Mass of the pole (kg).", length="Half the pole's length (m).",
    force_mag="Force of a push, left or right (N).", tau="Seconds per step (Euler integration).",
    theta_threshold="Pole angle (rad) past which the episode terminates.",
    x_threshold="Cart position past which the episode terminates.", max_steps="Steps before truncation.",
)

NUM_AGENTS = 1
MAX_STEPS = "max_steps"
# Gymnasium's bounds: x and theta within twice their thresholds, the speeds unbounded
OBSERVATION = Box(low=(lambda p: -2 * p.x_threshold, -math.inf, lambda p: -2 * p.theta_threshold, -math.inf),
                  high=(lambda p: 2 * p.x_threshold, math.inf, lambda p: 2 * p.theta_threshold, math.inf), shape=(4,))
ACTION = Discrete(2)
STATE = dict(x=per_env(), x_dot=per_env(), theta=per_env(), theta_dot=per_env())
PARAM_RANGES = dict(gravity="[0, inf)", masscart="(0, inf)", masspole="(0, inf)", length="(0, inf)",
                    force_mag="[0, inf)", tau="(0, inf)", theta_threshold="(0, pi]", x_threshold="(0, inf)",
                    max_steps="int [1, inf)")


def validate_params(p):
    return check_ranges(p, PARAM_RANGES)


def reset(env, key, x, x_dot, theta, theta_dot):
    x[env] = uniform_range(key, 0, -0.05, 0.05)
    x_dot[env] = uniform_range(key, 1, -0.05, 0.05)
    theta[env] = uniform_range(key, 2, -0.05, 0.05)
    theta_dot[env] = uniform_range(key, 3, -0.05, 0.05)


def step(env, agent, action, x, x_dot, theta, theta_dot, reward, terminated):
    # every load before any arithmetic: on a GPU one memory round trip a step, not three
    a = action[env, agent]
    x0 = x[env]
    x_dot0 = x_dot[env]
    theta0 = theta[env]
    theta_dot0 = theta_dot[env]
    total_mass = masspole + masscart
    polemass_length = masspole * length
    force = force_mag if a == 1 else -force_mag
    costheta = math.cos(theta0)
    sintheta = math.sin(theta0)
    temp = (force + polemass_length * theta_dot0 ** 2 * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (4.0 / 3.0 - masspole * costheta ** 2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    new_x = x0 + tau * x_dot0
    x_dot[env] = x_dot0 + tau * xacc
    new_theta = theta0 + tau * theta_dot0
    theta_dot[env] = theta_dot0 + tau * thetaacc
    x[env] = new_x
    theta[env] = new_theta
    reward[env, agent] = 1.0
    failed = new_x < -x_threshold or new_x > x_threshold or new_theta < -theta_threshold or new_theta > theta_threshold
    terminated[env] = 1 if failed else 0


def observe(env, agent, x, x_dot, theta, theta_dot, obs):
    obs[env, agent, 0] = x[env]
    obs[env, agent, 1] = x_dot[env]
    obs[env, agent, 2] = theta[env]
    obs[env, agent, 3] = theta_dot[env]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

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


RENDER = CartPoleDrawer
