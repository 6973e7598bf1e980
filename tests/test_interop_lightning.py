"""RolloutModule: Lightning's Trainer drives the workbench trainer's own iterations (tiny Tag, cpu target).

A Lightning step is one `Trainer.run_iteration()`: the tests compare N Lightning steps with
`Trainer.train(num_iterations=N)` of a same-seed twin (one thread, so both round alike)."""
import pytest

pytest.importorskip("lightning")
from workbench.interop import AdapterError  # noqa: E402
from workbench.interop.lightning import RolloutModule  # noqa: E402


def tag_config(**changes):
    import workbench as wb
    from test_tag import SMALL as TAG_SMALL
    algorithm = changes.pop("algorithm", "ppo")
    base = dict(env="tag_continuous", target="cpu", num_envs=4, rollout_length=8, hidden_sizes=(16,),
                env_params=TAG_SMALL, seed=0, cpu_threads=1)
    if algorithm == "ppo":
        return wb.PPOConfig(**{**base, "update_epochs": 2, "num_minibatches": 2, **changes})
    return wb.A2CConfig(**{**base, **changes})


def fit(module, root, ckpt_path=None, **kwargs):
    import lightning as L
    kwargs = {"max_epochs": 1, "accelerator": "cpu", "devices": 1, "default_root_dir": root, "logger": False,
              "enable_progress_bar": False, "enable_model_summary": False, **kwargs}
    trainer = L.Trainer(**kwargs)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


def flat_parameters(trainer):
    import torch
    return torch.cat([p.detach().reshape(-1) for model in trainer.models.values() for p in model.parameters()])


def adam_steps(trainer) -> set:
    """The optimiser steps each policy's Adam (a MemberAdam of one member) has taken."""
    return {int(opt.steps) for opt in trainer.optimizers.values()}


def test_lightning_fits_tag_with_the_projects_ppo(tmp_path):
    import torch

    import workbench as wb
    trainer = wb.make_trainer(tag_config())
    before = flat_parameters(trainer).clone()
    lightning = fit(RolloutModule(trainer, iterations_per_epoch=2), tmp_path, max_epochs=2)
    assert lightning.global_step == trainer.iteration == 4  # a Lightning step is a workbench iteration
    assert not torch.equal(before, flat_parameters(trainer))
    assert list(tmp_path.glob("**/*.ckpt")), "Lightning's checkpoint callback wrote a checkpoint"
    # log_every=1: a metrics pull per iteration, logged through Lightning and kept in the trainer's history
    assert [m["iteration"] for m in trainer.history] == [1, 2, 3, 4]
    logged = lightning.callback_metrics
    assert {"mean_return", "value_loss/taggers", "return/runners", "env_steps"} <= set(logged)
    assert float(logged["env_steps"]) == trainer.env_steps


def test_a_bf16_config_trains_under_lightning_on_the_cpu(tmp_path):
    """The update runs under the trainer's autocast (the module computed its loss without one: bf16
    observations met fp32 layers, 'mat1 and mat2 must have the same dtype')."""
    import torch

    import workbench as wb
    trainer = wb.make_trainer(tag_config(precision="bf16"))
    assert trainer.buffers["taggers"].obs.dtype == torch.bfloat16
    before = flat_parameters(trainer).clone()
    fit(RolloutModule(trainer, iterations_per_epoch=2), tmp_path)
    after = flat_parameters(trainer)
    assert trainer.iteration == 2
    assert torch.isfinite(after).all() and not torch.equal(before, after)


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_each_lightning_step_trains_on_one_rollout_with_the_algorithms_own_update(tmp_path, algorithm):
    """N Lightning steps = N iterations of Trainer.train: every rollout trained on once, with its own
    observations (A2C's runners have a centralised critic: its joint state comes from the same rollout)."""
    import torch

    import workbench as wb
    changes = {"algorithm": algorithm}
    if algorithm == "a2c":
        changes["centralised_critic"] = ("runners",)
    trainer, twin = wb.make_trainer(tag_config(**changes)), wb.make_trainer(tag_config(**changes))
    assert torch.equal(flat_parameters(trainer), flat_parameters(twin))
    flags, run_iteration = [], trainer.run_iteration
    trainer.run_iteration = lambda: (flags.append(trainer.env.keep_final_obs), run_iteration())
    trainer.env.keep_final_obs = False  # the user's own; the trainer's is True (a metric reads final observations)
    lightning = fit(RolloutModule(trainer, iterations_per_epoch=3), tmp_path)
    assert flags == [True] * 3 and not trainer.env.keep_final_obs  # the trainer's while it trains, then the env's
    twin.train(num_iterations=3)
    per_iteration = trainer.E * trainer.T
    assert lightning.global_step == trainer.iteration == twin.iteration == 3
    assert trainer.env_steps == twin.env_steps == 3 * per_iteration
    assert adam_steps(trainer) == adam_steps(twin) == {3 * 2 * 2 if algorithm == "ppo" else 3}
    torch.testing.assert_close(flat_parameters(trainer), flat_parameters(twin), rtol=0, atol=1e-6)


