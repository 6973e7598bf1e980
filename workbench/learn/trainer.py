"""The trainer: one policy per agent group learning on the device, reporting through a callback.

One iteration is: collect a rollout (policy step, env step, bookkeeping, V of truncated final
observations: collection.py), GAE, the algorithm's update (algorithms/), the normaliser's statistics.
On a GPU target the whole iteration is captured once in a CUDA graph and replayed (iteration_graph.py);
the same code runs eagerly on the CPU. The trainer knows nothing of any UI: it reports through
`callback(iteration, metrics) -> bool` (False stops) every `log_every` iterations, the only time
metrics cross to the host (metrics.py). Checkpoints: trainer_state.py; what it builds: learners.py.
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from . import checkpoint as ckpt
from . import config as cfg
from . import distributed as dist_mod
from . import fused, interrupts, learners, population, trainer_state
from .algorithms import a2c, ddpg, ppo
from .collection import Collector
from .compiled import MaybeCompiled
from .config_env import check_against_env, check_minibatches, check_rank_by, config_for_env, policy_sizes
from .episode_stats import EpisodeStats
from .iteration_graph import IterationGraph
from .members import MemberSamples
from .metrics import Metrics, RateWindow, append_csv, keep_report, nonfinite_error, weights_finite
from .policies import ActionHead
from .report import reached
from .pretrained import check_policies, load as load_pretrained
from .groups import PolicyMapError, build_groups, resolve_policy_map
from ..runtime import registry
from ..errors import WorkbenchWarning, did_you_mean

ON_POLICY = {"ppo": ppo, "a2c": a2c}


@dataclass
class TrainResult:
    iterations: int
    env_steps: int
    wall_time_s: float
    stopped_by: Literal["budget", "target_return", "callback", "interrupted"]
    metrics: dict
    history: list = field(default_factory=list)  # (at most HISTORY_REPORTS, evenly spaced: metrics.keep_report)
    checkpoint: str | None = None
    warmup_s: float = 0.0  # of wall_time_s: iterations that compiled (torch.compile) and captured the CUDA graph
    signal: Literal["SIGINT", "SIGTERM"] | None = None  # what interrupted the run

    def last_reported(self) -> dict:
        """The last report of `history` whose mean_return is a number, with its `iteration` ({} if no
        episode ended): `metrics` is the final window's, NaN where no episode ended in it (long episodes)."""
        return next((m for m in reversed(self.history) if m.get("mean_return", math.nan) == m.get("mean_return")), {})


