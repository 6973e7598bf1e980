"""The fused learner kernels' launch settings on this GPU: rows per tile, warps, stages, programs per
SM, the MMA instructions and the tanh (block: a minibatch's rows per tile, step_block: the policy
step's; mma=2: mma.sync, fused.MMA_SYNC; tanh=0: 2 sigmoid(2x) - 1 instead of tanh.approx),
each timed at a population's sizes (CartPole's 4 observations, 64x64
tanh MLPs, 2 actions, 1024 rows per member and minibatch: the population benchmark's shape) and
checked against the torch path's fp32 gradients; then MemberAdam's step, fused against torch's.

    python bench/tune_fused.py --members 256 1024
    python bench/tune_fused.py --members 1024 --variants block=64,warps=2 block=128,warps=4,mma=2

Each variant runs in its own process (its own compiled kernels). Prints RESULT lines (JSON).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

VARIANTS = ["block=32,warps=2", "block=32,warps=2,tanh=0", "block=64,warps=2", "block=32,warps=2,stages=1",
            "block=64,warps=2,stages=1", "block=32,warps=4,mma=2", "block=64,warps=4,mma=2",
            "block=64,warps=4,mma=2,stages=1", "block=64,warps=4,mma=2,per_sm=4", "block=32,warps=2,step_block=32"]


def parse(spec: str) -> dict:
    out = dict(block=32, step_block=64, warps=2, per_sm=2, stages=0, mma=3, tanh=1)
    for item in spec.split(","):
        key, value = item.split("=")
        out[key] = int(value)
    return out


class Cfg:
    algorithm, normalize_advantages, clip_value = "ppo", True, False
    clip_coef, ent_coef, vf_coef = 0.2, 0.01, 0.5


def problem(M: int, device, O=4, K=2, hidden=(64, 64), per_member=4096, rows=1024):
    import torch
    from workbench.compiler.envdef import Discrete
    from workbench.learn.members import stack_members
    from workbench.learn.policies import ActionHead, ActorCritic
    torch.manual_seed(0)
    model = stack_members([ActorCritic(O, Discrete(K), hidden) for _ in range(M)]).to(device)
    model.head = ActionHead(Discrete(K)).to(device)
    B = M * per_member
    fields = {"obs": torch.randn(B, O, device=device), "actions": torch.randint(0, K, (B,), device=device),
              "logp_old": -torch.rand(B, device=device) * 2, "values": torch.randn(B, device=device),
              "advantages": torch.randn(B, device=device), "returns": torch.randn(B, device=device),
              "mask": (torch.rand(B, device=device) > 0.1).float()}
    idx = (torch.rand(M, per_member, device=device).argsort(1)[:, :rows] + per_member * torch.arange(M, device=device)[:, None])
    live = fields["mask"][idx]
    count = live.sum(1).clamp_min(1)
    adv = fields["advantages"][idx]
    mean = (adv * live).sum(1) / count
    std = ((((adv - mean[:, None]) * live) ** 2).sum(1) / (count - 1)).sqrt()
    return model, fields, idx, count, mean, std


def timed(fn, device, repeats=20) -> float:
    """Median ms of fn() over repeats, after three warm-up calls (CUDA events)."""
    import torch
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def one(spec: str, members: list[int]):
    import torch
    from workbench.learn import fused
    from workbench.learn.algorithms import ppo
    from workbench.learn.members import MemberAdam
    v = parse(spec)
    fused.GRAD_BLOCK, fused.STEP_BLOCK = v["block"], v["step_block"]
    fused.NUM_WARPS, fused.PROGRAMS_PER_SM = v["warps"], v["per_sm"]
    fused.NUM_STAGES = v["stages"] or None
    fused.TANH_APPROX, fused.MMA_SYNC = bool(v["tanh"]), v["mma"] == 2
    device = torch.device("cuda")
    for M in members:
        model, fields, idx, count, mean, std = problem(M, device)
        cfg = Cfg()
        optimizer = MemberAdam(model, torch.full((M,), 1e-3, device=device))
        grads = fused.FusedGradients(model, optimizer, fields, cfg, cfg, M, "bf16")
        stats = torch.zeros((6, M), device=device)
        ms = timed(lambda: grads.gradients(idx, count, mean, std, stats), device)
        got = [g.clone() for g in grads.grads]
        torch.backends.cuda.matmul.allow_tf32 = False
        model.zero_grad(set_to_none=True)
        total, _ = ppo.chunk_loss(model, fields, None, 1, idx.reshape(-1), cfg, count, mean, std, None, M)
        total.backward()
        err = max(float((g - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-12))
                  for g, p in zip(got, model.parameters()))
        print("RESULT " + json.dumps({"kernel": "minibatch_grad", "variant": spec, "members": M,
                                      "ms_per_minibatch": round(ms, 4), "max_rel_err": round(err, 5)}), flush=True)
        step = fused.FusedPolicyStep(model, M, "bf16")
        obs = torch.randn(M * 64, 4, device=device)
        noise = torch.rand(M * 64, 2, device=device)
        actions = torch.zeros(M * 64, dtype=torch.long, device=device)
        logp, values = torch.zeros(M * 64, device=device), torch.zeros(M * 64, device=device)
        ms = timed(lambda: step(obs, noise, actions, logp, values), device, repeats=50)
        print("RESULT " + json.dumps({"kernel": "policy_step", "variant": spec, "members": M,
                                      "ms_per_step": round(ms, 4)}), flush=True)
        del model, fields, optimizer, grads
        torch.cuda.empty_cache()


def adam(members: list[int]):
    import torch
    from workbench.learn import fused
    from workbench.learn.members import MemberAdam
    device = torch.device("cuda")
    for M in members:
        model, *_ = problem(M, device, per_member=1, rows=1)
        P = sum(p[0].numel() for p in model.parameters())
        for fused_on in (True, False):
            optimizer = MemberAdam(model, torch.full((M,), 1e-3, device=device))
            if fused_on:
                optimizer.fused = fused.FusedMemberAdam(optimizer)
            for p in model.parameters():
                p.grad = torch.randn_like(p) * 1e-2
            ms = timed(lambda: optimizer.step(0.5), device)
            print("RESULT " + json.dumps({"kernel": "member_adam", "fused": fused_on, "members": M, "params": P,
                                          "ms_per_step": round(ms, 4)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--adam-only", action="store_true")
    args = parser.parse_args()
    if args.one:
        one(args.one, args.members)
        return
    adam(args.members)
    if args.adam_only:
        return
    for spec in args.variants:
        run = subprocess.run([sys.executable, __file__, "--one", spec, "--members", *map(str, args.members)],
                             capture_output=True, text=True, timeout=300)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT")]
        print("\n".join(lines), flush=True)
        if run.returncode != 0:
            print("RESULT " + json.dumps({"variant": spec, "failed": run.returncode,
                                          "error": run.stderr.strip().splitlines()[-1:]}), flush=True)


if __name__ == "__main__":
    main()
