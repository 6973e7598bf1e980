"""What a Tag step kernel's time depends on: the launch shape (lanes a block, lanes a replica), a
register cap and, on the cuda-c target, another text of the env's CUDA C (an older revision, an
edit), each compiled on its own and timed as env.random_steps() (blocks of random steps from one
CUDA graph: sample-and-step pairs before 2c850f1, the actions drawn in the step since), median of
CUDA-event timings, in microseconds a step.

    python bench/probe_tag_step.py                                  # Tag continuous, the stated config
    python bench/probe_tag_step.py --cu old=/tmp/old.cu             # beside an older .cu, e.g. from
        # git show 12263a3:envs/tag_continuous.cu > /tmp/old.cu
    python bench/probe_tag_step.py --game grid --targets cuda --num-envs 2000 --lanes 128 512 --regs 64
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc

import _common as C  # (also puts the checkout on sys.path)

GAMES = {  # the configurations of the stated env-only table
    "continuous": ("tag_continuous", dict(num_taggers=10, num_runners=100, grid_length=20.0,
                                          num_other_agents_observed=10, num_acceleration_levels=20,
                                          num_turn_levels=20, tagging_distance=0.02, episode_length=500)),
    "grid": ("tag_grid", dict(num_taggers=999, num_runners=1, grid_length=100)),
}


@contextlib.contextmanager
def compiled_as(block: int, max_lanes: int, regs: int | None):
    """Kernels compiled in this block are laid out with `block` lanes a block (multi-agent) and at most
    `max_lanes` a replica, and capped at `regs` registers a thread (cuda-c: NVRTC's
    max_register_count; cuda: numba's max_registers, bypassing its on-disk cache)."""
    import cuda.core
    import numba.cuda

    from workbench.compiler import codegen
    from workbench.compiler.targets import cuda as numba_target, cuda_c
    from workbench.runtime import env as env_mod
    saved = (cuda_c.gpu_layout, numba_target.gpu_layout, cuda.core.ProgramOptions, numba.cuda.jit)

    def layout(n, block_size=256, max_threads_per_env=256, multi_agent_block=128):
        return codegen.gpu_layout(n, block_size, max_lanes, multi_agent_block=block)

    def jit(fn=None, **options):
        if fn is None or options.get("device"):
            return saved[3](**options) if fn is None else saved[3](fn, **options)
        return saved[3](fn, **dict(options, cache=False, max_registers=regs))

    cuda_c.gpu_layout = numba_target.gpu_layout = layout
    if regs:
        cuda.core.ProgramOptions = functools.partial(saved[2], max_register_count=regs)
        numba.cuda.jit = jit
    env_mod._KERNEL_CACHE.clear()
    try:
        yield
    finally:
        cuda_c.gpu_layout, numba_target.gpu_layout, cuda.core.ProgramOptions, numba.cuda.jit = saved
        env_mod._KERNEL_CACHE.clear()


def one(game: str, target: str, num_envs: int, cu: str | None, block: int, max_lanes: int, regs: int | None,
        repeats: int) -> float:
    from workbench.runtime import registry
    from workbench.runtime.env import Env
    name, params = GAMES[game]
    with compiled_as(block, max_lanes, regs):
        defn = registry.definition(name, **params)
        if cu is not None:
            defn.c_source = open(cu).read()
        env = Env(defn, num_envs=num_envs, target=target, seed=0)
    block_steps = env.RANDOM_BLOCK

    def steps():
        env.random_steps(block_steps)

    us = C.steady_us_per_step(steps, block_steps, repeats)
    del env
    gc.collect()
    return us


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=list(GAMES), default="continuous")
    parser.add_argument("--targets", nargs="+", default=["cuda-c"])
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=[100, 1000])
    parser.add_argument("--cu", nargs="*", default=[], metavar="LABEL=PATH",
                        help="other texts of the env's CUDA C to time beside the shipped one (cuda-c)")
    parser.add_argument("--lanes", nargs="+", type=int, default=[128], help="lanes a multi-agent block")
    parser.add_argument("--max-lanes", nargs="+", type=int, default=[256], help="most lanes a replica")
    parser.add_argument("--regs", nargs="+", type=int, default=[0],
                        help="register caps (0: none beyond the source's own; tag_continuous.cu sets "
                             "WB_MAX_REGISTERS 64 itself, so to time it uncapped pass --cu with a copy "
                             "without that line)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    sources = [("shipped", None)] + [tuple(item.split("=", 1)) for item in args.cu]
    info = C.machine()
    print(f"# probe_tag_step on {info['gpu']}; torch {info['torch']}")
    rows = []
    for target in args.targets:
        for label, cu in sources if target == "cuda-c" else sources[:1]:
            for block in args.lanes:
                for max_lanes in args.max_lanes:
                    for regs in args.regs:
                        for n in args.num_envs:
                            variant = f"{label}, {block} lanes a block, <= {max_lanes} a replica" + (
                                f", <= {regs} registers" if regs else "")
                            try:
                                us = f"{one(args.game, target, n, cu, block, max_lanes, regs or None, args.repeats):.1f}"
                            except Exception as exc:  # noqa: BLE001 - a variant that cannot launch is recorded
                                us = f"failed: {type(exc).__name__}"
                            rows.append([target, f"{n:,}", variant, us])
                            print(f"  {target:7s} {n:>7,} {variant:60s} {us} us/step", flush=True)
    print()
    print(C.markdown(["target", "replicas", "variant", "us a step"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
