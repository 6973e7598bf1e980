"""`python -m workbench ...`: demo, check, envs."""
from __future__ import annotations

import argparse
import sys
import time


def _sync(env):
    if env.device.type == "cuda":
        import torch
        torch.cuda.synchronize()


def rollout_throughput(env, steps: int) -> float:
    """Env-steps/s (replica steps, random actions sampled on the device) over `steps` steps."""
    env.reset()
    for _ in range(3):
        env.step(env.sample_actions())
    _sync(env)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.sample_actions())
    _sync(env)
    return steps * env.num_envs / (time.perf_counter() - start)


def cmd_rollouts(args) -> int:
    import workbench as wb
    target = args.target or wb.best_target()
    print(f"rollouts of every shipped env on target '{target}' ({args.num_envs} replicas, {args.steps} steps)")
    for name in wb.env_names():
        start = time.perf_counter()
        env = wb.make(name, num_envs=args.num_envs, target=target, seed=args.seed)
        compile_s = time.perf_counter() - start
        rate = rollout_throughput(env, args.steps)
        print(f"  {name:28s} {rate / 1e6:10.2f} M env-steps/s   (compile {compile_s:.1f} s)")
    return 0


def cmd_check(args) -> int:
    import workbench as wb
    for name in args.envs or wb.env_names():
        print(wb.check_env(name, targets=args.targets, num_envs=args.num_envs, steps=args.steps))
    return 0


def cmd_envs(args) -> int:
    import workbench as wb
    for name in wb.env_names():
        print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the main job: rollouts of every shipped env on the best target")
    demo.add_argument("--target", default=None)
    demo.add_argument("--num-envs", type=int, default=100_000)
    demo.add_argument("--steps", type=int, default=100)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=cmd_rollouts)
    check = sub.add_parser("check", help="cross-target consistency check of envs")
    check.add_argument("envs", nargs="*")
    check.add_argument("--targets", nargs="+", default=None)
    check.add_argument("--num-envs", type=int, default=16)
    check.add_argument("--steps", type=int, default=64)
    check.set_defaults(func=cmd_check)
    envs = sub.add_parser("envs", help="list the registered envs")
    envs.set_defaults(func=cmd_envs)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .errors import WorkbenchError
    try:
        return args.func(args)
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
