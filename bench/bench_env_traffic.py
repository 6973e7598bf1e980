"""Memory traffic and kernel launches of one env step against the minimum the env's state needs.

For every shipped env (or --envs), on each target and at each size:

- minimum bytes per replica-step: what one step must move if each array is touched once: every
  persistent state array of the env read and written, the action read, reward, obs, terminated and
  truncated written, t, last_return (the running return) and done read and written (each array's bytes per
  replica from the store's dtypes and shapes; an observation that is the state, envdef.observed_state,
  moves nothing of its own). Scratch arrays are left out: an env array is
  scratch when, over PROBE_STEPS random steps of PROBE_REPLICAS replicas on the cpu target (same
  params), it holds one and the same constant after every step (Tag's neighbour lists, emptied
  after each use; a slot array left all -1; also tag_grid's in_game with one runner, whose tag
  ends the episode and the same step's reset refills it). Episode-end traffic (final_obs,
  last_length, episode and the reset's writes) is not counted either, so the minimum
  is a slight underestimate of a real step's needs. The step keeps final observations where an
  episode was truncated, as the trainer asks (`--final-obs every-end`: the env's default).
- launches per step (GPU targets): the CUDA kernels torch.profiler records over LAUNCH_STEPS
  steps of env.step(env.sample_actions()), and of env.random_steps(LAUNCH_STEPS) (CUDA graph
  replays), divided by the steps; memcpy/memset are counted apart. Not applicable on cpu.
- DRAM bytes per step (GPU, --ncu): Nsight Compute on a child run of this script (--child: make
  the env, warm up, then NCU_STEPS steps with the actions left in place inside a profiler range),
  dram__bytes_read.sum + dram__bytes_write.sum over its kernels. ncu flushes the caches before each
  kernel, so reads are cold; writes a kernel leaves in L2 are not counted, so where the arrays fit
  in L2 (about 50 MB on an H100) the figure can fall below the minimum. Skipped, saying so, when ncu
  is not on PATH.
- time per step: env.step() with the store's actions left in place (the step kernel alone),
  median of --repeats synchronised batches after a warm-up, as bench_bandwidth.py times it; then
  env-steps/s and the achieved bandwidth, minimum bytes x replicas / time (and DRAM bytes / time),
  each as a share of the device's copy bandwidth measured in the same run (bench_bandwidth's).
  The cuda-c target runs only the envs with CUDA C phases; the others' rows say skipped.

    python bench/bench_env_traffic.py                           # every env, best target (+ cuda-c)
    python bench/bench_env_traffic.py --targets cpu --num-envs 1000
    python bench/bench_env_traffic.py --envs tag_grid --param tag_grid:grid_length=50 --ncu --out runs/traffic.json
"""
from __future__ import annotations

import argparse
import collections
import csv
import gc
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # imported by path (the tests)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from bench_bandwidth import copy_bandwidth  # noqa: E402

ENVS = ["cartpole", "acrobot", "mountain_car", "mountain_car_continuous", "pendulum", "tag_continuous", "tag_grid"]
DEFAULT_NUM_ENVS = {"tag_continuous": [1000], "tag_grid": [2000]}  # classic control: CLASSIC_NUM_ENVS
CLASSIC_NUM_ENVS = [10**6, 10**7]
DEFAULT_PARAMS = {"tag_continuous": dict(num_taggers=10, num_runners=100, num_other_agents_observed=10),
                  "tag_grid": dict(num_taggers=999, num_runners=1, grid_length=100)}
# 8 steps of 4 replicas left Tag's in_game and runners_left constant (no tag yet): too short to tell
PROBE_STEPS, PROBE_REPLICAS = 32, 16
LAUNCH_STEPS = 64  # a multiple of Env.RANDOM_BLOCK, so random_steps replays whole graphs
WARMUP_STEPS = 20
NCU_STEPS = 5
NCU_METRICS = {"dram__bytes_read.sum": "read", "dram__bytes_write.sum": "written", "gpu__time_duration.sum": "ns"}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}
TIME_UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
# the framework's per-step arrays: (times read, times written) on the common (no episode end) path
FRAMEWORK_ACCESS = {"action": ("input", 1, 0), "reward": ("output", 0, 1), "obs": ("output", 0, 1),
                    "terminated": ("output", 0, 1), "truncated": ("output", 0, 1), "done": ("clock", 1, 1),
                    "t": ("clock", 1, 1), "last_return": ("clock", 1, 1)}


def env_params(items) -> dict:
    """--param ENV:KEY=VALUE items -> {env: {key: value}} (values read as YAML: 10, 0.5, true)."""
    import yaml
    params = collections.defaultdict(dict)
    for item in items or []:
        name, sep, pair = item.partition(":")
        key, eq, value = pair.partition("=")
        if not sep or not eq or not key:
            raise SystemExit(f"--param takes ENV:KEY=VALUE, got {item!r}")
        params[name][key] = yaml.safe_load(value)
    return dict(params)


