"""The CPU trainer keeps freed tensor memory in the process (learn/cpu_memory.py)."""
import os
import subprocess
import sys

import pytest

from workbench.learn import cpu_memory

# allocates and frees twelve 2 MB tensors 20 times (a CPU learner's pass, in small), prints the
# minor page faults it took; "trainer": after making a CPU trainer (then also whether it fixed the
# thresholds)
CHURN = """
import resource, sys, torch
import workbench.learn  # (the heap a trainer's process starts from)
if sys.argv[1] == "trainer":
    from workbench.learn import config as cfg
    from workbench.learn.trainer import make_trainer
    make_trainer(cfg.from_dict({"env": "cartpole", "target": "cpu", "num_envs": 8, "rollout_length": 4}))
def churn():
    tensors = [torch.ones(512 * 1024) for _ in range(12)]
    del tensors
churn(); churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
if sys.argv[1] == "trainer":
    from workbench.learn import cpu_memory
    print(cpu_memory._state.get("applied"))
"""


def churn(mode: str, **env) -> list:
    environ = {k: v for k, v in os.environ.items() if k not in cpu_memory.USER_VARIABLES and k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True,
                         env={**environ, **env}, timeout=300)
    return out.stdout.split()


@pytest.mark.skipif(cpu_memory.why_not() == "not glibc", reason="glibc's allocator only")
def test_freed_tensors_come_back_without_page_faults():
    # glibc's defaults hand a block back or not depending on what the process freed before (its
    # thresholds move); fixed at its initial mmap threshold, every block goes back
    handed_back = int(churn("off", MALLOC_MMAP_THRESHOLD_="131072")[0])
    faults, applied = churn("trainer")
    assert handed_back > 20 * 12 * 256  # (at least half of) each block's pages faulted in again
    assert applied == "True" and int(faults) < handed_back / 50, (handed_back, faults, applied)


@pytest.mark.skipif(cpu_memory.why_not() == "not glibc", reason="glibc's allocator only")
def test_the_users_allocator_settings_are_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1")
    assert cpu_memory.why_not() == "the user set MALLOC_TRIM_THRESHOLD_"
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert cpu_memory.why_not() == "the user set GLIBC_TUNABLES"
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("LD_PRELOAD", "libjemalloc.so.2")
    assert "LD_PRELOAD" in cpu_memory.why_not()
