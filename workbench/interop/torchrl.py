"""`env.as_torchrl()`: all replicas as a TorchRL EnvBase, TensorDicts on the env's device.

Keys follow TorchRL's multi-agent layout: per group, (group, "observation") [E, n, *O],
(group, "action") [E, n(, k)] and (group, "reward") [E, n, 1]; "done", "terminated" and
"truncated" [E, 1] at the root (an episode ends for the whole replica). Groups: "agents" (all
agents, the default) or the env's policy groups (group_map="policies": taggers, runners, ...).
The env resets finished replicas inside its step: a step returns the finished episode's last
observation as ("next", group, "observation"), and the partial reset TorchRL asks for next
returns the already-started episode, with no kernel launch. A partial reset of replicas whose
episode goes on (a StepCounter's limit) starts new episodes for those alone.
"""
from __future__ import annotations


import numpy as np
import torch

from ..compiler.envdef import Discrete, MultiDiscrete
from ..extras import require
from . import AdapterError
from .spaces import action_tensor, checked_seed, staged_actions

require("torchrl", "torchrl", "env.as_torchrl()")
from tensordict import TensorDict, TensorDictBase  # noqa: E402
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402


def policy_groups(env, group_map: str) -> dict:
    """{group name: agent ids}: "agents" -> one group of all agents; "policies" -> the env's AGENT_GROUPS."""
    if group_map == "agents":
        return {"agents": list(range(env.num_agents))}
    if group_map == "policies":
        groups = env.definition.agent_groups()
        if groups is None:
            raise AdapterError(f"'{env.name}' declares no AGENT_GROUPS; use group_map='agents'")
        return groups
    raise AdapterError(f"group_map must be 'agents' or 'policies', got {group_map!r}")


def _index(ids: list):
    """A slice for contiguous ids (a view), else an index tensor."""
    if ids == list(range(ids[0], ids[-1] + 1)):
        return slice(ids[0], ids[-1] + 1)
    return torch.tensor(ids)


