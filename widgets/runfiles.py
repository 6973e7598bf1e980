"""A run folder's files as the panel writes and reads them: config.yaml (the run's config) and
metrics.csv (one row per metrics pull; a population's: one row per member per pull, read back as
the trainer's population reports), the same files a Trainer and the CLI write."""
from __future__ import annotations

import csv
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.learn import config as cfg
from workbench.learn import runs
from workbench.learn.runs import default_run_dir  # noqa: F401 - the panel's new runs are named as the CLI's


# where the panel's user names another folder, in the refusal of a folder that holds a run
NEW_FOLDER_HINT = "the form's run_dir; left empty, each new run gets a fresh runs/<env>-<date>"


class RunFolderError(WorkbenchError, ValueError):
    """A path given as a run folder (to compare with) is not one."""


def refuse_held_run(run_dir) -> None:
    """ResumeError when `run_dir` holds a run already (checkpoint.pt or metrics.csv), which a new run
    would overwrite: the refusal of the CLI and wb.train, naming the panel's fix."""
    if run_dir:
        runs.refuse_held_run(run_dir, NEW_FOLDER_HINT)


def write_config(config) -> None:
    """Write config.yaml into config.run_dir (when set): the config the run trains with now (a new
    run's, or a continued run's raised budget; refuse_held_run keeps a new run out of another's folder)."""
    if config.run_dir:
        run_dir = Path(config.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save_yaml(config, run_dir / "config.yaml")


def run_folder(path) -> Path:
    """The run folder `path` names (a run's checkpoint.pt names its folder); RunFolderError when it
    holds no run's metrics.csv."""
    path = Path(path)
    folder = path.parent if path.is_file() and path.suffix == ".pt" else path
    if not (folder / "metrics.csv").is_file():
        what = ("does not exist" if not path.exists() else "is a checkpoint outside a run folder (its folder holds "
                "no metrics.csv)" if folder != path else "is a file, not a run folder" if path.is_file()
                else "holds no metrics.csv")
        raise RunFolderError(f"{str(path)!r} {what}: a run folder (written by a panel run, wb.train or `python -m "
                             f"workbench train`) holds metrics.csv with its curves, config.yaml and, once trained, "
                             f"checkpoint.pt; name such a folder (or its checkpoint.pt)")
    return folder


def read_run(run_dir) -> tuple:
    """(config dict or {}, metrics rows) of a run folder written by a panel run, the CLI or a Trainer."""
    import yaml
    run_dir = Path(run_dir)
    config = {}
    for name in ("config.yaml", "panel_config.yaml"):
        if (run_dir / name).exists():
            config = yaml.safe_load((run_dir / name).read_text()) or {}
            break
    return config, read_metrics(run_dir / "metrics.csv", rank_by=config.get("rank_by"))


def read_metrics(path: Path, rank_by: str | None = None) -> list:
    """The rows of a trainer's metrics.csv as dicts of numbers (an incomplete last line is left out); a
    population's as its reports (population_reports), ranked by `rank_by` (the run's config.rank_by)."""
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
        for key in ("iteration", "env_steps", "member", "seed"):
            if isinstance(parsed.get(key), float):
                parsed[key] = int(parsed[key])
        rows.append(parsed)
    return population_reports(rows, rank_by) if rows and "member" in rows[0] else rows


def population_reports(rows: list, rank_by: str | None = None) -> list:
    """A population's metrics.csv rows (one per member per pull, with its member, seed and swept
    values) as the reports its trainer made: per pull each statistic's median over the members,
    the returns' quartiles, num_members, rank_by (default mean_return) and `members`
    (workbench.learn.metrics.population_report). A last pull with fewer members than the first (its rows being written) is left out."""
    from workbench.learn.metrics import population_report
    from workbench.learn.ranking import HYPERPARAMETERS
    pulls: list = []
    for row in rows:
        row = dict(row, nonfinite=str(row.get("nonfinite", "False")).lower() in ("true", "1", "1.0"))
        if pulls and (pulls[-1][0]["iteration"], pulls[-1][0]["env_steps"]) == (row["iteration"], row["env_steps"]):
            pulls[-1].append(row)
        else:
            pulls.append([row])
    if len(pulls) > 1 and len(pulls[-1]) < len(pulls[0]):
        pulls.pop()
    base_keys = ("iteration", "env_steps", "env_steps_per_s", "time_s")
    swept = [k for k in rows[0] if k in HYPERPARAMETERS]
    reports = []
    for members in pulls:
        report = population_report({k: members[0][k] for k in base_keys if k in members[0]}, members, [],
                                   rank_by=rank_by or "mean_return")
        for name in swept:  # a swept value is the members' own, not a statistic
            report.pop(name, None)
        reports.append(report)
    return reports
