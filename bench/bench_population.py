"""Populations: many CartPole PPO members trained in one program, on exactly the work of PureJaxRL's
jit(vmap(make_train)) seeds benchmark (../shared/peers: purejaxrl_bench.py seeds, its "ours_demo_shape"):
64 envs x 64 steps per member, 5e5 env-steps per member, 4 epochs x 4 minibatches, lr 2.5e-3 annealed,
ent_coef 0.01, 64x64 tanh, every other setting as PureJaxRL's.

    python bench/bench_population.py --target cuda --members 1 16 256 1024
    python bench/bench_population.py --target cpu --members 1 8 --env-steps 131072

For each member count: the first run (make_trainer, the first iterations' CUDA graph capture, the
whole training) and a second run in the same process with other seeds (kernels compiled, caches
warm), whose training time is reported with and without its capture iteration; the share of
members whose last report (the mean return of the episodes finished in the last 5 iterations, as
PureJaxRL's share averages its last 5 updates) reaches 475.
"""
from __future__ import annotations

import argparse
import json
import time

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import count, machine, sync

PEER_SHAPE = dict(env="cartpole", algorithm="ppo", num_envs=64, rollout_length=64, update_epochs=4, num_minibatches=4,
                  lr=2.5e-3, anneal_lr=True, ent_coef=0.01, vf_coef=0.5, clip_coef=0.2, gamma=0.99, gae_lambda=0.95,
                  max_grad_norm=0.5, hidden_sizes=[64, 64], log_every=5)


def run(target: str, members: int, env_steps: int, seed: int, extra: dict) -> dict:
    from workbench.learn import config as cfg
    from workbench.learn.trainer import make_trainer
    config = cfg.from_dict({**PEER_SHAPE, "target": target, "seeds": members, "seed": seed,
                            "total_env_steps": env_steps, **extra})
    start = time.perf_counter()
    trainer = make_trainer(config)
    made = time.perf_counter() - start
    result = trainer.train()
    sync(trainer.device)
    total = time.perf_counter() - start
    last = result.history[-1]
    reports = last.get("members", [last])
    finals = [r["return/shared"] for r in reports]
    solved = sum(1 for v in finals if v == v and v >= 475) / len(finals)
    per_member = result.env_steps
    return {"members": members, "env_steps_per_member": per_member, "make_s": round(made, 3),
            "wall_s": round(total, 3), "train_s": round(result.wall_time_s, 3),
            "train_without_capture_s": round(result.wall_time_s - result.warmup_s, 3),
            "env_steps_per_s": round(members * per_member / result.wall_time_s),
            "solved_share": round(solved, 3), "median_final": sorted(finals)[len(finals) // 2],
            "graph": trainer.graph.state, "precision": trainer.precision, "threads": trainer.threads}


# WarpDrive's shipped continuous-Tag training config (../shared/peers/ours_tag_training.py has the same)
TAG = dict(num_taggers=10, num_runners=100, grid_length=20.0, episode_length=500, max_acceleration=0.1,
           min_acceleration=-0.1, max_turn=2.356, min_turn=-2.356, num_acceleration_levels=20, num_turn_levels=20,
           num_other_agents_observed=10, tagging_distance=0.02, tag_reward_for_tagger=10.0,
           tag_penalty_for_runner=-10.0, step_penalty_for_tagger=0.0, step_reward_for_runner=0.0, edge_hit_penalty=0.0,
           end_of_game_reward_for_runner=1.0, runner_exits_game_after_tagged=1)


def tag_rate(target: str, members: int, num_envs: int = 100, T: int = 250, iterations: int = 4,
             extra: dict | None = None) -> dict:
    """Env-steps/s (every member's) of a Tag population on WarpDrive's shipped config (with `extra`
    config overrides, e.g. shared_body), median of timed iterations after the eager one and the capture."""
    import statistics
    import torch
    from workbench.learn import config as cfg
    from workbench.learn.trainer import make_trainer
    config = cfg.from_dict({"env": "tag_continuous", "algorithm": "a2c", "env_params": TAG, "num_envs": num_envs,
                            "rollout_length": T, "target": target, "hidden_sizes": [256, 256], "lr": 1e-3,
                            "gamma": 0.98, "log_every": 10**9, "total_env_steps": 10**15, "seeds": members,
                            **(extra or {})})
    trainer = make_trainer(config)
    trainer.train(num_iterations=3)
    times = []
    for _ in range(iterations):
        sync(trainer.device)
        start = time.perf_counter()
        trainer.train(num_iterations=1)
        sync(trainer.device)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30 if trainer.device.type == "cuda" else 0.0
    del trainer
    return {"task": "population_tag", "members": members, "num_envs": num_envs, "T": T, **(extra or {}),
            "iteration_s": round(median, 4),
            "env_steps_per_s": round(members * num_envs * T / median), "peak_gb": round(peak, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--members", type=count, nargs="+", default=[1, 16, 256, 1024])
    parser.add_argument("--env-steps", type=count, default=500_000, help="per member")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides (YAML values)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--tag", type=count, nargs="*", default=None, metavar="MEMBERS",
                        help="instead: Tag populations of these sizes on WarpDrive's shipped config (e.g. 1 8)")
    args = parser.parse_args()
    import yaml
    extra = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    if args.tag:
        base = None
        for members in args.tag:
            row = tag_rate(args.target, members, extra=extra)
            base = base or row["env_steps_per_s"] / members
            row["vs_one_member"] = round(row["env_steps_per_s"] / base, 2)
            print("RESULT " + json.dumps(row), flush=True)
        return
    rows = []
    print(f"{'members':>8} {'first run s':>12} {'second run s':>13} {'train s':>8} {'w/o capture':>12} "
          f"{'env-steps/s':>12} {'reach 475':>10}")
    for members in args.members:
        first = run(args.target, members, args.env_steps, 0, extra)
        second = run(args.target, members, args.env_steps, 10_000, extra)
        row = {"first_run": first, **second}
        rows.append(row)
        print(f"{members:>8} {first['wall_s']:>12.2f} {second['wall_s']:>13.2f} {second['train_s']:>8.2f} "
              f"{second['train_without_capture_s']:>12.2f} {second['env_steps_per_s']:>12.3g} "
              f"{second['solved_share']:>10.0%}", flush=True)
        print("RESULT " + json.dumps({"task": "population", "target": args.target, **row}, default=str), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"machine": machine(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
