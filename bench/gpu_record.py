"""The GPU record: which commit the GPU test suite last ran at, and how it went.

    python bench/gpu_record.py write PYTEST_LOG --device NAME --out FILE [--out FILE ...]
    python bench/gpu_record.py status [--record docs/gpu-record.md]

`write` (called by bench/gpu_check.sh's tests stage) parses pytest's output: the summary line's
counts and the FAILED/ERROR lines of `-rfE`. `status` (printed last by .ci/run) says which commit
the record is for and how many commits touching GPU code came after it. Standard library only.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

RECORD = Path(__file__).resolve().parent.parent / "docs" / "gpu-record.md"
# Commits touching these can change what runs on the GPU.
GPU_PATHS = ("workbench/compiler/targets", "workbench/compiler/codegen*.py", "workbench/compiler/cuda",
             "workbench/compiler/rng.py", "workbench/compiler/helpers.py", "workbench/compiler/kernel_cache.py",
             "workbench/compiler/envdef.py", "workbench/compiler/envdef_c.py", "workbench/compiler/observed_state.py",
             "workbench/runtime/sampling*.py", "workbench/runtime/recorder.py",
             "workbench/runtime/env.py", "workbench/runtime/random_actions.py", "workbench/runtime/store.py",
             "workbench/runtime/env_metrics.py", "workbench/runtime/check.py",
             "workbench/learn/trainer.py",
             "workbench/learn/collection.py", "workbench/learn/learners.py", "workbench/learn/iteration_graph.py",
             "workbench/learn/metrics.py", "workbench/learn/algorithms", "workbench/learn/rollout.py",
             "workbench/learn/groups.py", "workbench/learn/normaliser.py", "workbench/learn/streams.py",
             "workbench/learn/policies.py", "workbench/learn/compiled.py", "workbench/learn/episode_stats.py", "envs/",
             "workbench/learn/fused*.py", "workbench/learn/members.py", "workbench/learn/padded_linear.py",
             "workbench/learn/linear_kernels.py", "workbench/learn/categorical*.py",
             "workbench/learn/evaluate.py", "workbench/learn/pretrained.py", "workbench/learn/reward_scale.py",
             "workbench/learn/policy_function.py",
             # the same modules before the layer packages (commits older than the move)
             "workbench/targets", "workbench/codegen*.py", "workbench/cuda", "workbench/trainer.py", "workbench/algorithms",
             "workbench/rollout.py", "workbench/policies.py", "workbench/sampling.py", "workbench/compiled.py",
             "workbench/env.py", "workbench/store.py", "workbench/episode_stats.py", "workbench/rng.py",
             "workbench/kernel_cache.py", "workbench/learn/linear_tanh.py")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)")


def parse_pytest(text: str) -> dict:
    """{passed, failed, skipped, errors, failing: [names]} from pytest's output."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    summary = [line for line in text.splitlines() if _COUNT.search(line) and re.search(r"\bin [\d.]+s", line)]
    if summary:
        for number, kind in _COUNT.findall(summary[-1]):
            kind = "errors" if kind.startswith("error") else kind
            if kind in counts:
                counts[kind] = int(number)
    failing = []
    for line in text.splitlines():
        m = _FAILED.match(line.strip())
        if m and m.group(2) not in failing:
            failing.append(m.group(2))
    interrupted = "KeyboardInterrupt" in text or "Interrupted:" in text
    return {**counts, "failing": failing, "summary_found": bool(summary), "interrupted": interrupted}


def render(commit: str, device: str, date: str, result: dict) -> str:
    lines = ["# GPU record", "",
             "The GPU test suite's last run (written by `bench/gpu_check.sh tests`; `.ci/run` prints how many",
             "commits touching GPU code came after it).", "",
             f"- commit: {commit}", f"- device: {device}", f"- date: {date}"]
    if not result.get("summary_found", True):
        lines.append("- result: no pytest summary line found (the run was cut off?)")
    else:
        lines.append(f"- result: {result['passed']} passed, {result['failed']} failed, {result['skipped']} skipped, "
                     f"{result['errors']} errors"
                     + (" (stopped at the time limit: the tests not counted did not run)"
                        if result.get("interrupted") else ""))
    lines.append("- failing: " + ("none" if not result["failing"] else ""))
    lines += [f"  - {name}" for name in result["failing"]]
    return "\n".join(lines) + "\n"


def read_commit(record: Path) -> str | None:
    """The commit a record names; None for no record or one that names none."""
    if not record.is_file():
        return None
    m = re.search(r"^- commit: *(\S+)", record.read_text(), re.M)
    if m is None or m.group(1).lower() in ("none", "unknown"):
        return None
    return m.group(1)


def _git(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def status(record: Path = RECORD) -> str:
    """One line: the record's commit and the GPU-relevant commits since (or why that is unknown)."""
    root = record.resolve().parent.parent
    try:
        shown = record.relative_to(root)
    except ValueError:
        shown = record
    commit = read_commit(record)
    if commit is None:
        why = "is missing" if not record.is_file() else "names no commit (no GPU run is recorded at this tree)"
        return f"GPU record: {shown} {why}; run bash bench/gpu_check.sh tests on a GPU and commit its gpu-record.md"
    text = record.read_text()
    result = re.search(r"^- result: *(.*)$", text, re.M)
    outcome = f" ({result.group(1)})" if result else ""
    try:
        known = _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=root)
    except FileNotFoundError:
        return f"GPU record: {shown} is for commit {commit}{outcome}; git is not installed, commits since unknown"
    if known.returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository", cwd=root).stdout.strip() == "true"
        return (f"GPU record: {shown} is for commit {commit}{outcome}, which is not in this clone's history"
                f"{' (a shallow clone)' if shallow else ''}; commits since unknown")
    log = _git("log", "--oneline", f"{commit}..HEAD", "--", *GPU_PATHS, cwd=root)
    if log.returncode != 0:
        return f"GPU record: {shown} is for commit {commit}{outcome}; git log failed: {log.stderr.strip()[:200]}"
    since = len([line for line in log.stdout.splitlines() if line.strip()])
    verdict = "the record covers HEAD's GPU code" if since == 0 else "run bench/gpu_check.sh tests again"
    return (f"GPU record: {shown} is for commit {commit}{outcome}; {since} commit(s) touching kernels, targets, "
            f"the trainer or the algorithms came after it: {verdict}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write the record from a pytest log")
    write.add_argument("log")
    write.add_argument("--device", default="unknown device")
    write.add_argument("--commit", default=None, help="default: git rev-parse --short HEAD, else $WORKBENCH_COMMIT")
    write.add_argument("--out", action="append", required=True, help="file to write (repeatable)")
    st = sub.add_parser("status", help="one line: the record's commit and the GPU commits since")
    st.add_argument("--record", default=str(RECORD))
    args = parser.parse_args(argv)
    if args.command == "status":
        print(status(Path(args.record)))
        return 0
    commit = args.commit
    if not commit:
        try:
            head = _git("rev-parse", "--short", "HEAD", cwd=Path(args.log).resolve().parent)
            commit = head.stdout.strip() if head.returncode == 0 else ""
        except FileNotFoundError:
            commit = ""
        commit = commit or os.environ.get("WORKBENCH_COMMIT", "") or "unknown"
    log = Path(args.log)
    text = log.read_text(errors="replace") if log.is_file() else ""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = render(commit, args.device, date, parse_pytest(text))
    for out in args.out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(body)
    sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
