"""Where a training iteration's GPU time goes: kernels per phase and the costliest kernels.

    python bench/profile_iteration.py --env cartpole --num-envs 1000 10000
    python bench/profile_iteration.py --env tag --num-envs 100 --rollout-length 250 --no-compile

For each size: the median time of a replayed iteration (whole-iteration CUDA graph), the kernels
one replay runs and their summed device time, then, from an eager trainer built the same way, the
kernel count of each phase (rollout, GAE, update) and the 15 kernels with the most device time.
"""
from __future__ import annotations

import argparse
import collections
import json

import torch
from torch.profiler import ProfilerActivity, profile

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import iteration_seconds
import workbench as wb

TAG = dict(num_taggers=10, num_runners=100, grid_length=20.0, episode_length=500, num_other_agents_observed=10,
           num_acceleration_levels=20, num_turn_levels=20, tagging_distance=0.02)


SEEDS = 1  # --seeds: members of a population (num_envs each)
TOP = 15  # --top: kernels listed per phase


def config_for(env, num_envs, T, compile_on, graph):
    if env == "cartpole":
        return wb.PPOConfig(env="cartpole", num_envs=num_envs, rollout_length=T or 32, num_minibatches=4,
                            update_epochs=4, target="auto", cuda_graph=graph, compile=compile_on,
                            log_every=10**9, total_env_steps=10**15, seeds=SEEDS)
    return wb.A2CConfig(env="tag_continuous", env_params=TAG, num_envs=num_envs, rollout_length=T or 100,
                        target="auto", hidden_sizes=(256, 256), lr=1e-3, gamma=0.98, cuda_graph=graph,
                        compile=compile_on, log_every=10**9, total_env_steps=10**15, seeds=SEEDS)


def kernels(prof):
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return events


def summarise(events, repeats=1):
    total = sum(e.device_time_total for e in events) / repeats
    by_name = collections.Counter()
    counts = collections.Counter()
    for e in events:
        by_name[e.name[:90]] += e.device_time_total / repeats
        counts[e.name[:90]] += 1 / repeats
    top = [(name, round(t, 1), round(counts[name], 1)) for name, t in by_name.most_common(TOP)]
    return {"kernels": round(len(events) / repeats, 1), "device_us": round(total, 1), "top": top}


def run(env, num_envs, T, compile_on):
    trainer = wb.make_trainer(config_for(env, num_envs, T, compile_on, graph=True))
    iteration_s = iteration_seconds(trainer, repeats=10, warmup=3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            trainer.train(num_iterations=1)
        torch.cuda.synchronize()
    replay = summarise(kernels(prof), repeats=3)
    print("RESULT " + json.dumps({"env": env, "num_envs": num_envs, "compile": compile_on,
                                  "graph_state": trainer.graph.state, "iteration_ms": round(iteration_s * 1e3, 3),
                                  "env_steps_per_s": round(trainer.steps_per_iteration * trainer.M / iteration_s),
                                  "replay_kernels": replay["kernels"], "replay_device_ms": replay["device_us"] / 1e3}),
          flush=True)
    del trainer
    eager = wb.make_trainer(config_for(env, num_envs, T, compile_on, graph=False))
    eager.train(num_iterations=2)
    eager.env.keep_final_obs = eager.keep_final_obs  # (what train() sets while it runs)
    torch.cuda.synchronize()
    phases = {}
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        eager.collector.rollout()
        torch.cuda.synchronize()
    phases["rollout"] = summarise(kernels(prof))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for g in eager.groups:
            eager.collector.compute_gae(g)
        torch.cuda.synchronize()
    phases["gae"] = summarise(kernels(prof))
    from workbench.learn.trainer import ON_POLICY
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for g in eager.groups:
            ON_POLICY[eager.algorithm].update(
                eager.models[g.name], eager.optimizers[g.name], eager.buffers[g.name].batch(), eager.config,
                chunk_size=eager.chunk_size[g.name], autocast=eager.autocast, stats=eager.metrics.sums[g.name],
                loss_fn=eager.loss_fn, samples=eager.samples[g.name], hp=eager.hp, fused=eager.fused.get(g.name))
        torch.cuda.synchronize()
    phases["update"] = summarise(kernels(prof))
    for name, summary in phases.items():
        print(f"PHASE {env} {num_envs} {name}: {summary['kernels']} kernels, {summary['device_us'] / 1e3:.3f} ms device")
        for kernel, us, count in summary["top"]:
            print(f"    {us:10.1f} us  x{count:<6} {kernel}")
    del eager
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=("cartpole", "tag"), default="cartpole")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1000])
    parser.add_argument("--rollout-length", type=int, default=0)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--seeds", type=int, default=1, help="members of a population (num_envs replicas each)")
    parser.add_argument("--top", type=int, default=15, help="kernels listed per phase")
    args = parser.parse_args()
    global SEEDS, TOP
    SEEDS, TOP = args.seeds, args.top
    for n in args.num_envs:
        run(args.env, n, args.rollout_length, not args.no_compile)


if __name__ == "__main__":
    main()
