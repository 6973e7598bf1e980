"""Launched by tests/test_interop_lightning.py under torchrun (2 processes, gloo, cpu target): each rank
fits RolloutModule on its own env replicas with Lightning's DDP strategy (the module gives the trainer a
GradientSync over Lightning's process group) and prints what it saw."""
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


def main(root_dir: str, owner: str):
    """owner: who sets up the process group. "lightning": the trainer is made with distributed=False and
    a seed per rank, and the module gives it a GradientSync over Lightning's group; "workbench":
    make_trainer under torchrun joins the group itself (its rank's device, seed and rank 0's weights)."""
    rank = int(os.environ["RANK"])
    config = wb.PPOConfig(env="tag_continuous", target="cpu", num_envs=4, rollout_length=8, update_epochs=2,
                          num_minibatches=2, hidden_sizes=(16,), env_params=TAG_SMALL, cpu_threads=1,
                          seed=10 + rank if owner == "lightning" else 10)
    trainer = wb.make_trainer(config, distributed=False if owner == "lightning" else None)
    assert (trainer.sync is None) == (owner == "lightning")
    initial = flat_parameters(trainer).clone()
    fit = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp", default_root_dir=root_dir,
                    logger=False, enable_progress_bar=False, enable_model_summary=False)
    fit.fit(RolloutModule(trainer, iterations_per_epoch=2))
    assert trainer.sync is not None and trainer.world_size == 2
    final = flat_parameters(trainer)
    report = trainer.history[-1]  # losses and returns, pooled over both ranks
    pooled = torch.tensor([v for k, v in sorted(report.items()) if "/" in k]).nan_to_num()
    print(f"rank {rank}: initial equal {same_on_both_ranks(initial)}; final equal {same_on_both_ranks(final)}; "
          f"changed {not torch.equal(initial, final)}; observations equal "
          f"{same_on_both_ranks(trainer.env.store['obs'].clone())}; steps {fit.global_step}; iterations "
          f"{trainer.iteration}; env steps {trainer.env_steps}; metrics equal {same_on_both_ranks(pooled)}", flush=True)
    dist.barrier()  # no rank tears gloo down while the other still talks to it (an abort at exit otherwise)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "lightning")
