"""Auto-scaling: the most replicas a run can use, found by measurement.

On a GPU target it grows num_envs by doubling, running one real training iteration at each size
and reading the peak device memory, until the next size would not fit the free memory less a
safety margin or an out-of-memory error occurs (caught: the size is reduced, the run goes on).
On the CPU target memory is rarely the limit, so it grows num_envs while throughput (env-steps/s
with learning) still improves by at least 10%, within half of the available host memory.
"""
from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, field

import torch

from . import config as cfg


@dataclass
class ScaleReport:
    num_envs: int
    num_minibatches: int | None
    how: str
    trials: list = field(default_factory=list)  # (num_envs, peak bytes or env-steps/s, "ok" | "oom")

    def __str__(self):
        rows = "; ".join(f"{n}: {v if isinstance(v, str) else f'{v:.3g}'} {s}" for n, v, s in self.trials)
        return f"auto-scale chose num_envs={self.num_envs} ({self.how}); trials {rows}"


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text or "out_of_memory" in text


def search_memory(trial, free_bytes: int, start: int, max_envs: int, margin: float) -> tuple:
    """Largest n (doubling from `start`) whose measured peak `trial(n)` fits `free_bytes*(1-margin)`.
    `trial(n)` returns the peak bytes of one iteration at n replicas or raises an OOM error."""
    budget = free_bytes * (1 - margin)
    trials, best, n = [], None, start
    while n <= max_envs:
        try:
            peak = trial(n)
        except Exception as exc:  # noqa: BLE001 - only OOM is expected; anything else is re-raised
            if not is_oom(exc):
                raise
            trials.append((n, "out of memory", "oom"))
            break
        trials.append((n, float(peak), "ok"))
        if peak > budget:
            break
        best = (n, peak)
        n *= 2
    if best is None:
        raise RuntimeError(f"even {start} replicas do not fit in the free device memory ({free_bytes / 2**30:.1f} GiB)")
    fitted = [(k, v) for k, v, s in trials if s == "ok"]
    if len(fitted) >= 2 and fitted[-1][1] > fitted[-2][1]:
        (n1, p1), (n2, p2) = fitted[-2], fitted[-1]
        per_replica = (p2 - p1) / (n2 - n1)
        estimate = int(n1 + (budget - p1) / per_replica)
        return max(best[0], min(estimate, max_envs, 2 * best[0] - 1)), trials
    return best[0], trials


def _divisible(n: int, config) -> int:
    step = getattr(config, "num_minibatches", 1)
    return max(step, n - n % step)


def _host_bytes(trainer) -> int:
    tensors = list(trainer.env.store.values())
    for buf in trainer.buffers.values():
        tensors += [v for v in vars(buf).values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _free_trainer(trainer):
    del trainer
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def auto_scale(config, *, margin: float = 0.2, start: int = 1024, max_envs: int = 1 << 26, log=print):
    """Return (config with num_envs sized to this device, ScaleReport)."""
    if config.algorithm == "ddpg":  # (its trial iterations would time the random phase, not learning)
        raise cfg.ConfigError(f"auto-scale sizes on-policy runs (ppo, a2c) by their env-steps/s; DDPG takes "
                              f"updates_per_rollout={config.updates_per_rollout} gradient steps an iteration whatever "
                              f"the replica count, so more replicas learn less from each transition: set num_envs "
                              f"yourself (the pendulum config's: 16) and drop --auto-scale")
    from ..runtime.env import best_target
    from .trainer import make_trainer
    target = best_target(config.env) if config.target == "auto" else config.target
    from . import distributed as dist_mod
    # under torchrun: join first, so that each rank measures on its own GPU (init selects it)
    context = dist_mod.init(target) if dist_mod.launched_by_torchrun() else None

    def one_iteration(n):
        trainer = make_trainer(cfg.replace(config, num_envs=n, run_dir=None, target=target), distributed=False,
                               pretrained=False)
        try:
            start_t = time.perf_counter()
            if trainer.device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            trainer.train(num_iterations=1)
            if trainer.device.type == "cuda":
                torch.cuda.synchronize()
                return (float(torch.cuda.max_memory_allocated()),
                        trainer.steps_per_iteration / (time.perf_counter() - start_t))
            rate = trainer.steps_per_iteration / (time.perf_counter() - start_t)
            return float(_host_bytes(trainer)), rate
        finally:
            _free_trainer(trainer)

    if target in ("cuda", "cuda-c"):
        free, _total = torch.cuda.mem_get_info()
        n, trials = search_memory(lambda k: one_iteration(k)[0], free, start, max_envs, margin)
        n = _divisible(n, config)
        while True:  # confirm the chosen size; back off on OOM rather than crash the run
            try:
                one_iteration(n)
                break
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc) or n <= start:
                    raise
                trials.append((n, "out of memory", "oom"))
                n = _divisible(int(n * 0.8), config)
        how = f"fits {100 * (1 - margin):.0f}% of {free / 2**30:.1f} GiB free device memory"
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        trials, n, best = [], start, None
        while n <= max_envs:
            used, rate = one_iteration(n)
            trials.append((n, rate, "ok"))
            if best is not None and rate < 1.10 * best[1]:
                break
            best = (n, rate)
            if 2 * used > available / 2:
                break
            n *= 2
        n = _divisible(best[0], config)
        how = ("cpu target: replicas live in host memory, so the size is where throughput stops improving "
               "by 10% per doubling (within half the available RAM)")
    if context is not None:  # every rank trains the same iteration: the smallest rank's size
        sizes = dist_mod.all_ranks(context, n)
        if min(sizes) != n:
            how += f"; ranks chose {sizes}, all take the smallest"
        n = min(sizes)
    report = ScaleReport(n, getattr(config, "num_minibatches", None), how, trials)
    log(str(report))
    return cfg.replace(config, num_envs=n), report
