"""RolloutModule: Lightning's Trainer fits the project's PPO on device rollouts (tiny Tag, cpu target)."""
import pytest

pytest.importorskip("lightning")
from workbench.interop.lightning import RolloutModule  # noqa: E402


def test_lightning_fits_tag_with_the_projects_ppo(tmp_path):
    import lightning as L
    import torch

    import workbench as wb
    from test_tag import SMALL as TAG_SMALL
    config = wb.PPOConfig(env="tag_continuous", target="cpu", num_envs=4, rollout_length=8, update_epochs=2,
                          num_minibatches=2, hidden_sizes=(16,), env_params=TAG_SMALL, seed=0)
    trainer = wb.make_trainer(config)
    before = {k: v.clone() for k, v in trainer.models["taggers"].state_dict().items()}
    module = RolloutModule(trainer, iterations_per_epoch=2)
    fit = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
                    enable_progress_bar=False, enable_model_summary=False)
    fit.fit(module)
    assert fit.global_step == 2 * 2 * 2 * 2  # iterations x epochs x minibatches, an optimiser step per policy
    after = trainer.models["taggers"].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert list(tmp_path.glob("**/*.ckpt")), "Lightning's checkpoint callback wrote a checkpoint"



def test_lightning_ddp_keeps_the_ranks_policies_identical(tmp_path):
    """Two torchrun ranks, each on its own replicas (other seeds, other initial weights): Lightning's DDP
    strategy starts them from rank 0's weights and averages every gradient, so they end identical."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    job = Path(__file__).resolve().parent / "jobs" / "lightning_ddp_job.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(job), str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for rank in (0, 1):
        assert (f"rank {rank}: initial equal False; final equal True; changed True; observations equal False; "
                f"steps 16") in out.stdout, out.stdout
