"""One run at a time in a run folder. A run holds an advisory lock (flock) on its folder from the
moment it is configured until it returns; the OS drops the lock when the process ends, however it
ends, so a killed run leaves nothing to clean up. Under torchrun rank 0 holds it for the job."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..errors import WorkbenchError
from .config import ConfigError

try:
    import fcntl
except ImportError:  # (no flock on Windows: folders are not guarded there)
    fcntl = None

_HELD: dict = {}  # resolved folder -> the open descriptor that holds its lock


class RunFolderInUseError(WorkbenchError, RuntimeError):
    """Another process trains in this run folder."""


def _holds_the_job() -> bool:
    return os.environ.get("RANK", "0") == "0"


def make_folder(run_dir) -> Path:
    """run_dir made (with its parents) if it is not there, or a ConfigError naming run_dir and why."""
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run_dir {str(run_dir)!r} is a file, not a folder: name a folder (--run-dir; run_dir=)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"run_dir {str(run_dir)!r} cannot be made ({exc.strerror or exc}): name a folder you can "
                          f"write to (--run-dir; run_dir=)") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"run_dir {str(run_dir)!r} is not writable: name a folder you can write to "
                          f"(--run-dir; run_dir=)")
    return path


def new_folder(base: str) -> str:
    """`base`, or base-2, base-3, ...: the first name no folder has, made now (two runs started in the
    same second get two folders). Other ranks of a torchrun job only name it."""
    path, k = base, 2
    while True:
        if not _holds_the_job():
            if not Path(path).exists():
                return path
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                pass
        path, k = f"{base}-{k}", k + 1


def claim(run_dir) -> None:
    """Hold run_dir's lock for this process (made if missing; a no-op where this process holds it);
    RunFolderInUseError while another process holds it."""
    if not run_dir or not _holds_the_job():
        return
    path = make_folder(run_dir)
    key = str(path.resolve())
    if key in _HELD or fcntl is None:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunFolderInUseError(f"run folder {str(run_dir)!r} is in use: another process is training in it "
                                  f"now; wait for that run to end (then --resume it), or name another folder "
                                  f"(--run-dir; run_dir=)") from None
    except OSError:  # a file system without locks: the run goes on unguarded
        os.close(fd)
        return
    _HELD[key] = fd


def release(run_dir) -> None:
    """Let go of run_dir's lock, if this process holds it."""
    if not run_dir:
        return
    fd = _HELD.pop(str(Path(run_dir).resolve()), None)
    if fd is not None:
        os.close(fd)


def held(run_dir) -> bool:
    """Whether this process holds run_dir's lock."""
    return bool(run_dir) and str(Path(run_dir).resolve()) in _HELD


@contextlib.contextmanager
def training_in(run_dir):
    """Hold run_dir for the block; a block that fails while the folder is still empty (a compile
    error, a refused config) leaves no empty folder behind."""
    claim(run_dir)
    try:
        yield
    except BaseException:
        if run_dir and _holds_the_job() and Path(run_dir).is_dir() and not any(Path(run_dir).iterdir()):
            release(run_dir)
            Path(run_dir).rmdir()
        raise
    finally:
        release(run_dir)
