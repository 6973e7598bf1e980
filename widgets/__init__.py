"""Notebook widgets of warp-workbench: the training panel and its parts.

    from workbench.widgets import TrainingPanel
    panel = TrainingPanel("cartpole", target="cpu")     # display it; press Start, or panel.start()

TrainingPanel (and `panel(...)`, the same) builds its form from the config dataclasses; Runner and
RunSpec are the engine beneath it, usable without widgets; LivePlot draws the curves with
matplotlib's Agg canvas.
"""
from .form import ConfigForm, EnvParamsForm, agent_params
from .panel import TrainingPanel, device_summary, gpu_count, panel
from .plots import LivePlot
from .runner import Runner, RunSpec

__all__ = ["TrainingPanel", "panel", "Runner", "RunSpec", "ConfigForm", "EnvParamsForm", "agent_params",
           "LivePlot", "device_summary", "gpu_count"]
