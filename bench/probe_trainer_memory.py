"""Device memory a dropped trainer leaves behind: trainers of a shipped config made, trained and
dropped in turn with the garbage collector paused, memory read after each `del`.

    python bench/probe_trainer_memory.py cartpole
    python bench/probe_trainer_memory.py cartpole --stream-per-trainer   # a new side stream each (the old way)

What stays after the first trainer is cuBLAS's per-stream workspaces, made once per process; more after
each later trainer is a leak."""
from __future__ import annotations

import argparse
import gc

import _common  # noqa: F401 (puts the checkout on sys.path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="cartpole")
    parser.add_argument("--trainers", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--stream-per-trainer", action="store_true",
                        help="each trainer's first iteration on a new stream, as before one stream per device")
    args = parser.parse_args(argv)
    import torch
    from workbench.learn import config as cfg, iteration_graph, runs
    from workbench.learn.trainer import make_trainer
    if args.stream_per_trainer:
        iteration_graph._side_stream = torch.cuda.Stream
    config = cfg.replace(cfg.load_yaml(runs.resolve_config(args.config)), num_envs=args.num_envs, progress=False)
    gc.disable()
    base = torch.cuda.memory_allocated()
    for k in range(args.trainers):
        trainer = make_trainer(config)
        trainer.train(num_iterations=3)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - base
        del trainer
        left = torch.cuda.memory_allocated() - base
        print(f"{args.config} trainer {k}: {held / 2**20:.1f} MiB while alive, {left / 2**20:.1f} MiB after del")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
