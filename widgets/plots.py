"""Live training curves drawn with matplotlib's Agg canvas into PNG bytes (for an ipywidgets.Image):
no interactive backend, no ipympl, nothing that needs the notebook's event loop, so a background
thread can draw them. One figure is made once and its lines are moved with set_data."""
from __future__ import annotations

import io
import math
import time

import numpy as np

LOSS_KEYS = ("policy_loss", "value_loss", "actor_loss", "critic_loss")
VALUE_KEYS = ("value_loss", "critic_loss")  # drawn against the right-hand axis of the losses panel
_COLOURS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def _series(history, key):
    xs, ys = [], []
    for m in history:
        v = m.get(key)
        if v is None or isinstance(v, str):
            continue
        v = float(v)
        if math.isfinite(v):
            xs.append(float(m.get("env_steps", len(xs))))
            ys.append(v)
    return np.asarray(xs), np.asarray(ys)


class LivePlot:
    """Three panels against env-steps: episode return per policy, losses, throughput (M env-steps/s).

    plot.render(history) -> PNG bytes; history is the trainer's list of metrics dicts."""

    def __init__(self, width: float = 10.5, height: float = 2.7, dpi: int = 80):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self.fig = Figure(figsize=(width, height), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.ax_return, self.ax_loss, self.ax_rate = self.fig.subplots(1, 3)
        for ax, title in ((self.ax_return, "episode return"), (self.ax_loss, "losses"),
                          (self.ax_rate, "throughput (env-steps/s)")):
            ax.set_title(title, fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(True, color="0.9")
            ax.set_xlabel("env-steps", fontsize=7)
        # value and critic losses are often 100x the policy's: their own scale, on the right, dashed
        self.ax_value = self.ax_loss.twinx()
        self.ax_value.tick_params(labelsize=7)
        self.lines: dict = {}
        self.placeholder = self.fig.text(0.5, 0.5, "", ha="center", va="center", fontsize=11, color="0.4")
        self.renders = 0
        self.last_render_s = 0.0

    def _line(self, ax, key, label, style="-"):
        if key not in self.lines:
            colour = _COLOURS[len(self.lines) % len(_COLOURS)]
            (self.lines[key],) = ax.plot([], [], style, lw=1.4, color=colour, label=label)
            legend_ax = self.ax_loss if ax is self.ax_value else ax
            handles = [line for line in self.lines.values() if line.axes in (
                (self.ax_loss, self.ax_value) if legend_ax is self.ax_loss else (ax,))]
            legend = legend_ax.legend(handles=handles, fontsize=7, loc="best", framealpha=0.7)
            legend.set_zorder(5)
        return self.lines[key]

    def render(self, history: list, message: str = "") -> bytes:
        start = time.perf_counter()
        history = list(history)
        keys = sorted({k for m in history for k in m})
        self.placeholder.set_text(message if message else ("" if history else "waiting for the first metrics..."))
        for key in keys:
            if key.startswith("return/"):
                xs, ys = _series(history, key)
                self._line(self.ax_return, key, key.split("/", 1)[1]).set_data(xs, ys)
            elif key.split("/", 1)[0] in LOSS_KEYS:
                xs, ys = _series(history, key)
                right = key.split("/", 1)[0] in VALUE_KEYS
                self._line(self.ax_value if right else self.ax_loss, key, key + (" (right)" if right else ""),
                           "--" if right else "-").set_data(xs, ys)
        xs, ys = _series(history, "env_steps_per_s")
        top = float(ys.max()) if len(ys) else 0.0
        scale, unit = (1e9, "G ") if top >= 1e9 else (1e6, "M ") if top >= 1e6 else (1e3, "k ") if top >= 1e3 else (1, "")
        self.ax_rate.set_title(f"throughput ({unit}env-steps/s)", fontsize=9)
        self._line(self.ax_rate, "env_steps_per_s", "env-steps/s").set_data(xs, ys / scale)
        if history and not any(k.split("/", 1)[0] in LOSS_KEYS for k in keys):
            self.ax_loss.set_title("losses (none reported)", fontsize=9)
        for line in self.lines.values():  # a curve of a few points (or one) shows its points
            line.set_marker("o" if len(line.get_xdata()) <= 40 else "")
            line.set_markersize(3)
        right = max((float(m.get("env_steps", 0)) for m in history), default=0.0)
        for ax in (self.ax_return, self.ax_loss, self.ax_value, self.ax_rate):
            ax.relim()
            ax.autoscale_view()
            if right > 0:  # one env-steps axis for the three panels, from the start of the run
                ax.set_xlim(0, right * 1.03)
        self.fig.tight_layout(pad=0.6)
        buf = io.BytesIO()
        self.canvas.print_png(buf)
        self.renders += 1
        self.last_render_s = time.perf_counter() - start
        return buf.getvalue()


def placeholder_png(message: str, width: float = 10.5, height: float = 2.7, dpi: int = 80) -> bytes:
    """An empty curve image with a message (what the panel shows before a run)."""
    return LivePlot(width, height, dpi).render([], message)
