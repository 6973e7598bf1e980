"""Notebook widgets of warp-workbench: the training panel and its parts.

    from workbench.widgets import TrainingPanel
    panel = TrainingPanel("cartpole", target="cpu")     # display it; press Start, or panel.start()

TrainingPanel (panel.py; `panel(...)` is the same) puts its parts together:

    controls.py   RunForm: what to run, with form.py's forms generated from the config dataclasses;
                  checks.py its checks of typed values, before anything compiles or is written
    runner.py     Runner and RunSpec: a run in a background thread, usable without widgets (one
                  at a time in a process: running_runs() lists the one going);
                  jobs.py holds what a run does, runfiles.py its run folder's files
    curves.py     RunCurves: the live curves (plots.py's LivePlot, matplotlib Agg), runs compared
    viewer.py     EpisodeViewer: the episodes a run pulls, animated by workbench.notebook.render
    status.py     the status line, progress line and error box; device.py the device line
"""
from .device import device_summary, gpu_count
from .form import ConfigForm, EnvParamsForm, agent_params
from .panel import TrainingPanel, panel
from .plots import LivePlot
from .runner import Runner, RunSpec, running_runs

__all__ = ["TrainingPanel", "panel", "Runner", "RunSpec", "running_runs", "ConfigForm", "EnvParamsForm",
           "agent_params", "LivePlot", "device_summary", "gpu_count"]
