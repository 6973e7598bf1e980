"""Live training curves drawn with matplotlib's Agg canvas into PNG bytes (for an ipywidgets.Image):
no interactive backend, no ipympl, nothing that needs the notebook's event loop, so a background
thread can draw them.

Small multiples against env-steps, one axis per kind of curve present in the metrics: episode return
(one line per policy, the target return dashed; a population's median over its members with the
interquartile band, per policy, or per sweep setting with a sweep: `ranking.population_curves`, as
in learning_curve.png), each loss kind (policy, value, actor, critic: one
line per policy, each on its own scale), episode length, Tag's tag rate and runner survival, and
throughput (k/M/G env-steps/s by magnitude). A policy has the same colour in every axis, in the
rollout viewer and in learning_curve.png (workbench.learn.report.team_colour: taggers red, runners
blue); one legend on top names the runs by their run folders. Runs to compare are drawn in their
own colours on the return axis."""
from __future__ import annotations

import io
import math
import time

import numpy as np

from workbench.learn.ranking import rank_key, settings_of, swept_names
from workbench.learn.report import matplotlib_colours, rate_unit, team_colour  # noqa: F401 - rate_unit too

LOSS_KEYS = ("policy_loss", "value_loss", "actor_loss", "critic_loss")
_TITLES = {"return": "episode return", "policy_loss": "policy loss", "value_loss": "value loss",
           "actor_loss": "actor loss", "critic_loss": "critic loss", "episode_length": "episode length",
           "tag": "tag rate (red), survival (blue)", "rate": "throughput"}
_RUN_CYCLE = ("0.55", "tab:olive", "tab:cyan", "tab:pink", "tab:brown", "tab:purple")


def policy_colour(name: str, index: int = 0) -> str:
    """The colour of a policy in the curves, the viewer and learning_curve.png: taggers red, runners
    blue, one policy blue, other teams by their index."""
    return team_colour(name, index)


def policy_label(name: str, names, run: str | None = None) -> str:
    """The legend's name of a policy's line: its run's label (`run`, a run folder's name) for a
    single policy, followed by the policy's name for several; without a run a single policy is
    'policy' (the trainer's internal name 'shared' says nothing)."""
    single = len(list(names)) == 1
    if run:
        return run if single else f"{run} {name}"
    return "policy" if name == "shared" and single else name


