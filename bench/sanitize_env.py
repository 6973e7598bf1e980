"""A short run of one env for compute-sanitizer: reset, random steps through several auto-resets,
one synchronisation at the end. Kept small so memcheck/racecheck finish in seconds.

    compute-sanitizer --tool racecheck python bench/sanitize_env.py tag_continuous --target cuda
"""
from __future__ import annotations

import argparse

import _common as C  # noqa: F401  (puts the checkout on sys.path)


def main(argv=None) -> int:
    import torch

    import workbench as wb
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("env")
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", default=[])
    args = parser.parse_args(argv)
    import yaml
    params = {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in args.param)}
    env = wb.make(args.env, num_envs=args.num_envs, target=args.target, seed=1, **params)
    env.reset()
    for _ in range(args.steps):
        env.step(env.sample_actions())
    torch.cuda.synchronize()
    done = int(env.data["episode"].sum().item())
    print(f"{args.env} on {args.target}: {args.steps} steps x {args.num_envs} replicas x {env.num_agents} agents, "
          f"{done} episodes finished")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
