"""The trainer: device-resident rollouts, per-policy updates, metrics through a callback, checkpoints.

One iteration is: the rollout (policy forward, sampling, env step, buffer writes, V of truncated
final observations), GAE, the algorithm's update, and the metric sums. On a GPU target the whole
iteration is captured once in a CUDA graph and replayed; the same code runs eagerly on the CPU.
The trainer knows nothing of any UI: it reports through `callback(iteration, metrics) -> bool`
(False stops) every `log_every` iterations, the only time metrics cross to the host.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import math
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import checkpoint as ckpt
from . import config as cfg
from . import distributed as dist_mod
from . import threads
from .compiled import MaybeCompiled, act_and_record, value_step
from .algorithms import a2c, ddpg, ppo
from .envdef import Box
from .errors import NonFiniteError, WorkbenchError
from .policies import ActionHead, ActorCritic, CentralisedActorCritic, DeterministicActor, QCritic
from .rollout import PolicyMapError, RolloutBuffer, RunningNorm, advantages, build_groups, chunks, gae

# The rollout keeps its final observations for one batched critic pass when they take at most
# this much memory (else V(final observation) is computed after every step)
FINAL_OBS_BUFFER_BYTES = 256 * 2**20

ON_POLICY = {"ppo": ppo, "a2c": a2c}


@dataclass
class TrainResult:
    iterations: int
    env_steps: int
    wall_time_s: float
    stopped_by: str  # "budget", "target_return", "callback", "interrupted"
    metrics: dict
    history: list = field(default_factory=list)
    checkpoint: str | None = None
    warmup_s: float = 0.0  # of wall_time_s: iterations that compiled (torch.compile) and captured the CUDA graph


def resolve_precision(precision: str, device) -> str:
    """auto -> bf16 on a GPU, fp32 on the CPU (where autocast to bf16 is slower, not faster)."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


