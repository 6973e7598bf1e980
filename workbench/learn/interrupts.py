"""Ctrl-C and SIGTERM during training: finish the iteration, save, return (a second Ctrl-C stops at once)."""
from __future__ import annotations

import signal
import threading


def install(trainer) -> dict:
    """Handlers that set `trainer._interrupt` to the signal's name; returns the handlers they replace
    (to put back when training returns). Only the main thread may install handlers: elsewhere, none."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}

    def handler(signum, frame):
        if trainer._interrupt is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        trainer._interrupt = signal.Signals(signum).name

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    return previous
