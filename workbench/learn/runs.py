"""Run folders: training into one (the CLI's train and wb.train), the default name, resuming or forking
a run (the configs it starts from: config_files.py).

A run of a registered env (a `%%warpenv` cell, `wb.register`) keeps the env's source in its checkpoint
(and a copy for reading, env_source.py, next to config.yaml): `load_checkpoint` registers it again in a
new process, so resume, evaluate and replay need no notebook. Where this process has registered that
name with another source, they refuse and say what differs (the run's env is never swapped silently)."""
from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
import zipfile
from pathlib import Path

from . import config as cfg, interrupts, run_lock
from .config_files import (config_file, default_config, env_named_by_file, is_default_config,  # noqa: F401 - (API)
                           load_config, resolve_config, shipped_configs)
from .report import reached, returns_text, run_folder_contents  # noqa: F401 - (runs' API)
from ..errors import BudgetWarning, WorkbenchWarning
from .resume_rules import (ResumeError, refuse_edited_fixed_fields,  # noqa: F401 - (runs' API)
                           refuse_fixed_and_swept, refuse_fixed_changes, refuse_other_algorithms_fields)

# torch (through .checkpoint, .trainer) is imported where used: the CLI imports this module, and
# `python -m workbench --help` needs no torch.




def load_checkpoint(run_or_checkpoint):
    """(checkpoint path, payload) of a run folder or checkpoint file, with the env it trained
    registered here when the checkpoint kept its source (registry.register_stored)."""
    from . import checkpoint as ckpt
    from ..runtime import registry
    path = checkpoint_in(run_or_checkpoint)
    payload = ckpt.load(path)
    kept = payload.get("env_source")
    different = registry.register_stored(kept)
    name = (payload.get("config") or {}).get("env")
    if not kept and isinstance(name, str) and (shipped := registry.shipped_for_run(name)):
        raise ResumeError(f"{str(path)!r} trained env '{name}' from another source than the '{name}' registered in "
                          f"this process ({shipped}); a run resumes, evaluates and replays only with the env it "
                          f"trained: use a new process, or register the changed source under another name")
    if not kept and isinstance(name, str) and registry.changed_since(name, payload.get("env_digest")):
        warnings.warn(f"{str(path)!r} trained env '{name}' from another version of its source than this "
                      f"installation's (an upgrade, or an edit of envs/{name}.py): it resumes, evaluates and "
                      f"replays on this version, whose dynamics or spaces may differ", WorkbenchWarning, stacklevel=3)
    if different:
        name, params = kept["name"], kept.get("params") or {}
        copy = path.parent / registry.SOURCE_COPIES.get(kept.get("language"), "env_source.py")
        text = f"open({str(copy)!r}).read()" if copy.is_file() else \
            f"torch.load({str(path)!r}, weights_only=False)['env_source']['source']"
        lang = f", language={kept['language']!r}" if kept.get("language", "python") != "python" else ""
        raise ResumeError(
            f"{str(path)!r} trained env '{name}' from another source than the '{name}' registered in this process "
            f"({different}); a run resumes, evaluates and replays only with the env it trained: register the run's "
            f"version again, wb.register({name!r}, {text}{lang}{f', params={params!r}' if params else ''}), or use "
            f"a new process (from the command line: leave the changed source file out, `--resume RUN` alone loads the "
            f"run's version); to train the changed env, start a new run")
    return path, payload


def default_run_dir(env: str, root="runs") -> str:
    """'runs/<env>-<YYYYmmdd-HHMMSS>' (with -2, -3, ... when that folder exists already), made now:
    the CLI's, wb.train's and the panel's new runs."""
    return run_lock.new_folder(f"{root}/{env}-{time.strftime('%Y%m%d-%H%M%S')}")


