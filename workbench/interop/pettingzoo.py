"""`env.as_pettingzoo(replica=i)`: one replica as a PettingZoo ParallelEnv; `replica=None`: the same
dict-of-agents API over all replicas at once, with device tensors [E, ...] as values.

Agents are named from the env's AGENT_GROUPS (taggers_0, runners_3, ...), else agent_<id>. In the
one-replica form an agent that leaves the game (the env's ACTIVE flag drops to 0: a tagged runner)
is terminated at that step and leaves `agents`; the others live until the replica's episode ends
(terminated or truncated for all at once). The batched form keeps every agent (its values are
[E, ...] over replicas) and says who is in the game in infos[agent]["active"].
"""
from __future__ import annotations

import re

import numpy as np
import torch

from ..extras import require
from . import AdapterError
from ..errors import ActionError
from .spaces import action_tensor, agent_names, checked_seed, gymnasium_space, staged_actions

require("pettingzoo", "pettingzoo", "env.as_pettingzoo()")
from pettingzoo import ParallelEnv  # noqa: E402


def as_pettingzoo(env, replica: int | None = None):
    if replica is None:
        return BatchedParallelEnv(env)
    return ReplicaParallelEnv(env, replica)


class _Agents:
    """Names, spaces and the action writer both forms share."""

    def _setup(self, env):
        self.env = env
        env.keep_final_obs = True  # final observations at every end (a trainer may have kept them only where truncated)
        self.possible_agents = agent_names(env)
        self._ids = {name: i for i, name in enumerate(self.possible_agents)}
        self._obs_space = gymnasium_space(env.observation_space)
        self._act_space = gymnasium_space(env.action_space)
        self._action = staged_actions(env)
        self.metadata = {"name": f"workbench_{env.name}", "render_modes": [], "is_parallelizable": True}
        self.render_mode = None

    @property
    def observation_spaces(self) -> dict:
        """{agent: its observation space}, as PettingZoo's ParallelEnv declares it."""
        return dict.fromkeys(self.possible_agents, self._obs_space)

    @property
    def action_spaces(self) -> dict:
        return dict.fromkeys(self.possible_agents, self._act_space)

    def observation_space(self, agent):
        """The same space object for every agent (all agents of an env share their spaces)."""
        self._check_agent(agent)
        return self._obs_space

    def action_space(self, agent):
        """One agent's action space in one replica (the batched form takes [E, ...] of it)."""
        self._check_agent(agent)
        return self._act_space

    def _actions_of(self, name, action, replicas: tuple = ()) -> torch.Tensor:
        """An agent's action (one replica's, or [E, ...] with replicas=(E,)) checked as action_tensor does."""
        self._check_agent(name)
        return action_tensor(action, self.env, replicas + tuple(self._act_space.shape), f"step: agent {name!r}")

    def _step_env(self, actions: torch.Tensor):
        """env.step(actions), with a range error naming the agent as this API does ('taggers_0')."""
        try:
            return self.env.step(actions)
        except ActionError as exc:
            named = re.sub(r"of agent (\d+) in replica",
                           lambda m: f"of agent {self.possible_agents[int(m.group(1))]!r} in replica", str(exc))
            raise ActionError(named) from None

    def _check_agent(self, agent):
        if agent not in self._ids:
            raise AdapterError(f"no agent named {agent!r} in '{self.env.name}'; agents: "
                               f"{self.possible_agents[:4]}{' ...' if len(self.possible_agents) > 4 else ''}")

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def close(self):
        pass


