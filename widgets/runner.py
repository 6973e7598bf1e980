"""The training panel's engine, usable without any widget: a run (training, or rollouts alone)
in a background thread, reporting through plain callbacks and stopped through a threading.Event.

    run = Runner(RunSpec(config=wb.PPOConfig(env="cartpole", num_envs=64, target="cpu")))
    run.start(); ...; run.stop(); result = run.wait()

This module drives a run: its thread, state, Stop, wait, and what the run reports through (its
metrics and the recorded episodes it pulls). What the run does is in jobs.py: training through
`Trainer.train(callback=...)`, rollouts alone, or training on several ranks under torchrun.
The callback records the metrics and returns False once Stop was asked for, so a stop takes effect
at the next metrics pull (every `log_every` iterations; the default 1 makes it the end of the
current iteration). The trainer itself knows nothing of this module.

A run continues another: `Runner(spec, resume=previous)` takes the previous run's trainer (and its
history) and calls `train()` again, so the iteration count goes on where Stop left it.
Every run writes its config.yaml and metrics.csv into `config.run_dir` (`default_run_dir` names one).

One run goes at a time in a process: a second `start()` while one goes raises (two runs would
share the cores, and a trainer built meanwhile would measure its thread counts under that load);
`running_runs()` lists the one going.
"""
from __future__ import annotations

import math
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from workbench.learn import config as cfg
from workbench.learn import population
from workbench.learn.config import ConfigError
from workbench.learn.metrics import keep_report

from . import jobs
from .runfiles import default_run_dir, read_run  # noqa: F401 - importable from here too
from .status import refused_text

STATES = ("idle", "compiling", "running", "finished", "stopped", "error")
_started: "weakref.WeakSet" = weakref.WeakSet()  # a run's thread holds its Runner while it goes
_starting = threading.Lock()


def running_runs() -> list:
    """The Runners going in this process (started, not ended)."""
    return [run for run in list(_started) if run.running]


def check_replicas(replicas, num_envs: int, members: int) -> None:
    """ConfigError unless every replica index in `replicas` is one of the run's num_envs x members."""
    total = int(num_envs) * members
    bad = [r for r in replicas if not 0 <= r < total]
    if bad:
        per = f" ({num_envs} per member x {members} members)" if members > 1 else ""
        raise ConfigError(f"record_replicas {bad} out of range: the run's env has {total} replicas{per}, "
                          f"indices 0 .. {total - 1}; pick replicas in that range")


@dataclass
class RunSpec:
    """What to run.

    mode: "train" (the config's algorithm) or "rollouts" (no learning: throughput and animations);
    config: a PPOConfig / A2CConfig / DDPGConfig naming the env, replicas, target, env_params,
    total_env_steps, rollout_length (steps per iteration) and log_every;
    checkpoint: rollouts with the policy of this checkpoint (None: uniformly random actions);
    record_every: every this many iterations pull the last episode of `record_replicas` (0: never),
    indices into the run's env: 0 .. num_envs x members - 1 (a population's member k holds replicas
    k x num_envs .. (k + 1) x num_envs - 1);
    world_size: processes (GPUs) of a data-parallel training run (1: in this process);
    policies: the policy map {name: agent ids} (None: the env's AGENT_GROUPS, else one shared policy).
    """
    config: object = field(default_factory=cfg.PPOConfig)
    mode: str = "train"
    checkpoint: str | None = None
    record_every: int = 0
    record_replicas: tuple = (0,)
    world_size: int = 1
    policies: dict | None = None

    def __post_init__(self):
        if self.mode not in ("train", "rollouts"):
            raise ValueError(f"mode must be 'train' or 'rollouts', got {self.mode!r}")
        if int(self.record_every) < 0:
            raise ValueError(f"record_every must be >= 0 (0: never), got {self.record_every!r}")
        if int(self.world_size) < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size!r}")
        if self.world_size > 1 and self.mode != "train":
            raise ValueError("several processes (world_size > 1) are for training; rollouts run in one")
        self.record_replicas = tuple(int(r) for r in self.record_replicas)
        check_replicas(self.record_replicas, self.config.num_envs,
                       population.size(self.config) if self.mode == "train" else 1)

    @property
    def total_iterations(self) -> int:
        steps_per_iteration = self.config.num_envs * self.config.rollout_length * self.world_size
        return max(1, math.ceil(self.config.total_env_steps / steps_per_iteration))


def same_experiment(a: RunSpec, b: RunSpec) -> bool:
    """Whether a run of `b` can continue the trainer of a run of `a`: the same env, parameters,
    replicas, target, algorithm, policy map and population (seeds and sweep), trained in this process."""
    ca, cb = a.config, b.config
    return (a.mode == b.mode == "train" and a.world_size == b.world_size == 1 and a.policies == b.policies
            and type(ca) is type(cb) and env_parameters(ca) == env_parameters(cb)
            and all(getattr(ca, k, None) == getattr(cb, k, None)
                    for k in ("env", "num_envs", "target", "seeds", "sweep")))


def env_parameters(config) -> dict:
    """Every parameter the config's env takes, as the registry resolves them: a parameter left to the
    env's default (None) and the same value written out (a trainer's config records them) agree."""
    from workbench.runtime import registry
    try:
        return dict(registry.definition(config.env, **(config.env_params or {})).params)
    except Exception:  # noqa: BLE001 - an env or parameters the registry refuses: compared as written
        return dict(config.env_params or {})


def env_redefined(env) -> bool:
    """Whether `env` was made from a definition its name no longer registers (a %%warpenv cell
    or wb.register ran again since with another source)."""
    from workbench.runtime import registry
    try:
        return registry.definition(env.name, **env.definition.params).digest != env.definition.digest
    except Exception:  # noqa: BLE001 - parameters the new definition refuses: not the env registered now
        return True


