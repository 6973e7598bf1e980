"""End-to-end training speed: env-steps/s with learning included, and wall time to solve CartPole.

    python bench/bench_training.py --num-envs 1000 10000 100000 1000000 --out training.json   # target auto
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
import yaml

import workbench as wb
from workbench.learn import config as cfg
from workbench.cli import resolve_config


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def throughput(target, num_envs, iterations, graph=True, env="cartpole", extra=None, precision="auto", compile=True):
    config = wb.PPOConfig(env=env, num_envs=num_envs, rollout_length=32, num_minibatches=4, update_epochs=4,
                          target=target, cuda_graph=graph, log_every=10**9, total_env_steps=10**15,
                          precision=precision, compile=compile, **(extra or {}))
    trainer = wb.make_trainer(config)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.train(num_iterations=3)  # compile, eager first iteration, capture, allocator warm-up
    times = []
    for _ in range(iterations):
        sync(trainer.device)
        start = time.perf_counter()
        trainer.train(num_iterations=1)
        sync(trainer.device)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if trainer.device.type == "cuda" else 0
    row = {"target": target, "env": env, "num_envs": num_envs, "cuda_graph": graph,
           "precision": trainer.precision, "graph_state": trainer.graph.state, "compile": compile,
           "env_steps_per_s": trainer.steps_per_iteration / median, "iteration_s": median, "peak_bytes": peak}
    del trainer
    if target != "cpu":
        torch.cuda.empty_cache()
    return row


def solve(target, repeats=1, overrides=None):
    results = []
    for seed in range(repeats):
        config = cfg.replace(cfg.load_yaml(resolve_config("cartpole")), target=target, seed=seed,
                             total_env_steps=5_000_000, log_every=1, **(overrides or {}))
        start = time.perf_counter()
        trainer = wb.make_trainer(config)
        compile_s = time.perf_counter() - start
        result = trainer.train()
        results.append({"seed": seed, "compile_s": compile_s, "train_s": result.wall_time_s - result.warmup_s,
                        "warmup_s": result.warmup_s,
                        "env_steps": result.env_steps, "final_return": result.metrics["mean_return"],
                        "solved": result.stopped_by == "target_return"})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", default="auto", help="default: what target: auto picks for CartPole here")
    parser.add_argument("--num-envs", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--no-graph-too", action="store_true", help="also time without the CUDA graph")
    parser.add_argument("--no-compile-too", action="store_true", help="also time without torch.compile")
    parser.add_argument("--no-compile", action="store_true", help="time without torch.compile only (the default settings)")
    parser.add_argument("--solve", action="store_true")
    parser.add_argument("--solve-repeats", type=int, default=1)
    parser.add_argument("--precisions", nargs="*", default=["auto"], help="fp32 tf32 bf16 auto")
    parser.add_argument("--solve-set", nargs="*", default=[], help="config overrides for --solve, KEY=VALUE")
    parser.add_argument("--fused-set", nargs="*", default=[],
                        help="settings of workbench.learn.fused to try, NAME=VALUE (MIN_TILES=4, PROGRAMS_PER_SM=1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.target == "auto":
        args.target = wb.best_target("cartpole")
    from workbench.learn import fused
    for item in args.fused_set:
        name, value = item.split("=", 1)
        if not hasattr(fused, name):
            parser.error(f"--fused-set: workbench.learn.fused has no setting {name!r}")
        setattr(fused, name, yaml.safe_load(value))
    device = torch.cuda.get_device_name() if args.target != "cpu" else platform.processor() or platform.machine()
    rows = []
    for n in args.num_envs:
        for precision in args.precisions:
            rows.append(throughput(args.target, n, args.iterations, precision=precision, compile=not args.no_compile))
            print(rows[-1], flush=True)
        if args.no_compile_too and args.target != "cpu":
            rows.append(throughput(args.target, n, args.iterations, compile=False))
            print(rows[-1], flush=True)
        if args.no_graph_too and args.target != "cpu":
            rows.append(throughput(args.target, n, args.iterations, graph=False))
            print(rows[-1], flush=True)
    print(f"| env | target | replicas | precision | compile | CUDA graph | env-steps/s (learning incl.) | s/iteration "
          f"| peak memory |  ({device})")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['env']} | {r['target']} | {r['num_envs']} | {r['precision']} | {r['compile']} | {r['graph_state'] if r['cuda_graph'] else 'off'} "
              f"| {r['env_steps_per_s'] / 1e6:.3f} M | {r['iteration_s'] * 1e3:.2f} ms | {r['peak_bytes'] / 2**20:.0f} MiB |")
    overrides = {}
    for item in args.solve_set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    solved = solve(args.target, args.solve_repeats, overrides) if args.solve else []
    for s in solved:
        print(f"CartPole PPO to return >= 475 on {args.target}: {s['train_s']:.2f} s of training "
              f"({s['env_steps']} env-steps; env compile {s['compile_s']:.1f} s and the first iterations' compiles, "
              f"kernel loads and graph capture "
              f"{s['warmup_s']:.1f} s apart; solved={s['solved']})")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": device, "throughput": rows, "solve": solved,
                       "date": time.strftime("%Y-%m-%d")}, fh, indent=1)


if __name__ == "__main__":
    main()
