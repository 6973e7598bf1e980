"""What glibc's malloc handing freed tensors back to the kernel costs a CPU population, and what
learn/cpu_memory.py (freed memory kept in the process) saves.

    python bench/bench_cpu_allocator.py                       # 1 and 8 CartPole members, 5 rounds
    python bench/bench_cpu_allocator.py --members 8 --rounds 3 --iterations 20

Each measurement is a fresh process (the allocator's settings are per process): a trainer of
bench_population.py's peer shape (CartPole PPO, 64 envs x 64 steps a member) trains 3 iterations,
then `--iterations` more are timed, with the process's CPU time (user and system) and its minor
page faults. "default" leaves glibc's thresholds as they are, "kept" is what a CPU trainer sets.
Rounds alternate the two; the table gives medians and the ratio of the largest member count to the
smallest.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import _common as C  # (also puts the checkout on sys.path)


def child(members: int, iterations: int, allocator: str) -> dict:
    from bench_population import PEER_SHAPE
    from workbench.learn import config as cfg, cpu_memory
    from workbench.learn.trainer import make_trainer
    if allocator == "default":
        cpu_memory._state["applied"] = False  # this process answers "not applied" before a trainer asks
    config = cfg.from_dict({**PEER_SHAPE, "target": "cpu", "seeds": members, "total_env_steps": 10**9})
    trainer = make_trainer(config)
    trainer.train(num_iterations=3)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    trainer.train(num_iterations=iterations)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {"members": members, "allocator": allocator, "iterations": iterations, "seconds": round(seconds, 3),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3),
            "sys_s": round(after.ru_stime - before.ru_stime, 3),
            "minor_faults": after.ru_minflt - before.ru_minflt, "threads": trainer.threads}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10, help="timed iterations a process")
    parser.add_argument("--child", nargs=2, metavar=("MEMBERS", "ALLOCATOR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(int(args.child[0]), args.iterations, args.child[1])), flush=True)
        return
    runs = {}
    for _ in range(args.rounds):
        for members in args.members:
            for allocator in ("default", "kept"):
                out = subprocess.run([sys.executable, __file__, "--iterations", str(args.iterations), "--child",
                                      str(members), allocator], capture_output=True, text=True, check=True)
                row = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
                print("RESULT " + json.dumps(row), flush=True)
                runs.setdefault((members, allocator), []).append(row)
    rows, medians = [], {}
    for (members, allocator), found in sorted(runs.items()):
        seconds = [r["seconds"] for r in found]
        medians[(members, allocator)] = statistics.median(seconds)
        rows.append([members, allocator, f"{statistics.median(seconds):.2f}", f"{min(seconds):.2f} to {max(seconds):.2f}",
                     f"{statistics.median(r['cpu_s'] for r in found):.2f}",
                     f"{statistics.median(r['sys_s'] for r in found):.2f}",
                     int(statistics.median(r["minor_faults"] for r in found))])
    print(C.markdown(["members", "allocator", f"s for {args.iterations} iterations (median)", "range",
                      "CPU s (user + system)", "system s", "minor page faults (median)"], rows))
    low, high = min(args.members), max(args.members)
    for allocator in ("default", "kept"):
        print(f"{allocator}: {high} members take {medians[(high, allocator)] / medians[(low, allocator)]:.2f}x "
              f"the time of {low}")


if __name__ == "__main__":
    main()
