"""The env runner: gym-style reset/step over all replicas at once, launching kernels in place."""
from __future__ import annotations

import math

import numpy as np
import torch

from ..compiler import envdef_c
from ..compiler.envdef import Box, Discrete, EnvDefinition, MultiDiscrete
from ..errors import ActionError, NonFiniteError, WorkbenchError
from .random_actions import RandomActions
from .recorder import TerminalCopies, TrajectoryRecorder
from .store import DataStore, check_fits
from ..compiler.targets import get_target

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

    obs: [E, A, *O] float32; action: [E, A] (Discrete), [E, A, n] (MultiDiscrete) of the smallest of int8,
    int16 and int32 that fits, or [E, A, n] float32 (Box); reward [E, A]; done, terminated, truncated: [E] bool.
    `reset` and `step` return the store's own tensors, rewritten in place by every step (clone what you keep).
    replicas_per_seed: block k of that many replicas is exactly an env of them seeded seed + k (None: all one).
    """

    step_graphs = True  # replay step launches from a CUDA graph on GPU targets

    def __init__(self, defn: EnvDefinition, *, num_envs: int, target: str, seed: int = 0, debug: bool = False,
                 replicas_per_seed: int | None = None):
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or not 1 <= num_envs <= MAX_NUM_ENVS:
            raise WorkbenchError(f"num_envs must be an int in [1, {MAX_NUM_ENVS}], got {num_envs!r}")
        self.definition = defn
        self.name = defn.name
        self.num_envs = int(num_envs)
        self.replicas_per_seed = _replicas_per_seed(replicas_per_seed, self.num_envs)
        self.num_agents = defn.num_agents
        if defn.language == "cuda-c" and target != "cuda-c":
            raise envdef_c.c_only_error(defn, target)
        self.target = get_target(target)
        self.device = self.target.device
        self.debug = debug
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise WorkbenchError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
        self.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
        self.store = DataStore(self.target, self.num_envs, self.num_agents)
        observed = ("obs",) if defn.obs_state else ()
        check_fits(self.device, self.store.bytes_needed(defn.arrays.values(), views=observed),
                   f"the arrays of {self.num_envs} replicas of '{defn.name}' ({self.num_agents} agent(s) each)",
                   "use fewer replicas (num_envs)")
        if defn.obs_state:  # the observation is the state: one array, the kernels write no copy
            self.store.share_observed(defn.arrays["obs"], [defn.arrays[n] for n in defn.obs_state])
        for spec in defn.arrays.values():
            self.store.allocate(spec)
        self.terminal = TerminalCopies(defn, self.num_envs, self.num_agents, self.device)
        self._views = self._kernel_views()
        self.kernels, fresh = _kernels(defn, self.target, debug)
        self._done = self.store["done"].view(torch.bool)
        self.info = {
            "terminated": self.store["terminated"].view(torch.bool),
            "truncated": self.store["truncated"].view(torch.bool),
            "final_obs": self.store["final_obs"],
            "episode_return": self.store["last_return"],
            "episode_length": self.store["last_length"],
        }
        self._step_graph = None  # ((seed, span), CUDAGraph) of one step launch, GPU targets only
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(self.seed)
        self._random = RandomActions(self)
        self._action_check = ActionCheck(defn.action, tuple(self.store["action"].shape), self.device,
                                         deferred=self.device.type == "cuda" and not debug)
        self._recorder: TrajectoryRecorder | None = None
        self._detached = None  # (recorder, clock): the recording last detached, resumable until the env moves
        self._clock = 0  # steps and resets so far
        if fresh:  # compile both kernels now, so a broken env fails in make() rather than mid-run
            self.kernels.reset(*self._scalars(), self._views)
            self.kernels.step(*self._scalars(), self._views)
            _KERNEL_CACHE[_kernel_key(defn, self.target, debug)] = self.kernels
            if getattr(self.kernels, "module", None) is not None:
                self.kernels.module.mark_ready()
            for tensor in self.store.values():
                tensor.zero_()
        self.reset()

    # -- spaces -------------------------------------------------------------------------
    observation_space = property(lambda self: self.definition.observation,
                                 doc="One agent's observation: a Box of shape O.")
    action_space = property(lambda self: self.definition.action,
                            doc="One agent's action: Discrete, MultiDiscrete or Box.")
    obs_shape = property(lambda self: self.definition.obs_shape, doc="O, one agent's observation shape (obs: [E, A, *O]).")

    @property
    def data(self) -> DataStore:
        """Every named array (state, obs, action, ...) as a device tensor."""
        return self.store

    @property
    def agents(self) -> list:
        return list(range(self.num_agents))

    def __getattr__(self, item):
        definition = self.__dict__.get("definition")  # (absent while the Env is being built)
        table = definition.agent_groups() if definition is not None else None
        if table is not None and item in table:
            return table[item]
        raise AttributeError(item)

    # -- the loop -----------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every replica to a fresh random start; obs: [E, A, *O]."""
        self._action_check.report(wait=True)
        if seed is not None:
            if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
                raise WorkbenchError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
            self.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
            self.store["episode"].zero_()
            self._generator.manual_seed(self.seed)
        self._clock += 1
        self.kernels.reset(*self._scalars(), self._views)
        if self.recorder is not None:
            self.recorder.restart()
        return self.store["obs"]

    def step(self, actions: torch.Tensor | None = None):
        """Advance every replica one step; finished replicas are reset in the same step.

        actions: the store's own action tensor (no copy), or a tensor of its shape (for single-agent envs
        [E, ...] too). Returns (obs [E, A, *O], reward [E, A], done [E], info) with info's terminated,
        truncated, final_obs, episode_return and episode_length: where done, those of the episode that
        just ended (elsewhere the running return and the last finished length; final_obs where
        truncated only, with `keep_final_obs` False).

        Given actions are range-checked on the device (the store's own tensor, which the trainer
        samples into, is not): out-of-range discrete values and non-finite continuous ones raise
        ActionError, on a GPU at the next step() or reset() (no host sync per step; debug=True
        checks before the step).
        """
        if self._action_check.pending:
            self._action_check.report()
        if actions is not None:
            self._accept_actions(actions)
        return self._advance()

    def _advance(self, draw: bool = False):
        """step() after its actions are in place; draw: the step kernel draws them (random_steps)."""
        self._clock += 1
        if self.recorder is not None:
            self.recorder.capture_before_step()
        self._launch_step(draw)
        if self.recorder is not None:
            self.recorder.capture_after_step()
        if self.debug:
            self._check_finite()
        return self.store["obs"], self.store["reward"], self._done, self.info

    def _launch_step(self, draw: bool = False):
        """One step kernel, on a GPU captured once in a CUDA graph and replayed (a few us, where a launch
        from Python costs 40 to 300; the store's fixed addresses keep the graph valid), launched as is
        inside someone else's capture (the trainer's rollout graph)."""
        if not self.step_graphs or self.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            self.kernels.step(*self._scalars(), self._views, draw=int(draw))
            return
        key = (self.seed, self.replicas_per_seed, draw)
        if self._step_graph is None or self._step_graph[0] != key:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.kernels.step(*self._scalars(), self._views, draw=int(draw))
            self._step_graph = (key, graph)
        self._step_graph[1].replay()

    def _scalars(self) -> tuple:
        """The kernels' leading arguments: replicas, seed and replicas per seed (the key's span)."""
        return self.num_envs, self.seed, self.replicas_per_seed

    def sample_actions(self) -> torch.Tensor:
        """Uniformly random actions for every agent, drawn on the device into the action array."""
        return self._random.draw()

    def actions_from_uniform(self, uniform) -> torch.Tensor:
        """Uniformly random actions made from uniforms in [0, 1) shaped as the action array (uniform: [E, A]
        or [E, A, D]; e.g. each member's from its own stream), written into the action array (returned)."""
        return self._random.from_uniform(uniform)

    RANDOM_BLOCK = RandomActions.BLOCK  # random steps per CUDA graph replay (random_steps)

    def random_steps(self, steps: int):
        """`steps` steps of every replica with uniformly random actions (a random policy's rollout): discrete
        actions drawn by the step kernel from the replica's counter-based stream (agent ACTION_STREAM + a's
        key at its episode and step: alike on every target, no sampler launch), Box ones by sample_actions;
        on GPUs RANDOM_BLOCK steps a CUDA graph replay. The actions taken are left in the action array.
        Returns step()'s (obs, reward, done, info) after the last step."""
        return self._random.steps(steps)

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
                              f"(any integer dtype, int8 to int64; sample_actions gives the store's own)")
        self._action_check.check(actions)
        buf.copy_(actions)

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

    @property
    def keep_final_obs(self) -> bool:
        """info["final_obs"] at every episode end (True, the default) or only where truncated and for recorded
        replicas (False, the trainer's unless its metrics read them: all a learner bootstraps from, and a
        scattered store less, CartPole at 10M replicas on an H100: 313 -> 287 us a step); rows not written
        keep stale values (TerminalCopies)."""
        return self.terminal.keep_final_obs

    @keep_final_obs.setter
    def keep_final_obs(self, keep: bool):
        self.terminal.keep_final_obs = keep

    # -- recording ----------------------------------------------------------------------
    def _kernel_views(self) -> list:
        return [self.store.view(name) for name in self.definition.arrays] + \
            [self.target.view(tensor) for tensor in self.terminal.tensors()]

    @property
    def recorder(self) -> TrajectoryRecorder | None:
        """The recording `record` began (None: none); set None, it detaches and terminal states stop."""
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: TrajectoryRecorder | None):
        if recorder is None:
            if self._recorder is not None:
                self._detached = (self._recorder, self._clock)
            self.terminal.clear()
        else:
            if self.terminal.assign(recorder.distinct):
                self._views = self._kernel_views()
                self._step_graph = self._random.graph = None
            self._detached = None
        self._recorder = recorder

    def record(self, replicas=(0,), max_steps: int | None = None) -> TrajectoryRecorder:
        """Keep the last episode of `replicas` on the device until `pull_trajectories()`, ending with the state
        that ended it: 2 * `max_steps` steps kept (default MAX_STEPS, at most 50,000), so the last finished
        episode up to `max_steps` long is whole. Asked again for the same replicas and length while recording,
        or detached with no step or reset since, the recording goes on (Stop and Continue keep its episodes)."""
        replicas = [int(r) for r in replicas]
        steps = int(max_steps or min(self.definition.max_steps, 50_000))
        previous = self._recorder
        if previous is None and self._detached is not None and self._detached[1] == self._clock:
            previous = self._detached[0]
        if previous is not None and previous.replicas == replicas and previous.max_steps == steps:
            recorder = previous
        else:
            recorder = TrajectoryRecorder(self, replicas, steps)
        self.recorder = recorder
        return recorder

    def pull_trajectories(self) -> list:
        """Per recorded replica, a dict of host arrays [T, ...] of its last finished episode: the state
        before each of its steps, then the state it ended in (see TrajectoryRecorder.pull)."""
        if self.recorder is None:
            raise WorkbenchError("nothing is being recorded; call env.record(replicas=[...]) first")
        return self.recorder.pull()

    # -- other ecosystems' APIs (workbench/interop; imported on first use) ----------------
    def as_gymnasium(self, flatten_agents: bool = False):
        """All replicas as a gymnasium.vector.VectorEnv (SAME_STEP autoreset)."""
        from ..interop.gymnasium import GymnasiumVectorEnv
        return GymnasiumVectorEnv(self, flatten_agents=flatten_agents)

    def as_sb3(self):
        """All replicas as a Stable-Baselines3 VecEnv (single-agent envs)."""
        from ..interop.sb3 import SB3VecEnv
        return SB3VecEnv(self)

    def as_pettingzoo(self, replica: int | None = None):
        """A PettingZoo ParallelEnv over replica `replica`, or (None) a batched one over all replicas."""
        from ..interop.pettingzoo import as_pettingzoo
        return as_pettingzoo(self, replica)

    def as_torchrl(self, group_map: str = "agents"):
        """A TorchRL EnvBase over all replicas, TensorDicts [E, A, ...] on the env's device (group_map
        "agents": one group; "policies": the env's agent groups)."""
        from ..interop.torchrl import TorchRLEnv
        return TorchRLEnv(self, group_map=group_map)

    def __repr__(self):
        return (f"Env({self.name!r}, num_envs={self.num_envs}, num_agents={self.num_agents}, "
                f"target={self.target.name!r}, obs={self.obs_shape}, action={self.action_space})")


