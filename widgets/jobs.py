"""What a Runner's thread runs, one function per kind of run, each reporting through the Runner
(`run.set_state`, `run.report`, `run.pull_episodes`) and ending when `run.stop_requested`:

    train(run)            Trainer.train(callback=...) in this process; the callback records the
                          metrics and returns False once Stop was asked for
    rollouts(run)         no learning: step the env with uniformly random actions or a
                          checkpoint's policy, checking Stop every iteration
    train_on_ranks(run)   `python -m workbench train` under torchrun in a subprocess, one rank per
                          GPU; its metrics read back from the run folder's metrics.csv, Stop
                          interrupts it

Each sets run.trainer, run.env (in this process), run.stopped_by and run.result (`stopped_result`
when Stop came before the first iteration). A new run refuses a run folder that holds a run already.
"""
from __future__ import annotations

import atexit
import functools
import math
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

from workbench.learn import config as cfg, run_lock
from workbench.learn.metrics import append_csv
from workbench.learn.config_env import check_against_env

from .runfiles import default_run_dir, read_metrics, refuse_held_run, write_config

# what a continued run takes from the form; every other field stays the trainer's
CONTINUED = ("total_env_steps", "log_every", "checkpoint_every", "target_return", "run_dir", "logger", "rank_by")


def continued_config(trained, form):
    """The config a continued run trains with: the trainer's config `trained` with the form's
    budget and schedule (CONTINUED) from `form`."""
    return cfg.replace(trained, **{k: getattr(form, k) for k in CONTINUED})


def train(run) -> None:
    """Train the spec's config in this process (continuing run.trainer when the run resumes one),
    holding its run folder meanwhile (a run of another process keeps out until this one returns)."""
    run_dir = run.spec.config.run_dir  # (a continued run's too: it takes the form's run_dir)
    run_lock.claim(run_dir)
    try:
        _train(run)
    finally:
        run_lock.release(run_dir)


def _train(run) -> None:
    from workbench.learn.loggers import make_logger
    from workbench.learn.provenance import write_run_config
    from workbench.learn.runs import finish_run_folder
    from workbench.learn.trainer import make_trainer
    config = run.spec.config
    if run.trainer is not None:  # continuing: same trainer, the form's budget and schedule
        config = continued_config(run.trainer.config, config)
        # a new rank_by (what ranks the members, nothing they learn), checked against what the run reports
        check_against_env(config, run.trainer.env, run.trainer.groups, members=run.trainer.M)
    else:
        refuse_held_run(config.run_dir)
    if run.spec.record_every and config.cuda_graph:
        # the recorder's copies are host-driven: they run outside a captured CUDA graph
        config = cfg.replace(config, cuda_graph=False)
    # a continued run's config.yaml says what it trains to now (the raised budget), as the CLI's resume
    write_config(config)
    # the form's logger (tensorboard, wandb), made first: a missing extra is named before any compile
    logger = make_logger(config, config.run_dir)
    try:
        if run.trainer is not None:
            run.trainer.metrics.rank_by = config.rank_by
            run.trainer.config = config
        else:
            given = _given_env(run, config)
            if given is None:
                run.set_state("compiling")
            run.trainer = make_trainer(config, policies=run.spec.policies, env=given)
        if config.run_dir:  # (the trainer's config, env parameters resolved, and its provenance)
            write_run_config(run.trainer, config.run_dir)
        run.env = run.trainer.env
        run.check_stop()
        run.start_recording()
        run.set_state("running")

        def callback(iteration, metrics):
            run.report(metrics)
            run.pull_episodes(iteration)
            logger(iteration, metrics)
            return not run.stop_requested

        callback.phase = run.set_phase
        run.result = run.trainer.train(callback=callback)
    finally:
        history = run.trainer.history if run.trainer is not None else []
        logger.close(history[-1] if history else None)
    run.stopped_by = run.result.stopped_by
    run.pull_episodes(run.trainer.iteration, force=run.spec.record_every > 0)
    finish_run_folder(run.trainer, config.run_dir)  # learning_curve.png (and a sweep's ranking.csv), as the CLI's


