"""Env-steps/s against num_envs for each target and env, with gymnasium's vector envs as the baseline.

Each cell: make the env (compile time reported apart), warm up, then `--repeats` timed batches of
(random actions sampled on the device with env.sample_actions() + env.step(); `--actions graph`:
env.random_steps(), blocks of random steps replayed from one CUDA graph, discrete actions drawn by
the step kernel itself since 2c850f1), each batch
bracketed by a device synchronisation; the median is reported. An env-step is one replica step
(all its agents); agent-steps/s = env-steps/s x num_agents. The step keeps final observations where
an episode was truncated, as the trainer asks (`--final-obs every-end`: wherever one ends, the
env's default; gymnax's step keeps none).

    python bench/bench_envs.py --targets cpu --num-envs 1000 100000
    python bench/bench_envs.py --envs cartpole acrobot --num-envs 1e3 1e4 1e5 1e6 1e7 --out runs/bench_envs.json
"""
from __future__ import annotations

import argparse
import gc
import time

import _common as C

GYM_IDS = {"cartpole": "CartPole-v1", "acrobot": "Acrobot-v1", "mountain_car": "MountainCar-v0",
           "mountain_car_continuous": "MountainCarContinuous-v0", "pendulum": "Pendulum-v1"}


def parse_params(items) -> dict:
    import yaml
    params = {}
    for item in items or []:
        key, _, value = item.partition("=")
        params[key] = yaml.safe_load(value)
    return params


def bench_workbench(name, target, num_envs, args, params) -> dict:
    import torch

    import workbench as wb
    row = {"env": name, "target": target, "num_envs": num_envs}
    start = time.perf_counter()
    env = wb.make(name, num_envs=num_envs, target=target, seed=0, **params)
    row["make_s"] = time.perf_counter() - start  # includes the kernel compile on first use
    row["final_obs"] = args.final_obs
    env.keep_final_obs = args.final_obs == "every-end"
    row["num_agents"] = env.num_agents
    per_call = 1
    if args.actions == "sample":
        def step():
            env.step(env.sample_actions())
    elif args.actions == "graph":  # blocks of random steps replayed from one CUDA graph, as a jit'd scan runs them
        per_call = env.RANDOM_BLOCK

        def step():
            env.random_steps(per_call)
    else:
        env.sample_actions()

        def step():
            env.step()
    for _ in range(args.warmup):
        step()
    inner = C.calls_for(step, env.device, args.min_time, args.max_steps, floor=3)
    median, times = C.median_seconds(step, env.device, args.repeats, inner)
    median, times = median / per_call, [t / per_call for t in times]
    row.update(actions=args.actions, steps_per_repeat=inner * per_call, s_per_step=median, all_s_per_step=times,
               env_steps_per_s=num_envs / median, agent_steps_per_s=num_envs * env.num_agents / median)
    del env
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def bench_gym(name, num_envs, args, mode) -> dict:
    import gymnasium as gym
    row = {"env": name, "target": f"gymnasium-{mode}", "num_envs": num_envs, "num_agents": 1}
    gym_id = GYM_IDS[name]
    make = (gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv)
    envs = make([lambda: gym.make(gym_id) for _ in range(num_envs)])
    try:
        envs.reset(seed=0)
        envs.action_space.seed(0)

        def step():
            envs.step(envs.action_space.sample())
        for _ in range(args.warmup):
            step()
        inner = C.calls_for(step, "cpu", args.min_time, args.max_steps, floor=3)
        median, times = C.median_seconds(step, "cpu", args.repeats, inner)
    finally:
        envs.close()
    row.update(steps_per_repeat=inner, s_per_step=median, all_s_per_step=times,
               env_steps_per_s=num_envs / median, agent_steps_per_s=num_envs / median)
    return row


def summary(row) -> str:
    if "error" in row:
        return "FAIL " + row["error"]
    return f"{C.fmt_rate(row['env_steps_per_s'])} env-steps/s ({C.fmt_time(row['s_per_step'])}/step)"


