"""The Tag learner's fused pieces against the torch ops they replace, at one learner chunk's size
(234 k rows of WarpDrive's Tag config: 78 observation features, 256-wide tanh layers, 21 x 21 heads),
bf16, on a GPU:

- a head's log-probability and entropy, forward and backward through autograd:
  categorical.LogProbEntropy against the torch path of policies.ActionHead;
- a tanh layer's forward: linear_kernels.linear_activation (bias and tanh in the matmul's epilogue)
  against cuBLAS's addmm then torch's tanh, at 80 (78 padded) and 256 input features.

    python bench/bench_learner_layers.py [--rows 234000]

Prints RESULT lines (JSON): microseconds a call, the median of CUDA-event timings over replays of a
CUDA graph holding `--inner` calls (no launch cost from Python).
"""
from __future__ import annotations

import argparse
import json

import _common as C  # (also puts the checkout on sys.path)


def graphed_us(fn, inner: int, repeats: int = 7) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    return C.median_event_seconds(graph.replay, repeats)[0] / inner * 1e6


def head(rows: int, inner: int) -> dict:
    import torch
    from workbench.compiler.envdef import MultiDiscrete
    from workbench.learn import categorical
    from workbench.learn.policies import ActionHead
    head = ActionHead(MultiDiscrete([21, 21])).to("cuda")
    logits = (torch.randn(rows, 42, device="cuda") * 2).bfloat16()
    actions = torch.randint(0, 21, (rows, 2), device="cuda")
    weight = torch.randn(rows, device="cuda")

    def through(fused: bool):
        def step():
            out = logits.detach().requires_grad_(True)
            original = categorical.serves
            categorical.serves = original if fused else (lambda o: False)
            try:
                logp, entropy = head.log_prob_entropy(out, None, actions)
            finally:
                categorical.serves = original
            (logp * weight + entropy * weight).sum().backward()
        return step

    return dict(fused_us=round(graphed_us(through(True), inner), 1),
                torch_us=round(graphed_us(through(False), inner), 1))


def layer(rows: int, features: int, inner: int) -> dict:
    import torch
    from workbench.learn import padded_linear
    x = torch.randn(rows, features, device="cuda").bfloat16()
    w = (torch.randn(256, features, device="cuda") / features ** 0.5).bfloat16()
    b = torch.randn(256, device="cuda").bfloat16()
    fused = graphed_us(lambda: padded_linear._linear_activation_bf16(x, w, b), inner)
    unfused = graphed_us(lambda: torch.addmm(b, x, w.t()).tanh_(), inner)
    err = float((padded_linear._linear_activation_bf16(x, w, b).float() - torch.addmm(b, x, w.t()).tanh_().float()).abs().max())
    return dict(fused_us=round(fused, 1), torch_us=round(unfused, 1), max_abs_diff=err)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=C.count, default=234_000)
    parser.add_argument("--inner", type=int, default=10, help="calls per graph replay")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("bench_learner_layers times the learner's GPU kernels: run it on a machine with a GPU")
    print("RESULT " + json.dumps(dict(task="head_logp_entropy", rows=args.rows, **head(args.rows, args.inner))),
          flush=True)
    for features in (80, 256):
        print("RESULT " + json.dumps(dict(task="linear_tanh_forward", rows=args.rows, features=features,
                                          **layer(args.rows, features, args.inner))), flush=True)


if __name__ == "__main__":
    main()
