"""A LightningModule whose data are the trainer's device rollouts and whose training_step is the
project's own PPO/A2C loss (workbench.algorithms.ppo.loss / a2c.loss), so Lightning's loggers,
checkpoint callbacks and strategies apply to the workbench's algorithms.

One Lightning epoch = `iterations_per_epoch` workbench iterations. Per iteration the data stream
collects one rollout on the device (`Trainer.rollout_batches()`: {policy: GAE'd Batch [B, ...]})
and yields its minibatches: PPO update_epochs x num_minibatches of them, A2C the whole batch; each
training_step takes one optimiser step per policy (manual optimisation: one optimiser per policy).
The loss is the algorithms' own: ppo.loss(model, minibatch, config, count) -> (loss, stats),
a2c.loss(model, batch, config, count) -> (loss, stats).
"""
from __future__ import annotations

import torch

from ..extras import require
from . import AdapterError

require("lightning", "lightning", "workbench.interop.lightning")
import lightning as L  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402


class RolloutStream(IterableDataset):
    """Minibatches {policy: dict of [b, ...] device tensors} of fresh rollouts, `iterations` rollouts long."""

    def __init__(self, trainer, iterations: int):
        self.trainer, self.iterations = trainer, iterations

    def __iter__(self):
        trainer, config = self.trainer, self.trainer.config
        for _ in range(self.iterations):
            batches = trainer.rollout_batches()
            if trainer.algorithm == "a2c":
                yield {name: batch.take(slice(None)) for name, batch in batches.items()}
                continue
            for _epoch in range(config.update_epochs):
                order = {name: torch.randperm(b.size, device=trainer.device, generator=trainer.generator)
                         for name, b in batches.items()}
                for m in range(config.num_minibatches):
                    yield {name: b.take(order[name][m * (b.size // config.num_minibatches):
                                                    (m + 1) * (b.size // config.num_minibatches)])
                           for name, b in batches.items()}


class RolloutModule(L.LightningModule):
    """trainer: a workbench Trainer (its env, policies, optimisers and rollout buffers).
    iterations_per_epoch: rollouts per Lightning epoch."""

    def __init__(self, trainer, iterations_per_epoch: int = 10):
        super().__init__()
        if trainer.algorithm not in ("ppo", "a2c"):
            raise AdapterError(f"RolloutModule trains PPO or A2C; this trainer runs {trainer.algorithm!r}")
        self.trainer_ = trainer
        self.policies = torch.nn.ModuleDict(trainer.models)
        self.iterations_per_epoch = int(iterations_per_epoch)
        self.automatic_optimization = False
        self.save_hyperparameters({"env": trainer.env.name, "num_envs": trainer.env.num_envs,
                                   **{k: v for k, v in vars(trainer.config).items()
                                      if isinstance(v, (int, float, str, bool))}})

    def train_dataloader(self):
        return DataLoader(RolloutStream(self.trainer_, self.iterations_per_epoch), batch_size=None)

    def configure_optimizers(self):
        return [self.trainer_.optimizers[name] for name in self.policies]

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # rollouts are made on the env's device and stay there

    def training_step(self, batch, batch_idx):
        from ..algorithms import a2c, ppo
        from ..rollout import masked_mean_std
        algorithm = ppo if self.trainer_.algorithm == "ppo" else a2c
        config = self.trainer_.config
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
        losses = []
        for name, model in self.policies.items():
            mb = dict(batch[name])
            count = mb["mask"].sum().clamp_min(1)
            if config.normalize_advantages:
                mean, std = masked_mean_std(mb["advantages"], mb["mask"], count)
                mb["advantages"] = (mb["advantages"] - mean) / (std + 1e-8)
            loss, stats = algorithm.loss(model, mb, config, count)
            self.log_dict({f"{k}/{name}": v for k, v in stats.items()}, on_step=True, prog_bar=False)
            losses.append(loss)
        # One backward of the policies' summed losses: their parameters are disjoint, so each gets the
        # gradient of its own loss, and DDP (which hooks one backward per step) averages them all.
        total = torch.stack(losses).sum()
        for optimizer in optimizers:
            optimizer.zero_grad()
        self.manual_backward(total)
        for optimizer in optimizers:
            if config.max_grad_norm > 0:
                self.clip_gradients(optimizer, gradient_clip_val=config.max_grad_norm, gradient_clip_algorithm="norm")
            optimizer.step()
        total = total.detach()
        self.log("loss", total, prog_bar=True)
        return total

    def on_train_epoch_end(self):
        env = self.trainer_.env
        returns = env.store["last_return"]
        self.log("last_return", float(returns.float().mean()), prog_bar=True)
