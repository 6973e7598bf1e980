"""One short table from a gpu_check.sh log folder: every env benchmark row (env-steps/s, and the
ratio to WarpDrive's published/measured figure where one exists), then the tables that the
training and bandwidth benchmarks printed.

    python bench/summarize.py gpu_out/logs
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import _common as C

# env-steps/s of WarpDrive on the same configurations (its README; its numba continuous Tag on an H100)
WARPDRIVE = {("tag_grid", 2000, 1000): 2.9e6, ("tag_continuous", 100, 110): 58e3,
             ("tag_continuous", 1000, 110): 650e3, ("tag_continuous", 2000, 640): 22e3}


def env_rows(folder: Path) -> list:
    rows = []
    for path in sorted(folder.glob("bench_*.json")):
        payload = json.loads(path.read_text())
        if payload.get("bench") != "envs":
            continue
        for r in payload["results"]:
            if r["target"].startswith("gymnasium"):
                rate = r.get("env_steps_per_s")
                rows.append([r["env"], r["target"], f"{r['num_envs']:,}", 1, C.fmt_rate(rate), "-", "-"])
                continue
            rate = r.get("env_steps_per_s")
            ref = WARPDRIVE.get((r["env"], r["num_envs"], r.get("num_agents")))
            rows.append([r["env"], r["target"], f"{r['num_envs']:,}", r.get("num_agents", "?"),
                         C.fmt_rate(rate) if rate else "FAIL " + r.get("error", "")[:80],
                         C.fmt_rate(r.get("agent_steps_per_s")),
                         f"{rate / ref:.2g}x of {C.fmt_rate(ref)}" if rate and ref else "-"])
    return rows


def scaling_rows(folder: Path) -> list:
    rows = []
    for path in sorted(folder.glob("scaling_*.json")):
        for r in json.loads(path.read_text())["results"]:
            rows.append([r["env"], r["ranks"], f"{r['num_envs_per_rank']:,}", C.fmt_time(r["s_per_iteration"]),
                         C.fmt_rate(r["env_steps_per_s"])])
    return rows


def printed_tables(folder: Path, names) -> str:
    out = []
    for name in names:
        path = folder / f"{name}.log"
        if path.exists():
            lines = [ln for ln in path.read_text().splitlines() if ln.startswith("|")]
            if lines:
                out += [f"**{name}**", "", *lines, ""]
    return "\n".join(out)


def main(folder: str) -> int:
    folder = Path(folder)
    rows = env_rows(folder)
    if rows:
        print(C.markdown(["env", "target", "replicas", "agents", "env-steps/s", "agent-steps/s", "vs WarpDrive"], rows))
        print()
    scaling = scaling_rows(folder)
    if scaling:
        print(C.markdown(["env", "GPUs", "replicas per GPU", "time/iteration", "env-steps/s (learning included)"], scaling))
        print()
    print(printed_tables(folder, ["bench_training", "bench_bandwidth"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu_out/logs"))
