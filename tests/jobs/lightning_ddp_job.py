"""Launched by tests/test_interop_lightning.py under torchrun (2 processes, gloo, cpu target): each rank
fits RolloutModule on its own env replicas with Lightning's DDP strategy and prints what it saw."""
import os
import sys

import lightning as L
import torch
import torch.distributed as dist

import workbench as wb
from workbench.interop.lightning import RolloutModule

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_tag import SMALL as TAG_SMALL  # noqa: E402


def flat_parameters(trainer):
    return torch.cat([p.detach().reshape(-1) for model in trainer.models.values() for p in model.parameters()])


def same_on_both_ranks(tensor) -> bool:
    seen = [torch.zeros_like(tensor) for _ in range(2)]
    dist.all_gather(seen, tensor)
    return torch.equal(seen[0], seen[1])


def main(root_dir: str):
    rank = int(os.environ["RANK"])
    config = wb.PPOConfig(env="tag_continuous", target="cpu", num_envs=4, rollout_length=8, update_epochs=2,
                          num_minibatches=2, hidden_sizes=(16,), env_params=TAG_SMALL, seed=10 + rank, cpu_threads=1)
    trainer = wb.make_trainer(config, distributed=False)  # Lightning, not the workbench, owns the process group
    initial = flat_parameters(trainer).clone()
    fit = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp", default_root_dir=root_dir,
                    logger=False, enable_progress_bar=False, enable_model_summary=False)
    fit.fit(RolloutModule(trainer, iterations_per_epoch=2))
    final = flat_parameters(trainer)
    print(f"rank {rank}: initial equal {same_on_both_ranks(initial)}; final equal {same_on_both_ranks(final)}; "
          f"changed {not torch.equal(initial, final)}; observations equal "
          f"{same_on_both_ranks(trainer.env.store['obs'].clone())}; steps {fit.global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
