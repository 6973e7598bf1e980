"""A LightningModule over a workbench Trainer (PPO or A2C): each Lightning step is one workbench
iteration, `Trainer.run_iteration()` (the rollout, GAE and the algorithm's own update, with its
anneal_lr, target_kl, learner_memory_gb chunking, precision and, on a GPU, CUDA graph), so
Lightning's loggers, checkpoint callbacks and DDP strategy apply to the project's algorithms.

One Lightning epoch is `iterations_per_epoch` iterations and `global_step` counts iterations.
Metrics are pulled to the host every `log_every` iterations of the config (and at an epoch's end)
and logged; training stops at the config's total_env_steps or target_return, as Trainer.train does.
Under the DDP strategy the trainer averages gradients over Lightning's process group itself.
"""
from __future__ import annotations

import math
import time

import torch

from ..learn import distributed as dist_mod
from ..extras import require
from ..learn.metrics import keep_report, nonfinite_error
from . import AdapterError

require("lightning", "lightning", "workbench.interop.lightning")
import lightning as L  # noqa: E402
from lightning.fabric.utilities.optimizer import _optimizers_to_device  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy  # noqa: E402
from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher  # noqa: E402
from lightning.pytorch.utilities import rank_zero_info  # noqa: E402

# config fields of Trainer.train's own loop, and what does their job under Lightning
TRAIN_LOOP_ONLY = {"run_dir": "L.Trainer(default_root_dir=...) and its ModelCheckpoint callback",
                   "checkpoint_every": "a ModelCheckpoint(every_n_train_steps=...) callback",
                   "progress": "L.Trainer(enable_progress_bar=True)"}


