"""The device's copy bandwidth against the CartPole step kernel's effective bandwidth.

Copy bandwidth: a large device-to-device torch copy (dst.copy_(src)), bytes read + bytes
written, median of repeats. Step bandwidth: env.step() with the store's actions left in place
(the step kernel alone, auto-reset included), at --num-envs replicas, times the bytes one
replica-step must move between the kernel and memory on the path taken every step:

    read:    action, x, x_dot, theta, theta_dot, t, last_return, done
    written: x, x_dot, theta, theta_dot, reward, terminated, truncated, done, t, last_return

(each array's bytes per replica taken from the store's dtypes and shapes: 57 B for CartPole, whose
observation is its state). A finished replica also writes final_obs, last_length and episode and re-draws its
state, about 1/22 of replica-steps with random actions: that traffic (~1.5 B a step) is not
counted, so the figure is a slight underestimate.

    python bench/bench_bandwidth.py                       # the best target, 10M replicas
    python bench/bench_bandwidth.py --target cpu --num-envs 1e6 --copy-mib 256
"""
from __future__ import annotations

import argparse

import _common as C

# array: (times read, times written) per replica-step on the common (no episode end) path
CARTPOLE_ACCESS = {
    "action": (1, 0), "x": (1, 1), "x_dot": (1, 1), "theta": (1, 1), "theta_dot": (1, 1), "t": (1, 1),
    "last_return": (1, 1), "reward": (0, 1), "terminated": (0, 1), "truncated": (0, 1), "done": (1, 1),
}


def copy_bandwidth(device, mib: int, repeats: int) -> dict:
    """Bytes read + written per second of dst.copy_(src) with src, dst of `mib` MiB each."""
    import torch
    n = mib * 2**20 // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if device.type == "cuda":
        median, times = C.median_event_seconds(lambda: dst.copy_(src), repeats, inner=10)
    else:
        median, times = C.median_seconds(lambda: dst.copy_(src), device, repeats, inner=3)
    moved = 2 * n * 4
    del src, dst
    return {"bytes_per_copy": moved, "s_per_copy": median, "all_s": times, "bytes_per_s": moved / median}


def step_bandwidth(target: str, num_envs: int, repeats: int, min_time: float) -> dict:
    import workbench as wb
    env = wb.make("cartpole", num_envs=num_envs, target=target, seed=0)
    env.sample_actions()
    per_replica = {}
    for name, (reads, writes) in CARTPOLE_ACCESS.items():
        tensor = env.data[name]
        size = tensor.element_size() * (tensor[0].numel() if tensor.dim() else 1)
        per_replica[name] = {"bytes": size, "read": reads, "written": writes, "moved": size * (reads + writes)}
    step_bytes = sum(v["moved"] for v in per_replica.values())
    for _ in range(3):
        env.step()
    inner = C.calls_for(env.step, env.device, min_time, 1000, floor=3)
    if env.device.type == "cuda":
        median, times = C.median_event_seconds(env.step, repeats, inner)
    else:
        median, times = C.median_seconds(env.step, env.device, repeats, inner)
    return {"target": target, "num_envs": num_envs, "bytes_per_replica_step": step_bytes, "arrays": per_replica,
            "s_per_step": median, "all_s": times, "steps_per_repeat": inner, "env_steps_per_s": num_envs / median,
            "bytes_per_s": step_bytes * num_envs / median}


def main(argv=None) -> int:
    import torch

    import workbench as wb
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None, help="default: the best target here (cuda with a GPU)")
    parser.add_argument("--num-envs", type=C.count, default=10_000_000)
    parser.add_argument("--copy-mib", type=int, default=None, help="MiB per copy buffer (default 2048 GPU, 256 CPU)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    target = args.target or wb.best_target()
    device = wb.targets.get_target(target).device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    mib = args.copy_mib or (2048 if device.type == "cuda" else 256)
    info = C.machine()
    copy = copy_bandwidth(device, mib, args.repeats)
    print(f"copy bandwidth on {device} ({info['gpu'] or info['cpu']}): {copy['bytes_per_s'] / 1e9:.1f} GB/s "
          f"(read + write of {mib} MiB, median of {args.repeats})")
    step = step_bandwidth(target, args.num_envs, args.repeats, args.min_time)
    ratio = step["bytes_per_s"] / copy["bytes_per_s"]
    rows = [[name, v["bytes"], v["read"], v["written"], v["moved"]] for name, v in step["arrays"].items()]
    rows.append(["total", "", "", "", step["bytes_per_replica_step"]])
    print(f"\nCartPole step on '{target}' at {args.num_envs:,} replicas: bytes moved per replica-step "
          f"(common path; episode-end writes not counted)")
    print(C.markdown(["array", "bytes/replica", "read", "written", "bytes moved"], rows))
    print()
    print(C.markdown(["target", "replicas", "time/step", "env-steps/s", "step GB/s", "copy GB/s", "step / copy"],
                     [[target, f"{args.num_envs:,}", C.fmt_time(step["s_per_step"]), C.fmt_rate(step["env_steps_per_s"]),
                       f"{step['bytes_per_s'] / 1e9:.1f}", f"{copy['bytes_per_s'] / 1e9:.1f}", f"{100 * ratio:.1f}%"]]))
    C.write_json(args.out, {"bench": "bandwidth", "machine": info, "args": vars(args), "copy": copy, "step": step,
                            "ratio": ratio})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