def resolve_precision(precision: str, device) -> str:
    """auto -> bf16 on a GPU, fp32 on the CPU (where autocast to bf16 is slower, not faster)."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


class Trainer:
    """Trains one policy per agent group on `env`; a population (config.seeds, config.sweep) trains M
    members of each at once, member k on the env's replicas [k * E / M, (k + 1) * E / M) (members.py).

    policies: {name: agent ids} (default: one policy shared by all agents);
    models: optional {name: nn.Module} replacing the default MLP of that policy.
    pretrained: start config.init_from's policies from their runs' weights (config.frozen's never learn).
    keep_final_obs: whether the env keeps every ended episode's final observation while train() runs
    (Env.keep_final_obs; default: only where its metrics read them, else only where truncated, which is
    all the learners read); the env's own setting before and after.
    The config must agree with the env (name, explicit target, env_params); the one kept and saved
    records all the env's parameters (config_env.config_for_env). config.seed seeds the policies and the
    sampler; the env keeps its own seed and starts afresh (a new env's starts). Training leaves torch's
    global RNG untouched.
    """

    def __init__(self, env, config, policies=None, models=None, distributed: bool | None = None, split=None,
                 pretrained: bool = True):
        cfg.validate(config)
        if config.algorithm not in cfg.ALGORITHMS:
            raise cfg.ConfigError(f"algorithm must be one of {sorted(cfg.ALGORITHMS)}, got {config.algorithm!r}")
        self.env, self.config, self.device, self.algorithm = env, config, env.device, config.algorithm
        self.sync, self.world_size, self.rank = None, 1, split.rank if split is not None else 0
        # (a population under torchrun: this rank's block of members, and the ranks it reports with)
        self.members, self.ranks = population.rank_members(config, split, distributed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed + 1)
        if policies is None and config.policies is not None:
            policies = resolve_policy_map(config.policies, env.definition)
        self.groups = build_groups(policies, env.num_agents, self.device)
        check_policies(config, [g.name for g in self.groups])
        self.frozen = set(config.frozen)  # (they act without learning: pretrained.py)
        self.obs_dim = int(math.prod(env.obs_shape)) if env.obs_shape else 1
        self.M = len(self.members)
        self.E, self.T = env.num_envs, config.rollout_length
        self.E_member = self.E // self.M
        check_against_env(config, env, self.groups, members=self.M)
        env.reset(seed=env.seed)  # (episodes begun before, another trainer's or the user's, are not this run's)
        self.config = config = config_for_env(config, env)  # (what it saves records the env's parameters)
        self.hp = population.Hyper(config, self.members, self.device)
        self.streams = learners.member_streams(self, [m.seed + 1 for m in self.members])
        self.precision = resolve_precision(config.precision, self.device)
        self.obs_dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        self._set_centralised_critics(config.centralised_critic)
        self.head = ActionHead(env.action_space).to(self.device)

        self.models, self.optimizers, self.buffers, self.lr_tensors = {}, {}, {}, []
        self.norms, self.reward_scales = {}, {}  # (the observations' and normalize_reward's, per policy)
        models = dict(models or {})
        unknown = sorted(set(models) - {g.name for g in self.groups})
        if unknown:
            raise PolicyMapError(f"models given for {unknown}, which are not in the policy map")
        learners.build_learners(self, models)
        self.samples = {g.name: MemberSamples(self.streams, self.T, self.E, g.n) for g in self.groups}
        self.fused, self.fused_off = learners.fused_gradients(self)
        # stacked members the narrow kernels do not serve act through the wide step or torch: both read
        # weights laid out as nn.Linear's as fast or faster (members.nn_linear_layout)
        self.rollout_models, self._copy_pairs = learners.rollout_copies(
            self.models, self.precision == "bf16" and self.algorithm in ON_POLICY,
            nn_layout={name for name in self.models if self.M > 1 and name not in self.fused})
        self.chunk_size = {g.name: learners.chunk_size(self, g) for g in self.groups}

        compile_on = bool(getattr(config, "compile", False)) and self.device.type == "cuda"
        self.episode_stats = EpisodeStats(env, self.groups, members=self.M)
        # the learners bootstrap from final observations only where truncated; the env stores others
        # only for metrics that read them (Env.keep_final_obs)
        self.keep_final_obs = bool(self.episode_stats.env_metrics or self.episode_stats.derived)
        self.collector = Collector(self, compile_on)
        self.loss_fn = (MaybeCompiled(ON_POLICY[self.algorithm].chunk_loss, compile_on, f"the {self.algorithm} loss")
                        if self.algorithm in ON_POLICY else None)
        stat_names = ddpg.STATS if self.algorithm == "ddpg" else ON_POLICY[self.algorithm].REPORTED
        self.metrics = Metrics(stat_names, self.groups, self.episode_stats, self.device, self.sync, self.world_size,
                               members=self.members, ranks=self.ranks, rank_by=config.rank_by, frozen=self.frozen)
        self.graph = IterationGraph(self.generator)
        self.iteration, self.env_steps, self.history = 0, 0, []
        self._interrupt: str | None = None
        self._warned_lr_floor = False
        self.threads = learners.measure_threads(self) if self.device.type == "cpu" else None
        self.pretrained = load_pretrained(self) if pretrained and (config.init_from or config.frozen) else []
        if distributed or (distributed is None and dist_mod.launched_by_torchrun()):
            self.join(dist_mod.init(env.target.name))

    def join(self, context):
        """Train data-parallel in the process group of `context` (a distributed.Context): gradients,
        normaliser statistics and reports are reduced over its ranks, every rank starts from rank 0's
        weights and explores with its own policy noise (as every rank's env has its own seed)."""
        self.sync = self.metrics.sync = dist_mod.GradientSync(context)
        self.rank, self.world_size = context.rank, context.world_size
        self.metrics.world_size = context.world_size
        self.generator.manual_seed(dist_mod.rank_seed(self.config.seed + 1, self.rank))
        self.streams = learners.member_streams(self, [dist_mod.rank_seed(self.config.seed + 1, self.rank)])
        for name, samples in self.samples.items():
            samples.streams = self.streams
        for model in self.models.values():
            self.sync.broadcast_parameters(model)
        self.refresh_rollout_copies()

    def _set_centralised_critics(self, names):
        central = tuple(names or ())
        self.central = {g.name for g in self.groups} if "all" in central else set(central)
        names = [g.name for g in self.groups]
        unknown = sorted(self.central - set(names))
        if unknown:
            raise PolicyMapError(f"centralised_critic names {unknown}, which are not policies; the policies are "
                                 f"{names}" + did_you_mean(unknown[0], names))
        if self.central and self.algorithm == "ddpg":
            raise cfg.ConfigError("centralised_critic is for PPO and A2C; DDPG's critic is per agent")
        self.state_dim = self.obs_dim * self.env.num_agents if self.central else 0

    # -- one iteration ------------------------------------------------------------------------
    def run_iteration(self, total_iterations: int | None = None):
        """One training iteration: the learning rate's annealing step, then collection, advantages
        and the algorithm's update (replayed from the CUDA graph once captured); its statistics are
        summed on the device until `pull_metrics`. total_iterations: the annealing horizon (default:
        the budget's)."""
        learners.anneal(self, total_iterations or self.total_iterations())
        body = self._ddpg_iteration if self.algorithm == "ddpg" else self._on_policy_iteration
        updates = self.algorithm != "ddpg" or self.ddpg_learning()  # (DDPG: none while filling its buffers)
        with tf32_while_computing(self.device, self.precision):
            self.graph.run(body, self.why_not_graphed())
        if self.algorithm == "ddpg":
            for name in self.buffers.keys() - self.frozen:
                self.buffers[name].advance_host_size(self.T)
        self.metrics.iterations += int(updates)  # (the update statistics average over these)
        self.iteration += 1
        self.env_steps += self.steps_per_iteration

    def _on_policy_iteration(self):
        self.streams.advance()
        with torch.no_grad():
            self.collector.rollout()
        for policy, g in enumerate(self.groups):
            if g.name in self.frozen:
                continue
            self.collector.compute_gae(g)
            ON_POLICY[self.algorithm].update(
                self.models[g.name], self.optimizers[g.name], self.buffers[g.name].batch(), self.config,
                sync=self.sync, chunk_size=self.chunk_size[g.name], autocast=self.autocast,
                stats=self.metrics.sums[g.name], loss_fn=self.loss_fn, samples=self.samples[g.name], hp=self.hp,
                policy=policy, fused=self.fused.get(g.name))
        for norm in self.norms.values():
            norm.commit(self.sync)

    def _ddpg_iteration(self):
        learning = self.ddpg_learning()
        self.streams.advance()
        ddpg.iteration(self.collector, learning)
        for norm in self.norms.values():
            norm.commit(self.sync)

    def ddpg_learning(self) -> bool:
        """DDPG learns once the replay buffer of every learning policy holds learning_starts transitions."""
        learning = self.buffers.keys() - self.frozen
        return all(self.buffers[name].size >= self.config.learning_starts for name in learning)

    def why_not_graphed(self) -> str | None:
        """Why this iteration cannot replay from a CUDA graph (None: it can)."""
        if not (self.config.cuda_graph and self.device.type == "cuda"):
            return "off"
        if getattr(self.config, "target_kl", None) is not None:
            return "target_kl stops an update's epochs on a value read back from the device"
        if self.algorithm == "ddpg" and not self.ddpg_learning():
            return "collecting random transitions until learning_starts"
        return None

    def autocast(self):
        """The learner's and the rollout's precision context."""
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def refresh_rollout_copies(self):
        """Copy every parameter and buffer of the learners into the rollout's bf16 copies (one kernel)."""
        if self._copy_pairs[0]:
            torch._foreach_copy_(*self._copy_pairs)

    # -- the loop -------------------------------------------------------------------------------
    @property
    def steps_per_iteration(self) -> int:
        """One member's replica steps per iteration (what the budget counts), summed over ranks."""
        return self.E_member * self.T * self.world_size

    @property
    def is_main(self) -> bool:
        """Only the main rank writes files and reports."""
        return self.rank == 0

    def total_iterations(self) -> int:
        """The iteration at which env_steps reaches total_env_steps (counted from the env-steps done)."""
        left = max(0, self.config.total_env_steps - self.env_steps)
        return max(1, self.iteration + math.ceil(left / self.steps_per_iteration))

    def train(self, callback=None, num_iterations: int | None = None) -> TrainResult:
        """Run until `total_env_steps` (or `num_iterations` more iterations), the target return,
        `callback(iteration, metrics)` (at each report: every `log_every` iterations and the last)
        returning False, or Ctrl-C / SIGTERM (which finish the iteration, save a checkpoint into
        run_dir and return stopped_by="interrupted"). A callback with a `phase(description)` method is
        also told when the first iteration compiles and when it is done (`progress.ProgressBar`)."""
        config = self.config
        total_iters = self.total_iterations()
        stop_at = self.iteration + num_iterations if num_iterations is not None else total_iters
        run_dir = Path(config.run_dir) if config.run_dir and self.is_main else None
        # every rank of a distributed run takes part in writing its checkpoint (rank 0 writes the file)
        save_dir = (Path(config.run_dir) if config.run_dir and (self.is_main or self.ranks is not None
                                                                or self.sync is not None) else None)
        callbacks = [callback] if callback is not None else []
        announce = getattr(callback, "phase", None)
        start = time.perf_counter()
        window, warmup, stopped_by = RateWindow(start), 0.0, "budget"
        metrics = self.history[-1] if self.history else {}
        earlier = float(metrics.get("time_s", 0.0))  # a continued or resumed run's clock goes on
        earlier = earlier if math.isfinite(earlier) else 0.0
        last_save = start
        with interrupts.caught(self):  # (until the last checkpoint is saved: a Ctrl-C then waits for it)
            env_keeps_final_obs, self.env.keep_final_obs = self.env.keep_final_obs, self.keep_final_obs
            try:
                while self.iteration < stop_at:
                    compiling = self.graph.state == "eager-first" and (
                        getattr(self.loss_fn, "compiled", None) is not None or bool(self.fused))
                    if announce is not None and compiling:
                        announce("first iteration: compiling (compile=false skips it)" if not self.fused
                                 else "first iteration: fused kernels compile once per shape (then cached)")
                    warming = self.device.type == "cuda" and self.graph.warming() and self.why_not_graphed() is None
                    iteration_start = time.perf_counter()
                    self.run_iteration(total_iters)
                    if warming:
                        torch.cuda.synchronize()
                        warmup += time.perf_counter() - iteration_start
                    if announce is not None and compiling:
                        announce("training")
                    window.add(self.steps_per_iteration * self.M, iteration_start, time.perf_counter(), warming)
                    due = save_dir is not None and time.perf_counter() - last_save >= AUTO_CHECKPOINT_S
                    interrupted, due = self._agree(self._interrupt is not None, due)  # (one collective for both)
                    if self.iteration % config.log_every == 0 or self.iteration >= stop_at or interrupted:
                        now = time.perf_counter()
                        metrics = self.pull_metrics(window.pull(now), earlier + now - start)
                        stopped_by = self._report(metrics, callbacks, run_dir) or stopped_by
                        if stopped_by != "budget":
                            break
                    if interrupted or (self._interrupt is not None and self.sync is None and self.ranks is None):
                        stopped_by = "interrupted"  # (a signal during the report above: nothing left unlogged)
                        break
                    last_save = _save_if_due(self, save_dir, run_dir, last_save, due)
            except Exception as exc:
                raise _kept_after_callback_error(self, exc, save_dir)
            finally:
                self.env.keep_final_obs = env_keeps_final_obs
            wall = time.perf_counter() - start
            saved = self.save(save_dir / "checkpoint.pt") if save_dir is not None else None
        return TrainResult(self.iteration, self.env_steps, wall, stopped_by, metrics, list(self.history),
                           str(saved) if saved else None, warmup, self._interrupt if stopped_by == "interrupted"
                           else None)

    def _report(self, metrics: dict, callbacks: list, run_dir) -> str | None:
        """Record a report, check it, hand it to the callbacks; returns why training stops, if it does."""
        keep_report(self.history, metrics, self.config.log_every, self.M)
        if run_dir is not None:
            _write_report(run_dir / "metrics.csv", metrics)
        if metrics.get("nonfinite"):
            raise nonfinite_error("the loss", self.iteration, run_dir, self)
        lr = "critic_lr" if self.algorithm == "ddpg" else "lr"
        self.metrics.warn_divergence(metrics, (lr, getattr(self.config, lr)),
                                     "critic_loss" if lr == "critic_lr" else "value_loss", self.head.kind != "gaussian")
        stop = self._agree(_ask_callbacks(callbacks, self.iteration, metrics))
        if stop:
            return "callback"
        if self.config.target_return is not None and reached(metrics, self.config.target_return, self.frozen):
            return "target_return"
        return None

    def _agree(self, *flags: bool):
        """Each flag set on any rank (every rank acts together), all in one collective; the flags
        themselves in a single process. One flag: a bool, several: a list."""
        ranks = self.sync or self.ranks
        agreed = ranks.any(flags, self.device) if ranks is not None else list(flags)
        return agreed[0] if len(flags) == 1 else agreed

    def pull_metrics(self, rate: float = float("nan"), elapsed: float = float("nan")) -> dict:
        """One host read of the update statistics (averaged over the iterations since the last pull
        and over ranks) and of the episode sums (returns per policy, lengths, env metrics)."""
        base = {"iteration": self.iteration, "env_steps": self.env_steps, "env_steps_per_s": rate, "time_s": elapsed}
        learning = not (self.algorithm == "ddpg" and self.metrics.iterations == 0)  # (not while DDPG fills buffers)
        return self.metrics.pull(base, learning, learners.learning_rates(self))

    # -- acting and checkpoints -----------------------------------------------------------------
    def act(self, deterministic: bool = True, generator: torch.Generator | None = None, streams=None) -> torch.Tensor:
        """Write the policies' actions for the env's current observations into its action array and return it
        (action: [E, A] or [E, A, D]): each distribution's mode, or a sample drawn from `streams` (a
        MemberStreams) or with `generator` (None: torch's global one)."""
        return self.collector.act(deterministic, generator, streams)

    def save(self, path) -> Path | None:
        """Atomically write policies, optimisers, normaliser, RNG, counters and env state
        (on the main rank only; other ranks return None)."""
        return trainer_state.save(self, path)

    def load(self, path, *, restore_env: bool = True) -> "Trainer":
        """Resume from a checkpoint written by `save` for the same env and policy map."""
        trainer_state.restore(self, ckpt.load(path), path, restore_env)
        return self


@contextlib.contextmanager
def tf32_while_computing(device, precision: str):
    """TF32 matmuls (fp32 ones, beside bf16 autocast's) for tf32 and bf16 runs on GPUs, only while a
    trainer computes: torch's flags are the whole process's, so the user's stand outside."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision in ("tf32", "bf16")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


WARM_UP_IN_BACKGROUND = True
AUTO_CHECKPOINT_S = 600.0  # checkpoint_every 0: a run killed hard loses at most this much training


def _save_if_due(trainer, save_dir, run_dir, last_save: float, time_due: bool) -> float:
    """Save a checkpoint after this iteration where checkpoint_every says so (0: where `time_due`,
    every rank's agreement that AUTO_CHECKPOINT_S have passed since the last save); returns when the
    last save was."""
    every = trainer.config.checkpoint_every
    if save_dir is None or not (trainer.iteration % every == 0 if every else time_due):
        return last_save
    if not weights_finite(trainer.models.values()):  # (between reports no loss is read)
        raise nonfinite_error("the weights", trainer.iteration, run_dir, trainer)
    trainer.save(save_dir / "checkpoint.pt")
    return time.perf_counter()


def _ask_callbacks(callbacks, iteration: int, metrics: dict) -> bool:
    """Whether a callback said stop (False). Each gets its own copy of the report: the history, the
    target_return check and the result read the trainer's. A callback's exception is marked, so that
    train keeps the finished iteration's checkpoint before passing it on."""
    try:
        return any([c(iteration, copy.deepcopy(metrics)) is False for c in callbacks])
    except Exception as exc:
        exc.workbench_failed_after_iteration = "a callback"
        raise


def _write_report(path: Path, metrics: dict) -> None:
    """metrics.csv's new rows; a failed write (a full disk, a folder made read-only) is marked as a
    callback's exception is, so that the finished iteration's checkpoint is saved first."""
    try:
        append_csv(path, metrics)
    except OSError as exc:
        exc.workbench_failed_after_iteration = f"writing {path.name}"
        raise


def _kept_after_callback_error(trainer, exc: Exception, save_dir):
    """`exc`, after saving the checkpoint of the iteration it followed where a callback or the write
    of metrics.csv raised it (a single process: other ranks are not at a save)."""
    failed = getattr(exc, "workbench_failed_after_iteration", None)
    if failed and save_dir is not None and trainer.sync is None \
            and trainer.ranks is None:
        saved = trainer.save(save_dir / "checkpoint.pt")
        warnings.warn(f"{failed} raised {type(exc).__name__} after iteration {trainer.iteration}: that iteration's "
                      f"checkpoint is saved ({saved}); resume continues the run", WorkbenchWarning, stacklevel=3)
    return exc


def warm_up_in_background(triton: bool):
    """Create the CUDA context and warm Triton (fused.warm_up) on a thread while make_trainer builds
    the env, whose numba kernels load meanwhile: both are start-up costs, the first mostly in the
    driver. torch's lazy initialisation is locked, so the env's first CUDA call waits for it."""
    def warm():
        try:
            if dist_mod.launched_by_torchrun():  # (a thread's current device is its own: this rank's GPU, not GPU 0)
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.init()
            if triton:
                fused.warm_up()
        except Exception:  # noqa: BLE001 - (the main thread then meets the same error, and reports it)
            pass
    threading.Thread(target=warm, name="workbench-gpu-warm-up", daemon=True).start()


def make_trainer(config, policies=None, models=None, env=None, distributed: bool | None = None,
                 pretrained: bool = True) -> Trainer:
    """Build the env named in `config` (on its target) and a trainer for it. Under torchrun
    (or distributed=True) this joins the process group first, so the env lands on this rank's GPU.
    pretrained: load config.init_from's weights (False where a checkpoint is restored next)."""
    from ..runtime.check import check_new_env
    from ..runtime.env import Env, best_target
    # parsed once: the policy map and rank_by are checked against it before anything compiles
    definition = env.definition if env is not None else registry.definition(config.env, **(config.env_params or {}))
    target = best_target(definition) if config.target == "auto" else config.target
    if target != "cpu" and WARM_UP_IN_BACKGROUND and torch.cuda.is_available():
        warm_up_in_background(getattr(config, "fused_kernels", False))
    seed = config.seed
    members, split = population.size(config), None
    if members > 1:
        learners.refuse_models(models)  # (before anything compiles)
    if distributed or (distributed is None and dist_mod.launched_by_torchrun()):
        context = dist_mod.init(target)
        dist_mod.check_same_config(context, {k: v for k, v in cfg.to_dict(config).items()
                                             if k not in ("progress", "run_dir")})  # (rank 0's folder is the run's)
        if members > 1:  # a population: each rank trains its block of members, seeded as they are
            start, stop = dist_mod.member_slice(members, context)
            seed, members, split = config.seed + start, stop - start, context
        else:
            seed = dist_mod.rank_seed(config.seed, context.rank)
        distributed = True
    if policies is None:
        policies = (resolve_policy_map(config.policies, definition) if config.policies is not None
                    else definition.agent_groups())
    if policies is None or isinstance(policies, dict):  # (named before anything compiles)
        check_rank_by(config, definition, policies if policies is not None else ["shared"])
        check_policies(config, list(policies) if policies is not None else ["shared"])
        check_minibatches(config, policy_sizes(definition, policies))
    if env is None:
        check_new_env(definition, config.env_params or {})
        env = Env(definition, num_envs=config.num_envs * members, target=target, seed=seed,
                  replicas_per_seed=config.num_envs if members > 1 else None)
    return Trainer(env, config, policies=policies, models=models, distributed=distributed and split is None,
                   split=split, pretrained=pretrained)
