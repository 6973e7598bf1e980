"""The training panel's engine, usable without any widget: a run (training, or rollouts alone)
in a background thread, reporting through plain callbacks and stopped through a threading.Event.

    run = Runner(RunSpec(config=wb.PPOConfig(env="cartpole", num_envs=64, target="cpu")))
    run.start(); ...; run.stop(); result = run.wait()

Training goes through `Trainer.train(callback=...)`: the callback records the metrics and returns
False once Stop was asked for, so a stop takes effect at the next metrics pull (every `log_every`
iterations; the default 1 makes it the end of the current iteration). The trainer itself knows
nothing of this module. Rollouts alone step the env with uniformly random actions or the policy of
a checkpoint (throughput and animations without learning) and check the stop flag every iteration.
With `world_size` > 1 the run is `python -m workbench train` under torchrun in a subprocess (one
rank per GPU); its metrics are read back from the run folder's metrics.csv and Stop interrupts it.

A run continues another: `Runner(spec, resume=previous)` takes the previous run's trainer (and its
history) and calls `train()` again, so the iteration count goes on where Stop left it.
Every run writes its config.yaml and metrics.csv into `config.run_dir` (`default_run_dir` names one).
"""
from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench import config as cfg

STATES = ("idle", "compiling", "running", "finished", "stopped", "error")


