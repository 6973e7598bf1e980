"""`python -m workbench ...`: demo (the main job), train, evaluate, export-member, rollouts, check, envs."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import yaml

from .cli_options import parse_with_hints, signed_values
from .learn.config_files import register_env_file
from .learn.runs import ResumeError, load_config, resolve_config, run_config, run_folder_contents, run_training


def _overrides(args) -> dict:
    from .learn.config import ALGORITHMS, ConfigError, describe
    values = {}
    for cls in ALGORITHMS.values():
        for name, *_ in describe(cls):
            if name in vars(args) and getattr(args, name) is not None:
                values[name] = None if getattr(args, name) is NULL else getattr(args, name)
    for item in getattr(args, "sweep_items", None) or []:
        (name, swept), = _sweep_item(item).items()
        if name in values.get("sweep", {}):
            raise ConfigError(f"--sweep names {name} twice; give all its values in one: --sweep {name}="
                              + ",".join(str(v) for v in values["sweep"][name] + swept))
        values.setdefault("sweep", {})[name] = swept
    flagged = set(values)  # (set by their own flags: --set may not set them again)
    for item in args.set or []:
        if "=" not in item:
            raise ConfigError(f"--set takes key=value, got {item!r}" + _misplaced_positional(item, "--set"))
        key, value = item.split("=", 1)
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            from .learn.config import yaml_problem
            raise ConfigError(f"--set {item}: the value {value!r} is not valid YAML ({yaml_problem(exc)}); "
                              f"e.g. --set hidden_sizes=[64,64]") from None
        if key in flagged or (key in values and values[key] != parsed):
            first = f"--{key.replace('_', '-')}" if key in flagged else f"--set {key}={values[key]}"
            raise ConfigError(f"{key} is given twice, by {first} and by --set {item}: keep one")
        values[key] = parsed
    return values


def _misplaced_positional(item: str, flag: str) -> str:
    """A hint for a --set or --sweep item without '=' that names a config: given after the flag, which takes
    every word that follows it."""
    from .learn.runs import config_file
    if "=" not in item and (config_file(item) is not None or item.endswith((".yaml", ".yml"))):
        return f" (put the config {item} before {flag}, which takes " + (
            "the word after it)" if flag == "the flag" else "every word after it)")
    return ""


def _sweep_item(item: str) -> dict:
    """--sweep NAME=V1,V2,... -> {NAME: [V1, V2, ...]} (numbers)."""
    from .learn.config import ConfigError
    key, sep, text = item.partition("=")
    try:
        values = [float(v) if any(c in v.lower() for c in ".en") else int(v) for v in text.split(",")] \
            if sep and text else []
    except ValueError:
        values = []
    if not key or not values:
        raise ConfigError(f"--sweep takes NAME=V1,V2,... with numbers, e.g. --sweep lr=1e-3,3e-4; got {item!r}"
                          + _misplaced_positional(item, "--sweep"))
    return {key.strip(): values}


def cmd_train(args) -> int:
    changes = _overrides(args)
    # (a config file, a shipped config's name or an env's source)
    config = (load_config(args.config, changes.get("algorithm"), changes.get("env"), resume=bool(args.resume))
              if args.config else None)
    if config is None and not args.resume and changes.get("env"):  # (train --env NAME: that env's config)
        config = load_config(changes["env"], changes.get("algorithm"))
        changes["env"] = config.env  # (--env my_env.py: the env registered from it)
    if args.run_dir:
        changes["run_dir"] = args.run_dir
    config, checkpoint = run_config(config, resume=args.resume, changes=changes)
    if args.auto_scale:
        if args.resume:
            raise ResumeError("--auto-scale changes num_envs, which a resumed run keeps; drop one of the two")
        from .learn.autoscale import auto_scale
        config, _report = auto_scale(config)
        one_iteration = config.num_envs * config.rollout_length
        if config.total_env_steps < one_iteration:
            print(f"note: total_env_steps={config.total_env_steps} is less than one iteration at num_envs="
                  f"{config.num_envs} ({one_iteration} env-steps: {config.rollout_length} steps of each replica): the "
                  f"run trains one iteration; raise --total-env-steps or drop --auto-scale")
    _trainer, result = run_training(config, resume=checkpoint)  # a bar unless the config's progress is false
    return exit_code(result, config)


EXIT_INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT
EXIT_TERMINATED = 143  # and by SIGTERM (a scheduler's preemption: the job did not finish)


def exit_code(result, config) -> int:
    """0, or the shell's code for the signal that stopped the run (130 Ctrl-C, 143 SIGTERM), after
    saying where its checkpoint went."""
    if result.stopped_by != "interrupted":
        return 0
    code = EXIT_TERMINATED if getattr(result, "signal", None) == "SIGTERM" else EXIT_INTERRUPTED
    if os.environ.get("RANK", "0") != "0":  # (under torchrun, said once: by rank 0, which saved the checkpoint)
        return code
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None and config.run_dir:
        checkpoint = Path(config.run_dir) / "checkpoint.pt"
    if checkpoint is not None and Path(checkpoint).is_file():
        print(f"interrupted after {result.iterations} iterations: checkpoint saved to {checkpoint}; resume with "
              f"--resume {checkpoint}", file=sys.stderr)
    else:
        print(f"interrupted after {result.iterations} iterations: no checkpoint was saved (no run_dir)",
              file=sys.stderr)
    return code


def cmd_demo(args) -> int:
    from .learn import config as cfg
    from .runtime.env import best_target
    config = cfg.load_yaml(resolve_config("cartpole"))
    target = args.target or best_target("cartpole")
    config = cfg.replace(config, target=target, run_dir=args.run_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}",
                         total_env_steps=2_000_000)
    trainer, result = run_training(config, show_run_folder=False)
    if result.stopped_by == "interrupted":
        return exit_code(result, config)
    _animate_if_possible(trainer, Path(config.run_dir))
    print(run_folder_contents(Path(config.run_dir)))
    return 0 if result.stopped_by == "target_return" else 1


def _animate_if_possible(trainer, run_dir: Path):
    try:
        from .notebook.render import record_policy_animation
    except ImportError:
        return
    print("recording an episode of the trained policy (an HTML player and an mp4 where ffmpeg is present)...",
          flush=True)
    path = record_policy_animation(trainer, run_dir / "policy.html")
    print(f"animation of the trained policy: {path}")


def _member(value: str):
    """--member: a member's index or 'best'."""
    if value == "best":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a member's index (0, 1, ...) or best, not {value!r}") from None