class ActionCheck:
    """Range check of actions given to `Env.step`: discrete values outside [0, n), continuous ones
    NaN or inf. Immediate (raising before the step) on a CPU device or in debug mode. Deferred on a
    GPU: the first fault (flag, flat index, value) is kept in a device record, copied to pinned host
    memory asynchronously, and reported by the next call that finds the copy done, so no step
    waits for the device."""

    def __init__(self, space, shape: tuple, device, deferred: bool):
        self.space, self.shape, self.device, self.deferred = space, shape, torch.device(device), deferred
        self.nvec = torch.tensor(space.nvec, device=device) if isinstance(space, MultiDiscrete) else None
        self.record = torch.zeros(3, dtype=torch.float64, device=device)  # [fault, flat index, value]
        self.host = None
        if deferred and self.device.type == "cuda":
            self.host = torch.zeros(3, dtype=torch.float64, pin_memory=True)
        self.event = None
        self.pending = False

    def bad(self, actions: torch.Tensor) -> torch.Tensor:
        """Mask of the faulty entries of `actions` (shaped like the store's action tensor)."""
        if isinstance(self.space, Discrete):
            return (actions < 0) | (actions >= self.space.n)
        if isinstance(self.space, MultiDiscrete):
            return (actions < 0) | (actions >= self.nvec)
        return ~torch.isfinite(actions)

    def _clean_fast(self, actions) -> bool:
        """A cheap reduction that proves `actions` clean in the common case (no mask allocated)."""
        if isinstance(self.space, Discrete):
            low, high = torch.aminmax(actions)
            return int(low) >= 0 and int(high) < self.space.n
        if isinstance(self.space, MultiDiscrete):
            flat = actions.reshape(-1, len(self.space.nvec))
            return bool((flat.amin(0) >= 0).all()) and bool((flat.amax(0) < self.nvec).all())
        return bool(torch.isfinite(actions.sum()))

    def check(self, actions: torch.Tensor) -> None:
        if actions.numel() == 0:
            return
        if not self.deferred:
            if self._clean_fast(actions):
                return
            bad = self.bad(actions).reshape(-1)
            if bool(bad.any()):
                index = int(bad.nonzero()[0, 0])
                raise ActionError(self.describe(index, float(actions.reshape(-1)[index])))
            return
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return  # inside someone's graph capture: no record to publish
        bad = self.bad(actions).reshape(-1)
        first = bad.to(torch.int32).argmax().reshape(1)
        value = actions.reshape(-1).index_select(0, first).to(torch.float64)
        found = torch.cat([bad.any().reshape(1).to(torch.float64), first.to(torch.float64), value])
        self.record.copy_(torch.where(self.record[0] > 0, self.record, found))
        if self.host is not None:
            self.host.copy_(self.record, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        self.pending = True

    def report(self, wait: bool = False) -> None:
        """Raise the fault a deferred check recorded, once its copy reached the host (`wait`: block for it)."""
        if not self.pending:
            return
        if self.event is not None:
            if wait:
                self.event.synchronize()
            elif not self.event.query():
                return
        fault, index, value = (self.host if self.host is not None else self.record).tolist()
        self.pending = False
        if fault:
            self.record.zero_()
            raise ActionError(self.describe(int(index), value) + " (found on the device after an earlier step(), "
                              "which ran with it; make the env with debug=True to check before every step)")

    def describe(self, index: int, value: float) -> str:
        """The fault at flat `index` of the action tensor: replica, agent, value and the valid range."""
        per_agent = math.prod(self.shape[2:])
        replica, agent, part = index // (self.shape[1] * per_agent), (index // per_agent) % self.shape[1], \
            index % per_agent
        who = f"agent {agent} in replica {replica}"
        space = self.space
        if isinstance(space, Discrete):
            return (f"action {int(value)} of {who} is out of range: this env takes Discrete({space.n}) actions, "
                    f"integers in [0, {space.n - 1}]")
        if isinstance(space, MultiDiscrete):
            return (f"action component {part} of {who} is {int(value)}, out of range: this env takes "
                    f"MultiDiscrete(nvec={tuple(space.nvec)}) actions, component {part} in [0, {space.nvec[part] - 1}]")
        return (f"continuous action component {part} of {who} is {value}: actions must be finite numbers "
                f"(this env's Box: low={space.low}, high={space.high})")


def _replicas_per_seed(value, num_envs: int) -> int:
    """`replicas_per_seed` checked: an int >= 1 dividing num_envs (None: num_envs, one seed)."""
    if value is None:
        return num_envs
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise WorkbenchError(f"replicas_per_seed must be an int >= 1 that divides num_envs={num_envs} "
                             f"(or None for one seed), got {value!r}")
    if num_envs % int(value):
        raise WorkbenchError(f"replicas_per_seed must divide num_envs={num_envs}, got {value!r}; "
                             f"use a divisor of num_envs or num_envs = blocks * replicas_per_seed")
    return int(value)


def best_target(env=None) -> str:
    """compiler.targets.best_target for a registered env's name too (an unknown name: any env's)."""
    from ..compiler import targets
    from ..errors import UnknownEnvError
    from .registry import lookup
    if isinstance(env, str):
        try:
            env = lookup(env)
        except UnknownEnvError:  # the caller's own lookup says so
            env = None
    return targets.best_target(env)


def make(name: str, num_envs: int = 1, *, target: str | None = None, seed: int = 0, debug: bool = False,
         replicas_per_seed: int | None = None, **params) -> Env:
    """All `num_envs` replicas of the registered env `name` on `target` ("cpu", "cuda", "cuda-c";
    default: the best present), in blocks of `replicas_per_seed` seeded seed, seed + 1, ... (Env).
    Extra keyword arguments override the env's PARAMS."""
    from .registry import definition
    defn = definition(name, **params)
    # debug mode checks bounds, which the numba targets do and cuda-c does not
    target = target or best_target(None if debug else defn)
    return Env(defn, num_envs=num_envs, target=target, seed=seed, debug=debug,
               replicas_per_seed=replicas_per_seed)