def classify_arrays(env, steps: int = PROBE_STEPS) -> dict:
    """{env array: "state" | "scratch"}: scratch when, over `steps` random steps of `env`, the array
    holds one and the same constant after every step."""
    import torch
    own = [k for k, spec in env.definition.arrays.items() if spec.owner == "env"]
    seen = {k: set() for k in own}
    for _ in range(steps):
        env.step(env.sample_actions())
        for k in own:
            values = torch.unique(env.store[k])
            seen[k].add(values.item() if values.numel() == 1 else None)
    return {k: "scratch" if len(s) == 1 and None not in s else "state" for k, s in seen.items()}


def probe_arrays(name: str, params: dict) -> list:
    """array_traffic of env `name` with its arrays classified on the cpu target (PROBE_REPLICAS replicas)."""
    import workbench as wb
    env = wb.make(name, num_envs=PROBE_REPLICAS, target="cpu", seed=0, **params)
    return array_traffic(env, classify_arrays(env))


def array_traffic(env, kinds: dict) -> list:
    """One row per store array: bytes per replica, role, times read and written per step on the
    common path, bytes moved (0 for scratch and episode-end arrays)."""
    rows = []
    for name, tensor in env.store.items():
        size = tensor.element_size() * tensor[0].numel()
        if name in kinds:
            role, reads, writes = kinds[name], int(kinds[name] == "state"), int(kinds[name] == "state")
        elif name == "obs" and env.definition.obs_state:  # the state itself (envdef.observed_state): no copy
            role, reads, writes = "the state", 0, 0
        else:
            role, reads, writes = FRAMEWORK_ACCESS.get(name, ("episode end", 0, 0))
        rows.append({"array": name, "bytes": size, "role": role, "read": reads, "written": writes,
                     "moved": size * (reads + writes)})
    return rows


def minimum_bytes(rows: list) -> int:
    return sum(row["moved"] for row in rows)


def kernel_launches(fn, steps: int) -> dict:
    """Kernels and memcpy/memset per step that torch.profiler records while fn() runs `steps` steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle": one cycle here
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    names = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    copies = sum(n for k, n in names.items() if k.startswith(("Memcpy", "Memset")))
    return {"kernels_per_step": (sum(names.values()) - copies) / steps, "copies_per_step": copies / steps,
            "names": dict(names)}


def parse_ncu_csv(text: str) -> list:
    """Per kernel launch, in order: {"id", "kernel", "read", "written", "ns"} (bytes, nanoseconds), from
    the output of `ncu --csv --metrics ...`; lines before the header (ncu's notes, the program's own) are
    skipped, scaled units (Kbyte, usecond, ...) converted and thousands separators dropped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches = {}
    for row in csv.DictReader(line for line in lines[start:] if line.startswith('"')):
        field = NCU_METRICS.get(row.get("Metric Name"))
        if field is None:
            continue
        unit = row["Metric Unit"]
        scale = BYTE_UNITS.get(unit) or TIME_UNITS.get(unit)
        if scale is None:
            raise ValueError(f"ncu metric {row['Metric Name']} has unit {unit!r}, not one of "
                             f"{sorted(BYTE_UNITS) + sorted(TIME_UNITS)}")
        launch = launches.setdefault(row["ID"], {"id": int(row["ID"]), "kernel": row["Kernel Name"],
                                                 "read": 0.0, "written": 0.0, "ns": 0.0})
        launch[field] = float(row["Metric Value"].replace(",", "")) * scale
    return list(launches.values())


