"""What `normalize_reward` does for learning: PPO (or A2C) on a Box env with and without it, same seeds.

    python bench/bench_reward_scaling.py                                   # PPO on pendulum, 150 k env-steps
    python bench/bench_reward_scaling.py --env mountain_car_continuous --algorithm a2c --env-steps 1e6
    python bench/bench_reward_scaling.py --speed --target cuda --num-envs 1e3 1e4 1e5   # what scaling costs

Each run starts from the env's default config for the algorithm (`wb.train(ENV, algorithm=...)`: for
PPO on a Box env 64 x 64 steps, 32 minibatches x 10 epochs, rewards scaled), with normalize_reward set
on or off, on the CPU target with one thread. After training, `workbench.learn.evaluate.compare`
plays the trained policy (sampled actions) and random actions from the same starts. The table gives,
per setting, each seed's evaluated return, the env-steps of the first report whose mean return
reached the threshold, and the training seconds.

--speed times instead one training iteration (median of warm iterations, device synchronised, the
report included) of the env's default config with and without normalize_reward at each replica count:
the cost of the running-return recurrence, T small ops an iteration.
"""
from __future__ import annotations

import argparse
import statistics
import time

import _common  # (also puts the checkout on sys.path)


def run(env: str, algorithm: str, scaled: bool, seed: int, env_steps: int, threshold: float) -> dict:
    import workbench as wb
    from workbench.learn import config as cfg
    from workbench.learn.config_files import load_config
    from workbench.learn.evaluate import compare
    config = cfg.replace(load_config(env, algorithm), target="cpu", normalize_reward=scaled, seed=seed,
                         total_env_steps=env_steps, target_return=None, cpu_threads=1, progress=False, log_every=5)
    start = time.perf_counter()
    trainer = wb.make_trainer(config)
    result = trainer.train()
    reached = next((r["env_steps"] for r in result.history if r.get("mean_return", float("nan")) >= threshold), None)
    evaluated = compare(trainer, seed=7)
    return {"trained": evaluated["trained"]["return/shared"], "random": evaluated["random"]["return/shared"],
            "reached": reached, "seconds": time.perf_counter() - start}


def speed(env: str, algorithm: str, target: str, num_envs: list, repeats: int) -> None:
    import workbench as wb
    from workbench.learn import config as cfg
    from workbench.learn.config_files import load_config
    print(f"{algorithm.upper()} on {env}, target {target}: seconds an iteration (median of {repeats})")
    print("| replicas | T | without | with normalize_reward | with / without |")
    print("|---|---|---|---|---|")
    for n in num_envs:
        seconds = {}
        for scaled in (False, True):
            config = cfg.replace(load_config(env, algorithm), target=target, normalize_reward=scaled, num_envs=n,
                                 total_env_steps=10**12, target_return=None, progress=False, log_every=1)
            trainer = wb.make_trainer(config)
            seconds[scaled] = _common.iteration_seconds(trainer, repeats=repeats, warmup=3)
            del trainer
        print(f"| {n} | {config.rollout_length} | {seconds[False] * 1e3:.2f} ms | {seconds[True] * 1e3:.2f} ms | "
              f"{seconds[True] / seconds[False]:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="pendulum")
    parser.add_argument("--algorithm", default="ppo")
    parser.add_argument("--env-steps", type=_common.count, default=150_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threshold", type=float, default=-250.0, help="the mean return a run should reach")
    parser.add_argument("--speed", action="store_true", help="time iterations instead of training to the end")
    parser.add_argument("--target", default="cuda", help="with --speed")
    parser.add_argument("--num-envs", type=_common.count, nargs="+", default=[1000, 10000, 100000], help="with --speed")
    parser.add_argument("--repeats", type=int, default=7, help="with --speed")
    args = parser.parse_args()
    if args.speed:
        return speed(args.env, args.algorithm, args.target, args.num_envs, args.repeats)
    import numba
    import torch
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    print(f"{args.algorithm.upper()} on {args.env}, {args.env_steps} env-steps, seeds {args.seeds}, CPU, one thread")
    print("| normalize_reward | evaluated return per seed | median | random | env-steps to "
          f"{args.threshold:g} | training s (median) |")
    print("|---|---|---|---|---|---|")
    for scaled in (True, False):
        rows = [run(args.env, args.algorithm, scaled, seed, args.env_steps, args.threshold) for seed in args.seeds]
        returns = [r["trained"] for r in rows]
        reached = ", ".join(f"{r['reached'] / 1000:.0f} k" if r["reached"] else "not" for r in rows)
        print(f"| {str(scaled).lower()} | {', '.join(f'{x:.1f}' for x in returns)} | {statistics.median(returns):.1f} "
              f"| {statistics.median(r['random'] for r in rows):.1f} | {reached} | "
              f"{statistics.median(r['seconds'] for r in rows):.1f} |", flush=True)


if __name__ == "__main__":
    main()
