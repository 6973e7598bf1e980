"""The on-disk compile cache: each compiled env lives in its own directory of the user's cache.

A numba target writes the env's kernel module (the env source, the random-number library, the
target's intrinsics and the generated drivers) to `<cache root>/<digest>/`, imports it from there
and compiles its drivers with numba's `cache=True`, so numba keeps the machine code beside it and
a second process loads instead of compiling. The digest hashes the module's text (source,
parameters, target, layout, bounds checking) and the versions of python, numpy, numba and
numba-cuda, so a change to any of them lands in a fresh directory. The cuda-c target keeps the cubin
NVRTC made of a generated program in a directory of its own (`targets/cuda_c.py`).

The root is `$WORKBENCH_CACHE_DIR`, else `$XDG_CACHE_HOME/warp-workbench/kernels`, else
`~/.cache/warp-workbench/kernels`. Deleting it (or `python -m workbench.compiler.kernel_cache --clear`,
`workbench.compiler.kernel_cache.clear()`) is always safe. Writes are atomic (a file is linked into place
complete, never overwritten), so pytest-xdist workers and torchrun ranks can share one root.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

MODULE_FILE = "kernels.py"
READY_FILE = "compiled"  # written once both kernels compiled and ran: the next make loads them


def cache_root() -> Path:
    """Where compiled envs are kept (see the module docstring)."""
    explicit = os.environ.get("WORKBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warp-workbench" / "kernels"


def enabled() -> bool:
    """False when WORKBENCH_CACHE_DIR is 'off' or '0' (any other value is the cache's folder)."""
    return os.environ.get("WORKBENCH_CACHE_DIR", None) not in ("off", "0")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def versions() -> dict:
    """Library versions a compiled kernel depends on (part of every cache key)."""
    return {"python": platform.python_version(), "numpy": np.__version__, "numba": _version("numba"),
            "numba-cuda": _version("numba-cuda"), "cuda-core": _version("cuda-core"),
            "workbench": _version("warp-workbench")}


# Part of every key: entries of an earlier layout (whose module names held the env's name) are not read
_LAYOUT = 2


def digest(text: str, target: str) -> str:
    """Cache directory name of a kernel module `text` compiled for `target`."""
    key = repr((text, target, sorted(versions().items()), sys.implementation.cache_tag, _LAYOUT))
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def write_once(path: Path, data: bytes) -> None:
    """Put `data` at `path` unless a file is already there; never leaves a partial file."""
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        try:
            os.link(tmp, path)  # atomic and refuses to replace: the first writer wins, its mtime stays
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class KernelModule:
    """A kernel module written to the cache and imported from there."""

    def __init__(self, text: str, target: str, name: str):
        self.digest = digest(text, target)
        self.directory = cache_root() / self.digest
        self.path = self.directory / MODULE_FILE
        self.directory.mkdir(parents=True, exist_ok=True)
        write_once(self.path, text.encode())
        # one name per text: the same source registered under two env names shares one cache entry,
        # and numba's entry names this module
        module_name = f"workbench_kernels_{self.digest}"
        spec = importlib.util.spec_from_file_location(module_name, self.path)
        self.module = importlib.util.module_from_spec(spec)
        # numba names a kernel's module in its cache entry and imports it by that name when loading
        sys.modules[module_name] = self.module
        spec.loader.exec_module(self.module)

    @property
    def namespace(self) -> dict:
        return self.module.__dict__

    def mark_ready(self) -> None:
        write_once(self.directory / READY_FILE, b"")


def is_ready(text: str, target: str) -> bool:
    """True when a kernel module of this text has been compiled (and run) before."""
    return (cache_root() / digest(text, target) / READY_FILE).exists()


def clear() -> int:
    """Delete every cached kernel; returns how many compiled envs were removed."""
    root = cache_root()
    if not root.is_dir():
        return 0
    entries = [p for p in root.iterdir() if p.is_dir()]
    for entry in entries:
        shutil.rmtree(entry, ignore_errors=True)
    return len(entries)


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(prog="python -m workbench.compiler.kernel_cache",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--clear", action="store_true", help="delete every cached kernel")
    args = parser.parse_args()
    if args.clear:
        print(f"removed {clear()} compiled envs from {cache_root()}")
    else:
        root = cache_root()
        count = len([p for p in root.iterdir() if p.is_dir()]) if root.is_dir() else 0
        print(f"{root}: {count} compiled envs")