def _member_or_all(value: str):
    """evaluate's --member: a member's index, 'best' or 'all'."""
    if value == "all":
        return value
    try:
        return _member(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"a member's index (0, 1, ...), best or all, not {value!r}") from None


def _checkpoint_path(path: str) -> Path:
    """A checkpoint file, or a run folder holding checkpoint.pt."""
    from .learn.checkpoint import CheckpointError
    p = Path(path)
    runs = sorted(c.name for c in p.iterdir() if (c / "checkpoint.pt").is_file()) if p.is_dir() else []
    if runs and not (p / "config.yaml").is_file():
        shown = ", ".join(runs[:4]) + (", ..." if len(runs) > 4 else "")
        raise CheckpointError(f"{str(p)!r} is a folder of runs ({shown}), not a run: name one, e.g. "
                              f"{str(p / runs[-1])!r}")
    if p.is_dir() and not (p / "checkpoint.pt").is_file():
        raise CheckpointError(f"run folder {str(p)!r} has no checkpoint.pt yet (a run writes it when training ends, "
                              f"and every checkpoint_every iterations or 10 minutes)")
    p = p / "checkpoint.pt" if p.is_dir() else p
    if not p.is_file():
        raise CheckpointError(f"no checkpoint at {str(p)!r} (pass a run folder or a checkpoint file)")
    return p


def cmd_evaluate(args) -> int:
    from .learn import config as cfg, evaluation_json
    from .learn.config_env import env_param_items
    from .learn.evaluate import format_comparison, tag_side_labels
    from .learn.run_evaluation import evaluate_trainer, members_text, write_members_csv
    from .learn.runs import load_policy
    for option, value in (("--json", args.json), ("--csv", args.csv)):
        if value and not Path(value).resolve().parent.is_dir():
            raise cfg.ConfigError(f"{option} {value}: the folder {str(Path(value).parent)!r} does not exist")
    trainer = load_policy(_checkpoint_path(args.checkpoint), num_envs=args.num_envs, target=args.target,
                          member=args.member, env_params=env_param_items(args.env_param),
                          given=f"--env-param {' '.join(args.env_param or ())}")
    results = evaluate_trainer(trainer, episodes=args.episodes, steps=args.steps, deterministic=args.deterministic,
                               seed=args.seed, random_policies=None if args.random is None else tuple(args.random),
                               per_episode=bool(args.json))  # (the --json file holds every episode's values)
    config, settings, every = trainer.config, next(iter(results.values()))["settings"], trainer.M > 1
    if settings["member"] and not every:
        print(settings["member"])
    print(f"{config.env}: {config.num_envs} replicas{' a member' if every else ''} x {args.episodes} episode(s) "
          f"each, {acting_text(config.algorithm, args.deterministic)}, seed {settings['seed']}"
          + (f" (member k: seed + k; {settings['member']}: the means over members)" if every else ""))
    print(format_comparison(results, tag_side_labels(trainer)))
    if every:
        print(members_text(results, config))
    if args.json:
        evaluation_json.write(args.json, results)
    if args.csv:
        write_members_csv(results, args.csv, config)
    return 0