class TorchRLEnv(EnvBase):
    """batch_size [E]; see the module docstring for keys and shapes."""

    def __init__(self, env, group_map: str = "agents"):
        super().__init__(device=env.device, batch_size=torch.Size([env.num_envs]))
        self.env = env
        env.keep_final_obs = True  # final observations at every end (a trainer may have kept them only where truncated)
        self.group_map = {name: ids for name, ids in policy_groups(env, group_map).items()}
        self._index = {name: _index(ids) for name, ids in self.group_map.items()}
        self._action = staged_actions(env)
        E, dev = env.num_envs, env.device
        obs, act, rew = {}, {}, {}
        for name, ids in self.group_map.items():
            shape = (E, len(ids))
            obs[name] = Composite(observation=self._obs_spec(shape), shape=shape, device=dev)
            act[name] = Composite(action=self._action_spec(shape), shape=shape, device=dev)
            rew[name] = Composite(reward=Unbounded(shape=shape + (1,), dtype=torch.float32, device=dev),
                                  shape=shape, device=dev)
        self.observation_spec = Composite(obs, shape=(E,), device=dev)
        self.action_spec = Composite(act, shape=(E,), device=dev)
        self.reward_spec = Composite(rew, shape=(E,), device=dev)
        flag = lambda: Categorical(2, shape=(E, 1), dtype=torch.bool, device=dev)  # noqa: E731
        self.done_spec = Composite(done=flag(), terminated=flag(), truncated=flag(), shape=(E,), device=dev)

    # -- specs ---------------------------------------------------------------------------
    def _obs_spec(self, shape):
        space = self.env.observation_space
        full = shape + tuple(self.env.obs_shape)
        low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), full)
        high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), full)
        if np.isfinite(low).all() and np.isfinite(high).all():
            return Bounded(torch.tensor(low.copy()), torch.tensor(high.copy()), shape=full, dtype=torch.float32,
                           device=self.env.device)
        return Unbounded(shape=full, dtype=torch.float32, device=self.env.device)

    def _action_spec(self, shape):
        space, dev = self.env.action_space, self.env.device
        if isinstance(space, Discrete):
            return Categorical(space.n, shape=shape, dtype=torch.int64, device=dev)
        if isinstance(space, MultiDiscrete):
            return MultiCategorical(list(space.nvec), shape=shape + (len(space.nvec),), dtype=torch.int64, device=dev)
        full = shape + tuple(space.shape)
        low = torch.tensor(np.broadcast_to(np.asarray(space.low, dtype=np.float32), full).copy())
        high = torch.tensor(np.broadcast_to(np.asarray(space.high, dtype=np.float32), full).copy())
        return Bounded(low, high, shape=full, dtype=torch.float32, device=dev)

    # -- the loop ------------------------------------------------------------------------
    def _observations(self, obs: torch.Tensor, out: dict):
        for name, index in self._index.items():
            group = obs[:, index]
            out[name] = {"observation": group if isinstance(index, torch.Tensor) else group.clone()}
        return out

    def _flags(self, out: dict) -> dict:
        info = self.env.info
        out["done"] = self.env.store["done"].view(torch.bool).unsqueeze(-1).clone()
        out["terminated"] = info["terminated"].unsqueeze(-1).clone()
        out["truncated"] = info["truncated"].unsqueeze(-1).clone()
        return out

    def _tensordict(self, out: dict) -> TensorDictBase:
        E = self.env.num_envs
        for name, ids in self.group_map.items():
            out[name] = TensorDict(out[name], batch_size=(E, len(ids)), device=self.env.device)
        return TensorDict(out, batch_size=(E,), device=self.env.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        if mask is None:
            obs = self.env.reset()
        else:  # a partial reset: the env restarted the replicas that ended in its step already
            running = mask.reshape(-1).to(self.env.device) & ~self._ended
            if bool(running.any()):  # (StepCounter's limit, say: replicas whose episode goes on)
                self._restart(running)
            obs = self.env.store["obs"]
        out = self._observations(obs, {})
        E = self.env.num_envs
        no = torch.zeros((E, 1), dtype=torch.bool, device=self.env.device)
        out.update(done=no, terminated=no.clone(), truncated=no.clone())
        return self._tensordict(out)

    def _restart(self, replicas: torch.Tensor) -> None:
        """New episodes for the replicas where `replicas` [E] is True, the others left as they are: a
        reset of every replica, then the others' arrays put back (a copy of the store: not for every step)."""
        E = self.env.num_envs
        kept = {name: t.clone() for name, t in self.env.store.items() if t.dim() and t.shape[0] == E}
        self.env.reset()
        for name, saved in kept.items():
            current = self.env.store[name]
            current.copy_(torch.where(replicas.reshape((-1,) + (1,) * (current.dim() - 1)), current, saved))

    @property
    def _ended(self) -> torch.Tensor:
        return self.env.store["done"].view(torch.bool)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        for name, index in self._index.items():
            actions = tensordict.get((name, "action"), None)
            if actions is None:
                raise AdapterError(f"the tensordict has no ({name!r}, 'action'): this env's action keys are "
                                   f"{[(g, 'action') for g in self.group_map]} (a policy writes them, or rand_action)")
            shape = (self.env.num_envs, len(self.group_map[name])) + tuple(self._action.shape[2:])
            self._action[:, index] = action_tensor(actions, self.env, shape, f"step: ({name!r}, 'action')")
        obs, reward, done, info = self.env.step(self._action)
        shape = (-1,) + (1,) * (obs.dim() - 1)
        last = torch.where(done.reshape(shape), info["final_obs"], obs)
        out = {}
        for name, index in self._index.items():
            out[name] = {"observation": last[:, index], "reward": reward[:, index].unsqueeze(-1).clone()}
        return self._tensordict(self._flags(out))

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self.env.reset(seed=checked_seed(seed, "set_seed", nonnegative=False))
