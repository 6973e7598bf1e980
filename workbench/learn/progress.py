"""A progress bar for training (tqdm): env-steps/s, returns, and an ETA that knows about early stops.

Used as a trainer callback, so the trainer itself stays UI-free. The bar runs over the iteration
budget; when `target_return` is set it also shows an estimate of the time left until the target
is reached, extrapolated from the recent slope of the mean return.
"""
from __future__ import annotations

import math
import sys
import time
from collections import deque

from .report import learning_returns


class ProgressBar:
    """callback(iteration, metrics) -> True, drawing a tqdm bar over `total_iterations`."""

    def __init__(self, total_iterations: int, start_iteration: int = 0, target_return: float | None = None,
                 file=None, desc: str = "training", frozen=()):
        from tqdm.auto import tqdm
        # with a target the run ends well before its budget: tqdm's time left (to the budget's end) is left
        # out, and "to target" says how long
        fmt = ("{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]" if target_return is not None
               else None)
        # written to a file (a job's log, nohup) rather than a terminal or a notebook: a line every 30 s,
        # not ten a second (25 MB over a night)
        stream = file if file is not None else sys.stderr
        interactive = any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__) or _in_kernel()
        to_log = not interactive and not getattr(stream, "isatty", lambda: False)()
        self.bar = tqdm(total=total_iterations, initial=start_iteration, desc=desc, unit="it", file=file,
                        dynamic_ncols=True, leave=True, bar_format=fmt, mininterval=30.0 if to_log else 0.1)
        self.last_iteration = start_iteration
        self.target = target_return
        self.frozen = tuple(frozen)  # (policies that do not learn: the target waits for the others)
        self.recent = deque(maxlen=8)  # (time, mean return)
        self.last_returns = {}  # shown name -> the last return shown

    def eta_to_target(self) -> float | None:
        """Seconds until the lowest return (every policy's, every member's) reaches the target at the
        recent rate (None: unknown)."""
        if self.target is None or len(self.recent) < 3:
            return None
        (t0, r0), (t1, r1) = self.recent[0], self.recent[-1]
        if r1 >= self.target:
            return 0.0
        slope = (r1 - r0) / max(t1 - t0, 1e-9)
        return (self.target - r1) / slope if slope > 0 else None

    def __call__(self, iteration: int, metrics: dict) -> bool:
        ret = metrics.get("mean_return", float("nan"))
        lowest = _lowest_return(metrics, self.frozen)
        if not math.isnan(lowest):
            self.recent.append((time.perf_counter(), lowest))
        names = [k.removeprefix("return/") for k in metrics if k.startswith("return/")]
        teams = {f"return {n}" + (" (frozen)" if n in self.frozen else ""): metrics[f"return/{n}"] for n in names}
        post = {"steps/s": _si(metrics.get("env_steps_per_s", 0.0))}
        # teams playing against each other cancel out in the mean: one return each
        for name, value in (teams if len(teams) > 1 else {"return": ret}).items():
            # an iteration in which no episode ended (long episodes, DDPG's short iterations) keeps the last return
            if not math.isnan(value):
                self.last_returns[name] = f"{value:.4g}"
            post[name] = self.last_returns.get(name, "-")
        if self.target is not None:
            eta = self.eta_to_target()
            post["to target"] = "?" if eta is None else f"~{eta:.0f}s"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(iteration - self.last_iteration)
        self.last_iteration = iteration
        return True

    @classmethod
    def for_trainer(cls, trainer, file=None) -> "ProgressBar":
        """A bar over the trainer's iteration budget, for `trainer.train(callback=...)`."""
        return cls(trainer.total_iterations(), trainer.iteration, trainer.config.target_return, file=file,
                   frozen=trainer.config.frozen)

    def phase(self, description: str) -> None:
        """What the trainer is doing (the first iteration's compile, then training)."""
        self.bar.set_description(description)

    def close(self):
        self.bar.close()


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (whose stream is no terminal either: Jupyter without
    ipywidgets, qtconsole, Spyder)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and hasattr(shell, "kernel")


def _lowest_return(metrics: dict, frozen=()) -> float:
    """The lowest return among every learning policy (of every member) that ended an episode: what
    target_return waits for (the run stops once all of them reach it), NaN when none did."""
    returns = [v for v in learning_returns(metrics, frozen) if isinstance(v, (int, float)) and not math.isnan(v)]
    return min(returns) if returns else float("nan")


def _si(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"
