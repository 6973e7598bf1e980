"""The panel's device line: the GPU the target runs on (name, count, memory in use), or the CPU
(cores, RAM in use, this kernel's share, numba and torch threads)."""
from __future__ import annotations

import html
import os
import sys


def _meminfo() -> dict:
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def _process_rss() -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def gpu_count() -> int:
    """Real CUDA GPUs visible to torch (0 on a machine without one)."""
    import torch
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU here
        return 0


def device_summary(target: str) -> str:
    """One line on the device the target runs on: its name, count and memory in use."""
    import torch
    gib = 2.0 ** 30
    if target in ("cuda", "cuda-c", "auto") and gpu_count() > 0:
        index = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        return (f"GPU {index} of {gpu_count()}: {torch.cuda.get_device_name(index)} | memory "
                f"{(total - free) / gib:.2f} / {total / gib:.1f} GiB in use (torch holds "
                f"{torch.cuda.memory_reserved(index) / gib:.2f} GiB) | torch {torch.__version__}")
    info = _meminfo()
    rss = _process_rss()
    memory = ""
    if "MemTotal" in info:
        used = info["MemTotal"] - info.get("MemAvailable", 0)
        memory = f" | RAM {used / gib:.1f} / {info['MemTotal'] / gib:.1f} GiB in use"
    if rss is not None:
        memory += f" (this kernel {rss / gib:.2f} GiB)"
    threads = f"torch threads {torch.get_num_threads()}"
    if "numba" in sys.modules:
        threads = f"numba threads {sys.modules['numba'].config.NUMBA_NUM_THREADS}, " + threads
    return f"cpu: {os.cpu_count()} cores, no GPU in use{memory} | {threads} | torch {torch.__version__}"


def device_line(target: str, gpus: int) -> str:
    """The device line as HTML: device_summary(target) and the GPUs a run would use."""
    try:
        line = device_summary(target)
    except Exception as exc:  # noqa: BLE001 - device queries must never break the panel
        line = f"device information unavailable: {exc}"
    count = gpu_count()
    ranks = f" | GPUs to use: {gpus} of {max(count, 1)}" if count > 1 else " | 1 device"
    return f"<span style='color:#444;font-size:12px;font-family:monospace'>{html.escape(line)}{ranks}</span>"