def ncu_traffic(name: str, target: str, num_envs: int, params: dict, final_obs: str = "truncated",
                steps: int = NCU_STEPS) -> dict:
    """DRAM bytes and kernel time per step of a child run of this script under Nsight Compute."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"skipped": "ncu is not on PATH"}
    child = [sys.executable, str(Path(__file__).resolve()), "--child", "--envs", name, "--targets", target,
             "--num-envs", str(num_envs), "--ncu-steps", str(steps), "--final-obs", final_obs]
    for key, value in params.items():
        child += ["--param", f"{name}:{key}={value}"]
    command = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--print-units", "base",
               "--metrics", ",".join(NCU_METRICS), "--csv"] + child
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    try:
        launches = parse_ncu_csv(proc.stdout)
    except ValueError as exc:
        return {"skipped": str(exc)}
    if proc.returncode != 0 or not launches:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"skipped": f"ncu exited {proc.returncode} with {len(launches)} kernels: {' / '.join(tail)}"[:400]}
    kernels = {}
    for launch in launches:
        k = kernels.setdefault(launch["kernel"], {"launches": 0, "read": 0.0, "written": 0.0, "ns": 0.0})
        k["launches"] += 1
        for field in ("read", "written", "ns"):
            k[field] += launch[field]
    total = {field: sum(launch[field] for launch in launches) / steps for field in ("read", "written", "ns")}
    return {"steps": steps, "read_per_step": total["read"], "written_per_step": total["written"],
            "bytes_per_step": total["read"] + total["written"], "kernel_ns_per_step": total["ns"],
            "kernels": kernels}


def child(args, params) -> int:
    """The run ncu profiles: warm-up outside the profiler range, NCU_STEPS steps inside it."""
    import torch

    import workbench as wb
    name, target, num_envs = args.envs[0], args.targets[0], args.num_envs[0]
    env = wb.make(name, num_envs=num_envs, target=target, seed=0, **params.get(name, {}))
    env.keep_final_obs = args.final_obs == "every-end"
    env.sample_actions()
    for _ in range(WARMUP_STEPS):
        env.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(args.ncu_steps):
        env.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def step_launches(env) -> tuple:
    """kernel_launches of env.step(env.sample_actions()) and of env.random_steps, each after a warm-up."""
    def sampled():
        for _ in range(LAUNCH_STEPS):
            env.step(env.sample_actions())
    sampled()
    env.random_steps(LAUNCH_STEPS)
    return (kernel_launches(sampled, LAUNCH_STEPS),
            kernel_launches(lambda: env.random_steps(LAUNCH_STEPS), LAUNCH_STEPS))


def step_time(env, repeats: int, min_time: float) -> tuple:
    """(median, all) seconds of env.step() with the store's actions left in place."""
    env.sample_actions()
    for _ in range(WARMUP_STEPS):
        env.step()
    inner = C.calls_for(env.step, env.device, min_time, 1000, floor=3)
    if env.device.type == "cuda":
        return C.median_event_seconds(env.step, repeats, inner)
    return C.median_seconds(env.step, env.device, repeats, inner)


def bench_cell(name, target, num_envs, params, min_bytes, copy, args) -> dict:
    import workbench as wb
    row = {"env": name, "target": target, "num_envs": num_envs, "params": params,
           "min_bytes_per_replica_step": min_bytes, "launches": None, "random_steps_launches": None, "dram": None}
    env = wb.make(name, num_envs=num_envs, target=target, seed=0, **params)
    row["final_obs"] = args.final_obs
    env.keep_final_obs = args.final_obs == "every-end"
    if env.device.type == "cuda":
        row["launches"], row["random_steps_launches"] = step_launches(env)
    median, times = step_time(env, args.repeats, args.min_time)
    cuda = env.device.type == "cuda"
    del env
    gc.collect()
    if cuda:
        import torch
        torch.cuda.empty_cache()
    if args.ncu and target != "cpu":
        row["dram"] = ncu_traffic(name, target, num_envs, params, args.final_obs)
    row.update(s_per_step=median, all_s=times, env_steps_per_s=num_envs / median,
               min_bytes_per_s=min_bytes * num_envs / median)
    row["min_share_of_copy"] = row["min_bytes_per_s"] / copy["bytes_per_s"]
    if row["dram"] and "bytes_per_step" in row["dram"]:
        row["dram_bytes_per_s"] = row["dram"]["bytes_per_step"] / median
        row["dram_share_of_copy"] = row["dram_bytes_per_s"] / copy["bytes_per_s"]
    return row


def has_c_phases(name: str, params: dict) -> bool:
    from workbench.runtime import registry
    return registry.definition(name, **params).c_source is not None


def default_targets() -> list:
    import workbench as wb
    targets = [wb.best_target()]
    if "cuda-c" in wb.available_targets() and "cuda-c" not in targets:
        targets.append("cuda-c")
    return targets


def device_of(target: str):
    import torch

    import workbench as wb
    device = wb.targets.get_target(target).device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def launch_cell(launches) -> str:
    if launches is None:
        return "n/a"
    copies = launches["copies_per_step"]
    return f"{launches['kernels_per_step']:.2f}" + (f" + {copies:.2f} copies" if copies else "")


