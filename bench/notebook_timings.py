"""Wall time of each notebook run top to bottom at its default size (nbclient, one at a time).

    python bench/notebook_timings.py [notebooks/01_quick_start.ipynb ...] [--target cpu] [--small]

Prints each notebook's total and its slowest cells (a failing cell ends that notebook, named in its
line, and the exit status is 1). Each notebook gets a fresh compile cache
(WORKBENCH_CACHE_DIR), as on a first run, unless --warm. Without --small the notebooks pick their
laptop-CPU sizes on the cpu target (WORKBENCH_TARGET=cpu); the numbers go in docs/notebooks.md.
"""
import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(path: Path, env: dict, timeout_s: int):
    import nbclient
    import nbformat
    nb = nbformat.read(path, as_version=4)
    cell_times = []
    with tempfile.TemporaryDirectory() as cwd:
        client = nbclient.NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                                         resources={"metadata": {"path": cwd}})
        start = time.perf_counter()
        error = None
        with client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                t0 = time.perf_counter()
                try:
                    client.execute_cell(cell, index)
                except nbclient.exceptions.CellExecutionError as exc:
                    reason = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()[-1]
                    error = f"cell {index} failed: {reason[:300]}"
                    break
                finally:
                    cell_times.append((time.perf_counter() - t0, index, (cell.source.splitlines() or [""])[0][:70]))
        total = time.perf_counter() - start
    return total, cell_times, error


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--small", action="store_true", help="CI's tiny sizes (WORKBENCH_SMALL=1)")
    parser.add_argument("--timeout", type=int, default=1800, help="per cell, seconds")
    parser.add_argument("--warm", action="store_true",
                        help="use the user's compile cache (default: a fresh one, as on a first run)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    env = dict(os.environ, WORKBENCH_TARGET=args.target)
    env.pop("WORKBENCH_SMALL", None)
    if args.small:
        env["WORKBENCH_SMALL"] = "1"
    failed = 0
    for path in paths:
        cache = None if args.warm else tempfile.TemporaryDirectory(prefix="wb-kernels-")
        if cache is not None:
            env["WORKBENCH_CACHE_DIR"] = cache.name
        total, cells, error = run(path, env, args.timeout)
        if cache is not None:
            cache.cleanup()
        slowest = ", ".join(f"cell {i} {t:.0f} s" for t, i, _ in sorted(cells, reverse=True)[:3])
        print(f"{path.name}: {'FAILED, ' + error + ', ' if error else ''}{total:.0f} s (slowest: {slowest})", flush=True)
        for t, i, first in cells:
            print(f"    [{i:2d}] {t:7.1f} s  {first}", flush=True)
        failed += error is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
