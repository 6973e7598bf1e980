"""The env runner: gym-style reset/step over all replicas at once, launching kernels in place."""
from __future__ import annotations

import numpy as np
import torch

from .envdef import Box, Discrete, EnvDefinition, MultiDiscrete
from .errors import ActionError, NonFiniteError, WorkbenchError
from .recorder import TrajectoryRecorder
from .store import DataStore
from .targets import get_target

MAX_NUM_ENVS = 2**31 - 1
_KERNEL_CACHE: dict = {}


def _kernel_key(defn, target, debug) -> tuple:
    return defn.digest, target.name, bool(debug) and getattr(target, "bounds_checked", False)


def _kernels(defn, target, debug) -> tuple:
    """(kernels, fresh): from this process's kernel cache, else compiled (numba targets load from
    the on-disk cache when they can); debug mode compiles with bounds checking where the target has it."""
    key = _kernel_key(defn, target, debug)
    if key in _KERNEL_CACHE:
        return _KERNEL_CACHE[key], False
    if key[2]:
        return target.compile(defn, boundscheck=True), True
    return target.compile(defn), True


class Env:
    """All replicas of one environment on one target.

    obs: [E, A, *O] float32; action: [E, A] int32 (Discrete), [E, A, n] int32 (MultiDiscrete)
    or [E, A, n] float32 (Box); reward: [E, A]; done/terminated/truncated: [E] bool.
    The tensors returned by `reset` and `step` are the store's own, rewritten in place by every
    step (clone what you keep).
    """

    step_graphs = True  # replay step launches from a CUDA graph on GPU targets

    def __init__(self, defn: EnvDefinition, *, num_envs: int, target: str, seed: int = 0, debug: bool = False):
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or not 1 <= num_envs <= MAX_NUM_ENVS:
            raise WorkbenchError(f"num_envs must be an int in [1, {MAX_NUM_ENVS}], got {num_envs!r}")
        self.definition = defn
        self.name = defn.name
        self.num_envs = int(num_envs)
        self.num_agents = defn.num_agents
        self.target = get_target(target)
        self.device = self.target.device
        self.debug = debug
        self.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
        self.store = DataStore(self.target, self.num_envs, self.num_agents)
        for spec in defn.arrays.values():
            self.store.allocate(spec)
        self._views = [self.store.view(name) for name in defn.arrays]
        self.kernels, fresh = _kernels(defn, self.target, debug)
        self._done = self.store["done"].view(torch.bool)
        self.info = {
            "terminated": self.store["terminated"].view(torch.bool),
            "truncated": self.store["truncated"].view(torch.bool),
            "final_obs": self.store["final_obs"],
            "episode_return": self.store["last_return"],
            "episode_length": self.store["last_length"],
        }
        self._step_graph = None  # (seed, CUDAGraph) of one step launch, GPU targets only
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(self.seed)
        self._uniform = None
        self.recorder: TrajectoryRecorder | None = None
        if fresh:  # compile both kernels now, so a broken env fails in make() rather than mid-run
            self.kernels.reset(self.num_envs, self.seed, self._views)
            self.kernels.step(self.num_envs, self.seed, self._views)
            _KERNEL_CACHE[_kernel_key(defn, self.target, debug)] = self.kernels
            if getattr(self.kernels, "module", None) is not None:
                self.kernels.module.mark_ready()
            for tensor in self.store.values():
                tensor.zero_()
        self.reset()

    # -- spaces -------------------------------------------------------------------------
    @property
    def observation_space(self) -> Box:
        return self.definition.observation

    @property
    def action_space(self):
        return self.definition.action

    @property
    def obs_shape(self) -> tuple:
        return self.definition.obs_shape

    @property
    def data(self) -> DataStore:
        """Every named array (state, obs, action, ...) as a device tensor."""
        return self.store

    @property
    def agents(self) -> list:
        return list(range(self.num_agents))

    def __getattr__(self, item):
        groups = self.__dict__.get("definition")
        if groups is not None:
            fn = groups.namespace.get("AGENT_GROUPS")
            if fn is not None:
                import types
                table = fn(types.SimpleNamespace(**groups.params))
                if item in table:
                    return list(table[item])
        raise AttributeError(item)

    # -- the loop -----------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every replica to a fresh random start; obs: [E, A, *O]."""
        if seed is not None:
            self.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
            self.store["episode"].zero_()
            self._generator.manual_seed(self.seed)
        self.kernels.reset(self.num_envs, self.seed, self._views)
        if self.recorder is not None:
            self.recorder.restart()
        return self.store["obs"]

    def step(self, actions: torch.Tensor | None = None):
        """Advance every replica one step; finished replicas are reset in the same step.

        actions: the store's own action tensor (no copy), or a tensor of its shape
        (for single-agent envs [E, ...] is accepted too). Returns (obs [E, A, *O],
        reward [E, A], done [E], info) with info's terminated, truncated, final_obs,
        episode_return and episode_length (last finished episode per replica).
        """
        if actions is not None:
            self._accept_actions(actions)
        if self.recorder is not None:
            self.recorder.capture_before_step()
        self._launch_step()
        if self.recorder is not None:
            self.recorder.capture_after_step()
        if self.debug:
            self._check_finite()
        return self.store["obs"], self.store["reward"], self._done, self.info

    def _launch_step(self):
        """One step kernel. On a GPU the launch is captured once in a CUDA graph and replayed:
        a replay costs a few microseconds where a launch from Python costs 40 to 300 (per
        argument marshalling), and the store's fixed addresses make the graph valid for good.
        Inside someone else's capture (the trainer's rollout graph) the kernel is launched as is."""
        if not self.step_graphs or self.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            self.kernels.step(self.num_envs, self.seed, self._views)
            return
        if self._step_graph is None or self._step_graph[0] != self.seed:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.kernels.step(self.num_envs, self.seed, self._views)
            self._step_graph = (self.seed, graph)
        self._step_graph[1].replay()

    def sample_actions(self) -> torch.Tensor:
        """Uniformly random actions for every agent, drawn on the device into the action array."""
        buf = self.store["action"]
        space = self.action_space
        if isinstance(space, Discrete):
            torch.randint(0, space.n, buf.shape, generator=self._generator, out=buf, device=self.device)
            return buf
        if self._uniform is None:
            self._uniform = torch.empty(buf.shape, dtype=torch.float32, device=self.device)
            if isinstance(space, MultiDiscrete):
                self._scale = torch.tensor(space.nvec, dtype=torch.float32, device=self.device)
                self._offset = torch.zeros_like(self._scale)
            else:
                low, high = _finite_bounds(space, self.device)
                self._scale, self._offset = high - low, low
        torch.rand(buf.shape, generator=self._generator, out=self._uniform, device=self.device)
        self._uniform.mul_(self._scale).add_(self._offset)
        if isinstance(space, MultiDiscrete):
            self._uniform.floor_()
        buf.copy_(self._uniform)
        return buf

    def _accept_actions(self, actions):
        buf = self.store["action"]
        if actions is buf:
            return
        if not isinstance(actions, torch.Tensor):
            raise ActionError(f"actions must be a torch.Tensor on {self.device}, got {type(actions).__name__}")
        if actions.device.type != buf.device.type:
            raise ActionError(f"actions are on {actions.device}, the env runs on {buf.device}; "
                              f"move them with .to('{buf.device}')")
        shape = tuple(actions.shape)
        if shape != tuple(buf.shape):
            if self.num_agents == 1 and shape == (buf.shape[0],) + tuple(buf.shape[2:]):
                actions = actions.unsqueeze(1)
            else:
                raise ActionError(f"actions have shape {shape}; this env takes {tuple(buf.shape)} "
                                  f"([num_envs, num_agents{', n' if buf.dim() == 3 else ''}])")
        continuous = isinstance(self.action_space, Box)
        if continuous and not actions.is_floating_point():
            raise ActionError(f"actions have dtype {actions.dtype}; this env takes float32 (continuous actions)")
        if not continuous and (actions.is_floating_point() or actions.dtype == torch.bool):
            raise ActionError(f"actions have dtype {actions.dtype}; this env takes integer actions "
                              f"(int32 or int64)")
        if self.debug:
            self._check_action_range(actions)
        buf.copy_(actions)

    def _check_action_range(self, actions):
        space = self.action_space
        if isinstance(space, Discrete):
            lo, hi = int(actions.min()), int(actions.max())
            if lo < 0 or hi >= space.n:
                raise ActionError(f"actions must be in [0, {space.n}), got values in [{lo}, {hi}]")
        elif isinstance(space, MultiDiscrete):
            nvec = torch.tensor(space.nvec, device=actions.device)
            if bool((actions < 0).any()) or bool((actions >= nvec).any()):
                raise ActionError(f"multi-discrete actions must be in [0, nvec) with nvec={space.nvec}")
        elif not bool(torch.isfinite(actions).all()):
            raise ActionError("continuous actions contain NaN or inf")

    def _check_finite(self):
        for name in ("obs", "reward"):
            tensor = self.store[name]
            bad = ~torch.isfinite(tensor)
            if bool(bad.any()):
                replica = int(bad.reshape(self.num_envs, -1).any(dim=1).nonzero()[0, 0])
                raise NonFiniteError(f"step produced a non-finite value in '{name}' of replica {replica} "
                                     f"(debug mode); state of that replica: {self._replica_state(replica)}")

    def _replica_state(self, replica):
        return {k: self.store[k][replica].tolist() for k, s in self.definition.arrays.items() if s.owner == "env"}

    # -- recording ----------------------------------------------------------------------
    def record(self, replicas=(0,), max_steps: int | None = None) -> TrajectoryRecorder:
        """Keep the last episode of `replicas` on the device until `pull_trajectories()`."""
        self.recorder = TrajectoryRecorder(self, replicas, max_steps or min(self.definition.max_steps, 100_000))
        return self.recorder

    def pull_trajectories(self) -> list:
        """Per recorded replica, a dict of host arrays [T, ...] of its last finished episode."""
        if self.recorder is None:
            raise WorkbenchError("nothing is being recorded; call env.record(replicas=[...]) first")
        return self.recorder.pull()

    def __repr__(self):
        return (f"Env({self.name!r}, num_envs={self.num_envs}, num_agents={self.num_agents}, "
                f"target={self.target.name!r}, obs={self.obs_shape}, action={self.action_space})")


def _finite_bounds(space: Box, device) -> tuple:
    """(low, high) as device tensors broadcastable to [E, A, n]."""
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), space.shape)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise WorkbenchError("random continuous actions need finite Box bounds")
    return torch.tensor(low.copy(), device=device), torch.tensor(high.copy(), device=device)