def cmd_export_member(args) -> int:
    from .learn.runs import export_member
    path = export_member(_checkpoint_path(args.run), args.member, args.out)
    run = path.parent if args.out is None else path  # a run folder of its own, or the file alone
    print(f"wrote {run}: resume it with python -m workbench train --resume {run}")
    return 0


def cmd_rollouts(args) -> int:
    import workbench as wb
    from .runtime.random_actions import rollout_throughput
    target = args.target or wb.best_target()
    names = args.envs or wb.env_names()
    print(f"rollouts of {', '.join(args.envs) if args.envs else 'every env'} on target '{target}' "
          f"({args.num_envs} replicas, {args.steps} steps)")
    for name in names:
        start = time.perf_counter()
        env = wb.make(name, num_envs=args.num_envs, target=target, seed=args.seed)
        compile_s = time.perf_counter() - start
        rate = rollout_throughput(env, args.steps)
        print(f"  {name:28s} {rate / 1e6:10.2f} M env-steps/s   (compile {compile_s:.1f} s)")
    return 0


def cmd_check(args) -> int:
    import workbench as wb
    for name in args.envs or wb.env_names():  # (a name, or an env's source file: my_env.py)
        print(wb.check_env(register_env_file(name) or name, targets=args.targets, num_envs=args.num_envs,
                           steps=args.steps))
    return 0


def cmd_envs(args) -> int:
    """A table of the registered envs (agents, spaces, what each is), or one env's parameters."""
    import workbench as wb
    from .runtime import registry
    space = registry.describe_space
    if args.env is not None:
        defn = registry.definition(register_env_file(args.env) or args.env)  # (a name, or an env's source file)
        print(f"{defn.name}: {space(defn.observation)} observations, {space(defn.action)} actions, "
              f"{defn.num_agents} agent(s), at most {defn.max_steps} steps an episode\n")
        print((defn.namespace.get("__doc__") or "").strip() + "\n")
        print("parameters (wb.make(NAME, key=value), env_params: in a config, --set \"env_params={key: value}\"):")
        for key, value in defn.params.items():
            print(f"  {key} = {value!r}")
        return 0
    rows = [("env", "agents", "observation", "action", "about")]
    for name in wb.env_names():
        try:
            defn = registry.definition(name)
        except wb.WorkbenchError as exc:
            rows.append((name, "", "", "", f"does not load: {str(exc).splitlines()[0]}"))
            continue
        about = " ".join((defn.namespace.get("__doc__") or "").strip().split("\n\n", 1)[0].split())  # (its summary)
        rows.append((name, str(defn.num_agents), space(defn.observation), space(defn.action), about))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    print("\none env's parameters and description: python -m workbench envs NAME")
    return 0


def _boolean(text: str) -> bool:
    """A flag's true or false (true/false, yes/no, on/off, 1/0)."""
    value = {"true": True, "yes": True, "on": True, "1": True,
             "false": False, "no": False, "off": False, "0": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"true or false, not {text!r}" + _misplaced_positional(text, "the flag"))
    return value


def _integer(text: str) -> int:
    """An integer, also written as 1e6 or 1_000_000."""
    try:
        number = float(text.replace("_", ""))
    except ValueError:
        number = math.nan
    if not number.is_integer():
        raise argparse.ArgumentTypeError(f"an integer (e.g. 1000000, 1e6), not {text!r}")
    return int(number)


def _count(text: str) -> int:
    """An integer >= 1."""
    number = _integer(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"an integer >= 1, not {text!r}")
    return number


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number (e.g. 3e-4, 0.99), not {text!r}") from None


ARGUMENT_TYPES = {bool: _boolean, int: _integer, float: _float, str: str}
NULL = object()  # a flag given as null (--target-return null): the field's default None, not "not given"


def _or_null(parse):
    """`parse`, or NULL for null / none (for the fields whose default is None)."""
    def parse_or_null(text: str):
        return NULL if text.strip().lower() in ("null", "none", "~") else parse(text)
    parse_or_null.__name__ = parse.__name__  # (argparse names the type in its error)
    return parse_or_null


