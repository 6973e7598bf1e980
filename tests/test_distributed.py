"""Data-parallel training with torch.distributed: real 2-process gloo jobs launched by torchrun."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.learn import distributed as wbd

JOB = Path(__file__).resolve().parent / "jobs" / "distributed_job.py"


def torchrun(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(JOB), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def test_two_ranks_equal_single_process_on_the_same_total_batch():
    out = torchrun("equal_batch")
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        for algorithm in ("a2c", "a2c-norm", "ppo", "ppo-norm"):
            assert f"rank {rank} {algorithm} ok" in out.stdout


def test_ranks_given_different_configs_are_refused_by_name():
    out = torchrun("uneven", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        assert (f"rank {rank} refused: the ranks were given different configs (num_envs: [8, 24], by rank)"
                in out.stdout), out.stdout + out.stderr


def test_two_rank_training_keeps_parameters_identical_and_resumes_single_process(tmp_path):
    out = torchrun("train", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 trained 4 iterations, env_steps 1024" in out.stdout
    assert "rank 1 trained 4 iterations" in out.stdout
    assert "rank 1 resumed with its own policy noise" in out.stdout
    assert out.stderr.count("training past total_env_steps=1024 with anneal_lr") == 1, out.stderr  # rank 0's
    assert (tmp_path / "checkpoint.pt").exists() and (tmp_path / "metrics.csv").exists()
    config = wb.PPOConfig(num_envs=8, rollout_length=16, num_minibatches=2, target="cpu", normalize_obs=True,
                          normalize_reward=True)
    trainer = wb.make_trainer(config, distributed=False)
    with pytest.warns(UserWarning, match="written by 2 rank\\(s\\), resumed by 1"):
        trainer.load(tmp_path / "checkpoint.pt")
    assert trainer.iteration == 5 and trainer.env_steps == 1280  # (4 iterations, then 1 past the budget)
    trainer.train(num_iterations=1)


def test_a_resume_on_the_same_ranks_continues_exactly(tmp_path):
    """Stopped after 2 iterations and resumed on the same 2 ranks, a run ends with the weights of the
    same run trained straight through: each rank's env state and DDPG's replay come back as its own."""
    out = torchrun("resume_exact", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        for case in ("ppo", "ddpg", "population"):
            assert f"rank {rank} {case} resumed differs by 0 at iteration 4" in out.stdout, out.stdout


def test_population_split_over_ranks_equals_one_process(tmp_path):
    """Members split over 2 ranks (no gradient crosses them) learn exactly what one process training
    every member learns: the same reports, and one checkpoint holding every member."""
    population_split_equals_one_process(tmp_path, "cpu")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_population_split_over_two_gpus_equals_one_gpu(tmp_path):
    """The same over NCCL: each rank's members on its own GPU, against one GPU training all four."""
    population_split_equals_one_process(tmp_path, "cuda")


def population_split_equals_one_process(tmp_path, target):
    import json
    import importlib.util
    out = torchrun("population", str(tmp_path), target)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 trains members [0, 1]" in out.stdout and "rank 1 trains members [2, 3]" in out.stdout
    for rank in (0, 1):
        assert f"rank {rank} reports members [0, 1, 2, 3]" in out.stdout
        assert f"rank {rank} resumed its members True at iteration 4" in out.stdout
    split = json.loads((tmp_path / "split_history.json").read_text())
    spec = importlib.util.spec_from_file_location("distributed_job", JOB)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    single = wb.make_trainer(job.population_config(str(tmp_path / "single"), **job.TARGETS[target]), distributed=False)
    single.train()
    for mine, theirs in zip(split, single.history):
        assert len(mine["members"]) == 4
        for m, t in zip(mine["members"], theirs["members"]):
            assert (m["member"], m["seed"], m["lr"]) == (t["member"], t["seed"], t["lr"])
            for key in ("return/shared", "policy_loss/shared", "value_loss/shared", "entropy/shared"):
                assert m[key] == pytest.approx(t[key], rel=1e-4, abs=1e-6, nan_ok=True), key
    merged = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert merged["population"]["members"] == 4 and merged["signature"]["members"] == 4
    for name, value in single.models["shared"].state_dict().items():
        torch.testing.assert_close(merged["models"]["shared"][name], value.cpu(), rtol=1e-4, atol=1e-6)
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 1 + 3 * 4  # header + a row per member
    from workbench.learn.runs import load_policy  # (an ordinary population's checkpoint: one member loads alone)
    assert load_policy(tmp_path, member=3).config.lr == pytest.approx(3e-3)


def test_a_population_that_does_not_split_evenly_is_a_clear_error():
    context = wbd.Context(rank=0, local_rank=0, world_size=3, backend="gloo")
    with pytest.raises(wbd.DistributedError, match="torchrun --nproc-per-node 2 or 4, "):
        wbd.member_slice(8, context)  # (not 8: a rank trains 2 members at least)
    assert wbd.member_slice(8, wbd.Context(1, 1, 2, "gloo")) == (4, 8)
    with pytest.raises(wbd.DistributedError, match="needs at least 2 members per rank, it has 1: launch fewer ranks"):
        wbd.member_slice(8, wbd.Context(0, 0, 8, "gloo"))  # (refused in make_trainer, before the env compiles)


def test_a_dead_rank_stops_the_job_with_its_rank_named(tmp_path):
    out = torchrun("die", str(tmp_path), timeout=300)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "rank: 1" in text or "local_rank: 1" in text, text[-2000:]


def test_more_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(wbd.DistributedError, match="local rank 2 has no GPU: this node has 2 GPU\\(s\\); launch "
                                                   "with torchrun --nproc-per-node 2"):
        wbd.check_gpu_count(2, 2)


def test_distributed_without_torchrun_says_how_to_launch(monkeypatch):
    for key in ("MASTER_ADDR", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(wbd.DistributedError, match="launch with torchrun"):
        wb.make_trainer(wb.PPOConfig(num_envs=4, target="cpu"), distributed=True)


def test_auto_scale_search_backs_off_on_out_of_memory():
    from workbench.learn.autoscale import search_memory
    import torch

    def trial(n):  # 1 KiB per replica plus 1 MiB; OOM from 64k replicas on
        if n >= 65536:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate")
        return 2**20 + 1024 * n

    n, trials = search_memory(trial, free_bytes=2**30, start=1024, max_envs=1 << 24, margin=0.2)
    assert trials[-1] == (65536, "out of memory", "oom")
    assert 32768 <= n < 65536


def test_auto_scale_on_the_cpu_target_explains_itself():
    from workbench.learn.autoscale import auto_scale
    lines = []
    config, report = auto_scale(wb.PPOConfig(num_envs=8, rollout_length=8, num_minibatches=2, target="cpu"),
                                start=16, max_envs=64, log=lines.append)
    assert "cpu target: replicas live in host memory" in lines[0]
    assert config.num_envs in (16, 32, 64) and config.num_envs % 2 == 0
    assert [t[0] for t in report.trials][0] == 16