@dataclass
class RunSpec:
    """What to run.

    mode: "train" (the config's algorithm) or "rollouts" (no learning: throughput and animations);
    config: a PPOConfig / A2CConfig / DDPGConfig naming the env, replicas, target, env_params,
    total_env_steps, rollout_length (steps per iteration) and log_every;
    checkpoint: rollouts with the policy of this checkpoint (None: uniformly random actions);
    record_every: every this many iterations pull the last episode of `record_replicas` (0: never);
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

    @property
    def total_iterations(self) -> int:
        steps_per_iteration = self.config.num_envs * self.config.rollout_length * self.world_size
        return max(1, math.ceil(self.config.total_env_steps / steps_per_iteration))


def default_run_dir(env: str, root: str | os.PathLike = "runs") -> str:
    """A fresh folder name root/<env>-<YYYYmmdd-HHMMSS> (a suffix -2, -3 ... when taken)."""
    base = Path(root) / f"{env}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return str(path)


def same_experiment(a: RunSpec, b: RunSpec) -> bool:
    """Whether a run of `b` can continue the trainer of a run of `a`: the same env, parameters,
    replicas, target, algorithm and policy map, trained in this process."""
    ca, cb = a.config, b.config
    return (a.mode == b.mode == "train" and a.world_size == b.world_size == 1 and a.policies == b.policies
            and type(ca) is type(cb)
            and all(getattr(ca, k) == getattr(cb, k) for k in ("env", "env_params", "num_envs", "target")))


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
        self.given_env = env
        self.error: BaseException | None = None
        self.traceback = ""
        self.result = None
        self.trainer = resume.trainer if resume is not None else None
        self.env = None
        self.stopped_by = None
        self.started_at = None
        self.finished_at = None
        self.log_path: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_pull_iteration = 0

    # -- control ------------------------------------------------------------------------
    def start(self) -> "Runner":
        if self._thread is not None:
            raise RuntimeError("this run was started already; make a new Runner for another run")
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
    def _set_state(self, state):
        self.state = state
        if self.on_state is not None:
            self.on_state(state)

    def _main(self):
        try:
            if self.spec.world_size > 1:
                self._distributed()
            elif self.spec.mode == "train":
                self._train()
            else:
                self._rollouts()
            self._set_state("stopped" if self.stopped_by == "callback" else "finished")
        except StopRequested:
            self.stopped_by = "callback"
            self._set_state("stopped")
        except BaseException as exc:  # noqa: BLE001 - shown by the panel, re-raised by wait()
            self.error = exc
            self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self._set_state("error")
        finally:
            self.finished_at = time.perf_counter()
            if self.env is not None and self.env.recorder is not None and self.spec.record_every:
                self.env.recorder = None

    def _check_stop(self):
        if self._stop.is_set():
            raise StopRequested()

    def _report(self, metrics):
        self.history.append(metrics)
        if self.on_metrics is not None:
            self.on_metrics(metrics)

    def _maybe_pull(self, iteration, force=False):
        every = self.spec.record_every
        if not every or self.env is None or self.env.recorder is None:
            return
        if force or iteration - self._last_pull_iteration >= every:
            self._last_pull_iteration = iteration
            trajectories = self.env.pull_trajectories()
            if self.on_trajectories is not None:
                self.on_trajectories(trajectories, self.env)

    def _start_recording(self):
        if self.spec.record_every:
            env = self.env
            bad = [r for r in self.spec.record_replicas if not 0 <= r < env.num_envs]
            if bad:
                raise ValueError(f"replicas to animate {bad} are out of range: the run has {env.num_envs} replicas "
                                 f"(0 .. {env.num_envs - 1})")
            env.record(replicas=self.spec.record_replicas, max_steps=min(env.definition.max_steps, 5000))

    # training in this process
    def _train(self):
        from workbench.trainer import make_trainer
        config = self.spec.config
        if self.spec.record_every and config.cuda_graph:
            # the recorder's copies are host-driven: they run outside a captured CUDA graph
            config = cfg.replace(config, cuda_graph=False)
        self._write_config(config)
        from workbench.loggers import make_logger
        # the form's logger (tensorboard, wandb), made first: a missing extra is named before any compile
        logger = make_logger(config, config.run_dir)
        try:
            if self.trainer is not None:  # continuing: same trainer, the form's budget and schedule
                keep = {k: getattr(config, k) for k in ("total_env_steps", "log_every", "checkpoint_every",
                                                         "target_return", "run_dir", "logger")}
                self.trainer.config = cfg.replace(self.trainer.config, **keep)
            else:
                self._set_state("compiling")
                self.trainer = make_trainer(config, policies=self.spec.policies, env=self._env_for(config))
            self.env = self.trainer.env
            self._check_stop()
            self._start_recording()
            self._set_state("running")

            def callback(iteration, metrics):
                self._report(metrics)
                self._maybe_pull(iteration)
                logger(iteration, metrics)
                return not self._stop.is_set()

            self.result = self.trainer.train(callback=callback)
        finally:
            history = self.trainer.history if self.trainer is not None else []
            logger.close(history[-1] if history else None)
        self.stopped_by = self.result.stopped_by
        self._maybe_pull(self.trainer.iteration, force=self.spec.record_every > 0)

    def _env_for(self, config):
        """The env given to this run (reused: no compile) when it matches the config, else None."""
        env = self.given_env
        if env is None:
            return None
        from workbench import registry
        wanted = registry.definition(config.env, **(config.env_params or {}))
        if (env.name, env.num_envs, env.definition.digest) != (config.env, config.num_envs, wanted.digest) or \
                config.target not in (env.target.name, "auto"):
            return None
        return env

    def _write_config(self, config):
        if config.run_dir:
            run_dir = Path(config.run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            if not (run_dir / "config.yaml").exists():
                cfg.save_yaml(config, run_dir / "config.yaml")

    # rollouts alone
    def _policy_trainer(self, config):
        """A trainer holding the checkpoint's policies, on this run's replicas and target."""
        from workbench import checkpoint as ckpt
        from workbench.trainer import make_trainer
        payload = ckpt.load(self.spec.checkpoint)
        saved = cfg.from_dict(payload["config"])
        run_config = cfg.replace(saved, num_envs=config.num_envs, target=config.target, seed=config.seed,
                                 run_dir=None)
        policies = {name: list(ids) for name, ids in payload["signature"]["policies"].items()}
        trainer = make_trainer(run_config, policies=policies)
        trainer.load(self.spec.checkpoint, restore_env=False)
        return trainer

    def _rollouts(self):
        import workbench as wb
        from workbench.episode_stats import EpisodeStats
        config = self.spec.config
        self._write_config(config)
        self._set_state("compiling")
        if self.spec.checkpoint:
            self.trainer = self._policy_trainer(config)
            self.env = env = self.trainer.env
        else:
            target = wb.best_target() if config.target == "auto" else config.target
            self.env = env = self._env_for(config) or wb.make(config.env, num_envs=config.num_envs, target=target,
                                                              seed=config.seed, **(config.env_params or {}))
        self._check_stop()
        self._start_recording()
        self._set_state("running")
        if self.trainer is not None:
            groups = {g.name: g.ids for g in self.trainer.groups}
        else:
            table = env.definition.namespace.get("AGENT_GROUPS")
            groups = ({k: list(v) for k, v in table(types.SimpleNamespace(**env.definition.params)).items()}
                      if table is not None else None)
        stats = EpisodeStats(env, groups)
        T, E = config.rollout_length, env.num_envs
        total = self.spec.total_iterations
        csv_path = Path(config.run_dir) / "metrics.csv" if config.run_dir else None
        env.reset()
        start = time.perf_counter()
        window_start, window_steps = start, 0
        iteration = env_steps = 0
        metrics = {}
        self.stopped_by = "budget"
        while iteration < total:
            with torch.no_grad():
                for _ in range(T):
                    actions = self.trainer.act(deterministic=False) if self.trainer is not None else env.sample_actions()
                    env.step(actions)
                    stats.after_step()
            iteration += 1
            env_steps += E * T
            window_steps += E * T
            last = iteration >= total
            stop = self._stop.is_set()
            if iteration % config.log_every == 0 or last or stop:
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                now = time.perf_counter()
                metrics = {"iteration": iteration, "env_steps": env_steps,
                           "env_steps_per_s": window_steps / max(now - window_start, 1e-9),
                           "time_s": now - start, **stats.pull()}
                finite = [metrics[f"return/{n}"] for n in stats.names if not math.isnan(metrics[f"return/{n}"])]
                metrics["mean_return"] = sum(finite) / len(finite) if finite else float("nan")
                window_start, window_steps = now, 0
                if csv_path is not None:
                    append_csv(csv_path, metrics)
                self._report(metrics)
                self._maybe_pull(iteration)
            if stop:
                self.stopped_by = "callback"
                break
        self._maybe_pull(iteration, force=self.spec.record_every > 0)
        self.result = {"iterations": iteration, "env_steps": env_steps, "wall_time_s": time.perf_counter() - start,
                       "stopped_by": self.stopped_by, "metrics": metrics, "history": list(self.history)}

    # data-parallel training: torchrun in a subprocess
    def _distributed(self):
        config = self.spec.config
        run_dir = Path(config.run_dir or tempfile.mkdtemp(prefix="workbench-panel-"))
        run_dir.mkdir(parents=True, exist_ok=True)
        config = cfg.replace(config, run_dir=str(run_dir))
        config_path = run_dir / "panel_config.yaml"
        cfg.save_yaml(config, config_path)
        metrics_path = run_dir / "metrics.csv"
        if metrics_path.exists():
            metrics_path.unlink()
        self.log_path = run_dir / "panel_log.txt"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={self.spec.world_size}", "-m", "workbench", "train", str(config_path),
               "--run-dir", str(run_dir)]
        self._set_state("compiling")
        with open(self.log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            rows_seen = 0
            stopping_since = None
            while True:
                code = proc.poll()
                rows = _read_metrics(metrics_path)
                for row in rows[rows_seen:]:
                    if self.state == "compiling":
                        self._set_state("running")
                    self._report(row)
                rows_seen = len(rows)
                if code is not None:
                    break
                if self._stop.is_set() and stopping_since is None:
                    stopping_since = time.perf_counter()
                    os.killpg(proc.pid, signal.SIGINT)
                elif stopping_since is not None and time.perf_counter() - stopping_since > 20:
                    os.killpg(proc.pid, signal.SIGKILL)
                time.sleep(0.2)
        last = self.history[-1] if self.history else {}
        if stopping_since is not None:
            self.stopped_by = "callback"
        elif code != 0:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"torchrun with {self.spec.world_size} processes exited with status {code}; the end "
                               f"of its log ({self.log_path}):\n{tail}")
        else:
            self.stopped_by = "budget"
        self.result = {"iterations": int(last.get("iteration", 0)), "env_steps": int(last.get("env_steps", 0)),
                       "wall_time_s": time.perf_counter() - self.started_at, "stopped_by": self.stopped_by,
                       "metrics": last, "history": list(self.history), "run_dir": str(run_dir)}


def append_csv(path: Path, metrics: dict) -> None:
    """Append one metrics row to a CSV file (the header comes with the first row)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(metrics))
        if new:
            writer.writeheader()
        writer.writerow(metrics)


def read_run(run_dir) -> tuple:
    """(config dict or {}, metrics rows) of a run folder written by a panel run, the CLI or a Trainer."""
    import yaml
    run_dir = Path(run_dir)
    config = {}
    for name in ("config.yaml", "panel_config.yaml"):
        if (run_dir / name).exists():
            config = yaml.safe_load((run_dir / name).read_text()) or {}
            break
    return config, _read_metrics(run_dir / "metrics.csv")


def _read_metrics(path: Path) -> list:
    """The rows of a trainer's metrics.csv as dicts of numbers (an incomplete last line is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for row in csv.DictReader(text.splitlines()):
        parsed = {}
        for key, value in row.items():
            try:
                parsed[key] = float(value)
            except (TypeError, ValueError):
                parsed[key] = value
        for key in ("iteration", "env_steps"):
            if isinstance(parsed.get(key), float):
                parsed[key] = int(parsed[key])
        rows.append(parsed)
    return rows