def _add_config_options(parser):
    from .learn.config import ALGORITHMS, describe
    seen = set()
    group = parser.add_argument_group("config fields (override the file's values; a field of some algorithms "
                                      "only says whose)")
    owners = {}
    for key, cls in ALGORITHMS.items():
        for name, *_ in describe(cls):
            owners.setdefault(name, []).append(key.upper())
    for cls in ALGORITHMS.values():
        for name, kind, default, doc in describe(cls):
            if name in seen or name in ("algorithm", "env_params", "hidden_sizes", "run_dir"):
                continue
            seen.add(name)
            base = getattr(kind, "__origin__", kind)
            whose = f"({', '.join(owners[name])} only) " if len(owners[name]) < len(ALGORITHMS) else ""
            if base in (bool, int, float, str):
                parse = ARGUMENT_TYPES[base] if default is not None else _or_null(ARGUMENT_TYPES[base])
                flag = dict(nargs="?", const=True) if base is bool else {}  # (a bare --normalize-obs: true)
                group.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, type=parse, **flag,
                                   help=(whose + doc).replace("%", "%%") + (" (null: none)" if default is None else ""))
    group.add_argument("--algorithm", type=str.lower, choices=sorted(ALGORITHMS), help="as --set algorithm=NAME")
    parser.add_argument("--sweep", action="extend", nargs="+", dest="sweep_items", metavar="NAME=V1,V2,...",
                        help="train a population over these values of a hyperparameter (several names for a grid; "
                             "each setting times --seeds members), e.g. --sweep lr=1e-3,3e-4 ent_coef=0,0.01")
    parser.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                        help="config keys, values in YAML syntax (e.g. --set hidden_sizes=[128,128] gamma=0.98)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the main job: train CartPole with PPO on the best target until solved")
    demo.add_argument("--target", default=None, help="kernel target (default: the best one here)")
    demo.add_argument("--run-dir", default=None, help="run folder (default: runs/demo-<date>)")
    demo.set_defaults(func=cmd_demo)
    train = sub.add_parser("train", help="train from a config file or a shipped config name")
    train.add_argument("config", nargs="?", default=None, help="config file, shipped config name or an env's source "
                       "file (my_env.py: trained with a default config; optional with --resume)")
    train.add_argument("--run-dir", default=None, help="run folder (default: runs/<env>-<date>); with --resume, a "
                       "new folder to fork the run into: it gets the continued run's config.yaml, metrics.csv "
                       "(the resumed rows, then the new ones) and checkpoint.pt, and the resumed run is left as it is")
    train.add_argument("--resume", default=None, metavar="RUN_DIR",
                       help="continue this run folder (its config and checkpoint.pt; or a checkpoint file) to its "
                            "budget, appending to its metrics.csv. A --total-env-steps above the run's budget wins "
                            "over a target_return the run had reached (it trains on to the new budget; pass "
                            "--target-return to keep one)")
    train.add_argument("--auto-scale", action="store_true",
                       help="size num_envs to this device by measurement (GPU: free memory; CPU: throughput)")
    _add_config_options(train)
    train.set_defaults(func=cmd_train)
    ev = sub.add_parser("evaluate", help="evaluate a run's policies against random ones (per-episode returns "
                                          "and the env's metrics, e.g. Tag's tag rate)")
    ev.add_argument("checkpoint", help="run folder (its checkpoint.pt) or checkpoint file")
    ev.add_argument("--episodes", type=_count, default=1, help="episodes counted per replica")
    ev.add_argument("--steps", type=_count, default=None, help="steps to play (default: episodes x the env's "
                                                               "MAX_STEPS)")
    ev.add_argument("--num-envs", type=_count, default=None, help="replicas to play (default: the run's num_envs)")
    ev.add_argument("--target", default=None, help="kernel target (default: the run's)")
    ev.add_argument("--seed", type=_integer, default=None,
                    help="env and sampling seed (default: the run's seed + 2**20, held out: no training episode "
                         "started from its starts)")
    ev.add_argument("--deterministic", action="store_true", help="act with the policies' modes, not samples")
    ev.add_argument("--random", nargs="*", default=None,
                    help="only these policies replaced by random actions (no names: only the trained policies); "
                         "default: each policy replaced in turn")
    ev.add_argument("--env-param", nargs="+", default=None, metavar="NAME=VALUE",
                    help="play with these env parameters changed, e.g. max_steps=1000 (the run's agents, "
                         "observations and actions kept)")
    ev.add_argument("--json", default=None, help="also write the results and every episode's values to this JSON file")
    ev.add_argument("--csv", default=None, help="also write one row per member and report to this CSV file")
    ev.add_argument("--member", default=None, type=_member_or_all,
                    help="of a population's run: the member to evaluate (an index, or best: the default), or all: "
                         "every member at once, a table of members and a sweep's settings ranked")
    export = sub.add_parser("export-member", help="write one member of a population's run as a single run "
                                                  "(resume and evaluate it as any run; wb.replay plays it)")
    export.add_argument("run", help="population run folder or checkpoint")
    export.add_argument("--member", default="best", type=_member, help="the member to export (an index, or best)")
    export.add_argument("--out", default=None, help="write only the checkpoint, to this file (default: a run folder "
                        "member_K in the population's run folder: checkpoint.pt, config.yaml, metrics.csv)")
    export.set_defaults(func=cmd_export_member)
    ev.set_defaults(func=cmd_evaluate)
    rollouts = sub.add_parser("rollouts", help="random-action rollouts of the envs (default: every one), env-steps/s")
    rollouts.add_argument("envs", nargs="*", help="env names (default: every registered env, each compiled at its "
                                                  "default parameters)")
    rollouts.add_argument("--target", default=None, help="cpu, cuda or cuda-c (default: the best present)")
    rollouts.add_argument("--num-envs", type=_count, default=100_000, help="replicas of each env")
    rollouts.add_argument("--steps", type=_count, default=100, help="timed steps of each env, after 3 warm-up steps")
    rollouts.add_argument("--seed", type=_integer, default=0, help="the envs' seed")
    rollouts.set_defaults(func=cmd_rollouts)
    check = sub.add_parser("check", help="cross-target consistency check of envs")
    check.add_argument("envs", nargs="*", help="env names or env source files (my_env.py); default: every env")
    check.add_argument("--targets", nargs="+", default=None)
    check.add_argument("--num-envs", type=_count, default=16)
    check.add_argument("--steps", type=_count, default=64)
    check.set_defaults(func=cmd_check)
    envs = sub.add_parser("envs", help="list the registered envs (agents, spaces, what each is), or one env's "
                                       "parameters")
    envs.add_argument("env", nargs="?", default=None, help="an env's name: its description and parameters")
    envs.set_defaults(func=cmd_envs)
    return parser


