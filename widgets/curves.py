"""The curves of the panel's runs: one image (LivePlot, matplotlib Agg) of the run going, with the
panel's other runs and any run folder added to compare overlaid on its return axis, and a table
of the settings in which those runs differ."""
from __future__ import annotations

import html
import os

import ipywidgets as widgets

from workbench.learn import config as cfg

from .form import GPU_ONLY
from .plots import LivePlot
from .runfiles import read_run, run_folder
from .status import describe_state


class RunCurves:
    """image: the curves (an ipywidgets.Image); table: the runs compared (HTML); plot: the LivePlot.
    runs: [{"label", "run_dir", "config", and "runner" (a run of the panel) or "history" (a folder's
    metrics rows)}], oldest first; a run's label is its run folder's name."""

    def __init__(self):
        self.plot = LivePlot()
        self.runs: list = []
        self.image = widgets.Image(format="png", value=self.plot.render([], "press Start: curves appear here"),
                                   layout=widgets.Layout(max_width="100%"))
        self.image.add_class("wb-curves")
        self.table = widgets.HTML("")
        self.table.add_class("wb-runs")
        self.drawn_rows = -1  # metrics rows of the run going in the image (-1: draw at the next redraw)

    def add_runner(self, runner, resume=None) -> None:
        """Enter a run started in the panel: in the place of the run it continues (`resume`, whose
        config it takes: a raised budget shows), else as a new entry."""
        config = runner.spec.config
        if resume is not None:
            entry = next(r for r in self.runs if r.get("runner") is resume)
            entry.update(runner=runner, config=cfg.to_dict(config))
        else:
            self.runs.append({"label": run_label(config.run_dir, len(self.runs) + 1), "run_dir": config.run_dir,
                              "config": cfg.to_dict(config), "runner": runner})
        self.drawn_rows = -1

    def add_folder(self, run_dir, runner=None) -> dict:
        """Enter a run folder (its metrics.csv and config.yaml; a checkpoint.pt names its folder) to
        compare with, and redraw with `runner` the run going (None before the first run);
        RunFolderError when the path holds no run."""
        run_dir = run_folder(run_dir)
        config, rows = read_run(run_dir)
        entry = {"label": run_label(run_dir, len(self.runs) + 1), "run_dir": str(run_dir), "config": config,
                 "history": rows}
        self.runs.append(entry)
        self.update_table()
        self.drawn_rows = -1
        self.image.value = self.render(runner)
        return entry

    def redraw(self, runner, rows: int) -> bool:
        """Draw the image again when the run has received `rows` reports and the image fewer (its
        history's length stalls once thinned); whether it was drawn."""
        if rows == self.drawn_rows:
            return False
        self.drawn_rows = rows
        self.image.value = self.render(runner)
        return True

    def render(self, runner) -> bytes:
        """The PNG of `runner`'s curves with the other runs overlaid (a message before any row)."""
        history = list(runner.history) if runner is not None else []
        message = "" if history else (describe_state(runner) if runner is not None
                                      else "press Start: curves appear here")
        label = self.label_of(runner)
        others = self._others(runner)
        if not history and others:  # nothing of this run yet: the runs to compare stand alone
            label, history = others.pop()
        target = runner.spec.config.target_return if runner is not None else None
        return self.plot.render(history, message, target_return=target, others=others, label=label,
                                warmup_steps=warmup_steps(runner) if runner is not None and runner.history else None,
                                frozen=runner.spec.config.frozen if runner is not None else ())

    def label_of(self, runner) -> str | None:
        """The label of `runner`'s entry (None when it has none)."""
        return next((e["label"] for e in self.runs if runner is not None and e.get("runner") is runner), None)

    def _others(self, runner) -> list:
        """[(label, history)] of every run but `runner`'s, for the overlay."""
        out = []
        for entry in self.runs:
            if runner is not None and entry.get("runner") is runner:
                continue
            history = entry["runner"].history if "runner" in entry else entry["history"]
            if history:
                out.append((entry["label"], list(history)))
        return out

    def config_differences(self) -> tuple:
        """(keys, rows): the config fields whose values differ between the runs, and per run
        (label, run_dir, {key: value})."""
        configs = [_resolved_config(e) for e in self.runs]
        hidden = {"run_dir"} | (set() if any(map(_on_gpu, configs)) else set(GPU_ONLY))  # (no effect on the CPU)
        keys = sorted({k for c in configs for k in c if k not in hidden})
        differing = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
        return differing, [(e["label"], e["run_dir"], {k: c.get(k) for k in differing})
                           for e, c in zip(self.runs, configs)]

    def update_table(self) -> None:
        """Fill the table of runs compared (empty while there are fewer than two)."""
        if len(self.runs) < 2:
            self.table.value = ""
            return
        keys, rows = self.config_differences()
        head = "".join(f"<th style='padding:0 8px'>{html.escape(k)}</th>" for k in keys)
        body = "".join(
            f"<tr><td style='padding:0 8px'><b>{html.escape(label)}</b></td>"
            f"<td style='padding:0 8px;font-family:monospace'>{html.escape(str(run_dir))}</td>"
            + "".join(f"<td style='padding:0 8px;font-family:monospace'>{html.escape(str(v))}</td>"
                      for v in values.values()) + "</tr>" for label, run_dir, values in rows)
        self.table.value = (f"<div style='font-size:12px'><b>Runs compared</b> (curves overlaid on the return "
                            f"plot; the columns are the settings that differ)<table><tr><th>run</th>"
                            f"<th>folder</th>{head}</tr>{body}</table></div>")


def _resolved_config(entry: dict) -> dict:
    """A run's config as its trainer resolved it (activation None: the algorithm's), where it has one
    (a folder's config.yaml is resolved already): the form's config beside a folder's showed a
    difference that was none."""
    trainer = getattr(entry.get("runner"), "trainer", None)
    return cfg.to_dict(trainer.config) if trainer is not None else dict(entry.get("config") or {})


def _on_gpu(config: dict) -> bool:
    """Whether a run of `config` trains on a GPU target (auto: where this process sees a GPU)."""
    target = config.get("target", "auto")
    if target == "auto":
        import torch
        return torch.cuda.is_available()
    return target in ("cuda", "cuda-c")


def run_label(run_dir, number: int) -> str:
    """A run's name in the legend and the table: its run folder's name ("run N" without a folder)."""
    return os.path.basename(os.path.normpath(str(run_dir))) if run_dir else f"run {number}"


def warmup_steps(runner) -> float | None:
    """Rollouts of a fixed policy: the env-steps after which every replica has run an episode's step
    limit (before, only episodes shorter than the steps so far have ended); None for training."""
    if runner is None or runner.spec.mode != "rollouts" or runner.env is None:
        return None
    limit = runner.env.definition.max_steps
    return float(runner.env.num_envs * limit) if limit < 2**31 - 1 else 0.0  # 0: no step limit, no span