class RolloutModule(L.LightningModule):
    """trainer: a workbench Trainer (its env, policies and optimisers). iterations_per_epoch:
    workbench iterations per Lightning epoch."""

    def __init__(self, trainer, iterations_per_epoch: int = 10):
        super().__init__()
        if trainer.algorithm not in ("ppo", "a2c"):
            raise AdapterError(f"RolloutModule trains PPO or A2C; this trainer runs {trainer.algorithm!r}")
        config = trainer.config
        for name, fix in TRAIN_LOOP_ONLY.items():
            if getattr(config, name):
                raise AdapterError(f"{type(config).__name__}.{name}={getattr(config, name)!r} is for Trainer.train; "
                                   f"RolloutModule cannot honour it: leave it unset and use {fix}")
        if int(iterations_per_epoch) < 1:
            raise AdapterError(f"iterations_per_epoch must be >= 1, got {iterations_per_epoch!r}")
        self.trainer_ = trainer
        self.policies = torch.nn.ModuleDict(trainer.models)
        self.iterations_per_epoch = int(iterations_per_epoch)
        self.automatic_optimization = False
        self.save_hyperparameters({"env": trainer.env.name, "num_envs": trainer.env.num_envs,
                                   **{k: v for k, v in vars(config).items()
                                      if isinstance(v, (int, float, str, bool))}})

    @property
    def env_device(self) -> torch.device:
        return self.trainer_.env.store["obs"].device

    def __getstate__(self):
        # (Lightning's spawned strategies pickle the module before setup() could refuse them: refused here)
        raise AdapterError("a RolloutModule holds this process's workbench trainer, its env and their device "
                           "memory: it cannot be pickled or copied, so Lightning's spawned strategies (ddp_spawn) "
                           "cannot take it; use strategy='ddp' with one process per device started by torchrun or "
                           "from a script")

    def setup(self, stage: str):
        strategy, precision = self.trainer.strategy, str(self.trainer.precision)
        if precision not in ("32-true", "32"):
            raise AdapterError(f"L.Trainer(precision={precision!r}): RolloutModule runs in the workbench config's "
                               f"precision; leave Lightning's at 32-true and set the config's precision "
                               f"(fp32, tf32 or bf16) instead")
        if not isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)) \
                or isinstance(strategy.launcher, _MultiProcessingLauncher):
            raise AdapterError(f"L.Trainer(strategy={type(strategy).__name__}): RolloutModule trains this process's "
                               f"trainer on one device, or under strategy='ddp' one process per device launched by "
                               f"torchrun or from a script (not spawned or forked)")
        root, env = strategy.root_device, self.env_device
        if root.type != env.type or (env.type == "cuda" and root.index != env.index):
            raise AdapterError(f"Lightning runs this process on {root} but the trainer's env is on {env}: choose the "
                               f"accelerator of the env's target (accelerator='cpu' for target cpu, 'gpu' for cuda); "
                               f"under torchrun, wb.make_trainer(config) puts each rank's env on that rank's GPU")
        self._restore_device()
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            self._join_process_group()

    def _join_process_group(self):
        """The trainer's own GradientSync over Lightning's process group, as its update takes several
        backward passes and optimiser steps per iteration where DDP's reducer expects one backward per
        forward (Lightning prepares that reducer only in manual_backward, which this module never calls)."""
        dist, trainer = torch.distributed, self.trainer_
        seeds = [None] * dist.get_world_size()
        dist.all_gather_object(seeds, trainer.env.seed)
        if len(set(seeds)) < len(seeds):
            raise AdapterError(f"the ranks' envs have the seeds {seeds}: identical replicas add nothing; give each "
                               f"rank its own (config seed=SEED + rank), or make the trainer with "
                               f"wb.make_trainer(config) under torchrun, which seeds each rank's env")
        if trainer.sync is None:
            context = dist_mod.Context(dist.get_rank(), self.trainer.local_rank, dist.get_world_size(),
                                       dist.get_backend())
            trainer.join(context)
        elif trainer.world_size != dist.get_world_size():
            raise AdapterError(f"the trainer was made for {trainer.world_size} ranks, Lightning runs "
                               f"{dist.get_world_size()}")

    def cpu(self):
        """The parameters are the trainer's policies: they stay on the env's device (the rollout's
        copies and a captured CUDA graph read their memory), also when Lightning's teardown moves
        its module to the CPU at the end of a fit."""
        return self

    def _restore_device(self):
        """Lightning's teardown moves the optimisers' state to the CPU: back to the env's device, and
        the trainer's CUDA graph, which read the old tensors, is captured again."""
        device = self.env_device
        optimizers = list(self.trainer_.optimizers.values())
        if all(t.device == device for o in optimizers for state in o.state.values()
               for t in state.values() if torch.is_tensor(t)):
            return
        _optimizers_to_device(optimizers, device)
        self.trainer_.graph.invalidate()

    def on_fit_end(self):
        self._restore_device()

    def on_load_checkpoint(self, checkpoint):
        raise AdapterError("fit(ckpt_path=...) would restore the policies and optimisers but not the trainer's "
                           "iteration count, normaliser or env: resume with trainer.save(path) and trainer.load(path), "
                           "then fit a new RolloutModule (a Lightning checkpoint's weights load with "
                           "module.load_state_dict(torch.load(ckpt)['state_dict']))")

    def train_dataloader(self):
        return range(self.iterations_per_epoch)  # a step's work is an iteration: nothing crosses the prefetch

    def configure_optimizers(self):
        return [self.trainer_.optimizers[name] for name in self.policies]

    def on_train_start(self):
        self._started = self._window_start = time.perf_counter()
        self._window_steps = 0
        env = self.trainer_.env  # the trainer's final-observation setting while it trains, as Trainer.train
        self._env_keeps_final_obs, env.keep_final_obs = env.keep_final_obs, self.trainer_.keep_final_obs

    def on_train_end(self):
        self._give_env_its_setting()

    def _give_env_its_setting(self):
        kept = self.__dict__.pop("_env_keeps_final_obs", None)
        if kept is not None:
            self.trainer_.env.keep_final_obs = kept

    def configure_callbacks(self):
        # a fit that raises calls no module hook, only the callbacks' on_exception
        return [_EnvSettingOnException()]

    def training_step(self, batch, batch_idx):
        trainer, config = self.trainer_, self.trainer_.config
        trainer.run_iteration()
        self._window_steps += trainer.steps_per_iteration * trainer.M  # (every member's replicas, as Trainer.train)
        # Lightning counts global_step (max_steps, checkpoint names) in its optimiser wrappers' steps;
        # the algorithm's update steps the trainer's optimisers directly: one iteration, one step
        progress = self.trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
        progress.increment_ready()
        progress.increment_completed()
        budget = trainer.iteration >= trainer.total_iterations()
        if trainer.iteration % config.log_every == 0 or batch_idx + 1 == self.iterations_per_epoch or budget:
            self._log_metrics()
        if budget:
            if self.trainer.global_step < self.trainer.estimated_stepping_batches:
                rank_zero_info(f"total_env_steps={config.total_env_steps} reached after {trainer.iteration} "
                               f"iterations: training stops")
            self.trainer.should_stop = True

    def _log_metrics(self):
        trainer, config = self.trainer_, self.trainer_.config
        now = time.perf_counter()
        metrics = trainer.pull_metrics(self._window_steps / max(now - self._window_start, 1e-9), now - self._started)
        self._window_start, self._window_steps = now, 0
        keep_report(trainer.history, metrics, config.log_every, trainer.M)
        if metrics["nonfinite"]:
            raise nonfinite_error("the loss", trainer.iteration, None, trainer)
        # (NaN where no episode ended in the window: not logged, so the bar keeps the last known value)
        logged = {k: float(v) for k, v in metrics.items() if k not in ("iteration", "time_s", "nonfinite")
                  and isinstance(v, (int, float)) and math.isfinite(v)}
        if "mean_return" in logged:
            self.log("mean_return", logged.pop("mean_return"), on_step=True, on_epoch=False, prog_bar=True)
        self.log_dict(logged, on_step=True, on_epoch=False)
        returns = [metrics[f"return/{name}"] for name in self.policies]
        if config.target_return is not None and all(not math.isnan(r) and r >= config.target_return
                                                    for r in returns):
            rank_zero_info(f"target_return={config.target_return} reached at iteration {trainer.iteration}")
            self.trainer.should_stop = True


class _EnvSettingOnException(L.Callback):
    """Gives the env its own keep_final_obs back when a fit raises (on_train_end runs only when it ends)."""

    def on_exception(self, trainer, pl_module, exception):
        pl_module._give_env_its_setting()
