"""A stacked members' linear layer on the CPU, forward and backward, as MemberLinear runs it against
plain autograd through baddbmm: the shapes of a CartPole population's update (8 members x 1024 rows,
64 inputs) at one thread, outputs 1, 2, 4, 8 and 64.

    python bench/bench_cpu_member_heads.py [--members 8] [--rows 1024] [--threads 1]
"""
from __future__ import annotations

import argparse

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import median_seconds


def _time(fn, repeats: int = 40) -> float:
    for _ in range(3):  # (warm-up)
        fn()
    return median_seconds(fn, "cpu", repeats)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch
    from torch import nn
    from workbench.learn.members import MemberLinear
    torch.set_num_threads(args.threads)
    print(f"{'outputs':>8} {'baddbmm fwd+bwd us':>19} {'MemberLinear fwd+bwd us':>24}")
    for outputs in (1, 2, 4, 8, 64):
        layer = MemberLinear([nn.Linear(args.inputs, outputs) for _ in range(args.members)])
        x = torch.randn(args.members * args.rows, args.inputs, requires_grad=True)
        dy = torch.randn(args.members * args.rows, outputs)

        def plain():
            rows = x.reshape(args.members, -1, args.inputs)
            torch.baddbmm(layer.bias, rows, layer.weight).reshape(-1, outputs).backward(dy)

        def member():
            layer(x).backward(dy)
        print(f"{outputs:>8} {_time(plain) * 1e6:>19.0f} {_time(member) * 1e6:>24.0f}")


if __name__ == "__main__":
    main()
