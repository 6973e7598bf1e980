"""`env.as_sb3()`: all replicas as a Stable-Baselines3 VecEnv (single-agent envs).

SB3's VecEnv auto-resets in the step, as the env does: `infos[i]["terminal_observation"]` holds a
finished replica's last observation, `"TimeLimit.truncated"` marks a time-limit end (SB3 bootstraps
from it), and `"episode"` ({"r", "l"}) feeds SB3's episode statistics as its Monitor wrapper would.
"""
from __future__ import annotations

import numpy as np

from ..extras import require
from .gymnasium import GymnasiumVectorEnv

require("stable_baselines3", "sb3", "env.as_sb3()")
from stable_baselines3.common.vec_env import VecEnv  # noqa: E402


class SB3VecEnv(VecEnv):
    """observations [E, *O] float32; actions [E] or [E, n]; rewards [E] float32; dones [E] bool."""

    def __init__(self, env):
        self.vector = GymnasiumVectorEnv(env)
        self.env = env
        self.render_mode = None
        self._actions = None
        super().__init__(env.num_envs, self.vector.single_observation_space, self.vector.single_action_space)

    def reset(self) -> np.ndarray:
        seed = self._seeds[0]
        obs, _ = self.vector.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        obs, rewards, terminated, truncated, infos = self.vector.step(self._actions)
        dones = terminated | truncated
        out = [{} for _ in range(self.num_envs)]
        if infos:
            final = infos["final_info"]
            for i in np.flatnonzero(dones):
                out[i] = {"terminal_observation": infos["final_obs"][i],
                          "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                          "episode": {"r": float(final["episode_return"][i]), "l": int(final["episode_length"][i])}}
        return obs, rewards.astype(np.float32), dones, out

    def close(self) -> None:
        pass

    def _indices(self, indices) -> list:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)

    def get_attr(self, attr_name, indices=None) -> list:
        value = getattr(self, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name, value, indices=None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs) -> list:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list:
        return [False for _ in self._indices(indices)]