def test_a_fit_that_raises_gives_the_env_its_own_final_obs_setting(tmp_path):
    """Lightning calls no module hook when a fit raises: the module's callback restores the setting."""
    import workbench as wb
    trainer = wb.make_trainer(tag_config())
    flags, run_iteration = [], trainer.run_iteration

    def second_fails():
        flags.append(trainer.env.keep_final_obs)
        if len(flags) == 2:
            raise RuntimeError("the second iteration fails")
        run_iteration()
    trainer.run_iteration = second_fails
    trainer.env.keep_final_obs = False
    with pytest.raises(RuntimeError, match="the second iteration fails"):
        fit(RolloutModule(trainer, iterations_per_epoch=3), tmp_path)
    assert flags == [True, True] and not trainer.env.keep_final_obs


def test_anneal_lr_and_target_kl_are_the_trainers(tmp_path):
    import torch

    import workbench as wb
    # a budget of 10 iterations, of which 3 run; a target_kl every update's first epoch exceeds
    config = tag_config(update_epochs=3, target_kl=1e-9, total_env_steps=10 * 4 * 8)
    assert config.anneal_lr
    trainer, twin = wb.make_trainer(config), wb.make_trainer(config)
    fit(RolloutModule(trainer, iterations_per_epoch=3), tmp_path)
    twin.train(num_iterations=3)
    annealed = config.lr * (1 - 2 / 10)  # the third iteration's rate: 2 of 10 iterations done
    rates = [float(group["lr"]) for opt in [*trainer.optimizers.values(), *twin.optimizers.values()]
             for group in opt.param_groups]
    assert rates == pytest.approx([annealed] * len(rates))
    assert adam_steps(trainer) == adam_steps(twin) == {3 * 2}  # one epoch of 2 minibatches per iteration, not 3
    torch.testing.assert_close(flat_parameters(trainer), flat_parameters(twin), rtol=0, atol=1e-6)


def test_the_learner_works_in_chunks_of_learner_memory_gb(tmp_path):
    """A2C's batch of 6 runners x 32 replicas x 8 steps = 1536 samples passes through the learner in
    chunks of at most chunk_size (1024, the floor) rows, as the algorithm's update does."""
    import workbench as wb
    trainer = wb.make_trainer(tag_config(algorithm="a2c", num_envs=32, learner_memory_gb=1e-6))
    assert trainer.chunk_size["runners"] == 1024
    rows = []
    trainer.models["runners"].register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    fit(RolloutModule(trainer, iterations_per_epoch=1), tmp_path)
    assert rows and max(rows) <= 1024 and 1536 - 1024 in rows


def test_settings_it_cannot_honour_are_refused(tmp_path):
    import workbench as wb
    with pytest.raises(AdapterError, match=r"run_dir=.*default_root_dir"):
        RolloutModule(wb.make_trainer(tag_config(run_dir=str(tmp_path / "run"))))
    trainer = wb.make_trainer(tag_config())
    with pytest.raises(AdapterError, match=r"precision='bf16-mixed'.*config's precision"):
        fit(RolloutModule(trainer), tmp_path, precision="bf16-mixed")
    assert trainer.iteration == 0
    fit(RolloutModule(trainer, iterations_per_epoch=1), tmp_path)
    checkpoint = next(tmp_path.glob("**/*.ckpt"))
    with pytest.raises(AdapterError, match=r"ckpt_path=.*trainer.save\(path\) and trainer.load\(path\)"):
        fit(RolloutModule(trainer, iterations_per_epoch=1), tmp_path / "resumed", ckpt_path=checkpoint, max_epochs=2)
    assert trainer.iteration == 1
    with pytest.raises(AdapterError, match=r"cannot be pickled.*strategy='ddp'"):  # (before any process spawns)
        fit(RolloutModule(trainer, iterations_per_epoch=1), tmp_path / "spawned", strategy="ddp_spawn")
    assert trainer.iteration == 1


def test_training_stops_at_the_configs_budget_and_target_return(tmp_path):
    import workbench as wb
    trainer = wb.make_trainer(tag_config(total_env_steps=3 * 4 * 8))
    fit(RolloutModule(trainer, iterations_per_epoch=2), tmp_path / "budget", max_epochs=5)
    assert trainer.iteration == 3
    trainer = wb.make_trainer(tag_config(target_return=-1e9, log_every=2))
    fit(RolloutModule(trainer, iterations_per_epoch=5), tmp_path / "target", max_epochs=5)
    assert trainer.iteration == 2  # the first metrics pull reaches it


@pytest.mark.parametrize("owner", ["lightning", "workbench"])
def test_lightning_ddp_keeps_the_ranks_policies_identical(tmp_path, owner):
    """Two torchrun ranks, each on its own replicas. owner="lightning": other seeds, other initial
    weights, a trainer made with distributed=False; the module gives it a GradientSync over Lightning's
    process group, which starts the ranks from rank 0's weights. owner="workbench": make_trainer joins
    the group itself, and Lightning uses it. Every gradient is averaged, so the ranks end identical."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    job = Path(__file__).resolve().parent / "jobs" / "lightning_ddp_job.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(job), str(tmp_path), owner], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for rank in (0, 1):
        seen = (f"rank {rank}: initial equal {owner == 'workbench'}; final equal True; changed True; observations "
                f"equal False; steps 2; iterations 2; env steps {2 * 2 * 4 * 8}; metrics equal True")
        assert seen in out.stdout, out.stdout
