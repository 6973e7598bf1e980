"""What the numba `cuda` target's CartPole step costs against its variants, and its machine code.

Each variant runs in its own process with its own kernel cache (the cache key does not hold these
compile options):

    WORKBENCH_CACHE_DIR=/tmp/cache_as_is python bench/probe_numba_step.py as_is --dump $OUT
    WORKBENCH_CACHE_DIR=/tmp/cache_fma python bench/probe_numba_step.py fma
    WORKBENCH_CACHE_DIR=/tmp/cache_regs64 python bench/probe_numba_step.py regs64   # also regs56, regs48

Variants: as_is (as shipped: FMA contraction off); fma (NVVM's default, contraction on); regsN (the
step and reset kernels compiled with max_registers=N). Prints the step kernel's registers a thread,
then microseconds a step of env.random_steps() (blocks of 32 random steps from one CUDA graph) at 1M
and 10M replicas: the median of 5 batches of 640 steps, after 64 steps of warm-up. --dump writes
the step's PTX and SASS (numba's inspect_asm / inspect_sass) into that folder.
"""
from __future__ import annotations

import argparse
import time

import _common as C  # (also puts the checkout on sys.path)


def apply_variant(variant: str) -> None:
    from workbench.compiler.targets import cuda as cuda_target
    if variant == "fma":
        cuda_target._install_fma_switch = lambda: None
    elif variant.startswith("regs"):
        from numba import cuda
        jit, cap = cuda.jit, int(variant[4:])

        def capped(fn=None, **options):
            if fn is not None and not options.get("device"):
                options["max_registers"] = cap
            return jit(fn, **options) if fn is not None else jit(**options)
        cuda.jit = capped
    elif variant != "as_is":
        raise SystemExit(f"unknown variant {variant!r} (as_is, fma, regsN)")


def us_per_step(num_envs: int) -> float:
    import torch

    import workbench as wb
    env = wb.make("cartpole", num_envs=num_envs, target="cuda", seed=0)
    env.random_steps(64)
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        env.random_steps(32 * 20)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / 640)
    return sorted(times)[2] * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", help="as_is, fma or regsN")
    parser.add_argument("--dump", default=None, help="folder for the step kernel's PTX and SASS")
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=[10**6, 10**7])
    args = parser.parse_args(argv)
    apply_variant(args.variant)
    import workbench as wb
    env = wb.make("cartpole", num_envs=args.num_envs[0], target="cuda", seed=0)
    env.random_steps(1)
    kernel = env.kernels._step
    print(args.variant, "registers a thread", list(kernel.get_regs_per_thread().values()))
    if args.dump:
        for sig, ptx in kernel.inspect_asm().items():
            with open(f"{args.dump}/numba_step.ptx", "w") as fh:
                fh.write(ptx)
            with open(f"{args.dump}/numba_step.sass", "w") as fh:
                fh.write(kernel.inspect_sass(sig))
    del env
    for n in args.num_envs:
        print(args.variant, n, f"us/step {us_per_step(n):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