class StopRequested(Exception):
    """Raised inside the run thread when Stop was asked for before training began (e.g. while compiling)."""



class Runner:
    """One run in a background thread.

    on_state(state), on_metrics(metrics) and on_trajectories(trajectories, env) are called from the
    run's thread; keep them short (the panel only stores the data and wakes its own redraw thread).
    """

    def __init__(self, spec: RunSpec, *, on_state=None, on_metrics=None, on_trajectories=None,
                 resume: "Runner | None" = None, env=None):
        if resume is not None:
            if resume.trainer is None or resume.running:
                raise RuntimeError("only a run that trained and has ended can be continued")
            if not same_experiment(resume.spec, spec):
                raise ValueError("a continued run keeps the env, its parameters, replicas, target and algorithm "
                                 "of the run it continues; start a new run to change them")
        self.spec = spec
        self.on_state = on_state
        self.on_metrics = on_metrics
        self.on_trajectories = on_trajectories
        self.state = "idle"
        self.resumed_from = resume
        self.history: list = list(resume.history) if resume is not None else []
        self.reports = len(self.history)  # reports received (the history is thinned: its length stalls)
        self.given_env = env
        self.error: BaseException | None = None
        self.traceback = ""
        self.result = None
        self.trainer = resume.trainer if resume is not None else None
        self.env = None
        self.stopped_by = None
        self.started_at = None
        self.phase: str | None = None  # what the trainer says it is doing, while not plain training
        self.log_path: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_pull_iteration = 0

    # -- control ------------------------------------------------------------------------
    def start(self) -> "Runner":
        """Start the run's thread; RuntimeError when this run started already or another goes."""
        if self._thread is not None:
            raise RuntimeError("this run was started already; make a new Runner for another run")
        with _starting:
            going = running_runs()
            if going:
                raise RuntimeError(refused_text(going[0]))
            _started.add(self)
            self.started_at = time.perf_counter()
            self._thread = threading.Thread(target=self._main, name="workbench-run", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the run to stop; it does at its next check (the end of the current iteration)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def ended_within(self, timeout: float) -> bool:
        """Wait at most `timeout` s for the run to end; whether it has."""
        if self._thread is not None:
            self._thread.join(max(0.0, timeout))
        return not self.running

    def wait(self, timeout: float | None = None, raise_error: bool = True):
        """Block until the run ends; returns its result (a TrainResult, or the rollouts' summary dict).
        Raises the run's error when it failed (and raise_error), TimeoutError after `timeout` s."""
        if self._thread is None:
            raise RuntimeError("the run was not started")
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the run is still going after {timeout} s")
        if self.error is not None and raise_error:
            raise self.error
        return self.result

    # -- the thread -----------------------------------------------------------------------
    def _main(self):
        try:
            if self.spec.world_size > 1:
                jobs.train_on_ranks(self)
            elif self.spec.mode == "train":
                jobs.train(self)
            else:
                jobs.rollouts(self)
            self.set_state("stopped" if self.stopped_by == "callback" else "finished")
        except StopRequested:
            self.stopped_by = "callback"
            self.result = jobs.stopped_result(self)
            self.set_state("stopped")
        except BaseException as exc:  # noqa: BLE001 - shown by the panel, re-raised by wait()
            self.error = exc
            self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.set_state("error")
        finally:
            if self.env is not None and self.env.recorder is not None and self.spec.record_every:
                self.env.recorder = None

    # -- what a job reports through (called from the run's thread) ---------------------------------
    def set_state(self, state: str) -> None:
        """Enter `state` (one of STATES) and tell on_state."""
        self.state = state
        if self.on_state is not None:
            self.on_state(state)

    def set_phase(self, description: str) -> None:
        """The trainer's phase (its callback's `phase`: the first iteration's compile, then "training",
        which clears it); tells on_state, so that the status line says it."""
        self.phase = None if description == "training" else description
        if self.on_state is not None:
            self.on_state(self.state)

    def check_stop(self) -> None:
        """Raise StopRequested when Stop was asked for (before training begins)."""
        if self._stop.is_set():
            raise StopRequested()

    def report(self, metrics: dict) -> None:
        """Add a metrics row to the history (a long run's thinned as the trainer's: keep_report) and
        tell on_metrics."""
        members = self.trainer.M if self.trainer is not None else 1
        keep_report(self.history, metrics, self.spec.config.log_every, members)
        self.reports += 1
        if self.on_metrics is not None:
            self.on_metrics(metrics)

    def start_recording(self) -> None:
        """Record the episodes of `record_replicas` on self.env when the spec animates any."""
        if self.spec.record_every:
            env = self.env
            bad = [r for r in self.spec.record_replicas if not 0 <= r < env.num_envs]
            if bad:
                raise ValueError(f"replicas to animate {bad} are out of range: the run has {env.num_envs} replicas "
                                 f"(0 .. {env.num_envs - 1})")
            env.record(replicas=self.spec.record_replicas, max_steps=min(env.definition.max_steps, 5000))

    def pull_episodes(self, iteration: int, force: bool = False) -> None:
        """Pull the recorded episodes and hand them to on_trajectories, every `record_every`
        iterations (or now, when `force`)."""
        every = self.spec.record_every
        if not every or self.env is None or self.env.recorder is None:
            return
        if force or iteration - self._last_pull_iteration >= every:
            self._last_pull_iteration = iteration
            trajectories = self.env.pull_trajectories()
            if self.on_trajectories is not None:
                self.on_trajectories(trajectories, self.env)