def _given_env(run, config):
    """The env given to the run (reused: no compile) when it matches the config, else None."""
    env = run.given_env
    if env is None:
        return None
    from workbench.runtime import registry
    wanted = registry.definition(config.env, **(config.env_params or {}))
    if (env.name, env.num_envs, env.definition.digest) != (config.env, config.num_envs, wanted.digest) or \
            config.target not in (env.target.name, "auto"):
        return None
    return env


def rollouts(run) -> None:
    """Step the env without learning; one metrics row (throughput, episode statistics) every
    log_every iterations, appended to the run folder's metrics.csv."""
    import workbench as wb
    from workbench.learn.episode_stats import EpisodeStats
    config = run.spec.config
    refuse_held_run(config.run_dir)
    write_config(config)
    run.set_state("compiling")
    if run.spec.checkpoint:
        run.trainer = _checkpoint_trainer(run.spec.checkpoint, config)
        run.env = env = run.trainer.env
    else:
        target = wb.best_target() if config.target == "auto" else config.target
        run.env = env = _given_env(run, config) or wb.make(config.env, num_envs=config.num_envs, target=target,
                                                           seed=config.seed, **(config.env_params or {}))
    run.check_stop()
    run.start_recording()
    run.set_state("running")
    if run.trainer is not None:
        groups = {g.name: g.ids for g in run.trainer.groups}
    else:
        table = env.definition.namespace.get("AGENT_GROUPS")
        groups = ({k: list(v) for k, v in table(types.SimpleNamespace(**env.definition.params)).items()}
                  if table is not None else None)
    stats = EpisodeStats(env, groups)
    T, E = config.rollout_length, env.num_envs
    total = run.spec.total_iterations
    csv_path = Path(config.run_dir) / "metrics.csv" if config.run_dir else None
    env.reset()
    start = time.perf_counter()
    window_start, window_steps = start, 0
    iteration = env_steps = 0
    metrics = {}
    run.stopped_by = "budget"
    while iteration < total:
        with torch.no_grad():
            for _ in range(T):
                actions = run.trainer.act(deterministic=False) if run.trainer is not None else env.sample_actions()
                env.step(actions)
                stats.after_step()
        iteration += 1
        env_steps += E * T
        window_steps += E * T
        last = iteration >= total
        stop = run.stop_requested
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
            run.report(metrics)
            run.pull_episodes(iteration)
        if stop:
            run.stopped_by = "callback"
            break
    run.pull_episodes(iteration, force=run.spec.record_every > 0)
    run.result = {"iterations": iteration, "env_steps": env_steps, "wall_time_s": time.perf_counter() - start,
                  "stopped_by": run.stopped_by, "metrics": metrics, "history": list(run.history)}


def stopped_result(run):
    """The result of a run that Stop ended before its first iteration (while it compiled)."""
    elapsed = time.perf_counter() - run.started_at
    last = run.history[-1] if run.history else {}
    if run.spec.mode != "train":
        return {"iterations": 0, "env_steps": 0, "wall_time_s": elapsed, "stopped_by": "callback", "metrics": {},
                "history": list(run.history)}
    from workbench.learn.trainer import TrainResult
    iterations = run.trainer.iteration if run.trainer is not None else 0
    env_steps = run.trainer.env_steps if run.trainer is not None else 0
    return TrainResult(iterations, env_steps, elapsed, "callback", last, list(run.history))


def checkpoint_env(checkpoint) -> tuple:
    """(env name, env_params) a checkpoint's policies were trained on (registering a cell-defined
    env from its stored source, as the run itself will); the file's last reading is reused."""
    from workbench.learn.runs import checkpoint_in, load_checkpoint
    path = checkpoint_in(checkpoint)
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _CHECKPOINT_ENVS:
        _path, payload = load_checkpoint(path)
        saved = cfg.from_saved(payload["config"])
        _CHECKPOINT_ENVS.clear()  # one entry: the checkpoint the form names now
        _CHECKPOINT_ENVS[key] = (saved.env, dict(saved.env_params or {}))
    env, params = _CHECKPOINT_ENVS[key]
    return env, dict(params)


