"""The wide policy step (learn/fused_wide.py) against the torch path it replaces, at Tag's sizes:
one rollout step of a policy of two 256-wide tanh layers (actor and critic) with 21 x 21 heads and
78 observation features (WarpDrive's Tag config), bf16 weights as the rollout's copies hold them.
The torch path is the model's forward pass under bf16 autocast with the head kernel
(fused.FusedHeadSample). Each variant (rows a program, warps, MMA instructions) runs in its own
process, so each compiles its own kernel and a fault in one does not end the others.

    python bench/bench_wide_step.py                              # 1 k, 10 k, 100 k rows; 8 members x 10 k
    python bench/bench_wide_step.py --rows 100000 --variants 128,8,sync 64,4,sync 128,8,wgmma
    python bench/bench_wide_step.py --shapes 8:10000 --variants 128,8,sync 128,8,sync-t 128,8,sync-p2

(-t: stacked weights laid out as nn.Linear's; -pR: R persistent programs a multiprocessor; -z: every
member acting with member 0's weights)

Prints RESULT lines (JSON): microseconds a step (median of CUDA-event timings over graph replays)
and the share of rows whose actions equal the torch path's (bf16 near-ties may differ).
"""
from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys

import _common as C  # (also puts the checkout on sys.path)

VARIANTS = ["128,8,sync", "64,8,sync", "64,4,sync", "32,4,sync", "128,8,wgmma"]
SHAPES = ["1:1000", "1:10000", "1:100000", "8:10000"]  # members:rows per member


def one(members: int, rows: int, block: int, warps: int, mma: str, repeats: int = 7, inner: int = 20) -> dict:
    import torch

    from workbench.compiler.envdef import MultiDiscrete
    from workbench.learn import fused, fused_wide
    from workbench.learn.members import nn_linear_layout, stack_members
    from workbench.learn.policies import ActionHead, ActorCritic
    device = torch.device("cuda")
    space = MultiDiscrete([21, 21])
    nets = []
    for k in range(members):
        torch.manual_seed(k)
        nets.append(ActorCritic(78, space, (256, 256)))
    model = (stack_members(nets) if members > 1 else nets[0]).to(device)
    head = ActionHead(space).to(device)
    rollout = copy.deepcopy(model)  # (as learners' bf16 rollout copies: linear weights in bf16)
    for module in rollout.modules():
        if getattr(module, "weight", None) is not None and module.weight.dim() >= 2:
            module.weight.data = module.weight.data.to(torch.bfloat16)
    g = torch.Generator(device=device).manual_seed(0)
    N = members * rows
    obs = torch.randn(N, 78, device=device, generator=g)
    noise = torch.rand(N, head.out_dim, device=device, generator=g)
    out = [torch.zeros(N, 2, dtype=torch.long, device=device), torch.zeros(N, device=device),
           torch.zeros(N, device=device)]
    sample = fused.FusedHeadSample(head, device)

    def torch_path():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, value = rollout(obs)
        sample(logits, noise, out[0], out[1])
        out[2].copy_(value.reshape(-1))

    variant = mma
    mma, *flags = mma.split("-")
    if "t" in flags and members > 1:  # stacked weights laid out as nn.Linear's
        nn_linear_layout(rollout)
    persist = next((int(f[1:]) for f in flags if f.startswith("p")), 0)
    fused_wide._tiles = lambda rows, members: (block, warps, persist)
    fused_wide.MMA_SYNC = mma == "sync"
    step = fused_wide.FusedWidePolicyStep(rollout, head, members, "bf16")
    if "z" in flags:  # every member acting with member 0's weights (where weight reads cost, not the layout)
        step.strides.zero_()
    row = dict(task="wide_step", members=members, rows=rows, block=block, warps=warps, mma=variant)
    for name, fn in (("torch", torch_path), ("wide", lambda: step(obs, noise, *out))):
        for _ in range(3):
            fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        median, _ = C.median_event_seconds(graph.replay, repeats, inner)
        row[f"{name}_us"] = round(median * 1e6, 1)
        if name == "torch":
            reference = out[0].clone()
    row["same_actions"] = round(float((out[0] == reference).all(-1).float().mean()), 4)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="*", default=SHAPES, help="members:rows per member")
    parser.add_argument("--variants", nargs="*", default=VARIANTS, help="rows a program,warps,sync|wgmma[-t][-pR][-z]")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # (a child process: shape/variant)
    args = parser.parse_args()
    if args.one:
        shape, variant = args.one.split("/")
        members, rows = (int(x) for x in shape.split(":"))
        block, warps, mma = variant.split(",")
        print("RESULT " + json.dumps(one(members, rows, int(block), int(warps), mma)), flush=True)
        return
    for shape in args.shapes:
        for variant in args.variants:
            done = subprocess.run([sys.executable, __file__, "--one", f"{shape}/{variant}"], capture_output=True,
                                  text=True, timeout=300)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if lines:
                print(lines[-1], flush=True)
            else:
                error = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
                print("RESULT " + json.dumps(dict(task="wide_step", shape=shape, variant=variant, error=error)),
                      flush=True)


if __name__ == "__main__":
    main()