def table_row(row) -> list:
    lead = [row["env"], row["target"], f"{row['num_envs']:,}"]
    if "error" in row or "skipped" in row:
        return lead + [f"FAIL {row['error'][:80]}" if "error" in row else f"skipped: {row['skipped']}"] + ["-"] * 9
    dram = row["dram"] or {}
    dram_cell = f"{dram['bytes_per_step'] / row['num_envs']:.1f}" if "bytes_per_step" in dram else \
        ("skipped" if dram else "-")
    return lead + [row["min_bytes_per_replica_step"],
                   launch_cell(row["launches"]), launch_cell(row["random_steps_launches"]),
                   dram_cell, C.fmt_time(row["s_per_step"]), C.fmt_rate(row["env_steps_per_s"]),
                   f"{row['min_bytes_per_s'] / 1e9:.3g}", f"{100 * row['min_share_of_copy']:.1f}%",
                   f"{row['dram_bytes_per_s'] / 1e9:.3g} ({100 * row['dram_share_of_copy']:.1f}%)"
                   if "dram_bytes_per_s" in row else "-"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--targets", nargs="+", default=None, help="default: the best target here, and cuda-c if "
                        "available")
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=None,
                        help="replicas, for every env (default: 1e6 and 1e7 classic control, 1000 tag_continuous, "
                             "2000 tag_grid)")
    parser.add_argument("--param", action="append", metavar="ENV:KEY=VALUE",
                        help="env parameter, over this script's defaults for that env (Tag's sizes)")
    parser.add_argument("--final-obs", choices=("truncated", "every-end"), default="truncated",
                        help="where the step keeps final observations (Env.keep_final_obs): where truncated, as the "
                             "trainer asks (default), or at every episode end")
    parser.add_argument("--ncu", action="store_true", help="measure DRAM bytes with Nsight Compute (GPU targets)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timed batch")
    parser.add_argument("--copy-mib", type=int, default=None, help="MiB per copy buffer (default 2048 GPU, 256 CPU)")
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ncu-steps", type=int, default=NCU_STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    given = env_params(args.param)
    params = {name: {**DEFAULT_PARAMS.get(name, {}), **given.get(name, {})} for name in args.envs}
    if args.child:
        return child(args, params)
    targets = args.targets or default_targets()
    info = C.machine()
    print(f"# bench_env_traffic on {info['cpu']} ({info['cpu_count']} cpus), gpu: {info['gpu']}; "
          f"torch {info['torch']}, numba {info['numba']}")
    if args.ncu and shutil.which("ncu") is None:
        print("ncu is not on PATH: no DRAM measurement")
    copies = {}
    for target in targets:
        device = device_of(target)
        if str(device) not in copies:
            mib = args.copy_mib or (2048 if device.type == "cuda" else 256)
            copies[str(device)] = copy_bandwidth(device, mib, args.repeats)
            print(f"copy bandwidth on {device}: {copies[str(device)]['bytes_per_s'] / 1e9:.1f} GB/s "
                  f"(read + write of {mib} MiB, median of {args.repeats})")
    envs, rows = {}, []
    for name in args.envs:
        traffic = probe_arrays(name, params[name])
        envs[name] = {"params": params[name], "arrays": traffic, "min_bytes_per_replica_step": minimum_bytes(traffic)}
        shown = f"{name} {params[name]}" if params[name] else name
        print(f"\n{shown}: bytes per replica-step, each array touched once (scratch: one constant after every "
              f"step of {PROBE_STEPS} random steps of {PROBE_REPLICAS} replicas on cpu)")
        print(C.markdown(["array", "bytes/replica", "counted as", "read", "written", "bytes moved"],
                         [[r["array"], r["bytes"], r["role"], r["read"], r["written"], r["moved"]] for r in traffic]
                         + [["minimum", "", "", "", "", envs[name]["min_bytes_per_replica_step"]]]))
        for target in targets:
            for n in args.num_envs or DEFAULT_NUM_ENVS.get(name, CLASSIC_NUM_ENVS):
                if target == "cuda-c" and not has_c_phases(name, params[name]):
                    rows.append({"env": name, "target": target, "num_envs": n, "skipped": "no CUDA C phases"})
                    continue
                try:
                    row = bench_cell(name, target, n, params[name], envs[name]["min_bytes_per_replica_step"],
                                     copies[str(device_of(target))], args)
                except Exception as exc:  # noqa: BLE001 - a cell that cannot run is recorded, not fatal
                    row = {"env": name, "target": target, "num_envs": n, "error": f"{type(exc).__name__}: {exc}"[:300]}
                rows.append(row)
                print(f"  {name} {target} {n:,}: " + (row.get("error") or
                      f"{C.fmt_rate(row['env_steps_per_s'])} env-steps/s ({C.fmt_time(row['s_per_step'])}/step)"),
                      flush=True)
    print()
    print(C.markdown(["env", "target", "replicas", "min B/replica-step", "launches/step", "launches/step "
                      "(random_steps)", "DRAM B/replica-step", "time/step", "env-steps/s", "min GB/s", "min / copy",
                      "DRAM GB/s (/ copy)"], [table_row(row) for row in rows]))
    print("\nmin: the bytes the state needs (scratch and episode-end arrays not counted); launches: CUDA kernels of "
          "env.step(env.sample_actions()), n/a on cpu; time: env.step() with the actions in place")
    C.write_json(args.out, {"bench": "env_traffic", "machine": info, "args": vars(args), "copy": copies, "envs": envs,
                            "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
