"""CPU thread counts chosen by measurement.

numba's and torch's thread pools each default to every core. On a 2-core laptop, or beside another
busy process, the two pools oversubscribe the cores and small batches run many times slower than
on one thread. Unless the user set OMP_NUM_THREADS / NUMBA_NUM_THREADS (or `cpu_threads`), the
trainer times one env step and one learner pass at 1 thread and at all cores, and keeps the faster
count for each pool. A process measures each kind of work once (`key`: the env, its replicas, the
model): a later trainer of the same work reuses the counts, so two runs of one seed in a notebook
compute alike (a matmul split over another thread count rounds differently).

Ranks that torchrun starts on one host share its cores: each measures over its share
(LOCAL_WORLD_SIZE). numba does not read OMP_NUM_THREADS, which torchrun sets to 1 for every rank,
and its OpenMP pool, once started, sets the OpenMP runtime it shares with torch to its own count:
where OMP_NUM_THREADS (or MKL_NUM_THREADS) is set, torch gets that count again and numba too unless
NUMBA_NUM_THREADS is set (with every core each, two ranks on two cores trained 20 times slower than
one process).

With two cores (this process's share) both pools take one thread, unmeasured: each parallel region
waits for its slowest thread, so a second busy process (a browser, the notebook's own redraws)
stalls a two-thread region whenever it holds one of the cores. On 2 cores, two threads made CartPole's
iterations 1.09x faster idle and 3.5x slower beside one busy process (docs/benchmarks.md, "Thread
counts").
"""
from __future__ import annotations

import os
import statistics
import time
import warnings

import torch
from ..errors import WorkbenchWarning

TORCH_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
USER_VARIABLES = TORCH_VARIABLES + ("NUMBA_NUM_THREADS",)

_measured: dict = {}  # key of the work -> the counts measured for it in this process


def forget() -> None:
    """Drop the counts this process measured: the next trainer measures again."""
    _measured.clear()


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def process_cores() -> int:
    """This process's share of the cores: torchrun's ranks on one host split them (LOCAL_WORLD_SIZE)."""
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    return max(1, available_cores() // max(1, ranks_here))


def _first_count(value: str) -> int | None:
    """The outermost thread count of an OpenMP variable ("4" or, nested, "4,2"); None if it is not one."""
    head = value.split(",")[0].strip()
    return int(head) if head.isdigit() and int(head) > 0 else None


def _time(fn, repeats: int = 3) -> float:
    fn()  # first call pays for any lazy initialisation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _set_numba(n: int) -> None:
    import numba
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def pick(candidates, setter, work) -> tuple:
    """Time `work` under each thread count in `candidates` (via `setter`); keep the fastest.
    Returns (chosen count, {count: seconds})."""
    timings = {}
    for n in candidates:
        setter(n)
        timings[n] = _time(work)
    best = min(timings, key=timings.get)
    setter(best)
    return best, timings


def apply(chosen: dict) -> None:
    """Set both pools to counts chosen earlier ({"env": n, "learner": m}, as `configure` returns), at
    most this machine's cores (a checkpoint's counts may come from a larger machine)."""
    _set_numba(min(int(chosen["env"]), available_cores()))
    torch.set_num_threads(min(int(chosen["learner"]), available_cores()))


def configure(requested: int, env_step, learner_pass, key=None) -> dict:
    """Set numba's and torch's thread counts for CPU training and return what was chosen.

    requested > 0 sets both pools to it; 0 measures `env_step()` and `learner_pass()` (callables
    doing one representative unit of work) at 1 thread and at this process's cores (more than two;
    two or fewer take one thread), unless the user
    fixed the counts through the environment variables, which are then left as they are (numba
    following torch where only torch's are set). A `key` naming
    the work (hashable) measured before in this process reuses that measurement ("reused": True).
    """
    cores = process_cores()
    if requested > 0:
        if requested > available_cores():  # more threads than cores: every pool would wait on the others
            warnings.warn(f"cpu_threads={requested} is more than this machine's {available_cores()} cores: "
                          f"training with {available_cores()}", WorkbenchWarning, stacklevel=3)
            requested = available_cores()
        _set_numba(requested)
        torch.set_num_threads(requested)
        return {"env": requested, "learner": requested, "how": "cpu_threads"}
    if any(os.environ.get(v) for v in USER_VARIABLES):
        import numba
        torch_threads = next((n for v in TORCH_VARIABLES if (n := _first_count(os.environ.get(v, "")))), None)
        if not os.environ.get("NUMBA_NUM_THREADS") and torch_threads:
            _set_numba(torch_threads)
        # numba's OpenMP pool, when it starts (on this first call), sets the OpenMP runtime torch shares to
        # its own count: torch's count is set after it, or torch would run one thread beside MKL's two
        env_threads = numba.get_num_threads()
        if torch_threads:
            torch.set_num_threads(torch_threads)
        return {"env": env_threads, "learner": torch.get_num_threads(), "how": "environment variables"}
    if cores <= 2:  # (measured, not timed here: see the module's docstring)
        _set_numba(1)
        torch.set_num_threads(1)
        return {"env": 1, "learner": 1, "how": "one core" if cores == 1 else "two cores: one thread"}
    if key is not None and (key, cores) in _measured:
        chosen = _measured[(key, cores)]
        apply(chosen)
        return {**chosen, "reused": True}  # still "measured": a checkpoint's counts replace them on load
    candidates = (1, cores)
    env_threads, env_times = pick(candidates, _set_numba, env_step)
    learner_threads, learner_times = pick(candidates, torch.set_num_threads, learner_pass)
    chosen = {"env": env_threads, "learner": learner_threads, "how": "measured",
              "env_s": env_times, "learner_s": learner_times}
    if key is not None:
        _measured[(key, cores)] = chosen
    return chosen
