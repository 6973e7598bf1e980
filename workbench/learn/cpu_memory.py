"""Freed tensor memory kept in the process while training on the CPU.

glibc's malloc returns a large freed block to the kernel: above its mmap threshold (raised on the fly
to the largest block freed so far) a block is unmapped on free, and the top of the heap is trimmed
once more than twice that threshold is free there. A CPU learner allocates and frees tensors of a
few MB on every pass (a population's activations: [M x rows, hidden] floats), so each pass touched
fresh pages again: 8 CartPole members on 2 cores took about 68 thousand page faults and 0.24 s of
system time every 10 iterations, against 1 to 3 thousand faults and 0.05 s with the thresholds
fixed (mmap above 32 MB, the heap trimmed above 128 MB free; bench/bench_cpu_allocator.py).

`keep_freed_memory` fixes both thresholds once per process. It leaves the allocator alone where the
user chose its settings (glibc's MALLOC_* variables or a malloc tunable in GLIBC_TUNABLES), where
another allocator is preloaded (LD_PRELOAD), and off glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed on 64-bit
TRIM_THRESHOLD = 128 << 20

USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_state: dict = {}  # "applied": the answer of the first call, kept for the process


def why_not() -> str | None:
    """Why the thresholds are left as they are in this process, or None if they can be set."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "not glibc"
    chosen = [name for name in USER_VARIABLES if name in os.environ]
    if "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        chosen.append("GLIBC_TUNABLES")
    if chosen:
        return f"the user set {', '.join(chosen)}"
    if os.environ.get("LD_PRELOAD", "").strip():
        return "LD_PRELOAD loads another library (an allocator, perhaps)"
    return None


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (once per process); True if they are fixed."""
    if "applied" not in _state:
        applied = False
        if why_not() is None:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            applied = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
                bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        _state["applied"] = applied
    return _state["applied"]
