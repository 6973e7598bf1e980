"""Data-parallel training throughput: env-steps/s (learning included, summed over ranks) on 1..N
GPUs. Launch under torchrun; each rank keeps --num-envs replicas (weak scaling: the total batch
grows with the ranks). Rank 0 prints one line and writes --out.

    torchrun --nproc-per-node 2 bench/bench_distributed.py --env cartpole --num-envs 100000
    torchrun --nproc-per-node 2 bench/bench_distributed.py --env tag_continuous --num-envs 1000 \
        --param num_taggers=10 --param num_runners=100
"""
from __future__ import annotations

import argparse
import statistics
import time

import _common as C


def main(argv=None) -> int:
    import torch
    import torch.distributed as dist

    import workbench as wb
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--num-envs", type=C.count, default=100_000)
    parser.add_argument("--rollout-length", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", default=[])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import yaml
    params = {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in args.param)}
    config = wb.PPOConfig(env=args.env, num_envs=args.num_envs, rollout_length=args.rollout_length,
                          num_minibatches=4, update_epochs=4, target=args.target, env_params=params,
                          total_env_steps=10**12, log_every=10**6)
    trainer = wb.make_trainer(config)  # multi-agent envs: one policy per agent group (taggers, runners)
    world = trainer.world_size
    trainer.train(num_iterations=2)  # compile, CUDA graph capture, allocator warm-up
    times = []
    for _ in range(args.iterations):
        C.sync(trainer.device)
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        trainer.train(num_iterations=1)
        C.sync(trainer.device)
        if world > 1:
            dist.barrier()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    rate = trainer.steps_per_iteration / median
    if trainer.is_main:
        print(f"{args.env} {params or ''} ranks={world} replicas/rank={args.num_envs:,} T={args.rollout_length}: "
              f"{median * 1e3:.1f} ms/iteration, {C.fmt_rate(rate)} env-steps/s (learning included)", flush=True)
        C.write_json(args.out, {"bench": "distributed", "machine": C.machine(), "args": vars(args),
                                "results": [{"env": args.env, "ranks": world, "num_envs_per_rank": args.num_envs,
                                             "s_per_iteration": median, "all_s": times,
                                             "env_steps_per_s": rate}]})
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