def checkpoint_in(run_or_checkpoint) -> Path:
    """The checkpoint file of a run folder (RUN_DIR/checkpoint.pt), or the file itself."""
    path = Path(run_or_checkpoint)
    if path.is_dir():
        found = path / "checkpoint.pt"
        if not found.is_file():
            raise ResumeError(f"run folder {str(path)!r} has no checkpoint.pt (a run writes it when training ends, "
                              f"and every checkpoint_every iterations or 10 minutes); nothing to resume or replay")
        return found
    if not path.exists():
        raise ResumeError(f"{str(path)!r} does not exist: pass a run folder (runs/ENV-DATE) or its checkpoint.pt")
    if not path.is_file():
        raise ResumeError(f"{str(path)!r} is neither a run folder nor a checkpoint file")
    return path


def resume_config(run_or_checkpoint, requested=None):
    """(config, checkpoint path) to continue a run: the run folder's config.yaml (else the config
    stored in its checkpoint), with run_dir pointing at that folder. `requested`, a config the
    user also named, must agree on env and algorithm."""
    config, path, _payload = _resume(run_or_checkpoint, requested)
    return config, path


def _set_fields(config) -> dict:
    """The fields of `config` set away from their defaults, but for the run's env, algorithm and folder."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.name not in ("env", "algorithm", "run_dir") and getattr(config, f.name) != f.default}


def _resume(run_or_checkpoint, requested):
    from . import checkpoint as ckpt
    path, payload = load_checkpoint(run_or_checkpoint)
    run_dir = path.parent
    saved_file = run_dir / "config.yaml"
    if _exported_member_file(path, payload):
        # its own config (the folder's config.yaml is its population's), and a folder named after the
        # file to train on into
        config, run_dir = ckpt.stored_config(payload), path.with_suffix("")
    else:
        config = ckpt.stored_config(payload, cfg.load_yaml(saved_file) if saved_file.is_file() else None)
        refuse_edited_fixed_fields(config, ckpt.stored_config(payload), saved_file)
    signature = payload["signature"]
    for key, theirs in (("env", signature["env"]), ("algorithm", signature["algorithm"])):
        if getattr(config, key) != theirs:
            raise ResumeError(f"{saved_file} names {key}={getattr(config, key)!r} but the checkpoint was trained "
                              f"with {key}={theirs!r}; the run folder is inconsistent")
        if requested is not None and getattr(requested, key) != theirs:
            raise ResumeError(f"cannot resume {str(run_dir)!r} with {key}={getattr(requested, key)!r}: that run "
                              f"trained {key}={theirs!r} (drop the config argument to continue the run as it was)")
    return cfg.replace(config, run_dir=str(run_dir)), path, payload


def _exported_member_file(path: Path, payload: dict) -> bool:
    """Whether `path` is a member exported to a file of its own (export-member --out), maybe beside its run."""
    return bool(payload.get("member_of")) and path.name != "checkpoint.pt"


FEW_UPDATES = 10  # a run of fewer iterations (learner updates) gets a note before it trains
RUN_FILES = ("checkpoint.pt", "metrics.csv")  # a folder holding either holds a run


def run_config(config=None, *, resume=None, changes=None):
    """(config, checkpoint or None) of a run: `config` with `changes` and run_dir defaulting to
    runs/ENV-DATE (a folder that holds no run yet); with `resume` (a run folder or checkpoint) the config
    the run was trained with, whose FIXED_ON_RESUME fields (env, algorithm, replicas, seeds, sweep,
    networks) `changes` may not alter. A run_dir other than the resumed run's folder forks the run there
    (that folder must not hold a run yet); a total_env_steps raised past the budget of a run that stopped
    at its target_return drops that target_return (unless `changes` sets one), so the run trains on to
    the new budget. A `config` given with `resume` (`train FILE --resume RUN`) applies the fields it
    sets away from their defaults as changes, under the same rules (an env's default config none)."""
    changes = dict(changes or {})
    if "env" in changes:  # (--env my_env.py, env="my_env.py": the env registered from the file)
        changes["env"] = env_named_by_file(changes["env"])
    if resume:
        # what a config given with resume sets goes on as changes (it was dropped silently), but for an env's
        # default config (`train my_env.py --resume RUN`: the file names the env, the run keeps its settings)
        if config is not None and not is_default_config(config):
            changes = {**_set_fields(config), **changes}
        config, checkpoint, payload = _resume(resume, config)
        refuse_fixed_and_swept(changes, config.sweep, resuming=config.run_dir, algorithm=config.algorithm)
        _merge_env_params(changes, config)
        refuse_other_algorithms_fields(changes, config)
        refuse_fixed_changes(changes, config)
        done, total = int(payload.get("env_steps", 0)), changes.get("total_env_steps", config.total_env_steps)
        if isinstance(total, int) and total <= done:
            raise ResumeError(f"{config.run_dir!r} has trained {done} env-steps and total_env_steps is {total}: a "
                              f"resume would train nothing; raise the budget, e.g. --total-env-steps "
                              f"{done + config.total_env_steps} (total_env_steps= from Python)")
        fork = changes.pop("run_dir", None)
        if fork and Path(fork).resolve() != Path(config.run_dir).resolve():
            for name in RUN_FILES:
                if (Path(fork) / name).exists():
                    raise ResumeError(f"cannot fork {config.run_dir!r} into {str(fork)!r}: that folder already holds "
                                      f"a run ({name}); continue it with --resume {fork} (resume= from Python), or "
                                      f"name a new folder")
            changes["run_dir"] = str(fork)
        elif _exported_member_file(checkpoint, payload) and (Path(config.run_dir) / "checkpoint.pt").exists():
            raise ResumeError(f"{config.run_dir!r} holds the run trained on from {str(checkpoint)!r} already: "
                              f"continue it with --resume {config.run_dir}, or fork the member into a new folder "
                              f"with --run-dir")
        if ("target_return" not in changes and config.target_return is not None
                and changes.get("total_env_steps", config.total_env_steps) > config.total_env_steps
                and reached((payload.get("history") or [{}])[-1], config.target_return, config.frozen)):
            changes["target_return"] = None
            if os.environ.get("RANK", "0") == "0":  # once under torchrun, not once per rank
                print(f"resuming {config.run_dir}: it stopped at target_return={config.target_return}; the raised "
                      f"budget (total_env_steps={changes['total_env_steps']}) wins and target_return no longer "
                      f"stops it (set target_return to keep one)")
        config = cfg.replace(config, **changes)
        run_lock.claim(config.run_dir)  # (held until the run returns: no second run trains into it meanwhile)
        return config, checkpoint
    if config is None:
        raise cfg.ConfigError(f"train needs a config (a file or a shipped config: {shipped_configs()}), --env NAME for "
                              f"an env's own, or a run to resume (--resume RUN_DIR; resume=RUN_DIR from Python)")
    refuse_fixed_and_swept(changes, changes.get("sweep"), algorithm=changes.get("algorithm", config.algorithm))
    _merge_env_params(changes, config)
    config = cfg.replace(config, **changes)
    if not config.run_dir:
        config = cfg.replace(config, run_dir=default_run_dir(config.env))
    run_lock.claim(config.run_dir)
    refuse_held_run(config.run_dir)
    return config, None


def _merge_env_params(changes: dict, config) -> None:
    """env_params given as a change add to the config's (a file's tuned parameters stay); a key given
    as None (YAML null) goes back to the env's default."""
    given = changes.get("env_params")
    if isinstance(given, dict) and config.env_params:
        changes["env_params"] = {k: v for k, v in {**config.env_params, **given}.items() if v is not None} or None


def refuse_held_run(run_dir, new_folder: str = "--run-dir; run_dir=") -> None:
    """ResumeError when the folder `run_dir` holds a run already (RUN_FILES), which a new run would
    overwrite; `new_folder` says where the caller names another folder."""
    held = [name for name in RUN_FILES if (Path(run_dir) / name).exists()]
    if held:
        whole = "checkpoint.pt" in held and zipfile.is_zipfile(Path(run_dir) / "checkpoint.pt")  # (torch's format)
        keep = f"continue it with --resume {run_dir} (resume= from Python)" if whole else \
            ("its checkpoint.pt is damaged (not a whole file), so it cannot be continued" if "checkpoint.pt" in held
             else "it has no checkpoint to continue from") + ": delete the folder"
        raise ResumeError(f"run folder {str(run_dir)!r} already holds a run ({', '.join(held)}), which a new run "
                          f"would overwrite: {keep}, or name a new folder ({new_folder})")


def shows_progress(progress: bool | None, config) -> bool:
    """Whether wb.train and the CLI draw a progress bar: `progress`, else config.progress, else yes."""
    return progress if progress is not None else config.progress is not False


def run_training(config, *, resume=None, progress=None, policies=None, show_run_folder: bool = True, callback=None,
                 models=None):
    """Train per `config`, writing its run folder (held by this process meanwhile: run_lock); returns
    (trainer, result), on every rank of a distributed run once rank 0 has written the whole folder.
    `resume` is a checkpoint to continue from; one outside config.run_dir forks its run into run_dir.
    show_run_folder: print what the run folder holds at the end. callback(iteration, metrics): as
    Trainer.train's (False stops the run, its checkpoint kept)."""
    with run_lock.training_in(config.run_dir):
        return _train_in_folder(config, resume, progress, policies, show_run_folder, callback, models)


def _train_in_folder(config, resume, progress, policies, show_run_folder, callback, models):
    from . import checkpoint as ckpt_mod
    from .loggers import check_logger, compose, make_logger
    from .progress import ProgressBar
    from .metrics import keep_rows_upto, write_reports
    from .provenance import write_run_config
    from .trainer import make_trainer
    from .config_env import compile_notice

    start = time.perf_counter()
    if resume and policies is None:  # (the run's own policy map: wb.train(policies=...) is no CLI option)
        policies = ckpt_mod.saved_policy_map(resume)
    check_logger(config)  # a missing extra named now, not after the env's compile
    if os.environ.get("RANK", "0") == "0" and (notice := compile_notice(config)):
        print(notice, flush=True)
    trainer = make_trainer(config, policies=policies, models=models, pretrained=not resume)  # (a resume: its own)
    compile_s = time.perf_counter() - start
    if resume:
        trainer.load(resume)
    run_dir = Path(config.run_dir) if config.run_dir else None
    if run_dir is not None and trainer.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_run_config(trainer, run_dir)  # (env parameters set away from defaults, provenance; a user env's source)
        if resume and Path(resume).parent.resolve() != run_dir.resolve() and Path(resume).name == "checkpoint.pt":
            keep_rows_upto(Path(resume).parent / "metrics.csv", run_dir / "metrics.csv", trainer.iteration)
        elif resume and not (run_dir / "metrics.csv").exists():  # a checkpoint file trained on into a new folder
            write_reports(run_dir / "metrics.csv", trainer.history)
        elif resume:  # in place: rows logged after the checkpoint by a run killed since would come twice
            kept = keep_rows_upto(run_dir / "metrics.csv", run_dir / "metrics.csv", trainer.iteration)
            # reports the checkpoint holds but the file lacks (a full disk) go after its rows: the file is
            # never rebuilt from the checkpoint's reports, which keep at most HISTORY_REPORTS of them
            known = set(kept)
            missing = [m for m in trainer.history if m.get("iteration") not in known]
            if missing and kept and missing[0].get("iteration", 0) < kept[-1]:
                warnings.warn(f"{run_dir / 'metrics.csv'} lacked {len(missing)} report(s) the checkpoint holds from "
                              f"before its last row; they are appended after it", WorkbenchWarning, stacklevel=2)
            write_reports(run_dir / "metrics.csv", missing)
    say = print if trainer.is_main else (lambda *a, **k: None)
    total = trainer.M * (trainer.ranks.context.world_size if trainer.ranks is not None else 1)
    members = f"{total} members x " if trainer.M > 1 else ""
    ranks = f" on each of {trainer.world_size} ranks" if trainer.sync is not None else ""
    say(f"training {config.env} with {config.algorithm.upper()} on target '{trainer.env.target.name}' "
        f"({members}{config.num_envs} replicas{ranks} x {trainer.env.num_agents} "
        f"agent{'s' if trainer.env.num_agents != 1 else ''}; "
        f"{f'env compiled in {compile_s:.1f} s' if compile_s >= 0.05 else 'env kernels compiled already'})"
        + (f"; continuing {resume} from iteration {trainer.iteration}" if resume else ""))
    for line in trainer.pretrained:
        say(line)
    updates = trainer.total_iterations()  # (the run's in all: a resume continuing a long run is no short run)
    if updates < FEW_UPDATES and config.algorithm != "ddpg":  # (DDPG's gradient steps: learners.build_ddpg warns)
        product = "num_envs x rollout_length" + (" x ranks" if trainer.sync is not None else "")
        say(f"note: total_env_steps={config.total_env_steps} at {trainer.steps_per_iteration} env-steps an iteration "
            f"({product}) gives {updates} update(s) in all: too few to learn much; raise "
            f"total_env_steps (--total-env-steps {5 * FEW_UPDATES * trainer.steps_per_iteration} for "
            f"{5 * FEW_UPDATES}) or lower num_envs")
    logger = make_logger(config, run_dir) if trainer.is_main else None
    bar = ProgressBar.for_trainer(trainer) if shows_progress(progress, config) and trainer.is_main else None
    resumed_at = trainer.iteration  # (0 for a new run)
    try:
        result = trainer.train(callback=compose(bar, logger, callback))
    finally:
        if bar is not None:
            bar.close()
        if logger is not None:
            logger.close(trainer.history[-1] if trainer.history else None)
    from .population import latest_report
    # a population's members as last reported with a value (what the ranking and the best member use)
    final = (latest_report(trainer.history, config.rank_window) if result.metrics.get("members") and trainer.history
             else result.metrics)
    outcome = returns_text(final, config.frozen)
    oldest = min((m.get("iteration", math.inf) for m in final.get("members") or ()), default=math.inf)
    last = trainer.history[-1].get("iteration", 0) if trainer.history else 0
    if outcome and not config.rank_window and oldest < last:  # (a member with no episode in the last window)
        outcome += f" (each member's latest value, the oldest from iteration {oldest})"
    if not outcome and not final.get("members"):  # (DDPG's long episodes: the last log window may hold none)
        known = next((m for m in reversed(trainer.history) if returns_text(m)), None)
        if known is not None:
            outcome = (f"{returns_text(known, config.frozen)} (the last reported, at iteration "
                       f"{known.get('iteration', '?')})")
    training_s = result.wall_time_s - result.warmup_s
    warmup = "torch.compile, kernel loads and graph capture" if config.compile else "kernel loads and graph capture"
    stopped = "interrupted" if result.stopped_by == "interrupted" else f"stopped by {result.stopped_by}"
    steps = f"{result.env_steps / 1e6:.2f} M" if result.env_steps >= 100_000 else f"{result.env_steps}"
    say(f"{stopped} after {result.iterations} iterations, {steps} "
        f"env-steps, {training_s:.{2 if training_s < 10 else 1}f} s of training"
        + (f" since the resume at iteration {resumed_at}" if resumed_at else "") + f" (env compile {compile_s:.1f} s "
        + (f"and {warmup} {result.warmup_s:.1f} s " if result.warmup_s else "")
        + "apart); " + (outcome or "no episode ended"))
    if trainer.is_main:
        table = finish_run_folder(trainer, run_dir)
        if table:
            say(table)
        if run_dir is not None and trainer.history and show_run_folder:
            print(run_folder_contents(run_dir))
    if trainer.sync is not None or trainer.ranks is not None:
        import torch.distributed
        # rank 0 writes the run folder: no rank returns before it is complete (a rank that goes on to
        # load the checkpoint would otherwise find none, or the last one)
        torch.distributed.barrier()
    return trainer, result


def finish_run_folder(trainer, run_dir) -> str:
    """Write what a run folder holds once training stops (the CLI's, wb.train's and the panel's alike):
    learning_curve.png, and for a sweep ranking.csv; returns the sweep's ranking table ("" without a
    sweep or before any report). run_dir None writes nothing."""
    history, config = trainer.history, trainer.config
    if not history:
        return ""
    run_dir = Path(run_dir) if run_dir is not None else None
    table = ""
    if config.sweep:
        from .population import final_ranking
        from .ranking import write_ranking_csv
        rows, table = final_ranking(history, run_dir, config.rank_window)
        if run_dir is not None:
            write_ranking_csv(rows, run_dir / "ranking.csv")
    if run_dir is not None:
        from .report import plot_learning_curve
        plot_learning_curve(history, run_dir / "learning_curve.png", f"{config.env} {config.algorithm}",
                            config.frozen)
    return table


def train(config=None, *, resume=None, progress: bool | None = None, policies=None, models=None, callback=None,
          **changes):
    """Train from Python as `python -m workbench train` does: `config` is a config, a YAML file, a
    shipped config's name ("cartpole") or the name of a registered env without a config (trained with
    default_config's choices), `changes` override its fields (num_envs=..., seed=...), and
    `resume` (a run folder or checkpoint) continues that run instead. Every run keeps a folder
    (runs/ENV-DATE unless run_dir names one): config.yaml, metrics.csv, checkpoint.pt and
    learning_curve.png. With `resume`, run_dir names a folder to fork the run into, and a raised
    total_env_steps outruns a target_return the run had reached. `callback(iteration, metrics)`,
    called at each report (every log_every iterations and the last), returning False stops the run
    (its checkpoint kept, so `resume` continues it). Ctrl-C stops it after the iteration, saves the
    checkpoint and raises KeyboardInterrupt; SIGTERM the same, then ends the process. Returns (trainer, TrainResult). models: {policy: nn.Module} replacing default
    MLPs (a resume of such a run takes the same classes again).
    `Trainer.train` alone writes only where run_dir says."""
    if isinstance(config, (str, Path)):
        config = load_config(str(config), changes.get("algorithm"), changes.get("env"),
                             resume=resume is not None)
    config, checkpoint = run_config(config, resume=resume, changes=changes)
    trainer, result = run_training(config, resume=checkpoint, progress=progress, policies=policies, callback=callback,
                                   models=models)
    interrupts.pass_on(result, f"continue with wb.train(resume={config.run_dir!r})")  # (a script stops as asked)
    return trainer, result


def load_policy(run_or_checkpoint, *, num_envs: int | None = 1, target: str | None = None, seed: int | None = None,
                member=None, env_params: dict | None = None, models=None, given: str | None = None):
    """A Trainer holding the trained policies of a run, on a fresh env of `num_envs` replicas (None: the run's; with
    `env_params` changing the run's env parameters, as long as agents, observations and actions stay).
    For a population's run: those of `member` (an index, or "best", the default), which the trainer's
    `member_label` names ("member 6 of 8 (the best by mean_return, in its last training report), seed 6,
    lr=0.003"; None for a single run); "all": every member, `num_envs` replicas each, batched as in training.
    models: {policy: nn.Module} of a run trained with models of its own (the same classes, untrained).
    given: how the caller named env_params, for its errors (the CLI's "--env-param NAME=VALUE")."""
    from . import checkpoint as ckpt, population, trainer_state
    from .config_env import played_env_params
    from .trainer import make_trainer
    path, payload = load_checkpoint(run_or_checkpoint)
    if payload.get("population") and member != "all":
        payload = population.member_payload(payload, "best" if member is None else member)
    elif not payload.get("population") and member not in (None, 0, "best", "all"):
        raise cfg.ConfigError(f"{str(path)!r} is not a population's run: it has no member {member!r} (play or "
                              f"evaluate its one policy without a member: no --member, no member=)")
    config = ckpt.stored_config(payload)
    # (another replica count acts, learns nothing: the run's minibatches need not divide its batch)
    acting = {"num_minibatches": 1} if num_envs is not None and config.algorithm == "ppo" else {}
    config = cfg.replace(config, num_envs=config.num_envs if num_envs is None else num_envs, run_dir=None, **acting,
                         target=target or config.target, seed=config.seed if seed is None else seed,
                         env_params=played_env_params(config, env_params, payload["signature"],
                                                      given or f"env_params={env_params!r}",
                                                      "evaluate" if given else "load_policy"))
    with warnings.catch_warnings():  # (the run's training budget was the run's to warn of, not this load's)
        warnings.simplefilter("ignore", BudgetWarning)
        trainer = make_trainer(config, policies=payload["signature"]["policies"], models=models, pretrained=False)
    trainer_state.restore(trainer, payload, path, restore_env=False)
    trainer.member_label = (population.member_label(payload["member_of"]) if payload.get("member_of")
                            else f"every member ({trainer.M})" if trainer.M > 1 else None)
    trainer.checkpoint_path, trainer.member_of = path.resolve(), payload.get("member_of")
    return trainer


def export_member(run_or_checkpoint, member="best", path=None):
    """Write member `member` (an index or "best") of a population run as an ordinary single run: by default
    a run folder member_K beside the run's checkpoint (checkpoint.pt, config.yaml with the member's seed and
    hyperparameters, metrics.csv of its reports, its learning curve, the env's source where the run kept
    one), or with `path` its checkpoint alone; returns the checkpoint's path. Resume, evaluate and replay it
    as any run: training it on continues as the member would have in its population (to float rounding)."""
    from . import checkpoint as ckpt
    from .metrics import write_reports
    from .population import member_label, member_payload
    from .provenance import as_comment
    from ..runtime import registry
    from .report import plot_learning_curve
    source, payload = load_checkpoint(run_or_checkpoint)
    single = member_payload(payload, member)
    for key in ("format", "version"):
        single.pop(key, None)
    if path is not None:
        path = Path(path)
        if path.is_dir() or path.resolve() == source.resolve() or (path.name == "checkpoint.pt" and path.is_file()):
            what = "a folder" if path.is_dir() else "a run's checkpoint"
            raise ResumeError(f"--out {str(path)!r} is {what}, "
                              f"which the export would replace: write the member to a file of its own (member.pt), "
                              f"or leave --out out for a run folder member_K beside the population's")
        return ckpt.save_atomic(single, path)
    folder = source.parent / f"member_{single['member_of']['member']}"
    if (folder / "checkpoint.pt").exists():
        raise ResumeError(f"{str(folder)!r} already holds a run (checkpoint.pt), which exporting again would "
                          f"overwrite: continue it with --resume {folder}, or export to a new file with --out")
    folder.mkdir(parents=True, exist_ok=True)
    config = cfg.replace(ckpt.stored_config(single), run_dir=str(folder.resolve()))
    single["config"] = cfg.to_dict(config)
    origin = f"# exported: {member_label(single['member_of'])}, of the run {str(source.parent.resolve())!r}\n"
    cfg.save_yaml(config, folder / "config.yaml", origin + (as_comment(single["provenance"]) if single.get("provenance")
                                                            else ""))
    for name in set(registry.SOURCE_COPIES.values()):
        if (source.parent / name).is_file():
            (folder / name).write_text((source.parent / name).read_text())
    write_reports(folder / "metrics.csv", single["history"])
    plot_learning_curve(single["history"], folder / "learning_curve.png", f"{config.env} {config.algorithm}",
                        config.frozen)
    return ckpt.save_atomic(single, folder / "checkpoint.pt")
