"""Helpers shared by the bench scripts: timing, machine description, tables, JSON output."""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))


def count(text: str) -> int:
    """argparse type: '1e6' or '1_000_000' -> 1000000."""
    return int(float(text.replace("_", "")))


def sync(device) -> None:
    import torch
    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn, device, repeats: int, inner: int = 1) -> tuple:
    """(median, all) seconds per call of fn over `repeats` timed batches of `inner` calls,
    each batch bracketed by device synchronisation (host wall clock: launch costs included)."""
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times), times


def iteration_seconds(trainer, repeats: int = 4, warmup: int = 2) -> float:
    """Median wall seconds of one training iteration (after `warmup` iterations: compile, graph capture),
    each timed between device synchronisations, the report included."""
    trainer.train(num_iterations=warmup)
    return median_seconds(lambda: trainer.train(num_iterations=1), trainer.device, repeats)[0]


def median_event_seconds(fn, repeats: int, inner: int = 1) -> tuple:
    """Like median_seconds but timed with CUDA events on the current stream (GPU time)."""
    import torch
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times), times


def steady_us_per_step(steps, block: int, repeats: int, warmup: int = 10) -> float:
    """Microseconds a step when each call of steps() runs `block` steps: `warmup` calls first (past the
    first episodes' ends: steady state), then the median of CUDA-event timings of 3 calls."""
    for _ in range(warmup):
        steps()
    median, _ = median_event_seconds(steps, repeats, inner=3)
    return median / block * 1e6


def calls_for(fn, device, min_time: float, cap: int, floor: int = 1) -> int:
    """How many calls of fn fill about `min_time` seconds (from one timed call), in [floor, cap]."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    one = max(time.perf_counter() - start, 1e-7)
    return max(floor, min(cap, int(min_time / one) + 1))


def machine() -> dict:
    """What the numbers were measured on."""
    import numba
    import numpy
    import torch
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpu": platform.processor() or "",
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "numba": numba.__version__,
            "numpy": numpy.__version__, "torch_threads": torch.get_num_threads(),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
            "NUMBA_THREADING_LAYER": os.environ.get("NUMBA_THREADING_LAYER"),
            "NUMBA_ENABLE_CUDASIM": os.environ.get("NUMBA_ENABLE_CUDASIM"),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    try:
        with open("/proc/cpuinfo") as fh:
            names = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        info["cpu"] = names[0] if names else info["cpu"]
    except OSError:
        pass
    try:
        info["load_average"] = os.getloadavg()
    except OSError:
        pass
    return info


def markdown(headers: list, rows: list) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_rate(x) -> str:
    """1.23e9 -> '1.23 G'."""
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def fmt_time(s) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def write_json(path, payload: dict) -> None:
    if not path:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))
    print(f"wrote {path}")
