"""`env.as_gymnasium()`: all replicas as one `gymnasium.vector.VectorEnv` (autoreset mode SAME_STEP).

The env resets finished replicas inside `step`, which is Gymnasium 1.x's SAME_STEP mode: the
observation returned for a finished sub-env is the first of its next episode, and the last one of
the finished episode is in `infos["final_obs"]` (an object array, None where not finished, with the
mask `infos["_final_obs"]`); `infos["final_info"]` holds that episode's return and length.
Arrays cross to the host here (Gymnasium's API is NumPy); for device tensors use `as_torchrl` or
the native API.
"""
from __future__ import annotations

import numpy as np
import torch

from ..extras import require
from . import AdapterError
from .spaces import action_tensor, checked_seed, gymnasium_space

gym = require("gymnasium", "gymnasium", "env.as_gymnasium()")
from gymnasium.vector import AutoresetMode, VectorEnv  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402


class GymnasiumVectorEnv(VectorEnv):
    """num_envs = E (single-agent env) or E * A (flatten_agents=True, sub-env e * A + a).

    observations: [N, *O] float32; actions: [N] (Discrete), [N, n] (MultiDiscrete, Box);
    rewards: [N] float; terminations/truncations: [N] bool.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, env, flatten_agents: bool = False):
        if env.num_agents > 1 and not flatten_agents:
            raise AdapterError(
                f"'{env.name}' has {env.num_agents} agents per replica; a Gymnasium VectorEnv is single-agent. "
                f"Call env.as_gymnasium(flatten_agents=True) for one sub-env per agent (shared episode ends), "
                f"or env.as_pettingzoo() / env.as_torchrl() for a multi-agent API")
        self.env = env
        env.keep_final_obs = True  # infos["final_obs"] at every end (a trainer may have kept them only where truncated)
        self.agents_per_replica = env.num_agents
        self.num_envs = env.num_envs * env.num_agents
        self.single_observation_space = gymnasium_space(env.observation_space)
        self.single_action_space = gymnasium_space(env.action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(self.metadata)
        self.render_mode = None
        self.closed = False
        self._reset_once = False  # (Gymnasium's vector envs refuse a step before the first reset)
        self._action_shape = tuple(env.store["action"].shape)

    def _flat(self, tensor: torch.Tensor) -> np.ndarray:
        """[E, A, ...] device tensor -> a fresh host array [N, ...]."""
        return tensor.reshape((self.num_envs,) + tuple(tensor.shape[2:])).cpu().numpy().copy()

    def _per_agent(self, flags: torch.Tensor) -> np.ndarray:
        """[E] -> [N]: an episode ends for every agent of its replica."""
        return flags.repeat_interleave(self.agents_per_replica).cpu().numpy().copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every replica (seed: one int seeds all replicas' streams). Returns (obs [N, *O], {})."""
        if self.closed:
            raise AdapterError("reset() after close(): make a new adapter with env.as_gymnasium()")
        seed = checked_seed(seed, "reset(seed=...)")
        if options:
            raise AdapterError(f"reset(options=...) is not used by this env (got {sorted(options)}); its "
                               f"parameters are set when it is made: wb.make(name, ..., PARAM=value)")
        if seed is not None:
            self.action_space.seed(seed)
            self.single_action_space.seed(seed)
        super().reset(seed=seed)  # (np_random and np_random_seed, as Gymnasium's)
        obs = self.env.reset(seed=seed)
        self._reset_once = True
        return self._flat(obs), {}

    def step(self, actions):
        """actions: [N, ...] array or tensor. Returns (obs, rewards, terminations, truncations, infos)."""
        if self.closed:
            raise AdapterError("step() after close(): make a new adapter with env.as_gymnasium()")
        if not self._reset_once:
            raise AdapterError("step() before reset(): call reset() first (reset(seed=...) seeds every replica)")
        actions = action_tensor(actions, self.env, self.action_space.shape,
                                "GymnasiumVectorEnv.step").reshape(self._action_shape)
        obs, reward, done, info = self.env.step(actions)
        infos = {}
        if bool(done.any()):
            mask = self._per_agent(done)
            final_obs = np.full(self.num_envs, None, dtype=object)
            finals = self._flat(info["final_obs"])
            for i in np.flatnonzero(mask):
                final_obs[i] = finals[i]
            returns = self._flat(info["episode_return"]).astype(np.float64)
            lengths = info["episode_length"].repeat_interleave(self.agents_per_replica).cpu().numpy().astype(np.int64)
            infos = {"final_obs": final_obs, "_final_obs": mask,
                     "final_info": {"episode_return": np.where(mask, returns, 0.0),
                                    "episode_length": np.where(mask, lengths, 0),
                                    "_episode_return": mask.copy(), "_episode_length": mask.copy()},
                     "_final_info": mask.copy()}
        return (self._flat(obs), self._flat(reward).astype(np.float64), self._per_agent(info["terminated"]),
                self._per_agent(info["truncated"]), infos)

    def close_extras(self, **kwargs):
        self.closed = True

    def __repr__(self):
        return f"GymnasiumVectorEnv({self.env!r}, num_envs={self.num_envs})"
