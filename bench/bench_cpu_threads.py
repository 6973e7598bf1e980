"""What the CPU target's thread choice costs: 8 PPO iterations of CartPole at 64 replicas (T = 64,
4 epochs x 4 minibatches) with `cpu_threads` measured (0, the default), 1 and every core; each run a
fresh process, medians over --repeats runs. Seconds of training, after one warm-up iteration.
--busy N runs N busy loops (one core each) beside them: another process holding a core.

    python bench/bench_cpu_threads.py --repeats 3
    python bench/bench_cpu_threads.py --repeats 3 --busy 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _common import ROOT

PROBE = """
import json, sys, time
import workbench as wb
config = wb.PPOConfig(env="cartpole", num_envs=64, rollout_length=64, num_minibatches=4, update_epochs=4,
                      target="cpu", cpu_threads=int(sys.argv[1]), log_every=8)
trainer = wb.make_trainer(config)
trainer.train(num_iterations=1)
start = time.perf_counter()
trainer.train(num_iterations=8)
print(json.dumps({"seconds": time.perf_counter() - start, "chosen": [trainer.threads["env"], trainer.threads["learner"]]}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy loops running beside the runs")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        table(args)
    finally:
        for loop in busy:
            loop.kill()


def table(args):
    cores = len(os.sched_getaffinity(0))
    print(f"| cpu_threads | env / learner threads | seconds for 8 iterations (median of {args.repeats}) | runs |")
    print("|---|---|---|---|")
    for threads in (0, 1, cores):
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, "-c", PROBE, str(threads)], capture_output=True, text=True,
                                 cwd=ROOT, timeout=600)
            if out.returncode != 0:
                raise RuntimeError(out.stderr.strip().splitlines()[-1:])
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        label = {0: "0 (measured, the default)", 1: "1"}.get(threads, f"{threads} (every core)")
        chosen = sorted({f"{r['chosen'][0]} / {r['chosen'][1]}" for r in runs})
        seconds = [r["seconds"] for r in runs]
        print(f"| {label} | {', '.join(chosen)} | {statistics.median(seconds):.2f} | "
              f"{', '.join(f'{s:.2f}' for s in seconds)} |", flush=True)


if __name__ == "__main__":
    main()
