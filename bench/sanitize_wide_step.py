"""The wide policy step (learn/fused_wide.py) for compute-sanitizer: every program shape at the GPU
test's layer sizes and at WarpDrive's Tag sizes, built for mma.sync or for Hopper's warpgroup MMA,
each case synchronised and checked against the torch path before the next, so a bad access is
reported under the case that made it.

    compute-sanitizer --tool memcheck python bench/sanitize_wide_step.py --mma wgmma
    python bench/sanitize_wide_step.py --mma sync --cases tag8

Prints one CASE line (JSON) a case: the share of rows whose actions equal the torch path's (bf16
near-ties may differ) and the largest value difference.
"""
from __future__ import annotations

import argparse
import json

import _common as C  # noqa: F401  (puts the checkout on sys.path)

# name: (members, heads' sizes, hidden sizes, rows a member, observation features, one body, activation)
CASES = {
    "odd": (1, [5, 3], (160, 96), 70, 13, False, "tanh"),
    "narrow_first": (2, [4], (48, 200), 64, 13, False, "tanh"),
    "narrow_first_shared": (2, [5, 3], (48, 200), 64, 13, True, "tanh"),
    "narrow_first_relu": (2, [4], (48, 200), 64, 13, False, "relu"),
    "tag1": (1, [21, 21], (256, 256), 10000, 78, False, "tanh"),
    "tag8": (8, [21, 21], (256, 256), 10000, 78, False, "tanh"),
    "tag8_taggers": (8, [21, 21], (256, 256), 1000, 78, False, "tanh"),
    "warpdrive8": (8, [21, 21], (256, 256), 10000, 78, True, "relu"),
}
TILES = ("TINY_STEP", "SMALL_STEP", "LARGE_STEP")


def run_case(name: str, tiles: str, mma: str) -> dict:
    import torch

    from workbench.compiler.envdef import Discrete, MultiDiscrete
    from workbench.learn import fused_wide
    from workbench.learn.compiled import act_and_record
    from workbench.learn.members import stack_members
    from workbench.learn.policies import ActionHead, ActorCritic, SharedActorCritic
    M, sizes, hidden, rows, O, shared, act = CASES[name]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    space = Discrete(sizes[0]) if len(sizes) == 1 else MultiDiscrete(sizes)
    nets = []
    for k in range(M):
        torch.manual_seed(20 + k)
        nets.append((SharedActorCritic if shared else ActorCritic)(O, space, hidden, act))
    model = (stack_members(nets) if M > 1 else nets[0]).to(device)
    model.head = ActionHead(space).to(device)
    for p in model.parameters():
        p.data.add_(0.05 * torch.randn_like(p))
    fused_wide._tiles = lambda rows, members, shape=getattr(fused_wide, tiles): shape
    fused_wide.MMA_SYNC = mma == "sync"
    g = torch.Generator().manual_seed(8)
    obs = torch.randn(M * rows, O, generator=g).to(device)
    noise = torch.rand(M * rows, model.head.out_dim, generator=g).to(device)
    want = [torch.zeros((M * rows,) + model.head.act_shape, dtype=torch.long, device=device),
            torch.zeros(M * rows, device=device), torch.zeros(M * rows, device=device)]
    with torch.no_grad():
        act_and_record(model, model.head, obs, None, noise, False, *want)
    got = [torch.full_like(want[0], -1), torch.zeros_like(want[1]), torch.zeros_like(want[2])]
    step = fused_wide.FusedWidePolicyStep(model, model.head, M, "bf16" if device.type == "cuda" else "fp32")
    step(obs, noise, *got)
    obs_out = torch.zeros_like(obs)
    env_action = torch.full((M * rows // 2, 4) + model.head.act_shape, -1, dtype=torch.int32, device=device)
    step(obs, noise, *[torch.zeros_like(w) for w in want], obs_out=obs_out, env_action=env_action,
         agents=slice(1, 3))
    E_member, A = max(rows // 4, 1), 4
    final_obs = torch.randn(M * E_member, A, O, generator=g).to(device)
    truncated = (torch.rand(M * E_member, generator=g) < 0.5).float().to(device)
    values = torch.zeros(M * E_member, 2, device=device)
    step.truncated_values(final_obs, truncated, torch.zeros_like(truncated), values, slice(1, 3))
    if device.type == "cuda":
        torch.cuda.synchronize()
    same = (got[0] == want[0]).reshape(M * rows, -1).all(-1)
    return dict(case=name, tiles=tiles, mma=mma, same_actions=round(float(same.float().mean()), 4),
                value_error=round(float((got[2] - want[2]).abs().max()), 4),
                recorded=bool(torch.equal(obs_out, obs)), values_finite=bool(values.isfinite().all()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mma", choices=("sync", "wgmma"), default="sync")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--tiles", nargs="*", default=list(TILES), choices=list(TILES))
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():  # (a dry run in Triton's interpreter: TRITON_INTERPRET=1)
        from workbench.learn import fused
        fused.INTERPRET_ON_CPU = True
    for name in args.cases:
        for tiles in args.tiles:
            print(f"case {name} {tiles} {args.mma}", flush=True)
            print("CASE " + json.dumps(run_case(name, tiles, args.mma)), flush=True)


if __name__ == "__main__":
    main()
