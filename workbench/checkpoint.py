"""Checkpoint files: written atomically (temp file, fsync, rename), checked on load."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from .errors import WorkbenchError

FORMAT = "warp-workbench-checkpoint"
VERSION = 1


class CheckpointError(WorkbenchError, ValueError):
    pass


def save_atomic(payload: dict, path) -> Path:
    """Write `payload` to `path` so that a crash mid-write leaves the previous file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "version": VERSION, **payload}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(path, map_location="cpu") -> dict:
    """Read a checkpoint, with a clear error for a missing, corrupt or foreign file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or not a checkpoint "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not a warp-workbench checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{str(path)!r} has checkpoint version {payload.get('version')}; this "
                              f"warp-workbench reads version {VERSION}")
    return payload
