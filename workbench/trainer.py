"""The trainer: device-resident rollouts, per-policy updates, metrics through a callback, checkpoints.

The trainer knows nothing of any UI: it reports through `callback(iteration, metrics) -> bool`
(False stops) every `log_every` iterations, the only time metrics cross to the host.
"""
from __future__ import annotations

import csv
import warnings
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import checkpoint as ckpt
from . import config as cfg
from . import distributed as dist_mod
from .algorithms import a2c, ddpg, ppo
from .envdef import Box
from .errors import NonFiniteError
from .policies import ActionHead, ActorCritic, DeterministicActor, QCritic
from .rollout import PolicyMapError, RolloutBuffer, RunningNorm, build_groups, gae, truncation_values


@dataclass
class TrainResult:
    iterations: int
    env_steps: int
    wall_time_s: float
    stopped_by: str  # "budget", "target_return", "callback"
    metrics: dict
    history: list = field(default_factory=list)


class Trainer:
    """Trains one policy per agent group on `env`.

    policies: {name: agent ids} (default: one policy shared by all agents);
    models: optional {name: nn.Module} replacing the default MLP of that policy.
    """

    def __init__(self, env, config, policies=None, models=None, distributed: bool | None = None):
        cfg.validate(config)
        self.env = env
        self.config = config
        self.device = env.device
        self.algorithm = config.algorithm
        torch.manual_seed(config.seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed + 1)
        self.groups = build_groups(policies, env.num_agents, self.device)
        self.obs_dim = int(math.prod(env.obs_shape)) if env.obs_shape else 1
        self.E, self.T = env.num_envs, config.rollout_length
        space = env.action_space
        self.head = ActionHead(space).to(self.device)
        self.models, self.optimizers, self.norms, self.buffers = {}, {}, {}, {}
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
        if self.algorithm != "ddpg":
            self.terminated = torch.zeros((self.T, self.E), device=self.device)
            self.truncated = torch.zeros((self.T, self.E), device=self.device)
            for buf in self.buffers.values():
                buf.terminated, buf.truncated = self.terminated, self.truncated
        self.return_sum = {g.name: torch.zeros((), device=self.device) for g in self.groups}
        self.return_count = {g.name: torch.zeros((), device=self.device) for g in self.groups}
        self.sync = None
        self.rank, self.world_size = 0, 1
        if distributed or (distributed is None and dist_mod.launched_by_torchrun()):
            context = dist_mod.init(env.target.name)
            self.sync = dist_mod.GradientSync(context)
            self.rank, self.world_size = context.rank, context.world_size
            for model in self.models.values():
                self.sync.broadcast_parameters(model)
        self.iteration = 0
        self.env_steps = 0
        self.history: list = []
        self.graph = None
        self.graph_ready = False
        self._last_stats: dict = {}

    # -- construction ---------------------------------------------------------------------
    def _check_model(self, name, model, out_dim):
        with torch.no_grad():
            out = model(torch.zeros(2, self.obs_dim, device=self.device))
        head_out = out[0] if isinstance(out, tuple) else out
        if head_out.shape[-1] != out_dim:
            raise PolicyMapError(f"policy '{name}': the model's action output has {head_out.shape[-1]} units, "
                                 f"the env's action space {self.env.action_space} needs {out_dim}")

    def _build_on_policy(self, g, space, model):
        if model is None:
            model = ActorCritic(self.obs_dim, space, self.config.hidden_sizes)
        model = model.to(self.device)
        model.head = self.head
        self._check_model(g.name, model, self.head.out_dim)
        self.models[g.name] = model
        self.optimizers[g.name] = torch.optim.Adam(model.parameters(), lr=self.config.lr, eps=1e-5)
        act_dtype = torch.float32 if self.head.kind == "gaussian" else torch.long
        self.buffers[g.name] = RolloutBuffer(self.T, self.E, g.n, (self.obs_dim,), self.head.act_shape, act_dtype,
                                             self.device)

    def _build_ddpg(self, g, space, model):
        if not isinstance(space, Box):
            raise PolicyMapError(f"DDPG needs a continuous (Box) action space; '{self.env.name}' has {space}")
        act_dim = self.head.out_dim
        agent = model or ddpg.DDPGAgent(DeterministicActor(self.obs_dim, space, self.config.hidden_sizes),
                                        QCritic(self.obs_dim, act_dim, self.config.hidden_sizes))
        agent = agent.to(self.device)
        self._check_model(g.name, agent.actor, act_dim)
        self.models[g.name] = agent
        self.optimizers[g.name] = (torch.optim.Adam(agent.actor.parameters(), lr=self.config.actor_lr),
                                   torch.optim.Adam(agent.critic.parameters(), lr=self.config.critic_lr))
        n = self.E * g.n
        capacity = max(self.config.buffer_size, n)
        self.buffers[g.name] = ddpg.ReplayBuffer(capacity, self.obs_dim, act_dim, self.device)
        self.buffers[g.name].last_obs = torch.zeros((n, self.obs_dim), device=self.device)
        self.buffers[g.name].last_actions = torch.zeros((n, act_dim), device=self.device)
        self.buffers[g.name].noise = torch.zeros((n, act_dim), device=self.device)

    # -- shared pieces --------------------------------------------------------------------
    def _obs(self, g, tensor):
        """[E, A, *O] -> the group's observations [E, n, O], normalised when configured."""
        obs = g.gather(tensor).reshape(self.E, g.n, self.obs_dim)
        norm = self.norms.get(g.name)
        return norm(obs) if norm is not None else obs

    def _track_returns(self, g, done):
        last = g.gather(self.env.store["last_return"])
        self.return_sum[g.name].add_((last * done.unsqueeze(1)).sum())
        self.return_count[g.name].add_(done.sum() * g.n)

    # -- on-policy rollout: policy forward, sampling, env step, buffer writes ---------------
    def _collect(self):
        store = self.env.store
        done = store["done"]
        for t in range(self.T):
            for g in self.groups:
                model, buf = self.models[g.name], self.buffers[g.name]
                if g.name in self.norms:
                    self.norms[g.name].accumulate(g.gather(store["obs"]).reshape(self.E, g.n, self.obs_dim))
                obs = self._obs(g, store["obs"])
                buf.obs[t].copy_(obs)
                out, value = model(obs.reshape(-1, self.obs_dim))
                noise = torch.rand(out.shape, device=self.device, generator=self.generator) \
                    if self.head.kind != "gaussian" else \
                    torch.randn(out.shape, device=self.device, generator=self.generator)
                if self.head.kind != "gaussian":
                    noise.clamp_(1e-10, 1.0)
                actions = self.head.sample(out, getattr(model, "log_std", None), noise)
                logp, _ = self.head.log_prob_entropy(out, getattr(model, "log_std", None), actions)
                buf.actions[t].copy_(actions.reshape(buf.actions[t].shape))
                buf.logp[t].copy_(logp.reshape(self.E, g.n))
                buf.values[t].copy_(value.reshape(self.E, g.n))
                g.scatter(store["action"], self.head.to_env(actions).reshape((self.E, g.n) + self.head.act_shape))
            self.env.step()
            self.terminated[t].copy_(store["terminated"])
            self.truncated[t].copy_(store["truncated"])
            for g in self.groups:
                buf = self.buffers[g.name]
                buf.rewards[t].copy_(g.gather(store["reward"]))
                buf.final_obs[t].copy_(self._obs(g, store["final_obs"]))
                self._track_returns(g, done)

    def _rollout(self):
        use_graph = (self.config.cuda_graph and self.device.type == "cuda" and self.algorithm != "ddpg")
        with torch.no_grad():
            if not use_graph:
                self._collect()
                return
            if self.graph is None:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._collect()  # warm-up: allocator and kernels settle before capture
                torch.cuda.current_stream().wait_stream(side)
                self.graph = torch.cuda.CUDAGraph()
                # the policy noise comes from self.generator: replays must advance its offset
                self.graph.register_generator_state(self.generator)
                with torch.cuda.graph(self.graph):
                    self._collect()
            self.graph.replay()

    def _update_on_policy(self, g) -> dict:
        model, buf = self.models[g.name], self.buffers[g.name]
        with torch.no_grad():
            next_value = model.value(self._obs(g, self.env.store["obs"]).reshape(-1, self.obs_dim)).reshape(self.E, g.n)
            final_values = truncation_values(buf, model.value)
            advantages, returns = gae(buf.rewards, buf.values, next_value, buf.terminated, buf.truncated,
                                      final_values, self.config.gamma, self.config.gae_lambda)
        batch = {"obs": buf.obs.reshape(-1, self.obs_dim),
                 "actions": buf.actions.reshape((-1,) + self.head.act_shape),
                 "logp": buf.logp.reshape(-1), "values": buf.values.reshape(-1),
                 "advantages": advantages.reshape(-1), "returns": returns.reshape(-1)}
        algorithm = ppo if self.algorithm == "ppo" else a2c
        return algorithm.update(model, self.optimizers[g.name], batch, self.config, sync=self.sync)

    # -- DDPG: exploration rollout into the replay buffer, then gradient steps --------------
    def _collect_ddpg(self):
        store = self.env.store
        done = store["done"]
        for _ in range(self.T):
            for g in self.groups:
                agent, rb = self.models[g.name], self.buffers[g.name]
                obs = self._obs(g, store["obs"]).reshape(-1, self.obs_dim)
                rb.last_obs.copy_(obs)
                if rb.size < self.config.learning_starts:
                    rb.noise.uniform_(0, 1, generator=self.generator)
                    actions = self.head.low.reshape(-1) + rb.noise * (self.head.high - self.head.low).reshape(-1)
                else:
                    rb.noise.normal_(0, 1, generator=self.generator)
                    span = (self.head.high - self.head.low).reshape(-1) / 2
                    actions = agent.actor(obs) + rb.noise * self.config.exploration_noise * span
                actions = self.head.to_env(actions.reshape((-1,) + self.head.act_shape)).reshape(-1, self.head.out_dim)
                rb.last_actions.copy_(actions)
                g.scatter(store["action"], actions.reshape((self.E, g.n) + self.head.act_shape))
            self.env.step()
            for g in self.groups:
                rb = self.buffers[g.name]
                ended = done.bool().reshape(self.E, 1, 1)
                next_obs = torch.where(ended, self._obs(g, store["final_obs"]), self._obs(g, store["obs"]))
                term = store["terminated"].float().reshape(self.E, 1).expand(self.E, g.n)
                rb.add(rb.last_obs, rb.last_actions, g.gather(store["reward"]).reshape(-1),
                       next_obs.reshape(-1, self.obs_dim), term.reshape(-1))
                self._track_returns(g, done)

    def _update_ddpg(self, g) -> dict:
        agent, rb = self.models[g.name], self.buffers[g.name]
        actor_opt, critic_opt = self.optimizers[g.name]
        stats = {}
        if rb.size < self.config.learning_starts:
            return stats
        for _ in range(self.config.updates_per_rollout):
            stats = ddpg.update(agent, actor_opt, critic_opt, rb.sample(self.config.batch_size, self.generator),
                                self.config, sync=self.sync)
        return stats

    # -- the loop -------------------------------------------------------------------------
    @property
    def steps_per_iteration(self) -> int:
        """Replica steps per iteration, summed over ranks."""
        return self.E * self.T * self.world_size

    @property
    def is_main(self) -> bool:
        """Only the main rank writes files and reports."""
        return self.rank == 0

    def train(self, callback=None, num_iterations: int | None = None) -> TrainResult:
        """Run until `total_env_steps` (or `num_iterations` more iterations), the target return,
        or `callback(iteration, metrics)` returning False. Returns a TrainResult."""
        config = self.config
        total_iters = max(1, math.ceil(config.total_env_steps / self.steps_per_iteration))
        stop_at = self.iteration + num_iterations if num_iterations is not None else total_iters
        run_dir = Path(config.run_dir) if config.run_dir and self.is_main else None
        start = time.perf_counter()
        window_start, window_steps = start, 0
        stopped_by = "budget"
        metrics = self.history[-1] if self.history else {}
        while self.iteration < stop_at:
            if getattr(config, "anneal_lr", False):
                frac = 1.0 - self.iteration / total_iters
                for opt in self.optimizers.values():
                    for group in opt.param_groups:
                        group["lr"] = frac * config.lr
            if self.algorithm == "ddpg":
                with torch.no_grad():
                    self._collect_ddpg()
                stats = {g.name: self._update_ddpg(g) for g in self.groups}
            else:
                self._rollout()
                stats = {g.name: self._update_on_policy(g) for g in self.groups}
                for norm in self.norms.values():
                    norm.commit(self.sync)
            self._last_stats = stats
            self.iteration += 1
            self.env_steps += self.steps_per_iteration
            window_steps += self.steps_per_iteration
            last = self.iteration >= stop_at
            if self.iteration % config.log_every == 0 or last:
                now = time.perf_counter()
                metrics = self._pull_metrics(stats, window_steps / max(now - window_start, 1e-9), now - start)
                window_start, window_steps = now, 0
                self.history.append(metrics)
                if run_dir is not None:
                    self._append_csv(run_dir / "metrics.csv", metrics)
                if metrics.get("nonfinite"):
                    raise NonFiniteError(
                        f"the loss became NaN or inf at iteration {self.iteration}; training stopped and no "
                        f"checkpoint was written from this state"
                        + (f" (the last good one is in {run_dir})" if run_dir else "")
                        + ". Lower lr, enable normalize_obs, or check the env's rewards for NaN (debug=True).")
                if config.checkpoint_every and run_dir is not None and self.iteration % config.checkpoint_every == 0:
                    self.save(run_dir / "checkpoint.pt")
                stop = callback is not None and callback(self.iteration, metrics) is False
                if self.sync is not None:
                    stop = self.sync.any(stop, self.device)
                if stop:
                    stopped_by = "callback"
                    break
                if config.target_return is not None and self._reached(metrics, config.target_return):
                    stopped_by = "target_return"
                    break
        wall = time.perf_counter() - start
        if run_dir is not None:
            self.save(run_dir / "checkpoint.pt")
        return TrainResult(self.iteration, self.env_steps, wall, stopped_by, metrics, list(self.history))

    def _reached(self, metrics, target) -> bool:
        values = [metrics.get(f"return/{g.name}") for g in self.groups]
        return all(v is not None and not math.isnan(v) and v >= target for v in values)

    def _pull_metrics(self, stats, rate, elapsed) -> dict:
        names = [g.name for g in self.groups]
        device_values, is_stat = [], []
        for n in names:
            device_values += [self.return_sum[n], self.return_count[n]]
            device_values += [stats[n][k] for k in sorted(stats[n])]
            is_stat += [False, False] + [True] * len(stats[n])
        stacked = torch.stack([v.float() for v in device_values])
        if self.sync is not None:  # returns and counts add up over ranks; losses average
            stacked = self.sync.sum(stacked)
            stacked = torch.where(torch.tensor(is_stat, device=stacked.device), stacked / self.world_size, stacked)
        host = stacked.cpu().tolist()
        metrics = {"iteration": self.iteration, "env_steps": self.env_steps, "env_steps_per_s": rate,
                   "time_s": elapsed}
        pos, returns, nonfinite = 0, [], 0.0
        for n in names:
            total, count = host[pos], host[pos + 1]
            pos += 2
            value = total / count if count > 0 else float("nan")
            metrics[f"return/{n}"] = value
            returns.append(value)
            for k in sorted(stats[n]):
                if k == "nonfinite":
                    nonfinite += host[pos]
                else:
                    metrics[f"{k}/{n}"] = host[pos]
                pos += 1
            self.return_sum[n].zero_()
            self.return_count[n].zero_()
        finite = [r for r in returns if not math.isnan(r)]
        metrics["mean_return"] = sum(finite) / len(finite) if finite else float("nan")
        metrics["nonfinite"] = nonfinite > 0
        return metrics

    @staticmethod
    def _append_csv(path: Path, metrics: dict):
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(metrics))
            if new:
                writer.writeheader()
            writer.writerow(metrics)

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
                    out, _ = model(obs)
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
    def _signature(self) -> dict:
        return {"env": self.env.name, "num_agents": self.env.num_agents, "obs_shape": list(self.env.obs_shape),
                "action_space": repr(self.env.action_space), "policies": {g.name: g.ids for g in self.groups},
                "algorithm": self.algorithm, "normalize_obs": bool(self.norms)}

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
        }
        return ckpt.save_atomic(payload, path)

    def load(self, path, *, restore_env: bool = True) -> "Trainer":
        """Resume from a checkpoint written by `save` for the same env and policy map."""
        payload = ckpt.load(path)
        mine, theirs = self._signature(), payload["signature"]
        for key in mine:
            if mine[key] != theirs.get(key):
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
        for n, state in payload["norms"].items():
            self.norms[n].load_state_dict(state)
        self.iteration, self.env_steps = payload["iteration"], payload["env_steps"]
        self.history = list(payload["history"])
        torch.set_rng_state(payload["rng"]["torch"])
        self.generator.set_state(payload["rng"]["generator"])
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