class Trainer:
    """Trains one policy per agent group on `env`.

    policies: {name: agent ids} (default: one policy shared by all agents);
    models: optional {name: nn.Module} replacing the default MLP of that policy.
    """

    def __init__(self, env, config, policies=None, models=None, distributed: bool | None = None):
        cfg.validate(config)
        if config.algorithm not in cfg.ALGORITHMS:
            raise cfg.ConfigError(f"algorithm must be one of {sorted(cfg.ALGORITHMS)}, got {config.algorithm!r}")
        self.env = env
        self.config = config
        self.device = env.device
        self.algorithm = config.algorithm
        self.sync = None
        self.rank, self.world_size = 0, 1
        if distributed or (distributed is None and dist_mod.launched_by_torchrun()):
            context = dist_mod.init(env.target.name)
            self.sync = dist_mod.GradientSync(context)
            self.rank, self.world_size = context.rank, context.world_size
        torch.manual_seed(config.seed)
        self.generator = torch.Generator(device=self.device)
        # every rank explores with its own policy noise, as every rank's env has its own seed
        self.generator.manual_seed(dist_mod.rank_seed(config.seed + 1, self.rank))
        self.groups = build_groups(policies, env.num_agents, self.device)
        self.obs_dim = int(math.prod(env.obs_shape)) if env.obs_shape else 1
        self.E, self.T = env.num_envs, config.rollout_length
        cfg.check_against_env(config, env, self.groups)
        self.precision = resolve_precision(config.precision, self.device)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = self.precision in ("tf32", "bf16")
            torch.backends.cudnn.allow_tf32 = self.precision in ("tf32", "bf16")
        self.obs_dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        self.active = env.definition.namespace.get("ACTIVE")  # per-agent array: nonzero while in the game
        central = tuple(config.centralised_critic or ())
        self.central = {g.name for g in self.groups} if "all" in central else set(central)
        unknown = sorted(self.central - {g.name for g in self.groups})
        if unknown:
            raise PolicyMapError(f"centralised_critic names {unknown}, which are not policies; the policies are "
                                 f"{[g.name for g in self.groups]}")
        if self.central and self.algorithm == "ddpg":
            raise cfg.ConfigError("centralised_critic is for PPO and A2C; DDPG's critic is per agent")
        self.state_dim = self.obs_dim * env.num_agents if self.central else 0
        space = env.action_space
        self.head = ActionHead(space).to(self.device)
        self.models, self.optimizers, self.norms, self.buffers = {}, {}, {}, {}
        self._lr_tensors: list = []
        models = dict(models or {})
        unknown = sorted(set(models) - {g.name for g in self.groups})
        if unknown:
            raise PolicyMapError(f"models given for {unknown}, which are not in the policy map")
        for g in self.groups:
            if self.algorithm == "ddpg":
                self._build_ddpg(g, space, models.get(g.name))
            else:
                self._build_on_policy(g, space, models.get(g.name))
            if config.normalize_obs:
                self.norms[g.name] = RunningNorm(self.obs_dim, self.device)
        self.can_truncate = env.definition.max_steps < 2**31 - 1  # an env without a time limit never does
        self.final_obs = None
        if self.algorithm != "ddpg":
            final_obs_bytes = 4 * self.T * self.E * env.num_agents * self.obs_dim
            if self.can_truncate and final_obs_bytes <= FINAL_OBS_BUFFER_BYTES:
                self.final_obs = torch.zeros((self.T, self.E, env.num_agents, self.obs_dim), device=self.device)
            self.terminated = torch.zeros((self.T, self.E), device=self.device)
            self.truncated = torch.zeros((self.T, self.E), device=self.device)
            for buf in self.buffers.values():
                buf.terminated, buf.truncated = self.terminated, self.truncated
        if self.sync is not None:
            for model in self.models.values():
                self.sync.broadcast_parameters(model)
        self.rollout_models, self._shadow_pairs = self._rollout_copies()
        stat_names = ddpg.STATS if self.algorithm == "ddpg" else ON_POLICY[self.algorithm].STATS
        self.stat_sums = {g.name: {k: torch.zeros((), device=self.device) for k in stat_names} for g in self.groups}
        self._stat_iterations = 0
        from .episode_stats import EpisodeStats
        compile_on = bool(getattr(config, "compile", False)) and self.device.type == "cuda"
        self.episode_stats = EpisodeStats(env, self.groups)
        self.chunk_size = {g.name: self._chunk_size(g) for g in self.groups}
        self._act_and_record = MaybeCompiled(act_and_record, compile_on, "the policy step")
        self._record_outcome = MaybeCompiled(self._step_outcome, compile_on, "the step's bookkeeping")
        self._value_step = MaybeCompiled(value_step, compile_on, "the value function")
        self._advantages = MaybeCompiled(advantages, compile_on, "GAE")
        self._loss = (MaybeCompiled(ON_POLICY[self.algorithm].chunk_loss, compile_on, f"the {self.algorithm} loss")
                      if self.algorithm in ON_POLICY else None)
        self._noise = {g.name: torch.empty((self.E * g.n, self.head.out_dim), device=self.device)
                       for g in self.groups} if self.algorithm in ON_POLICY else {}
        self.iteration = 0
        self.env_steps = 0
        self.history: list = []
        self.graph = None
        self._graph_state = "eager-first"  # -> "capture" -> "replay", or "eager" after a failed capture
        self._divergence_seen: dict = {}
        self._interrupt: str | None = None
        self.threads = self._configure_threads() if self.device.type == "cpu" else None

    # -- construction ---------------------------------------------------------------------
    def _check_model(self, name, model, out_dim):
        with torch.no_grad():
            obs = torch.zeros(2, self.obs_dim, device=self.device)
            if isinstance(model, CentralisedActorCritic):
                out = model.actor(obs)
            else:
                out = model(obs)
        head_out = out[0] if isinstance(out, tuple) else out
        if head_out.shape[-1] != out_dim:
            raise PolicyMapError(f"policy '{name}': the model's action output has {head_out.shape[-1]} units, "
                                 f"the env's action space {self.env.action_space} needs {out_dim}")

    def _adam(self, params, lr):
        """Adam whose step can be replayed from a CUDA graph on a GPU (fused, capturable, with the
        learning rate in a device tensor that annealing rewrites in place)."""
        if self.device.type == "cuda":
            lr_tensor = torch.tensor(float(lr), device=self.device)
            self._lr_tensors.append((lr_tensor, float(lr)))
            return torch.optim.Adam(params, lr=lr_tensor, eps=1e-5, fused=True, capturable=True)
        return torch.optim.Adam(params, lr=lr, eps=1e-5)

    def _build_on_policy(self, g, space, model):
        central = g.name in self.central
        if model is None:
            model = (CentralisedActorCritic(self.obs_dim, self.state_dim, g.n, space, self.config.hidden_sizes)
                     if central else ActorCritic(self.obs_dim, space, self.config.hidden_sizes))
        elif central and not isinstance(model, CentralisedActorCritic):
            raise PolicyMapError(f"policy '{g.name}' has a centralised critic: its model must be a "
                                 f"CentralisedActorCritic (actor(obs), values(state) -> [E, n])")
        model = model.to(self.device)
        model.head = self.head
        self._check_model(g.name, model, self.head.out_dim)
        self.models[g.name] = model
        self.optimizers[g.name] = self._adam(model.parameters(), self.config.lr)
        act_dtype = torch.float32 if self.head.kind == "gaussian" else torch.long
        self.buffers[g.name] = RolloutBuffer(self.T, self.E, g.n, (self.obs_dim,), self.head.act_shape, act_dtype,
                                             self.device, obs_dtype=self.obs_dtype,
                                             state_dim=self.state_dim if central else 0)

    def _build_ddpg(self, g, space, model):
        if not isinstance(space, Box):
            raise PolicyMapError(f"DDPG needs a continuous (Box) action space; '{self.env.name}' has {space}")
        act_dim = self.head.out_dim
        agent = model or ddpg.DDPGAgent(DeterministicActor(self.obs_dim, space, self.config.hidden_sizes),
                                        QCritic(self.obs_dim, act_dim, self.config.hidden_sizes))
        agent = agent.to(self.device)
        self._check_model(g.name, agent.actor, act_dim)
        self.models[g.name] = agent
        self.optimizers[g.name] = (self._adam(agent.actor.parameters(), self.config.actor_lr),
                                   self._adam(agent.critic.parameters(), self.config.critic_lr))
        n = self.E * g.n
        self.buffers[g.name] = ddpg.ReplayBuffer(max(self.config.buffer_size, n), self.obs_dim, act_dim, self.device,
                                                 batch=n)

    def _rollout_copies(self):
        """The models the rollout acts with. Under bf16 autocast every forward pass would cast each
        weight to bf16 again (a kernel per weight per step); instead the rollout uses a copy whose
        linear layers hold bf16 weights. Every parameter and buffer of the copy (log_std, norms,
        embeddings, a user model's buffers) is paired with its source and refreshed by one copy
        kernel per iteration."""
        if self.precision != "bf16" or self.algorithm not in ON_POLICY:
            return dict(self.models), ([], [])
        copies, shadows, sources = {}, [], []
        for name, model in self.models.items():
            shadow = copy.deepcopy(model).requires_grad_(False)
            for module in shadow.modules():
                if isinstance(module, torch.nn.Linear):
                    for attr in ("weight", "bias"):
                        if getattr(module, attr) is not None:
                            setattr(module, attr, torch.nn.Parameter(getattr(module, attr).detach().to(torch.bfloat16),
                                                                     requires_grad=False))
            for pairs in ((shadow.named_parameters(), model.named_parameters()),
                          (shadow.named_buffers(), model.named_buffers())):
                mine, theirs = dict(pairs[0]), dict(pairs[1])
                for key, tensor in mine.items():
                    shadows.append(tensor.data)
                    sources.append(theirs[key].detach())
            copies[name] = shadow
        return copies, (shadows, sources)

    def _refresh_rollout_copies(self):
        if self._shadow_pairs[0]:
            torch._foreach_copy_(*self._shadow_pairs)

    def _chunk_size(self, g) -> int:
        """Samples per learner chunk: activations of a forward and backward pass of the actor and the
        critic, estimated per sample, kept within `learner_memory_gb`."""
        if self.algorithm == "ddpg":
            return self.config.batch_size
        hidden = sum(self.config.hidden_sizes)
        floats = 2 * self.obs_dim + 2 * 4 * hidden + 4 * self.head.out_dim + 16
        if g.name in self.central:
            floats += self.state_dim + g.n
        return max(1024, int(self.config.learner_memory_gb * 2**30 / (4 * floats)))

    def _configure_threads(self) -> dict:
        g = self.groups[0]
        model = self.models[g.name]
        net = model.actor if self.algorithm == "ddpg" else model
        rows = min(self.E * g.n * self.T, 4096)
        sample = torch.zeros(rows, self.obs_dim)

        def learner_pass():
            if isinstance(net, CentralisedActorCritic):
                out = net.actor(sample)
            else:
                out = net(sample)
            (out[0] if isinstance(out, tuple) else out).float().sum().backward()
            net.zero_grad(set_to_none=False)

        before = self.env.store.snapshot()  # the trial steps the env: put it back
        chosen = threads.configure(self.config.cpu_threads, self.env.step, learner_pass)
        self.env.store.load_snapshot(before)
        return chosen

    def autocast(self):
        """The learner's and the rollout's precision context."""
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    # -- shared pieces --------------------------------------------------------------------
    def _obs(self, g, tensor):
        """[R, A, *O] (R replicas, or replica-steps) -> the group's observations [R, n, O],
        normalised when configured."""
        obs = g.gather(tensor).reshape(tensor.shape[0], g.n, self.obs_dim)
        norm = self.norms.get(g.name)
        return norm(obs) if norm is not None else obs

    def _joint_obs(self, group_obs: dict):
        """The groups' observations {name: [R, n, O]} -> each replica's joint observation [R, A * O]."""
        rows = next(iter(group_obs.values())).shape[0]
        parts = torch.empty((rows, self.env.num_agents, self.obs_dim), dtype=self.obs_dtype, device=self.device)
        for g in self.groups:
            g.scatter(parts, group_obs[g.name])
        return parts.reshape(rows, self.state_dim)

    def _values(self, g, model, obs, state):
        """V of observations obs [R, n, O] (or of the joint states [R, S]) -> [R, n]."""
        with self.autocast():
            value = self._value_step(model, obs.reshape(-1, self.obs_dim), state, g.name in self.central)
        return value.reshape(obs.shape[0], g.n)

    def _act(self, g, model, obs, state, buf, t):
        """Sample the group's actions for obs [E, n, O] into buf's step t (actions, logp, values);
        returns the actions [E * n, ...]."""
        noise = self._noise[g.name]
        if self.head.kind == "gaussian":
            noise.normal_(generator=self.generator)
        else:
            noise.uniform_(generator=self.generator)  # (the policy step keeps it off 0)
        with self.autocast():
            return self._act_and_record(model, self.head, obs.reshape(-1, self.obs_dim), state, noise,
                                        g.name in self.central, buf.actions[t], buf.logp[t], buf.values[t])

    # -- on-policy iteration: rollout, advantages, update ------------------------------------
    def _collect(self):
        store = self.env.store
        central = bool(self.central)
        per_step_final_values = self.can_truncate and self.final_obs is None
        self._refresh_rollout_copies()
        for t in range(self.T):
            group_obs = {}
            for g in self.groups:
                buf = self.buffers[g.name]
                if self.active is not None:
                    buf.mask[t].copy_(g.gather(store[self.active]) != 0)
                raw = g.gather(store["obs"]).reshape(self.E, g.n, self.obs_dim)
                norm = self.norms.get(g.name)
                if norm is not None:
                    norm.accumulate(raw, buf.mask[t] if self.active is not None else None)
                group_obs[g.name] = norm(raw) if norm is not None else raw
            state = self._joint_obs(group_obs) if central else None
            for g in self.groups:
                model, buf, obs = self.rollout_models[g.name], self.buffers[g.name], group_obs[g.name]
                buf.obs[t].copy_(obs)
                if buf.state is not None:
                    buf.state[t].copy_(state)
                actions = self._act(g, model, obs, state, buf, t)
                g.scatter(store["action"], self.head.to_env(actions).reshape((self.E, g.n) + self.head.act_shape))
            self.env.step()
            self._record_outcome(self.terminated[t], self.truncated[t],
                                 self.final_obs[t] if self.final_obs is not None else None,
                                 [self.buffers[g.name].rewards[t] for g in self.groups])
            if per_step_final_values:
                truncated_only = (self.truncated[t] * (1 - self.terminated[t])).unsqueeze(1)
                final_obs = {g.name: self._obs(g, store["final_obs"]) for g in self.groups}
                final_state = self._joint_obs(final_obs) if central else None
                for g in self.groups:
                    final = self._values(g, self.rollout_models[g.name], final_obs[g.name], final_state)
                    self.buffers[g.name].final_values[t].copy_(final * truncated_only)
        if self.active is not None:
            for g in self.groups:
                self.buffers[g.name].mask[self.T].copy_(g.gather(store[self.active]) != 0)
        if self.final_obs is not None:
            self._final_values()

    def _step_outcome(self, terminated, truncated, final_obs, rewards: list):
        """After an env step: its terminations and truncations [E] (one pair shared by every group),
        final observations [E, A, O] (when kept) and each group's rewards [E, n] into the rollout's
        step t (the views given), and the episodes that finished into the episode statistics. One
        function, so that torch.compile fuses the step's bookkeeping into a few kernels."""
        store = self.env.store
        self.episode_stats.after_step()
        terminated.copy_(store["terminated"])
        truncated.copy_(store["truncated"])
        if final_obs is not None:
            final_obs.copy_(store["final_obs"].reshape(final_obs.shape))
        for g, reward in zip(self.groups, rewards):
            reward.copy_(g.gather(store["reward"]))

    def _final_values(self):
        """V(final observation) of every replica truncated during the rollout (else 0), into each
        group's final_values [T, E, n]: one batched pass over the rollout's final observations
        instead of a critic pass after every step (a few large kernels, not T times as many small
        ones), in chunks of the learner's memory bound."""
        T, E = self.T, self.E
        flat = self.final_obs.reshape(T * E, self.env.num_agents, self.obs_dim)
        truncated_only = (self.truncated * (1 - self.terminated)).reshape(T, E, 1)
        for part in chunks(T * E, max(1, min(self.chunk_size[g.name] // g.n for g in self.groups))):
            group_obs = {g.name: self._obs(g, flat[part]) for g in self.groups}
            state = self._joint_obs(group_obs) if self.central else None
            for g in self.groups:
                value = self._values(g, self.rollout_models[g.name], group_obs[g.name], state)
                final = self.buffers[g.name].final_values.reshape(T * E, g.n)
                final[part].copy_(value * truncated_only.reshape(T * E, 1)[part])

    def _advantages_of(self, g):
        """GAE of group g's rollout, written into its buffer's advantages and returns."""
        model, buf = self.rollout_models[g.name], self.buffers[g.name]
        store = self.env.store
        with torch.no_grad():
            if g.name in self.central:
                state = self._joint_obs({h.name: self._obs(h, store["obs"]) for h in self.groups})
            else:
                state = None
            next_value = self._values(g, model, self._obs(g, store["obs"]), state)
            gae(buf, next_value, self.config.gamma, self.config.gae_lambda, self._advantages)

    def _on_policy_iteration(self):
        with torch.no_grad():
            self._collect()
        for g in self.groups:
            self._advantages_of(g)
            ON_POLICY[self.algorithm].update(
                self.models[g.name], self.optimizers[g.name], self.buffers[g.name].batch(), self.config,
                sync=self.sync, chunk_size=self.chunk_size[g.name], generator=self.generator, autocast=self.autocast,
                stats=self.stat_sums[g.name], loss_fn=self._loss)
        for norm in self.norms.values():
            norm.commit(self.sync)

    def rollout_batches(self) -> dict:
        """One rollout and its advantages, without an update: {policy: Batch of B = T * E * n samples}
        (for training loops outside this trainer, e.g. the Lightning module). The batches are views of
        the rollout buffers, rewritten by the next call."""
        if self.algorithm not in ON_POLICY:
            raise WorkbenchError("rollout_batches serves PPO and A2C; DDPG learns from its replay buffer")
        with torch.no_grad():
            self._collect()
        for g in self.groups:
            self._advantages_of(g)
        for norm in self.norms.values():
            norm.commit(self.sync)
        self.env_steps += self.steps_per_iteration
        return {g.name: self.buffers[g.name].batch() for g in self.groups}

    # -- DDPG: exploration rollout into the replay buffer, then gradient steps --------------
    def _collect_ddpg(self, learning: bool):
        store = self.env.store
        done = store["done"]
        for _ in range(self.T):
            for g in self.groups:
                agent, rb = self.models[g.name], self.buffers[g.name]
                raw = g.gather(store["obs"]).reshape(-1, self.obs_dim)
                norm = self.norms.get(g.name)
                if norm is not None:
                    norm.accumulate(raw, (g.gather(store[self.active]) != 0).reshape(-1)
                                    if self.active is not None else None)
                rb.stage_obs(raw)
                if not learning:
                    rb.noise.uniform_(0, 1, generator=self.generator)
                    actions = self.head.low.reshape(-1) + rb.noise * (self.head.high - self.head.low).reshape(-1)
                else:
                    rb.noise.normal_(0, 1, generator=self.generator)
                    span = (self.head.high - self.head.low).reshape(-1) / 2
                    with self.autocast():
                        mu = agent.actor(norm(raw) if norm is not None else raw)
                    actions = mu.float() + rb.noise * self.config.exploration_noise * span
                actions = self.head.to_env(actions.reshape((-1,) + self.head.act_shape)).reshape(-1, self.head.out_dim)
                rb.stage_actions(actions)
                g.scatter(store["action"], actions.reshape((self.E, g.n) + self.head.act_shape))
            self.env.step()
            self.episode_stats.after_step()
            for g in self.groups:
                rb = self.buffers[g.name]
                ended = done.bool().reshape(self.E, 1, 1)
                raw_next = torch.where(ended, g.gather(store["final_obs"]), g.gather(store["obs"]))
                term = store["terminated"].float().reshape(self.E, 1).expand(self.E, g.n)
                rb.add(g.gather(store["reward"]).reshape(-1), raw_next.reshape(-1, self.obs_dim), term.reshape(-1))

    def _ddpg_iteration(self):
        learning = self._ddpg_learning()
        with torch.no_grad():
            self._collect_ddpg(learning)
        if learning:
            for g in self.groups:
                agent, rb = self.models[g.name], self.buffers[g.name]
                actor_opt, critic_opt = self.optimizers[g.name]
                for _ in range(self.config.updates_per_rollout):
                    batch = rb.sample(self.config.batch_size, self.generator, self.norms.get(g.name))
                    ddpg.update(agent, actor_opt, critic_opt, batch, self.config, sync=self.sync,
                                autocast=self.autocast, stats=self.stat_sums[g.name])
        for norm in self.norms.values():
            norm.commit(self.sync)

    def _ddpg_learning(self) -> bool:
        return all(self.buffers[g.name].size >= self.config.learning_starts for g in self.groups)

    def _after_ddpg_iteration(self):
        for g in self.groups:
            self.buffers[g.name].advance_host_size(self.T)

    # -- one iteration, eagerly or replayed from a CUDA graph --------------------------------
    def _graphable(self) -> str | None:
        """Why this run cannot replay iterations from a CUDA graph (None: it can)."""
        if not (self.config.cuda_graph and self.device.type == "cuda"):
            return "off"
        if getattr(self.config, "target_kl", None) is not None:
            return "target_kl stops an update's epochs on a value read back from the device"
        if self.algorithm == "ddpg" and not self._ddpg_learning():
            return "collecting random transitions until learning_starts"
        return None

    def _iteration_body(self):
        if self.algorithm == "ddpg":
            self._ddpg_iteration()
        else:
            self._on_policy_iteration()

    def _run_iteration(self):
        reason = self._graphable()
        if reason is not None or self._graph_state == "eager":
            self._iteration_body()
        elif self._graph_state == "eager-first":
            # the first iteration runs eagerly on a side stream: optimiser state, gradients and
            # the allocator settle before capture (and it is a real iteration of training)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._iteration_body()
            torch.cuda.current_stream().wait_stream(side)
            self._graph_state = "capture"
        elif self._graph_state == "capture":
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(self.generator)
            try:
                with torch.cuda.graph(graph):
                    self._iteration_body()
            except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager
                warnings.warn(f"CUDA graph capture of the training iteration failed ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200]}); training goes on eagerly", stacklevel=3)
                self._graph_state = "eager"
                torch.cuda.synchronize()
                self._iteration_body()
            else:
                self.graph = graph
                self._graph_state = "replay"
                graph.replay()
        else:
            self.graph.replay()
        if self.algorithm == "ddpg":
            self._after_ddpg_iteration()

    def _invalidate_graph(self):
        """Optimiser state or buffers were replaced (a checkpoint load): capture again."""
        self.graph = None
        if self._graph_state != "eager":
            self._graph_state = "eager-first"

    # -- the loop -------------------------------------------------------------------------
    @property
    def steps_per_iteration(self) -> int:
        """Replica steps per iteration, summed over ranks."""
        return self.E * self.T * self.world_size

    @property
    def is_main(self) -> bool:
        """Only the main rank writes files and reports."""
        return self.rank == 0

    def total_iterations(self) -> int:
        return max(1, math.ceil(self.config.total_env_steps / self.steps_per_iteration))

    def _anneal(self, total_iters: int):
        if not getattr(self.config, "anneal_lr", False):
            return
        frac = max(0.0, 1.0 - self.iteration / total_iters)  # past the budget the rate stays at 0
        if frac == 0.0 and not getattr(self, "_warned_lr_floor", False):
            self._warned_lr_floor = True
            warnings.warn(f"training past total_env_steps={self.config.total_env_steps} with anneal_lr: the "
                          f"learning rate has reached 0, so the policy no longer changes; raise total_env_steps "
                          f"or set anneal_lr false", stacklevel=3)
        if self._lr_tensors:
            for tensor, base in self._lr_tensors:
                tensor.fill_(frac * base)
        else:
            for opt in self.optimizers.values():
                for group in opt.param_groups:
                    group["lr"] = frac * self.config.lr

    def run_iteration(self, total_iterations: int | None = None):
        """One training iteration: the learning rate's annealing step, the rollout, advantages and the
        algorithm's update (replayed from the CUDA graph once captured); its statistics are summed on the
        device until `pull_metrics`. total_iterations: the annealing horizon (default: the budget's)."""
        self._anneal(total_iterations or self.total_iterations())
        self._run_iteration()
        self._stat_iterations += 1
        self.iteration += 1
        self.env_steps += self.steps_per_iteration

    def _install_signal_handlers(self):
        """Ctrl-C / SIGTERM stop training at the end of the current iteration (a second Ctrl-C
        interrupts at once). Only the main thread may install handlers: elsewhere, none."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, frame):
            if self._interrupt is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._interrupt = signal.Signals(signum).name

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
        return previous

    def train(self, callback=None, num_iterations: int | None = None, progress: bool | None = None) -> TrainResult:
        """Run until `total_env_steps` (or `num_iterations` more iterations), the target return,
        `callback(iteration, metrics)` returning False, or Ctrl-C / SIGTERM (which finish the
        iteration, save a checkpoint into run_dir and return stopped_by="interrupted")."""
        config = self.config
        total_iters = self.total_iterations()
        stop_at = self.iteration + num_iterations if num_iterations is not None else total_iters
        run_dir = Path(config.run_dir) if config.run_dir and self.is_main else None
        show = config.progress if progress is None else progress
        bar = None
        if show and self.is_main:
            from .progress import ProgressBar
            bar = ProgressBar(stop_at, self.iteration, config.target_return)
        callbacks = [c for c in (bar, callback) if c is not None]
        start = time.perf_counter()
        window_start, window_steps = start, 0
        stopped_by = "budget"
        warmup = 0.0
        metrics = self.history[-1] if self.history else {}
        self._interrupt = None
        previous = self._install_signal_handlers()
        try:
            while self.iteration < stop_at:
                if bar is not None and self._graph_state == "eager-first" and self._loss is not None \
                        and self._loss.compiled is not None:
                    bar.bar.set_description("first iteration: compiling (compile=false skips it)")
                warming = self.device.type == "cuda" and self._graph_state in ("eager-first", "capture") \
                    and self._graphable() is None
                iteration_start = time.perf_counter()
                self.run_iteration(total_iters)
                if warming:
                    torch.cuda.synchronize()
                    warmup += time.perf_counter() - iteration_start
                if bar is not None and self.iteration == 0:
                    bar.bar.set_description("training")
                window_steps += self.steps_per_iteration
                interrupted = self._interrupt is not None
                if self.sync is not None:
                    interrupted = self.sync.any(interrupted, self.device)
                last = self.iteration >= stop_at or interrupted
                if self.iteration % config.log_every == 0 or last:
                    now = time.perf_counter()
                    metrics = self.pull_metrics(window_steps / max(now - window_start, 1e-9), now - start)
                    window_start, window_steps = now, 0
                    self.history.append(metrics)
                    if run_dir is not None:
                        self._append_csv(run_dir / "metrics.csv", metrics)
                    if metrics.get("nonfinite"):
                        raise self._nonfinite_error(run_dir, "the loss")
                    self._warn_divergence(metrics)
                    stop = any(c(self.iteration, metrics) is False for c in callbacks)
                    if self.sync is not None:
                        stop = self.sync.any(stop, self.device)
                    if stop:
                        stopped_by = "callback"
                        break
                    if config.target_return is not None and self._reached(metrics, config.target_return):
                        stopped_by = "target_return"
                        break
                if interrupted or (self._interrupt is not None and self.sync is None):
                    stopped_by = "interrupted"  # (a signal during the report above: nothing left unlogged)
                    break
                if config.checkpoint_every and run_dir is not None and self.iteration % config.checkpoint_every == 0:
                    if not self._weights_finite():  # (between reports the loss statistics are not read)
                        raise self._nonfinite_error(run_dir, "the weights")
                    self.save(run_dir / "checkpoint.pt")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - start
        saved = self.save(run_dir / "checkpoint.pt") if run_dir is not None else None
        return TrainResult(self.iteration, self.env_steps, wall, stopped_by, metrics, list(self.history),
                           str(saved) if saved else None, warmup)

    def _weights_finite(self) -> bool:
        """One host read: every policy's parameters are finite."""
        flags = [torch.isfinite(p).all() for m in self.models.values() for p in m.parameters()]
        return bool(torch.stack(flags).all())

    def _nonfinite_error(self, run_dir, what: str) -> NonFiniteError:
        saved = run_dir is not None and (run_dir / "checkpoint.pt").exists()
        return NonFiniteError(
            f"{what} became NaN or inf by iteration {self.iteration}; training stopped and no checkpoint was written "
            f"from this state" + (f" (the last good one is {run_dir / 'checkpoint.pt'})" if saved else "")
            + ". Lower lr, enable normalize_obs, or check the env's rewards for NaN (debug=True).")

    def _reached(self, metrics, target) -> bool:
        values = [metrics.get(f"return/{g.name}") for g in self.groups]
        return all(v is not None and not math.isnan(v) and v >= target for v in values)

    def _warn_divergence(self, metrics):
        """A report that shows divergence: on its own values (PPO's approx_kl far past its trust region,
        a value loss far above the returns' scale) or against the first report (a loss grown by orders
        of magnitude, a discrete policy's entropy collapsed within a few iterations). Almost always a
        learning rate that is too high."""
        lr = self.config.lr if self.algorithm != "ddpg" else self.config.critic_lr
        loss_key = "critic_loss" if self.algorithm == "ddpg" else "value_loss"
        for g in self.groups:
            loss = metrics.get(f"{loss_key}/{g.name}")
            entropy = metrics.get(f"entropy/{g.name}")
            kl = metrics.get(f"approx_kl/{g.name}")
            ret = metrics.get(f"return/{g.name}")
            first = self._divergence_seen.setdefault(g.name, {"loss": loss, "entropy": entropy,
                                                               "iteration": self.iteration, "warned": False})
            if first["warned"] or loss is None:
                continue
            scale = max(1.0, abs(ret) if ret is not None and math.isfinite(ret) else 1.0) ** 2
            message = None
            if kl is not None and kl > 1.0:
                message = f"approx_kl is {kl:.3g} (a PPO update moves the policy by about 0.01 to 0.05)"
            elif loss > 1e6 * scale:
                message = f"the {loss_key.replace('_', ' ')} is {loss:.3g}, far above the returns' scale"
            elif first["loss"] is not None and loss > 1e3 * max(first["loss"], 1e-2):
                message = f"the {loss_key.replace('_', ' ')} grew from {first['loss']:.3g} to {loss:.3g}"
            elif (entropy is not None and first["entropy"] and self.head.kind != "gaussian" and first["entropy"] > 0
                  and entropy < 1e-3 * first["entropy"] and self.iteration - first["iteration"] <= 50):
                message = (f"the policy's entropy collapsed from {first['entropy']:.3g} to {entropy:.2g} in "
                           f"{self.iteration - first['iteration']} iterations")
            if message:
                first["warned"] = True
                warnings.warn(f"policy '{g.name}' looks divergent: {message} by iteration {self.iteration}; the "
                              f"likely cause is a learning rate too high for this problem (lr={lr:g}): try 10x "
                              f"lower, or normalize_obs / smaller rewards", stacklevel=3)

    def pull_metrics(self, rate: float = float("nan"), elapsed: float = float("nan")) -> dict:
        """One host read of the update statistics (averaged over the iterations since the last pull
        and over ranks) and of the episode sums (returns per policy, lengths, env metrics)."""
        names = [g.name for g in self.groups]
        keys = [(n, k) for n in names for k in sorted(self.stat_sums[n])]
        stacked = torch.stack([self.stat_sums[n][k].float() for n, k in keys])
        if self.sync is not None:  # losses average over ranks; episode sums add up
            stacked = self.sync.sum(stacked) / self.world_size
            self.episode_stats.sums.copy_(self.sync.sum(self.episode_stats.sums))
        host = stacked.cpu().tolist()
        episodes = self.episode_stats.pull()
        iterations = max(self._stat_iterations, 1)
        metrics = {"iteration": self.iteration, "env_steps": self.env_steps, "env_steps_per_s": rate,
                   "time_s": elapsed}
        learning = not (self.algorithm == "ddpg" and not self._ddpg_learning())
        nonfinite = 0.0
        returns = []
        for n in names:
            metrics[f"return/{n}"] = episodes[f"return/{n}"]
            returns.append(episodes[f"return/{n}"])
            for (owner, k), value in zip(keys, host):
                if owner != n:
                    continue
                if k == "nonfinite":
                    nonfinite += value
                elif learning:
                    metrics[f"{k}/{n}"] = value / iterations
        for key, value in episodes.items():
            if not key.startswith("return/"):
                metrics[key] = value
        for sums in self.stat_sums.values():
            for stat in sums.values():
                stat.zero_()
        self._stat_iterations = 0
        finite = [r for r in returns if not math.isnan(r)]
        metrics["mean_return"] = sum(finite) / len(finite) if finite else float("nan")
        metrics["nonfinite"] = nonfinite > 0
        return metrics

    @staticmethod
    def _append_csv(path: Path, metrics: dict):
        """One row per report. Columns keep the header's order; a report with new columns (DDPG's
        losses once learning starts) rewrites the file once with the wider header."""
        path.parent.mkdir(parents=True, exist_ok=True)
        rows, fields = [], list(metrics)
        if path.exists():
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                header = list(reader.fieldnames or [])
                if set(fields) <= set(header):
                    fields, rows = header, None
                else:
                    rows = list(reader)
                    fields = header + [k for k in fields if k not in header]
        if rows is None:
            with path.open("a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore").writerow(metrics)
            return
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows + [metrics])

    # -- acting with a trained policy -----------------------------------------------------
    def act(self, deterministic: bool = True) -> torch.Tensor:
        """Write the policies' actions for the env's current observations into its action array."""
        store = self.env.store
        with torch.no_grad():
            for g in self.groups:
                model = self.models[g.name]
                obs = self._obs(g, store["obs"]).reshape(-1, self.obs_dim)
                if self.algorithm == "ddpg":
                    actions = model.actor(obs)
                else:
                    out = model.actor(obs) if g.name in self.central else model(obs)[0]
                    if deterministic:
                        actions = self._mode(out)
                    else:
                        noise = torch.rand(out.shape, device=self.device).clamp_(1e-10, 1) \
                            if self.head.kind != "gaussian" else torch.randn(out.shape, device=self.device)
                        actions = self.head.sample(out, getattr(model, "log_std", None), noise)
                actions = self.head.to_env(actions.reshape((-1,) + self.head.act_shape))
                g.scatter(store["action"], actions.reshape((self.E, g.n) + self.head.act_shape))
        return store["action"]

    def _mode(self, out):
        if self.head.kind == "discrete":
            return out.argmax(-1)
        if self.head.kind == "multi":
            return torch.stack([p.argmax(-1) for p in out.split(self.head.splits, dim=-1)], -1)
        return out

    # -- checkpoints ----------------------------------------------------------------------
    def _restore_lr_tensors(self):
        """A loaded optimiser state brings its own learning-rate values: copy them into the device
        tensors the fused Adam (and a captured graph) read, and keep those tensors in place."""
        if not self._lr_tensors:
            return
        tensors = iter(self._lr_tensors)
        for opt in self.optimizers.values():
            for o in (opt if isinstance(opt, tuple) else (opt,)):
                for group in o.param_groups:
                    tensor, base = next(tensors)
                    tensor.fill_(float(group["lr"]))
                    group["lr"] = tensor

    def _signature(self) -> dict:
        return {"env": self.env.name, "num_agents": self.env.num_agents, "obs_shape": list(self.env.obs_shape),
                "action_space": repr(self.env.action_space), "policies": {g.name: g.ids for g in self.groups},
                "algorithm": self.algorithm, "normalize_obs": bool(self.norms),
                "centralised_critic": sorted(self.central)}

    def save(self, path) -> Path | None:
        """Atomically write policies, optimisers, normaliser, RNG, counters and env state
        (on the main rank only; other ranks return None)."""
        if not self.is_main:
            return None
        optim = {n: (o.state_dict() if not isinstance(o, tuple) else [x.state_dict() for x in o])
                 for n, o in self.optimizers.items()}
        payload = {
            "signature": self._signature(),
            "config": cfg.to_dict(self.config),
            "models": {n: m.state_dict() for n, m in self.models.items()},
            "optimizers": optim,
            "norms": {n: norm.state_dict() for n, norm in self.norms.items()},
            "iteration": self.iteration, "env_steps": self.env_steps, "history": self.history,
            "rng": {"torch": torch.get_rng_state(), "generator": self.generator.get_state(),
                    "env_generator": self.env._generator.get_state()},
            "env_state": {k: v.detach().cpu() for k, v in self.env.store.items()},
            "env_seed": self.env.seed,
            "world_size": self.world_size,
            "threads": self.threads,
            "replay": {n: b.state_dict() for n, b in self.buffers.items() if isinstance(b, ddpg.ReplayBuffer)},
        }
        return ckpt.save_atomic(payload, path)

    def load(self, path, *, restore_env: bool = True) -> "Trainer":
        """Resume from a checkpoint written by `save` for the same env and policy map."""
        payload = ckpt.load(path)
        mine, theirs = self._signature(), payload["signature"]
        for key in mine:
            if mine[key] != theirs.get(key, [] if key == "centralised_critic" else None):
                raise ckpt.CheckpointError(f"checkpoint {str(path)!r} was written for {key}={theirs.get(key)!r}; "
                                           f"this trainer has {key}={mine[key]!r}")
        for n, state in payload["models"].items():
            self.models[n].load_state_dict(state)
        for n, state in payload["optimizers"].items():
            opt = self.optimizers[n]
            if isinstance(opt, tuple):
                for o, s in zip(opt, state):
                    o.load_state_dict(s)
            else:
                opt.load_state_dict(state)
        self._restore_lr_tensors()
        for n, state in payload.get("replay", {}).items():
            self.buffers[n].load_state_dict(state)
        for n, state in payload["norms"].items():
            self.norms[n].load_state_dict(state)
        self.iteration, self.env_steps = payload["iteration"], payload["env_steps"]
        self.history = list(payload["history"])
        torch.set_rng_state(payload["rng"]["torch"])
        self.generator.set_state(payload["rng"]["generator"])
        if self.rank > 0:  # the checkpoint holds rank 0's stream: every other rank continues on its own
            self.generator.manual_seed(dist_mod.rank_seed(self.config.seed + 1, self.rank) * 2**20 + self.iteration)
        self._invalidate_graph()
        self._refresh_rollout_copies()
        saved_threads = payload.get("threads")
        if self.threads is not None and saved_threads and self.threads.get("how") == "measured":
            # a resumed run goes on with the counts its run measured (the same rounding as before)
            threads.apply(saved_threads)
            self.threads = {**saved_threads, "how": "restored from the checkpoint"}
        saved_world = payload.get("world_size", 1)
        if restore_env and saved_world != self.world_size:
            warnings.warn(f"checkpoint written by {saved_world} rank(s), resumed by {self.world_size}: policies, "
                          f"optimisers and counters are restored; env replicas start new episodes", stacklevel=2)
        elif restore_env and payload["env_state"]["obs"].shape == self.env.store["obs"].shape and \
                self.world_size == 1:
            self.env.store.load_snapshot(payload["env_state"])
            self.env.seed = payload["env_seed"]
            self.env._generator.set_state(payload["rng"]["env_generator"])
        return self


def make_trainer(config, policies=None, models=None, env=None, distributed: bool | None = None) -> Trainer:
    """Build the env named in `config` (on its target) and a trainer for it. Under torchrun
    (or distributed=True) this joins the process group first, so the env lands on this rank's GPU."""
    from . import make
    from .targets import best_target
    target = best_target() if config.target == "auto" else config.target
    seed = config.seed
    if distributed or (distributed is None and dist_mod.launched_by_torchrun()):
        context = dist_mod.init(target)
        seed = dist_mod.rank_seed(config.seed, context.rank)
        distributed = True
    if env is None:
        env = make(config.env, num_envs=config.num_envs, target=target, seed=seed, **(config.env_params or {}))
    if policies is None:
        groups = env.definition.namespace.get("AGENT_GROUPS")
        if groups is not None:
            import types
            policies = {k: list(v) for k, v in groups(types.SimpleNamespace(**env.definition.params)).items()}
    return Trainer(env, config, policies=policies, models=models, distributed=distributed)