_CHECKPOINT_ENVS: dict = {}


def _checkpoint_trainer(checkpoint: str, config):
    """A trainer holding the checkpoint's policies, on the run's replicas and target."""
    from workbench.learn.runs import load_checkpoint
    from workbench.learn.trainer import make_trainer
    checkpoint, payload = load_checkpoint(checkpoint)  # (registers a cell-defined env from its stored source)
    saved = cfg.from_saved(payload["config"])
    if saved.env != config.env:  # (the panel says so before Start; a bare Runner's spec here)
        raise cfg.ConfigError(f"checkpoint {str(checkpoint)!r} holds policies trained on env {saved.env!r}, but the "
                              f"run's env is {config.env!r}: set env {saved.env!r}, or pass a checkpoint trained on "
                              f"{config.env!r}")
    run_config = cfg.replace(saved, num_envs=config.num_envs, target=config.target, seed=config.seed,
                             run_dir=None)
    policies = {name: list(ids) for name, ids in payload["signature"]["policies"].items()}
    trainer = make_trainer(run_config, policies=policies, pretrained=False)
    trainer.load(checkpoint, restore_env=False)
    return trainer


def end_ranks(proc, grace_s: float = 20.0) -> None:
    """A torchrun still running as this process exits (a script's end, a notebook kernel's shutdown or
    restart) gets SIGINT, its ranks saving their checkpoints, and SIGKILL `grace_s` later: its own
    session outlives this process, and would train on to its budget (Stop's signals come from the
    panel's thread, which ends with the process)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def train_on_ranks(run) -> None:
    """Data-parallel training: torchrun with one rank per GPU in a subprocess (its output in the
    run folder's panel_log.txt); Stop sends SIGINT, and SIGKILL 20 s later."""
    config = run.spec.config
    run_dir = Path(config.run_dir or default_run_dir(config.env))
    refuse_held_run(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = cfg.replace(config, run_dir=str(run_dir))
    config_path = run_dir / "panel_config.yaml"
    cfg.save_yaml(config, config_path)
    metrics_path = run_dir / "metrics.csv"
    run.log_path = run_dir / "panel_log.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={run.spec.world_size}", "-m", "workbench", "train", str(config_path),
           "--run-dir", str(run_dir)]
    run.set_state("compiling")
    with open(run.log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        at_exit = functools.partial(end_ranks, proc)
        atexit.register(at_exit)
        rows_seen = 0
        stopping_since = None
        while True:
            code = proc.poll()
            rows = read_metrics(metrics_path, rank_by=config.rank_by)
            for row in rows[rows_seen:]:
                if run.state == "compiling":
                    run.set_state("running")
                run.report(row)
            rows_seen = len(rows)
            if code is not None:
                break
            if run.stop_requested and stopping_since is None:
                stopping_since = time.perf_counter()
                os.killpg(proc.pid, signal.SIGINT)
            elif stopping_since is not None and time.perf_counter() - stopping_since > 20:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
        atexit.unregister(at_exit)
    last = run.history[-1] if run.history else {}
    if stopping_since is not None:
        run.stopped_by = "callback"
    elif code != 0:
        tail = run.log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"torchrun with {run.spec.world_size} processes exited with status {code}; the end "
                           f"of its log ({run.log_path}):\n{tail}")
    else:
        run.stopped_by = "budget"
    run.result = {"iterations": int(last.get("iteration", 0)), "env_steps": int(last.get("env_steps", 0)),
                  "wall_time_s": time.perf_counter() - run.started_at, "stopped_by": run.stopped_by,
                  "metrics": last, "history": list(run.history), "run_dir": str(run_dir)}
