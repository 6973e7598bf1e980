"""Cold and warm make+compile of every shipped env: each measurement is a fresh Python process.

Cold runs against an empty cache directory, warm against the one the cold run filled. The time is
`wb.make(NAME, num_envs=4, target=...)` inside the process; importing workbench, torch and numba
is printed apart.

    python bench/bench_compile.py --target cpu
    python bench/bench_compile.py --target cuda --envs cartpole tag_continuous
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from _common import ROOT

PROBE = """
import json, sys, time
start = time.perf_counter()
import numba, torch  # the libraries every env runs on: their import is not the env's make
import workbench as wb
imported = time.perf_counter()
env = wb.make(sys.argv[1], num_envs=4, target=sys.argv[2])
made = time.perf_counter()
print(json.dumps({"import_s": imported - start, "make_s": made - imported,
                  "from_cache": bool(getattr(env.kernels, "loaded_from_cache", False))}))
"""


def measure(name: str, target: str, cache_dir: str) -> dict:
    env = {**os.environ, "WORKBENCH_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", PROBE, name, target], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{name} on {target}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    sys.path.insert(0, str(ROOT))
    from workbench.runtime.registry import names
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--envs", nargs="*", default=None, help="default: every shipped env")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    print(f"| env | target | cold make (s) | warm make (s) | warm from cache | import (s) |")
    print("|---|---|---|---|---|---|")
    for name in args.envs or names():
        with tempfile.TemporaryDirectory(prefix="wb-compile-") as cache_dir:
            cold = measure(name, args.target, cache_dir)
            warm = measure(name, args.target, cache_dir)
        row = {"env": name, "target": args.target, "cold_s": cold["make_s"], "warm_s": warm["make_s"],
               "warm_from_cache": warm["from_cache"], "import_s": warm["import_s"]}
        rows.append(row)
        print(f"| {name} | {args.target} | {row['cold_s']:.1f} | {row['warm_s']:.2f} | {row['warm_from_cache']} | "
              f"{row['import_s']:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