def one_line(exc: BaseException) -> str:
    """An error as one line: its text with line breaks folded, an OSError as 'reason: path'."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    elif isinstance(exc, yaml.YAMLError):
        from .learn.config import yaml_problem
        text = f"not valid YAML at {yaml_problem(exc)}"
    else:
        text = str(exc) or type(exc).__name__
    return "; ".join(part.strip() for part in text.splitlines() if part.strip()).replace(":; ", ": ")


def out_of_memory(exc: BaseException) -> bool:
    """Whether an error is an allocation that failed (torch's CUDA or CPU allocator, numpy, Python)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or \
        "out of memory" in text or "can't allocate memory" in text


def acting_text(algorithm: str, deterministic: bool) -> str:
    """How evaluate's policies act: DDPG's actor is deterministic either way (no exploration noise)."""
    if algorithm == "ddpg":
        return "deterministic actor (DDPG's, without exploration noise)"
    return "deterministic policies" if deterministic else "stochastic policies"


def _one_line_warnings():
    """The workbench's warnings as `warning: MESSAGE` (Python's own form adds a file and a source line)."""
    import warnings
    from .errors import WorkbenchWarning
    python_form = getattr(warnings.formatwarning, "python_form", warnings.formatwarning)  # (once, however many calls)

    def one_line(message, category, *rest, **kw):
        if issubclass(category, WorkbenchWarning):
            return f"warning: {message}\n"
        return python_form(message, category, *rest, **kw)
    one_line.python_form = python_form
    warnings.formatwarning = one_line


def main(argv=None) -> int:
    args = parse_with_hints(build_parser(), signed_values(sys.argv[1:] if argv is None else list(argv)))
    _one_line_warnings()
    from .errors import WorkbenchError
    try:
        return args.func(args)
    except BrokenPipeError:  # (output piped into `head`: stop quietly, as Unix tools do)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (WorkbenchError, yaml.YAMLError, OSError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
        print(f"error: out of memory ({one_line(exc)}); lower num_envs, rollout_length, hidden_sizes, seeds or "
              f"buffer_size, or set learner_memory_gb", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
