"""Cross-target consistency at full size: every shipped env on every target that runs it, in
lockstep with the cpu target (workbench.check_env), printing one line per env and config.

    python bench/cross_check.py --num-envs 2048 --steps 200
"""
from __future__ import annotations

import argparse
import time

import _common as C  # noqa: F401  (puts the checkout on sys.path)

TAG_CONFIGS = {
    "tag_grid": [dict(num_taggers=50, num_runners=950, grid_length=100)],
    "tag_continuous": [dict(num_taggers=10, num_runners=100), dict(num_taggers=50, num_runners=1050)],
}


def main(argv=None) -> int:
    import workbench as wb
    from workbench.runtime.registry import lookup
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", nargs="*", default=None)
    parser.add_argument("--num-envs", type=int, default=2048)
    parser.add_argument("--tag-num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    available = wb.available_targets()
    failures = 0
    for name in args.envs or wb.env_names():
        targets = ["cpu"] + [t for t in ("cuda", "cuda-c") if t in available]
        if lookup(name).c_source is None:
            targets = [t for t in targets if t != "cuda-c"]
        for params in TAG_CONFIGS.get(name, [{}]):
            n = args.tag_num_envs if name in TAG_CONFIGS else args.num_envs
            start = time.perf_counter()
            try:
                report = wb.check_env(name, targets=targets, num_envs=n, steps=args.steps, **params)
                print(f"PASS {name} {params or ''} {n} replicas x {args.steps} steps on {'/'.join(targets)} "
                      f"({time.perf_counter() - start:.0f} s): {report}", flush=True)
            except Exception as exc:  # noqa: BLE001 - report every env, then fail
                failures += 1
                print(f"FAIL {name} {params or ''} on {'/'.join(targets)}: {type(exc).__name__}: {exc}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
