"""Train every shipped learning config on the CPU target and write docs/learning.md from the measurements.

    python bench/learning_runs.py                         # all configs, one after the other
    python bench/learning_runs.py --configs acrobot pendulum
    python bench/learning_runs.py --doc-only              # rewrite the page from the saved results

Each config runs as `python -m workbench train configs/NAME.yaml --target cpu --run-dir OUT/NAME`
in a subprocess (single-threaded by default: OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1, which is much
faster than oversubscribed threads on a small shared machine), its output in OUT/NAME/train.log.
Then `python -m workbench evaluate OUT/NAME` plays one episode per replica with the trained
policies (stochastic and deterministic) and with each policy replaced by uniformly random actions
(OUT/NAME/evaluate*.log and .json). From metrics.csv the script reads the first logged window whose
mean return reaches the stated threshold (env-steps and training seconds, compile excluded).
Every figure on the page comes from these files: OUT/NAME/result.json holds them, and the page is
rebuilt from all the result.json files found, so configs can be rerun one at a time.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name: (task, threshold on the mean episode return of every policy, or None for the Tag games): the tasks'
# usual bars (Gymnasium's reward_threshold; Pendulum has none), below the configs' target_return
RUNS = {
    "cartpole": ("CartPole-v1", 475.0),
    "acrobot": ("Acrobot-v1", -100.0),
    "pendulum": ("Pendulum-v1", -250.0),
    "mountain_car_continuous": ("MountainCarContinuous-v0", 90.0),
    "tag_grid": ("Tag on a grid (1 tagger, 3 runners)", None),
    "tag_continuous": ("Tag in a continuous arena", None),
}
EVAL_ENVS = 256  # replicas for the evaluation (one episode each)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(cmd: list, log: Path, env: dict) -> tuple:
    """Run cmd, its output into log (and echoed); returns (exit status, wall seconds)."""
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            fh.write(line)
            fh.flush()
            if not line.startswith("["):  # progress lines stay in the log
                print("   ", line.rstrip(), flush=True)
        status = proc.wait()
    return status, time.perf_counter() - start


def first_crossing(rows: list, threshold: float, keys: list):
    """The first metrics row whose return of every policy is >= threshold, or None."""
    for row in rows:
        values = [float(row[k]) for k in keys if row.get(k) not in (None, "")]
        if len(values) == len(keys) and all(not math.isnan(v) and v >= threshold for v in values):
            return row
    return None


def last_finite(rows: list, keys: list):
    for row in reversed(rows):
        values = [float(row[k]) for k in keys if row.get(k) not in (None, "")]
        if len(values) == len(keys) and not any(math.isnan(v) for v in values):
            return row
    return None


def run_one(name: str, out: Path, figures: Path, threads: int) -> dict:
    task, threshold = RUNS[name]
    config_path = ROOT / "configs" / f"{name}.yaml"
    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    train_cmd = [sys.executable, "-m", "workbench", "train", str(config_path.relative_to(ROOT)), "--target", "cpu",
                 "--run-dir", str(run_dir)]
    started = time.strftime("%Y-%m-%d %H:%M")
    status, wall = run(train_cmd, run_dir / "train.log", env)
    if status != 0:
        raise SystemExit(f"{name}: training failed (exit {status}); see {run_dir / 'train.log'}")
    log_text = (run_dir / "train.log").read_text()
    summary = [ln for ln in log_text.splitlines() if ln.startswith(("training ", "stopped by "))]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    keys = [k for k in rows[0] if k.startswith("return/")]
    result = {"name": name, "task": task, "threshold": threshold, "config": f"configs/{name}.yaml",
              "command": "python -m workbench train " + str(config_path.relative_to(ROOT)) + " --target cpu",
              "date": started, "device": f"CPU, {os.cpu_count()} cores ({cpu_name()}), shared with other work; "
                                            f"{threads} thread(s)",
              "threads": threads, "process_wall_s": wall, "summary": summary,
              "algorithm": _config_value(config_path, "algorithm").upper(),
              "iterations": int(rows[-1]["iteration"]), "env_steps": int(rows[-1]["env_steps"]),
              "train_s": float(rows[-1]["time_s"])}
    final = last_finite(rows, keys)
    result["final_return"] = {k.split("/", 1)[1]: float(final[k]) for k in keys} if final else None
    result["best_return"] = {k.split("/", 1)[1]: max((float(r[k]) for r in rows if r.get(k) not in (None, "")
                                                       and not math.isnan(float(r[k]))), default=math.nan)
                             for k in keys}
    if threshold is not None:
        hit = first_crossing(rows, threshold, keys)
        result["reached"] = hit is not None
        if hit is not None:
            result["at_threshold"] = {"env_steps": int(hit["env_steps"]), "train_s": float(hit["time_s"]),
                                      "iteration": int(hit["iteration"]),
                                      "return": {k.split("/", 1)[1]: float(hit[k]) for k in keys}}
    evaluations = {}
    for mode in ("stochastic", "deterministic"):
        json_path = run_dir / f"evaluate-{mode}.json"
        cmd = [sys.executable, "-m", "workbench", "evaluate", str(run_dir), "--num-envs", str(EVAL_ENVS),
               "--json", str(json_path)] + (["--deterministic"] if mode == "deterministic" else [])
        status, _ = run(cmd, run_dir / f"evaluate-{mode}.log", env)
        if status != 0:
            raise SystemExit(f"{name}: evaluation failed (exit {status}); see {run_dir / f'evaluate-{mode}.log'}")
        evaluations[mode] = json.loads(json_path.read_text())
        evaluations[mode + "_table"] = (run_dir / f"evaluate-{mode}.log").read_text()
    result["evaluation"] = evaluations
    result["evaluate_command"] = f"python -m workbench evaluate RUN_DIR --num-envs {EVAL_ENVS} [--deterministic]"
    figures.mkdir(parents=True, exist_ok=True)
    figure = figures / f"learning-{name}.png"
    shutil.copyfile(run_dir / "learning_curve.png", figure)
    result["figure"] = str(figure.relative_to(ROOT / "docs"))
    (run_dir / "result.json").write_text(json.dumps(result, indent=2))
    return result


def _config_value(path: Path, key: str):
    import yaml
    return (yaml.safe_load(path.read_text()) or {}).get(key, "ppo")


# -- the page ---------------------------------------------------------------------------------

def _fmt(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _returns(d: dict | None) -> str:
    if not d:
        return "-"
    if len(d) == 1:
        return _fmt(next(iter(d.values())))
    return ", ".join(f"{k} {_fmt(v, 2)}" for k, v in d.items())


def _tag_verdict(ev: dict) -> list:
    trained, rt, rr = ev["trained"], ev["random taggers"], ev["random runners"]
    return [trained["tag_rate"], rt["tag_rate"], trained["runner_survival"], rr["runner_survival"]]


def write_page(results: list, path: Path) -> None:
    lines = ["# Learning results", "",
             "Every shipped learning config trained on the CPU target with `bench/learning_runs.py`, which also "
             "wrote this page from the run folders (no figure here was typed in by hand). Training returns are "
             "the mean return of the episodes that finished in a logging window; \"to threshold\" is the first "
             "window at or above the stated threshold, in env-steps (replica steps) and seconds of training "
             "(the env's compile time apart). The evaluation plays one episode in each of 256 replicas from the "
             "same starts (the CLI's held-out seed, the run's + 2**20) with the final policies (sampled and deterministic) and with each policy replaced by "
             "uniformly random actions: `python -m workbench evaluate RUN_DIR --num-envs 256`.", ""]
    solo = [r for r in results if r["threshold"] is not None]
    if solo:
        lines += ["| config | task | algorithm | threshold | reached | env-steps to threshold | "
                  "training s to threshold | final training return | evaluated return (sampled / deterministic) | "
                  "random policy | run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in solo:
            at = r.get("at_threshold")
            ev = r["evaluation"]
            lines.append(
                f"| `{r['name']}` | {r['task']} | {r['algorithm']} | {_fmt(r['threshold'], 0)} | "
                f"{'yes, ' + _returns(at['return']) if at else 'no (best ' + _returns(r['best_return']) + ')'} | "
                f"{_fmt(at['env_steps'], 0) if at else '-'} | {_fmt(at['train_s']) if at else '-'} | "
                f"{_returns(r['final_return'])} | "
                + (f"{_fmt(ev['deterministic']['trained']['return/shared'])} (a deterministic actor) | "
                   if r["algorithm"] == "DDPG" else
                   f"{_fmt(ev['stochastic']['trained']['return/shared'])} / "
                   f"{_fmt(ev['deterministic']['trained']['return/shared'])} | ")
                + f"{_fmt(ev['stochastic']['random']['return/shared'])} | "
                f"{_fmt(r['env_steps'], 0)} steps, {_fmt(r['train_s'])} s |")
        lines.append("")
    tags = [r for r in results if r["threshold"] is None]
    if tags:
        lines += ["## Tag", "",
                  "Tag has no return threshold: the two teams' returns move against each other. The evaluation "
                  "compares each trained team with uniformly random play against the other trained team: the "
                  "tag rate (fraction of runners tagged by the end of the episode) of the trained taggers "
                  "against that of random taggers, both against the trained runners, and the survival "
                  "(fraction of runners still in the game at the end) of the trained runners against that of "
                  "random runners, both against the trained taggers. The metrics are computed on the device "
                  "from the runners' in-game flags at each episode's end.", "",
                  "| config | policies | tag rate: trained / random taggers | survival: trained / random runners "
                  "| returns (taggers, runners) | run |",
                  "|---|---|---|---|---|---|"]
        for r in tags:
            for mode in ("stochastic", "deterministic"):
                ev = r["evaluation"][mode]
                t, rt, s, rr = _tag_verdict(ev)
                tr = ev["trained"]
                lines.append(f"| `{r['name']}` | {'sampled' if mode == 'stochastic' else 'deterministic'} | "
                             f"{t:.3f} / {rt:.3f} | {s:.3f} / {rr:.3f} | "
                             f"{_fmt(tr['return/taggers'], 2)}, {_fmt(tr['return/runners'], 2)} | "
                             f"{_fmt(r['env_steps'], 0)} steps, {_fmt(r['train_s'])} s |")
        lines.append("")
    lines += ["## Runs", ""]
    for r in results:
        lines += [f"### {r['name']}: {r['task']}", "",
                  f"- command: `{r['command']}` (with OMP_NUM_THREADS={r['threads']} "
                  f"NUMBA_NUM_THREADS={r['threads']}); config `{r['config']}`",
                  f"- device: {r['device']}",
                  f"- date: {r['date']}",
                  f"- {' '.join(r['summary'])}",
                  f"- whole process (compile, training, files): {_fmt(r['process_wall_s'])} s",
                  "", f"![{r['name']} learning curve]({r['figure']})", "",
                  "Evaluation (DDPG's deterministic actor):" if r["algorithm"] == "DDPG" else
                  "Evaluation (sampled actions):", "", "```", r["evaluation"]["stochastic_table"].rstrip(), "```", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", default=str(ROOT / "runs" / "learning"), help="folder for the run folders")
    parser.add_argument("--doc", default=str(ROOT / "docs" / "learning.md"))
    parser.add_argument("--figures", default=str(ROOT / "docs" / "figures"))
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS and NUMBA_NUM_THREADS of the runs")
    parser.add_argument("--doc-only", action="store_true", help="only rebuild the page from saved result.json files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not args.doc_only:
        for name in args.configs:
            result = run_one(name, out, Path(args.figures), args.threads)
            print(f"{name}: {json.dumps({k: result.get(k) for k in ('reached', 'at_threshold', 'final_return')})}",
                  flush=True)
    results = [json.loads((out / n / "result.json").read_text()) for n in RUNS if (out / n / "result.json").exists()]
    write_page(results, Path(args.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
