"""Ctrl-C and SIGTERM during training: finish the iteration, save, return (a second Ctrl-C stops at once)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

HEARD = ("\n{name}: stopping after this iteration and saving a checkpoint" +
         " (Ctrl-C again stops at once, without saving)")


def install(trainer) -> dict:
    """Handlers that set `trainer._interrupt` to the signal's name, saying once that they heard it;
    returns the handlers they replace (to put back when training returns). Only the main thread may
    install handlers: elsewhere, none."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}

    def handler(signum, frame):
        if trainer._interrupt is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        trainer._interrupt = signal.Signals(signum).name
        if os.environ.get("RANK", "0") == "0":  # (under torchrun every rank hears it: one says so)
            print(HEARD.format(name=trainer._interrupt), file=sys.stderr, flush=True)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    return previous


@contextlib.contextmanager
def caught(trainer):
    """The handlers installed for the block (training and its last checkpoint's save), then the
    ones they replaced."""
    trainer._interrupt = None
    previous = install(trainer)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def pass_on(result, resume_hint: str) -> None:
    """After a run `result` that a signal stopped (its checkpoint saved): SIGTERM goes on to the
    handler that was in place before training (by default the process ends, as the sender asked);
    SIGINT becomes a KeyboardInterrupt saying where the checkpoint is, so a script stops as Ctrl-C
    asks. Nothing for a run that no signal stopped, or off the main thread."""
    if result.stopped_by != "interrupted" or threading.current_thread() is not threading.main_thread():
        return
    if result.signal == "SIGTERM":
        signal.raise_signal(signal.SIGTERM)
        return
    saved = f"checkpoint saved to {result.checkpoint}; {resume_hint}" if result.checkpoint else \
        "no checkpoint was saved (no run_dir)"
    raise KeyboardInterrupt(f"interrupted after {result.iterations} iterations: {saved}")