def fmt_count(x: float, _pos=None) -> str:
    """Engineering format for axis ticks: 950, 1.5k, 160k, 2.4M, 1G."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            text = f"{x / scale:.1f}".rstrip("0").rstrip(".")
            return text + unit
    return f"{x:.0f}"


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


def panels_for(keys) -> list:
    """The axes the metrics `keys` call for, in drawing order."""
    keys = set(keys)
    out = ["return"]
    out += [k for k in LOSS_KEYS if any(key.split("/", 1)[0] == k for key in keys)]
    if "episode_length" in keys:
        out.append("episode_length")
    if keys & {"tag_rate", "survival"}:
        out.append("tag")
    out.append("rate")
    return out


class LivePlot:
    """plot.render(history, message, target_return=None, others=()) -> PNG bytes.

    history: the run's list of metrics dicts; others: [(label, history)] of runs to compare (their
    returns overlaid). lines: {metric key: Line2D} of the current run; axes: {panel: Axes}."""

    columns = 3

    def __init__(self, width: float = 10.5, row_height: float = 2.5, dpi: int = 80):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self.width, self.row_height = width, row_height
        self.fig = Figure(figsize=(width, 1.2), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.axes: dict = {}
        self.lines: dict = {}
        self.layout: tuple = ()
        self._drawn: set = set()  # the keys of the lines the render under way draws
        self.renders = 0
        self.last_render_s = 0.0
        self.message = None
        self._build([])

    def _build(self, panels):
        from matplotlib.ticker import FuncFormatter, MaxNLocator
        self.fig.clear()
        self.axes, self.lines = {}, {}
        self.layout = tuple(panels)
        self._layout_key = None  # (tight_layout's subplot parameters: measured again)
        if not panels:
            self.fig.set_size_inches(self.width, 1.2)
            self.message = self.fig.text(0.5, 0.5, "", ha="center", va="center", fontsize=11, color="0.4")
            return
        columns = min(self.columns, len(panels))
        rows = math.ceil(len(panels) / columns)
        self.fig.set_size_inches(self.width, self.row_height * rows + 0.5)
        for i, name in enumerate(panels):
            ax = self.fig.add_subplot(rows, columns, i + 1)
            ax.set_title(_TITLES[name], fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(True, color="0.9")
            ax.set_xlabel("env-steps", fontsize=7)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
            ax.xaxis.set_major_formatter(FuncFormatter(fmt_count))
            self.axes[name] = ax

    def _line(self, panel, key, colour, label=None, style="-", lw=1.5, alpha=1.0):
        self._drawn.add(key)
        if key not in self.lines:
            (self.lines[key],) = self.axes[panel].plot([], [], style, lw=lw, color=colour, label=label,
                                                       alpha=alpha)
        elif label is not None:  # the plot outlives a run: the next run's line takes its name
            self.lines[key].set_label(label)
        return self.lines[key]

    def render(self, history: list, message: str = "", target_return: float | None = None, others=(),
               label: str | None = None, warmup_steps: float | None = None, frozen=()) -> bytes:
        """label: the run's name in the legend (its run folder's); frozen: the policies that do not
        learn (marked so in the legend); warmup_steps: rollouts of a fixed
        policy (None: training), whose return axis says its points are per window and shades the
        env-steps before every replica ran an episode's step limit (warmup_steps; 0: no limit), where
        only the episodes shorter than the steps so far have ended."""
        start = time.perf_counter()
        history = list(history)
        keys = list(dict.fromkeys(k for m in history for k in m))
        panels = panels_for(keys) if history else []
        if tuple(panels) != self.layout:
            self._build(panels)
        self._drawn = set()
        if not history:
            self.message.set_text(message or "waiting for the first metrics...")
            return self._png(start)
        policies = [k.split("/", 1)[1] for k in keys if k.startswith("return/")]
        colours = {p: policy_colour(p, i) for i, p in enumerate(policies)}
        population = [m for m in history if m.get("members")]
        self._drop("pop:" if not population else ("pop:", "return/"))  # what an earlier run drew
        bands = self._population(population, label, frozen) if population else []
        for p in policies if not population else ():
            name = policy_label(p, policies, label) + (" (frozen)" if p in frozen else "")
            self._line("return", f"return/{p}", colours[p], name).set_data(*_series(history, f"return/{p}"))
        for key in keys:
            kind, _, policy = key.partition("/")
            if kind in LOSS_KEYS and policy in colours:
                self._line(kind, key, colours[policy]).set_data(*_series(history, key))
        if "episode_length" in self.axes:
            self._line("episode_length", "episode_length", "0.25").set_data(*_series(history, "episode_length"))
        if "tag" in self.axes:
            for key, colour in (("tag_rate", "tab:red"), ("survival", "tab:blue")):
                if key in keys:
                    self._line("tag", key, colour).set_data(*_series(history, key))
            self.axes["tag"].set_ylim(-0.03, 1.03)
        xs, ys = _series(history, "env_steps_per_s")
        rate_top = float(ys.max()) if len(ys) else 0.0
        scale, unit = rate_unit(rate_top)
        self.axes["rate"].set_title(f"throughput ({unit + ' ' if unit else ''}env-steps/s)", fontsize=9)
        self._line("rate", "env_steps_per_s", "0.2").set_data(xs, ys / scale)
        self._warmup(warmup_steps)
        if population:
            final = population[-1]
            shown = rank_key(final) if swept_names(final) and rank_key(final) != "mean_return" else "episode return"
            members = final.get("num_members", len(final["members"]))
            settings = len(settings_of(final["members"], swept_names(final))) if final["members"] else 1
            over = f"each setting's {members // settings}" if settings > 1 else f"{members}"
            self.axes["return"].set_title(f"{shown}: median, IQR band over {over} members", fontsize=9)
        right = max((float(m.get("env_steps", 0)) for m in history), default=0.0)
        for i, (label, other) in enumerate(others):
            other_policies = list(dict.fromkeys(k.split("/", 1)[1] for m in other for k in m
                                                if k.startswith("return/")))
            for p in other_policies:
                name = label if len(other_policies) == 1 else f"{label} {p}"
                line = self._line("return", f"other:{label}:{p}", _RUN_CYCLE[i % len(_RUN_CYCLE)], name,
                                  style="--" if p in ("runners",) else "-", lw=1.1, alpha=0.9)
                xs, ys = _series(other, f"return/{p}")
                line.set_data(xs, ys)
                if len(xs):
                    right = max(right, float(xs.max()))
        if target_return is not None:
            self._drawn.add("target")
            if "target" not in self.lines:
                self.lines["target"] = self.axes["return"].axhline(target_return, color="tab:green", ls=":", lw=1.2)
            self.lines["target"].set_ydata([target_return, target_return])
            self.lines["target"].set_label(f"target {target_return:g}")
        # the plot outlives a run: lines of series this render has not (an earlier run's) go
        for key in [k for k in self.lines if k not in self._drawn and not k.startswith(("pop:", "warmup"))]:
            self.lines.pop(key).remove()
        for key, line in self.lines.items():  # a curve of a few points (or one) shows its points
            if hasattr(line, "get_xdata") and key != "target" and not key.startswith("pop:member:"):
                line.set_marker("o" if 0 < len(line.get_xdata()) <= 40 else "")
                line.set_markersize(3)
        for name, ax in self.axes.items():
            ax.relim()
            if name == "return":  # relim leaves the bands (collections) out
                for (band, _median), _label in bands:
                    for path in band.get_paths():
                        ax.update_datalim(path.vertices)
            ax.autoscale_view()
            if name == "tag":
                ax.set_ylim(-0.03, 1.03)
            if name == "rate":  # from zero, up to the data: a steady rate reads as steady, not as noise
                ax.set_ylim(0, max(rate_top / scale, 1e-9) * 1.1)
            if right > 0:  # one env-steps axis for every panel, from the start of the run
                ax.set_xlim(0, right * 1.03)
        entries = bands + [(line, line.get_label()) for key, line in self.lines.items()
                           if key.startswith(("return/", "other:")) or key in ("target", "warmup")]
        handles = [handle for handle, _label in entries]
        for legend in list(self.fig.legends):
            legend.remove()
        longest = max((len(text) for _handle, text in entries), default=0)
        ncol = max(1, min(len(handles), 6, 90 // (longest + 6)))  # run folders' names are long
        self.fig.legend(handles, [text for _handle, text in entries], loc="upper center", ncol=ncol, fontsize=8,
                        frameon=False)
        rows = math.ceil(len(self.axes) / min(self.columns, len(self.axes)))
        room = 0.32 + 0.17 * (math.ceil(len(handles) / ncol) - 1)  # inches for the legend above the titles
        top = 1.0 - room / (self.row_height * rows + 0.5)
        # tight_layout measures every label (half a render's time): again where the panels or the
        # legend changed, else every few renders, as tick labels widen with the data
        layout = (tuple(self.axes), ncol, len(handles), top)
        if layout != self._layout_key or self.renders % 8 == 0:
            self.fig.tight_layout(pad=0.6, rect=(0, 0, 1, top))
            self._layout_key = layout
        return self._png(start)

    def _drop(self, prefixes) -> None:
        """Remove the artists whose keys start with `prefixes` (drawn afresh, or an earlier run's)."""
        for key in [k for k in self.lines if k.startswith(prefixes)]:
            self.lines.pop(key).remove()

    def _population(self, history: list, label: str | None, frozen=()) -> list:
        """Draw a population's returns (`ranking.population_curves` of its reports) on the return
        axis: per curve (a policy's, or a sweep setting's) the median line over the members and
        the interquartile band, each member thin (without a sweep, at most 8 members). Returns
        the legend's entries [((band, median line), label)]."""
        from workbench.learn.ranking import population_curves
        ax = self.axes["return"]
        tab10 = matplotlib_colours("tab10")
        entries = []
        for i, curve in enumerate(population_curves(history)["curves"]):
            colour = team_colour(curve["team"], i) if curve["team"] is not None else tab10[i % len(tab10)]
            band = ax.fill_between(curve["steps"], curve["q25"], curve["q75"], color=colour, alpha=0.25, linewidth=0)
            self.lines[f"pop:band:{i}"] = band
            name = (f"{label}: {curve['label']}" if label else curve["label"]) + (
                " (frozen)" if curve["team"] in frozen else "")
            median = self._line("return", f"pop:median:{i}", colour, name, lw=1.8)
            median.set_data(curve["steps"], curve["median"])
            for k, (xs, ys) in curve["members"].items():
                self._line("return", f"pop:member:{i}:{k}", colour, lw=0.6, alpha=0.4).set_data(xs, ys)
            entries.append(((band, median), name))
        return entries

    def _warmup(self, warmup_steps):
        """Shade the env-steps before `warmup_steps` on the axes of episode statistics (None or 0: none)."""
        for key in [k for k in self.lines if k.startswith("warmup")]:
            self.lines.pop(key).remove()
        self.axes["return"].set_title(_TITLES["return"] if warmup_steps is None
                                      else "episode return per window (no learning)", fontsize=9)
        if not warmup_steps:
            return
        for name in ("return", "episode_length", "tag"):
            if name in self.axes:
                key = "warmup" if name == "return" else f"warmup:{name}"  # one legend entry, the return axis'
                self.lines[key] = self.axes[name].axvspan(0, warmup_steps, color="0.85", alpha=0.6, lw=0,
                                                          label="early: only short episodes have ended")

    def _png(self, start) -> bytes:
        buf = io.BytesIO()
        self.canvas.print_png(buf)
        self.renders += 1
        self.last_render_s = time.perf_counter() - start
        return buf.getvalue()
