"""End-to-end training speed: env-steps/s with learning included, and wall time to solve CartPole.

    python bench/bench_training.py --target cuda --num-envs 1000 10000 100000 1000000 --out training.json
    python bench/bench_training.py --target cpu --solve

Throughput: PPO on CartPole (T=32, 4 epochs x 4 minibatches), a warm-up iteration (compile,
CUDA graph capture) then the median over timed iterations, synchronising the device. --solve
trains the shipped CartPole config until the mean return reaches 475 and reports the wall time,
with the env's compile time reported apart.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

import workbench as wb
from workbench import config as cfg
from workbench.cli import resolve_config


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def throughput(target, num_envs, iterations, graph=True, env="cartpole", extra=None):
    config = wb.PPOConfig(env=env, num_envs=num_envs, rollout_length=32, num_minibatches=4, update_epochs=4,
                          target=target, cuda_graph=graph, log_every=10**9, total_env_steps=10**15,
                          **(extra or {}))
    trainer = wb.make_trainer(config)
    trainer.train(num_iterations=2)  # compile, capture, allocator warm-up
    times = []
    for _ in range(iterations):
        sync(trainer.device)
        start = time.perf_counter()
        trainer.train(num_iterations=1)
        sync(trainer.device)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"target": target, "env": env, "num_envs": num_envs, "cuda_graph": graph,
            "env_steps_per_s": trainer.steps_per_iteration / median, "iteration_s": median}


def solve(target, repeats=1):
    results = []
    for seed in range(repeats):
        config = cfg.replace(cfg.load_yaml(resolve_config("cartpole")), target=target, seed=seed,
                             total_env_steps=5_000_000, log_every=1)
        start = time.perf_counter()
        trainer = wb.make_trainer(config)
        compile_s = time.perf_counter() - start
        result = trainer.train()
        results.append({"seed": seed, "compile_s": compile_s, "train_s": result.wall_time_s,
                        "env_steps": result.env_steps, "final_return": result.metrics["mean_return"],
                        "solved": result.stopped_by == "target_return"})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", default=wb.best_target())
    parser.add_argument("--num-envs", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--no-graph-too", action="store_true", help="also time without the CUDA graph")
    parser.add_argument("--solve", action="store_true")
    parser.add_argument("--solve-repeats", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.cuda.get_device_name() if args.target != "cpu" else platform.processor() or platform.machine()
    rows = []
    for n in args.num_envs:
        rows.append(throughput(args.target, n, args.iterations))
        if args.no_graph_too and args.target != "cpu":
            rows.append(throughput(args.target, n, args.iterations, graph=False))
    print(f"| env | target | replicas | CUDA graph | env-steps/s (learning incl.) | s/iteration |  ({device})")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['env']} | {r['target']} | {r['num_envs']} | {r['cuda_graph']} | {r['env_steps_per_s'] / 1e6:.3f} M "
              f"| {r['iteration_s'] * 1e3:.1f} ms |")
    solved = solve(args.target, args.solve_repeats) if args.solve else []
    for s in solved:
        print(f"CartPole PPO to return >= 475 on {args.target}: {s['train_s']:.2f} s of training "
              f"({s['env_steps']} env-steps; compile {s['compile_s']:.1f} s apart; solved={s['solved']})")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": device, "throughput": rows, "solve": solved,
                       "date": time.strftime("%Y-%m-%d")}, fh, indent=1)


if __name__ == "__main__":
    main()
