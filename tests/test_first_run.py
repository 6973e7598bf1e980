"""What a first run costs and says on a small machine: serial CPU kernels on two cores or fewer (the
same numbers as parallel ones), a notice before an uncached compile, `train --env NAME` without a config."""
import subprocess
import sys

import pytest
import torch

import workbench as wb
from workbench.compiler import kernel_cache
from workbench.compiler.targets import cpu
from workbench.learn import config as cfg
from workbench.learn.config_env import compile_notice
from workbench.runtime import env as env_module


@pytest.mark.parametrize("cores, asked, parallel", [(2, "", False), (1, "", False), (4, "", True), (2, "2", True),
                                                     (8, "1", False)])
def test_cpu_kernels_are_parallel_only_where_threads_can_run_them(monkeypatch, cores, asked, parallel):
    monkeypatch.setattr(cpu.os, "sched_getaffinity", lambda _pid: set(range(cores)), raising=False)
    monkeypatch.setenv("NUMBA_NUM_THREADS", asked)
    assert cpu.parallel_kernels() is parallel


def test_serial_and_parallel_kernels_step_the_same_numbers(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    runs = {}
    for parallel in (False, True):
        monkeypatch.setattr(cpu, "parallel_kernels", lambda parallel=parallel: parallel)
        monkeypatch.setattr(env_module, "_KERNEL_CACHE", {})  # (a process compiles one kind: its key has no flag)
        env = wb.make("cartpole", num_envs=32, target="cpu", seed=4)
        assert env.kernels._step.targetoptions["parallel"] is parallel
        env.random_steps(40)  # (episodes end and reset within them)
        runs[parallel] = {k: v.clone() for k, v in env.data.snapshot().items()}
    for name, value in runs[False].items():
        assert torch.equal(value, runs[True][name]), name
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2  # (another module text: its own cache entry)


def test_a_run_says_it_compiles_only_when_the_kernels_are_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(env_module, "_KERNEL_CACHE", {})  # (kernels this process made before: not in tmp_path)
    config = cfg.replace(wb.PPOConfig(env="acrobot", target="cpu"), num_envs=4)
    assert compile_notice(config) == ("compiling acrobot for target 'cpu' (once: later runs load the kernels from the "
                                      "cache)...")
    wb.make("acrobot", num_envs=4, target="cpu")
    assert compile_notice(config) is None
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", "off")
    assert not kernel_cache.enabled() and "(every run: WORKBENCH_CACHE_DIR turns" in compile_notice(config)


def test_train_with_only_an_env_takes_that_env_s_config(tmp_path):
    done = subprocess.run([sys.executable, "-m", "workbench", "train", "--env", "cartpole", "--total-env-steps", "4096",
                           "--run-dir", str(tmp_path / "run"), "--set", "progress=false"],
                          capture_output=True, text=True, check=True)
    assert "training cartpole with PPO" in done.stdout and (tmp_path / "run" / "checkpoint.pt").exists()
    assert "num_envs: 64" in (tmp_path / "run" / "config.yaml").read_text()  # (configs/cartpole.yaml's)
    missing = subprocess.run([sys.executable, "-m", "workbench", "train"], capture_output=True, text=True)
    assert missing.returncode == 2 and "'cartpole'" in missing.stderr and "--env NAME" in missing.stderr