def main(argv=None) -> int:
    import workbench as wb
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["cartpole"])
    parser.add_argument("--targets", nargs="+", default=None, help="default: every target available here")
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=[10**3, 10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timed batch (steps are chosen to fill it)")
    parser.add_argument("--max-steps", type=int, default=2000, help="at most this many steps per timed batch")
    parser.add_argument("--actions", choices=("sample", "graph", "fixed"), default="sample",
                        help="sample: env.sample_actions() then env.step() from Python every step (default); graph: "
                             "env.random_steps(), the same steps replayed in blocks from one CUDA graph; fixed: "
                             "the step kernel alone")
    parser.add_argument("--final-obs", choices=("truncated", "every-end"), default="truncated",
                        help="where the step keeps the final observation (Env.keep_final_obs): where an episode was "
                             "truncated, as the trainer asks (default), or at every episode end")
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", help="env parameter override")
    parser.add_argument("--gym-num-envs", nargs="*", type=C.count, default=[16, 256],
                        help="gymnasium vector env sizes (empty: no baseline)")
    parser.add_argument("--gym-async", action="store_true", help="also time gymnasium's AsyncVectorEnv")
    parser.add_argument("--out", default=None, help="JSON output path")
    args = parser.parse_args(argv)
    targets = args.targets or wb.available_targets()
    params = parse_params(args.param)
    info = C.machine()
    print(f"# bench_envs on {info['cpu']} ({info['cpu_count']} cpus), gpu: {info['gpu']}; "
          f"torch {info['torch']}, numba {info['numba']}")
    rows = []
    for name in args.envs:
        for target in targets:
            for n in args.num_envs:
                try:
                    row = bench_workbench(name, target, n, args, params)
                except Exception as exc:  # noqa: BLE001 - a cell that cannot run is recorded, not fatal
                    row = {"env": name, "target": target, "num_envs": n, "error": f"{type(exc).__name__}: {exc}"[:300]}
                rows.append(row)
                print(f"  {name} {target} {n}: {summary(row)}", flush=True)
        if name in GYM_IDS and not params:
            for mode in ("sync", "async") if args.gym_async else ("sync",):
                for n in args.gym_num_envs:
                    try:
                        row = bench_gym(name, n, args, mode)
                    except Exception as exc:  # noqa: BLE001
                        row = {"env": name, "target": f"gymnasium-{mode}", "num_envs": n,
                               "error": f"{type(exc).__name__}: {exc}"[:300]}
                    rows.append(row)
                    print(f"  {name} gymnasium-{mode} {n}: {summary(row)}", flush=True)
    best_gym = {}
    for row in rows:
        if row["target"] == "gymnasium-sync" and "error" not in row:
            best_gym[row["env"]] = max(best_gym.get(row["env"], 0.0), row["env_steps_per_s"])
    table = []
    for row in rows:
        base = best_gym.get(row["env"])
        rate = row.get("env_steps_per_s")
        ratio = f"{rate / base:.3g}x" if rate and base else "-"
        row["x_gymnasium_sync"] = rate / base if rate and base else None
        table.append([row["env"], row["target"], f"{row['num_envs']:,}",
                      C.fmt_rate(rate) if rate else "FAIL" if "error" in row else "-",
                      C.fmt_rate(row.get("agent_steps_per_s")), C.fmt_time(row.get("s_per_step")), ratio,
                      f"{row['make_s']:.1f} s" if "make_s" in row else "-"])
    print()
    print(C.markdown(["env", "target", "num_envs", "env-steps/s", "agent-steps/s", "time/step", "x gym sync (best)",
                      "make+compile"], table))
    print(f"\nactions: {args.actions}; median of {args.repeats} batches; x gym sync = env-steps/s over the best "
          f"gymnasium SyncVectorEnv rate measured here")
    C.write_json(args.out, {"bench": "envs", "machine": info, "args": vars(args), "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