class ReplicaParallelEnv(_Agents, ParallelEnv):
    """One replica: obs {agent: [*O] float32}, rewards {agent: float}, flags {agent: bool}.

    The env steps all its replicas together; the others keep the actions in their action arrays
    (make the env with num_envs=1 for a plain single-game env).
    """

    def __init__(self, env, replica: int):
        if not 0 <= int(replica) < env.num_envs:
            raise AdapterError(f"replica must be in [0, {env.num_envs}) for this env of {env.num_envs} replicas, "
                               f"got {replica}")
        self._setup(env)
        self.replica = int(replica)
        self.agents = []
        self._reset_once = False
        low, high = (np.broadcast_to(np.asarray(b, dtype=np.float32), env.obs_shape)
                     for b in (env.observation_space.low, env.observation_space.high))
        spaces = require("gymnasium.spaces", "gymnasium", "a PettingZoo env's state_space")
        self.state_space = spaces.Box(np.tile(low.reshape(-1), env.num_agents),
                                      np.tile(high.reshape(-1), env.num_agents), dtype=np.float32)

    def _obs(self, tensor):
        """{agent in the game: its observation in this replica}."""
        rows = tensor[self.replica].cpu().numpy()
        return {name: rows[self._ids[name]].copy() for name in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        seed = checked_seed(seed, "reset(seed=...)")
        if seed is not None:
            self._act_space.seed(seed)
        obs = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)  # (before _obs: every agent starts in the game)
        self._reset_once = True
        return self._obs(obs), {name: {} for name in self.agents}

    def step(self, actions: dict):
        if not self.agents:
            raise AdapterError("the episode has ended (no agents left); call reset() before step()" if self._reset_once
                               else "step() before reset(): call reset() first")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise AdapterError(f"actions for agents not in the game: {sorted(unknown)[:4]}")
        missing = [name for name in self.agents if name not in actions]
        if missing:
            raise AdapterError(f"no action for {len(missing)} agent(s) in the game: {missing[:4]}"
                               f"{' ...' if len(missing) > 4 else ''}; give one for every agent in env.agents")
        row = self._action[self.replica]
        for name, action in actions.items():
            row[self._ids[name]] = self._actions_of(name, action)
        obs, reward, done, info = self._step_env(self._action)
        r = self.replica
        ended = bool(done[r])
        observations = self._obs(info["final_obs"] if ended else obs)
        rewards = reward[r].cpu().numpy()
        term, trunc = bool(info["terminated"][r]), bool(info["truncated"][r])
        infos = {name: {} for name in self.agents}
        if ended:
            returns = info["episode_return"][r].cpu().numpy()
            length = int(info["episode_length"][r])
            infos = {name: {"episode_return": float(returns[self._ids[name]]), "episode_length": length}
                     for name in self.agents}
        terminations = {name: term for name in self.agents}
        still = self.agents
        if not ended and self.env.definition.active is not None:  # agents that left the game in this step
            live = self.env.store[self.env.definition.active][r].cpu().numpy() != 0
            still = [name for name in self.agents if live[self._ids[name]]]
            for name in set(self.agents) - set(still):
                terminations[name] = True
        out = (observations, {name: float(rewards[self._ids[name]]) for name in self.agents},
               terminations, {name: trunc for name in self.agents}, infos)
        self.agents = [] if ended else still
        return out

    def state(self) -> np.ndarray:
        """Every agent's observation of this replica, concatenated: [A * O]."""
        return self.env.store["obs"][self.replica].reshape(-1).cpu().numpy().copy()


class BatchedParallelEnv(_Agents):
    """All replicas, PettingZoo's parallel API with batched values, nothing copied to the host:
    obs {agent: [E, *O]}, rewards {agent: [E]}, terminations/truncations {agent: [E] bool},
    infos {agent: {"final_obs": [E, *O], "done": [E], "active": [E]}} (final_obs rows valid where
    the replica ended, which was reset in the same step; "active", for envs with an ACTIVE flag: the
    flag's view, nonzero while the agent is in the game). Values are views of the env's tensors, rewritten by the next step (clone what you keep).
    Actions {agent: [E] or [E, n]} for any subset of agents; the others keep their previous actions.
    """

    def __init__(self, env):
        self._setup(env)
        self._staged = staged_actions(env)  # (a step's actions, committed once the env accepts them)
        self.agents = list(self.possible_agents)
        self.num_envs = env.num_envs

    def _split(self, tensor):
        return {name: tensor[:, i] for name, i in self._ids.items()}

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs = self.env.reset(seed=checked_seed(seed, "reset(seed=...)", nonnegative=False))
        return self._split(obs), {name: {} for name in self.agents}

    def step(self, actions: dict):
        staged = self._staged
        staged.copy_(self._action)
        for name, action in actions.items():
            staged[:, self._ids[name]] = self._actions_of(name, action, (self.num_envs,))
        obs, reward, done, info = self._step_env(staged)
        # a refused step (an action out of range) changes nothing: the agents left out keep their last accepted
        self._action, self._staged = staged, self._action
        term, trunc = info["terminated"], info["truncated"]
        final = info["final_obs"]
        active = self.env.definition.active
        live = self.env.store[active] if active is not None else None
        return (self._split(obs), self._split(reward), dict.fromkeys(self.agents, term),
                dict.fromkeys(self.agents, trunc),
                {name: {"final_obs": final[:, i], "done": done,
                        **({"active": live[:, i]} if live is not None else {})} for name, i in self._ids.items()})
