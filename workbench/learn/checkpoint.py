"""Checkpoint files: written atomically (temp file, fsync, rename), checked on load."""
from __future__ import annotations

import errno
import os
import socket
import tempfile
import time
from pathlib import Path

import torch

from ..errors import WorkbenchError

FORMAT = "warp-workbench-checkpoint"
VERSION = 1


class CheckpointError(WorkbenchError, ValueError):
    pass


# A temp file whose owner cannot be checked (another host, or an older name) is left alone while
# it is younger than this: a live save rewrites it far more often.
STALE_AFTER_S = 600.0


def _owner_tag() -> str:
    return f"{socket.gethostname().replace('.', '_')}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale_temp(tmp: Path, now: float | None = None) -> bool:
    """Whether `tmp` (a `.NAME.<host>-<pid>.<random>.tmp` file of save_atomic) was left by a save that
    died: its process on this host is gone, or, when that cannot be checked, it is old."""
    host, own_pid = socket.gethostname().replace(".", "_"), os.getpid()
    parts = tmp.name.split(".")
    owner = parts[-3] if len(parts) >= 4 else ""
    owner_host, _, pid_text = owner.rpartition("-")
    if owner_host == host and pid_text.isdigit():
        pid = int(pid_text)
        return pid != own_pid and not _pid_alive(pid)
    try:
        age = (time.time() if now is None else now) - tmp.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > STALE_AFTER_S


def remove_stale_temps(path: Path) -> list:
    """Delete the temp files that killed saves of `path` left in its folder; returns their paths."""
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        if is_stale_temp(tmp):
            try:
                tmp.unlink()
                removed.append(tmp)
            except FileNotFoundError:
                pass
    return removed


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread a moment)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def save_atomic(payload: dict, path) -> Path:
    """Write `payload` to `path` so that a crash mid-write leaves the previous file intact.

    A failed write (a full disk, say) raises CheckpointError and removes its temp file; temp files
    of earlier saves that were killed are removed first."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_owner_tag()}.", suffix=".tmp")
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {str(path)!r}: {exc.strerror or exc}") from None
    payload = {"format": FORMAT, "version": VERSION, **payload}
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # (mkstemp's 0600 would hide it from a shared folder's readers)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) or _is_write_failure(exc):
            previous = f"the previous checkpoint {str(path)!r} is intact" if path.exists() else "no earlier checkpoint"
            reason = "the disk is full" if _errno_of(exc) == errno.ENOSPC else f"{type(exc).__name__}: {exc}"
            raise CheckpointError(f"could not save checkpoint {str(path)!r}: {reason} ({previous}; the partial "
                                  f"file was removed)") from None
        raise
    return path


def _errno_of(exc: BaseException):
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc.errno
        exc = exc.__cause__ or exc.__context__
    return None


def _is_write_failure(exc: BaseException) -> bool:
    """torch.save reports a failed write as a RuntimeError from its zip writer."""
    return isinstance(exc, RuntimeError) and ("write" in str(exc).lower() or _errno_of(exc) is not None)


def to_host(obj):
    """A payload with every tensor copied to the CPU (to send it to another process)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(v) for v in obj)
    return obj


def _which(path) -> str:
    """What to do instead: pass a checkpoint, or for a run's own damaged checkpoint.pt, start anew."""
    if Path(path).name == "checkpoint.pt":
        return ": the run cannot go on from it; train a new run in another folder (--run-dir; run_dir=)"
    return ": pass a run folder or the checkpoint.pt in it"


def load(path, map_location="cpu") -> dict:
    """Read a checkpoint, with a clear error for a missing, corrupt or foreign file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or not a checkpoint "
                              f"({type(exc).__name__}: {str(exc)[:200]}){_which(path)}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not a warp-workbench checkpoint{_which(path)}")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{str(path)!r} has checkpoint version {payload.get('version')}; this "
                              f"warp-workbench reads version {VERSION}")
    return payload


def stored_config(payload: dict, config=None):
    """The config a checkpoint's run trained with (`config`: the run folder's config.yaml read back,
    else the checkpoint's own), its activation as the checkpoint's signature records it where the
    config left it to the default (whose meaning changed: a shared body's default is relu now)."""
    from . import config as cfg
    config = cfg.from_saved(payload["config"]) if config is None else config
    recorded = (payload.get("signature") or {}).get("activation")
    return cfg.replace(config, activation=recorded) if config.activation is None and recorded else config


def shape_mismatch(saved: dict, own: dict):
    """The first parameter (by name) that one of two state dicts lacks or holds in another shape, as
    (name, its shape in saved, its shape in own) in words; None where they fit."""
    def text(tensor):
        return "missing" if tensor is None else f"shape {list(tensor.shape)}"
    for key in sorted(set(own) | set(saved)):
        a, b = saved.get(key), own.get(key)
        if a is None or b is None or tuple(a.shape) != tuple(b.shape):
            return key, text(a), text(b)
    return None


def saved_policy_map(checkpoint) -> dict | None:
    """The policy map {name: agent ids} a checkpoint was trained with (read through a memory map:
    the weights are not loaded), or None when it records none."""
    try:
        payload = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001 - an older or foreign file: trainer.load names what is wrong
        return None
    policies = payload.get("signature", {}).get("policies") if isinstance(payload, dict) else None
    return {name: list(ids) for name, ids in policies.items()} if isinstance(policies, dict) else None
