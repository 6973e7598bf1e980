"""Start-up: a new Python process from its first line to the end of its first training iterations,
against torch's own import. Each measurement is a fresh process; the first run of each target fills
the caches (the env's compiled kernels, Triton's), the runs after it are timed with them warm.

    python bench/bench_startup.py --target cpu
    python bench/bench_startup.py --target cuda --runs 3

Prints RESULT lines (JSON): torch_import_s, then the workbench's import, make_trainer and the first
`--iterations` iterations (configs/cartpole.yaml), `first_iteration_total_s` (the process's first line to
the end of its first iteration), and `over_torch_s`, everything after torch's import.

Python's bytecode cache counts among the warm caches: with PYTHONDONTWRITEBYTECODE set (some
container images set it) every process compiles torch's sources again, about a second more; the
summary's `bytecode_cache` says which was measured. `PYTHONPYCACHEPREFIX=/tmp/pyc` with that
variable unset gives a read-only install a cache.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

from _common import ROOT

PROBE = """
import json, sys, time
start = time.perf_counter()
import torch
torch_done = time.perf_counter()
import workbench as wb
from workbench.learn import config as cfg
from workbench.learn.trainer import make_trainer
imported = time.perf_counter()
from workbench.learn import trainer as trainer_module
trainer_module.WARM_UP_IN_BACKGROUND = sys.argv[3] == "1"
config = cfg.replace(cfg.load_yaml("configs/cartpole.yaml"), target=sys.argv[1], log_every=10**9, run_dir=None)
trainer = make_trainer(config)
made = time.perf_counter()
trainer.train(num_iterations=1)
if trainer.device.type == "cuda":
    torch.cuda.synchronize()
first = time.perf_counter()
trainer.train(num_iterations=int(sys.argv[2]) - 1)
if trainer.device.type == "cuda":
    torch.cuda.synchronize()
done = time.perf_counter()
print("RESULT " + json.dumps({"torch_import_s": round(torch_done - start, 3), "workbench_import_s": round(imported - torch_done, 3),
                              "make_trainer_s": round(made - imported, 3), "first_iteration_total_s": round(first - start, 3),
                              "iterations_s": round(done - made, 3),
                              "over_torch_s": round(done - torch_done, 3), "total_s": round(done - start, 3)}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="timed runs after the one that warms the caches")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="without the GPU warm-up thread (trainer.WARM_UP_IN_BACKGROUND), for comparison")
    parser.add_argument("--profile", type=int, default=0, metavar="LINES",
                        help="then one more process under cProfile: print its LINES top functions by cumulative time")
    args = parser.parse_args()
    warm = "0" if args.no_warm_up else "1"
    rows = []
    for run in range(args.runs + 1):
        out = subprocess.run([sys.executable, "-c", PROBE, args.target, str(args.iterations), warm], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        row = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        row["caches"] = "warming" if run == 0 else "warm"
        print("RESULT " + json.dumps({"target": args.target, "warm_up_thread": not args.no_warm_up, **row}), flush=True)
        if run:
            rows.append(row)
    keys = ("torch_import_s", "workbench_import_s", "make_trainer_s", "first_iteration_total_s", "iterations_s",
            "over_torch_s", "total_s")
    if rows:
        print("RESULT " + json.dumps({"target": args.target, "warm_up_thread": not args.no_warm_up, "median_of": len(rows),
                                      "bytecode_cache": not sys.flags.dont_write_bytecode,
                                      **{k: round(statistics.median(r[k] for r in rows), 3) for k in keys}}))
    if args.profile:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as probe:
            probe.write(PROBE)
        out = subprocess.run([sys.executable, "-m", "cProfile", "-s", "cumulative", probe.name, args.target,
                              str(args.iterations), warm], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        print("\n".join(out.splitlines()[:args.profile + 10]))


if __name__ == "__main__":
    main()
