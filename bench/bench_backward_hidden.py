"""The backward matmul into a hidden layer (padded_linear._backward_into_hidden: dz W times the hidden
layer's activation derivative, and its bias gradient, in one kernel) against the two steps it replaces
(cuBLAS's matmul, then fused_kernels.activation_backward_bias), at the sizes of Tag's update: 256-wide
hidden layers fed by a 256-wide layer, a 42-action head (48 padded) or a value (8 padded), bf16.

    python bench/bench_backward_hidden.py                                   # shipped tile, Tag's shapes
    python bench/bench_backward_hidden.py --tiles 64,256,4,3 128,128,8,3 64,128,4,4

(a tile: rows, columns, warps, stages of linear_kernels.linear_backward_activation)

Prints RESULT lines (JSON): microseconds a call (median of CUDA-event timings) and the bytes a call
must move at least (dz, y and dh) over that time.
"""
from __future__ import annotations

import argparse
import json

import _common as C  # (also puts the checkout on sys.path)

SHAPES = ["8:105000:256", "8:105000:48", "8:105000:8", "1:690000:256", "1:690000:48"]  # members:rows a member:K


def case(members: int, rows: int, K: int, tile, repeats: int = 9, inner: int = 10) -> dict:
    import torch

    from workbench.learn import fused, padded_linear
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    M, N = max(members, 1), 256
    dz = torch.randn(M * rows, K, device=device, generator=g).to(torch.bfloat16)
    w = (torch.randn(M, N, K, device=device, generator=g) / K ** 0.5).to(torch.bfloat16)
    wc = w if members > 1 else w[0].t().contiguous()
    y = torch.randn(M * rows, N, device=device, generator=g).tanh().to(torch.bfloat16)
    if tile == "two-step":
        def call():
            dy = torch.bmm(dz.reshape(M, -1, K), wc.transpose(1, 2)).reshape(-1, N) if members > 1 else dz @ wc
            dh = torch.empty_like(y)
            programs = -(-rows // padded_linear.BLOCK)
            partials = torch.empty((M, programs, N), dtype=torch.float32, device=device)
            fused._kernels().activation_backward_bias[(programs, M)](
                dy, y, dh, partials, rows, H=N, HP=N, BLOCK=padded_linear.BLOCK, RELU=0)
            return dh, partials.sum(1, keepdim=True)
    else:
        padded_linear.BACKWARD_TILE = tuple(tile)

        def call():
            return padded_linear._backward_into_hidden(dz, wc, y, "tanh", members if members > 1 else 0)
    call()
    torch.cuda.synchronize()
    seconds, _ = C.median_event_seconds(call, repeats, inner)
    moved = (dz.numel() + 2 * y.numel()) * 2
    return {"members": members, "rows": rows, "K": K, "tile": tile, "us": round(seconds * 1e6, 1),
            "GB_s": round(moved / seconds / 1e9)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="members:rows a member:K")
    parser.add_argument("--tiles", nargs="+", default=None, help="rows,columns,warps,stages (default: the shipped one)")
    parser.add_argument("--no-reference", action="store_true", help="leave out the two-step path")
    args = parser.parse_args()
    from workbench.learn import padded_linear
    tiles = [tuple(int(v) for v in t.split(",")) for t in args.tiles] if args.tiles else [padded_linear.BACKWARD_TILE]
    for shape in args.shapes:
        members, rows, K = (int(v) for v in shape.split(":"))
        for tile in ([] if args.no_reference else ["two-step"]) + tiles:
            print("RESULT " + json.dumps(case(members, rows, K, tile)), flush=True)


if __name__ == "__main__":
    main()
