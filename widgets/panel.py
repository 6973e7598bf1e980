"""The training panel: launch training or rollouts alone from a notebook and watch them live.

    from workbench.widgets import TrainingPanel
    panel = TrainingPanel("cartpole", target="cpu", num_envs=64)   # display it: the last line of a cell
    panel.start(); panel.wait()                                     # or press Start / Stop

The run goes in a background thread (widgets.runner.Runner) so the notebook stays usable; Stop only
sets a threading.Event that the training callback reads. A second thread redraws the panel at most
once per `redraw_interval` seconds: the progress bar with env-steps/s and ETA, the curves (matplotlib
Agg into an ipywidgets.Image), device memory, and, every `record_every` iterations, the pulled
episodes of the chosen replicas in the rollout viewer. Errors of either thread land in the panel.
"""
from __future__ import annotations

import html
import math
import os
import sys
import threading
import time

import ipywidgets as widgets

from workbench import config as cfg
from workbench.config import ConfigError

from .form import ConfigForm, EnvParamsForm
from .plots import LivePlot
from .runner import Runner, RunSpec, default_run_dir, read_run, same_experiment

# fields that the panel's own controls set (env, replicas, target, env parameters) or that the
# algorithm choice fixes; every other field of the config class is in the generated form
CONTROLLED = ("env", "num_envs", "target", "env_params", "algorithm")


# ---- device information --------------------------------------------------------------------------

def _meminfo() -> dict:
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def _process_rss() -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def gpu_count() -> int:
    """Real CUDA GPUs visible to torch (0 on a machine without one)."""
    import torch
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU here
        return 0


def device_summary(target: str) -> str:
    """One line on the device the target runs on: its name, count and memory in use."""
    import torch
    gib = 2.0 ** 30
    if target in ("cuda", "cuda-c", "auto") and gpu_count() > 0:
        index = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        return (f"GPU {index} of {gpu_count()}: {torch.cuda.get_device_name(index)} | memory "
                f"{(total - free) / gib:.2f} / {total / gib:.1f} GiB in use (torch holds "
                f"{torch.cuda.memory_reserved(index) / gib:.2f} GiB) | torch {torch.__version__}")
    info = _meminfo()
    rss = _process_rss()
    memory = ""
    if "MemTotal" in info:
        used = info["MemTotal"] - info.get("MemAvailable", 0)
        memory = f" | RAM {used / gib:.1f} / {info['MemTotal'] / gib:.1f} GiB in use"
    if rss is not None:
        memory += f" (this kernel {rss / gib:.2f} GiB)"
    threads = f"torch threads {torch.get_num_threads()}"
    if "numba" in sys.modules:
        threads = f"numba threads {sys.modules['numba'].config.NUMBA_NUM_THREADS}, " + threads
    return f"cpu: {os.cpu_count()} cores, no GPU in use{memory} | {threads} | torch {torch.__version__}"


def _fmt_steps(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} G"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} k"
    return f"{n:.0f} "


def _fmt_time(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


# ---- the panel -----------------------------------------------------------------------------------

class TrainingPanel(widgets.VBox):
    """Train or run rollouts from a form generated from the config dataclasses, with live progress.

    env, mode ("train" or "rollouts"), algorithm ("ppo", "a2c", "ddpg"), target (default: the best
    present), num_envs (replicas), env_params (the env's PARAMS, e.g. num_runners=...), checkpoint
    (rollouts with its policy instead of random actions), record_every (animate the recorded episode
    of `record_replicas` every this many iterations; 0: never), gpus (data-parallel ranks, one per
    GPU; 1 on a single device), policies (the policy map), redraw_interval (seconds between two
    redraws at most), and any field of the algorithm's config as a keyword (lr=..., total_env_steps=...).

    Programmatic use: start() -> Runner, stop(), wait() -> the run's result (raises its error),
    set(**fields), spec() -> the RunSpec the form describes; history, status, trainer, animation.
    """

    def __init__(self, env="cartpole", *, mode: str = "train", algorithm: str = "ppo",
                 target: str | None = None, num_envs: int | None = None, env_params: dict | None = None,
                 checkpoint: str | None = None, record_every: int = 0, record_replicas=(0,), gpus: int = 1,
                 policies: dict | None = None, redraw_interval: float = 0.3, max_frames: int = 300,
                 viewer_dpi: int = 72, runs_root: str = "runs", compare=(), **config):
        import workbench as wb
        self.given_env = None
        if not isinstance(env, str):  # an Env a cell made: its name, replicas, target and parameters, no compile
            self.given_env = env
            defaults = wb.registry.definition(env.name).params
            env_params = {**{k: v for k, v in env.definition.params.items() if defaults.get(k) != v},
                          **(env_params or {})}
            num_envs = num_envs or env.num_envs
            target = target or env.target.name
            env = env.name
        if algorithm not in cfg.ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {sorted(cfg.ALGORITHMS)}, got {algorithm!r}")
        if env not in wb.env_names():
            raise ConfigError(f"unknown env {env!r}; known envs: {wb.env_names()}")
        self.redraw_interval = float(redraw_interval)
        self.max_frames = max_frames
        self.viewer_dpi = viewer_dpi
        self.policies = policies
        self.runner: Runner | None = None
        self.runs_root = runs_root
        self.runs: list = []  # {"label", "run_dir", "config", "runner" or "history"}: this panel's runs and folders
        self.animation = None
        self.redraws = 0
        self._refresher: threading.Thread | None = None
        self._wake = threading.Event()
        self._pending = None
        self._drawn_rows = -1
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self.plot = LivePlot()

        targets = wb.available_targets()
        target = target or wb.best_target()
        if target not in targets + ["auto"]:
            raise ConfigError(f"target {target!r} is not available here; available: {targets}")
        style = {"description_width": "70px"}
        self.title = widgets.HTML("<b style='font-size:14px'>warp-workbench</b> "
                                  "<span style='color:#666'>training panel</span>")
        self.device_info = widgets.HTML(layout=widgets.Layout(margin="0 0 4px 0"))
        self.device_info.add_class("wb-device")
        self.mode = widgets.ToggleButtons(options=[("Train", "train"), ("Rollouts only", "rollouts")], value=mode,
                                          tooltips=["learn with the algorithm below",
                                                    "step the env with random actions or a checkpoint's policy: "
                                                    "throughput and animations without learning"],
                                          style={"button_width": "110px"})
        self.env_name = widgets.Dropdown(options=wb.env_names(), value=env, description="env", style=style,
                                         tooltip="the registered env (python -m workbench envs lists them)",
                                         layout=widgets.Layout(width="260px"))
        self.target = widgets.Dropdown(options=sorted(set(targets + ["auto"]), key=lambda t: t != "auto"),
                                       value=target, description="target", style=style,
                                       tooltip=cfg.RunConfig.__dataclass_fields__["target"].metadata["doc"],
                                       layout=widgets.Layout(width="200px"))
        self.gpus = widgets.BoundedIntText(value=1, min=1, max=1, description="GPUs", style=style,
                                           tooltip="data-parallel ranks (torchrun), one per GPU",
                                           layout=widgets.Layout(width="140px"))
        self.num_envs = widgets.IntText(value=int(num_envs or cfg.RunConfig.num_envs), description="replicas",
                                        style=style, tooltip=cfg.RunConfig.__dataclass_fields__["num_envs"]
                                        .metadata["doc"], layout=widgets.Layout(width="200px"))
        self.num_envs.add_class("wb-field-num_envs")
        self.algorithm = widgets.Dropdown(options=[(k.upper(), k) for k in cfg.ALGORITHMS], value=algorithm,
                                          description="algorithm", style=style,
                                          tooltip="; ".join(f"{k.upper()}: {(c.__doc__ or '').strip()}"
                                                            for k, c in cfg.ALGORITHMS.items()),
                                          layout=widgets.Layout(width="200px"))
        self.policy = widgets.Dropdown(options=[("uniformly random", "random"), ("checkpoint", "checkpoint")],
                                       value="checkpoint" if checkpoint else "random", description="policy",
                                       style=style, layout=widgets.Layout(width="260px"))
        self.checkpoint = widgets.Text(value=str(checkpoint or ""), placeholder="path/to/checkpoint.pt",
                                       description="checkpoint", style=style, layout=widgets.Layout(width="420px"),
                                       tooltip="a file written by Trainer.save or the CLI (its env and "
                                               "parameters are used; replicas and target are the panel's)")
        self.record_every = widgets.BoundedIntText(value=int(record_every), min=0, max=10**9,
                                                   description="animate an episode every",
                                                   style={"description_width": "160px"},
                                                   tooltip="pull and animate the last episode of the replicas "
                                                           "every this many iterations (0: never)",
                                                   layout=widgets.Layout(width="230px"))
        self.record_every_unit = widgets.HTML("iterations (0: never),")
        self.record_replicas = widgets.Text(value=", ".join(str(r) for r in record_replicas),
                                            description="of replicas", style={"description_width": "75px"},
                                            tooltip="replica indices to animate, e.g. 0, 1",
                                            layout=widgets.Layout(width="170px"))
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play",
                                           tooltip="start the run in the background",
                                           layout=widgets.Layout(width="100px"))
        self.start_button.add_class("wb-start")
        self.new_run_button = widgets.Button(description="New run", icon="plus",
                                             tooltip="start again from scratch (a fresh trainer and run folder); "
                                                     "Start continues the run that Stop paused",
                                             layout=widgets.Layout(width="100px"))
        self.new_run_button.add_class("wb-new-run")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                                          tooltip="stop at the end of the current iteration",
                                          layout=widgets.Layout(width="100px"))
        self.stop_button.add_class("wb-stop")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="260px"))
        self.progress.add_class("wb-progress")
        self.progress_text = widgets.HTML("")
        self.progress_text.add_class("wb-progress-text")
        self.status_html = widgets.HTML("")
        self.status_html.add_class("wb-status")
        self.curves = widgets.Image(format="png", value=self.plot.render([], "press Start: curves appear here"),
                                    layout=widgets.Layout(max_width="100%"))
        self.runs_html = widgets.HTML("")
        self.runs_html.add_class("wb-runs")
        self.curves.add_class("wb-curves")
        self.viewer_title = widgets.HTML("")
        self.viewer = widgets.Output(layout=widgets.Layout(max_width="100%"))
        self.viewer.add_class("wb-viewer")
        self.error_html = widgets.HTML("")
        self.error_html.add_class("wb-error")
        self.hint = widgets.HTML("")

        self.config_form = None
        self.env_form = None
        self.forms = widgets.Accordion(children=[], layout=widgets.Layout(max_width="980px"))
        self.forms.add_class("wb-forms")
        self._build_config_form(dict(config))
        self._build_env_form(env_params)

        self.start_button.on_click(lambda _b: self._on_start())
        self.new_run_button.on_click(lambda _b: self._on_start(new=True))
        self.stop_button.on_click(lambda _b: self.stop())
        self.env_name.observe(lambda _c: self._build_env_form(None), names="value")
        self.algorithm.observe(lambda _c: self._build_config_form(None), names="value")
        self.target.observe(lambda _c: self._refresh_controls(), names="value")
        self.mode.observe(lambda _c: self._refresh_controls(), names="value")
        self.policy.observe(lambda _c: self._refresh_controls(), names="value")

        self.rollout_row = widgets.HBox([self.policy, self.checkpoint])
        row = dict(layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        super().__init__([
            self.title, self.device_info,
            widgets.HBox([self.mode, self.env_name, self.target, self.gpus], **row),
            widgets.HBox([self.num_envs, self.algorithm], **row),
            widgets.HBox([self.record_every, self.record_every_unit, self.record_replicas], **row),
            self.rollout_row, self.hint, self.forms,
            widgets.HBox([self.start_button, self.stop_button, self.new_run_button, self.progress,
                          self.progress_text], **row),
            self.status_html, self.error_html, self.curves, self.runs_html, self.viewer_title, self.viewer,
        ])
        self.add_class("wb-panel")
        self._refresh_controls()
        if int(gpus) != 1:
            if self.gpus.disabled or not 1 <= int(gpus) <= self.gpus.max:
                raise ConfigError(f"gpus={gpus}: data-parallel ranks are one per GPU, for training on a GPU target; "
                                  f"here {gpu_count()} GPU(s) and target {self.target.value!r} (use gpus=1)")
            self.gpus.value = int(gpus)
        for run_dir in compare:
            self.add_run(run_dir)
        self._set_status("ready: press Start (or call panel.start())"
                         + (f"; the {env} env given is reused (no compile)" if self.given_env is not None else ""))
        self.device_info.value = self._device_line()

    # -- forms ----------------------------------------------------------------------------
    def _build_config_form(self, overrides: dict | None):
        cls = cfg.ALGORITHMS[self.algorithm.value]
        values = {}
        if self.config_form is not None:  # keep what the user typed in fields both classes have
            for name, widget in self.config_form.inputs.items():
                values[name] = widget.value
        names = {name for name, *_ in cfg.describe(cls)}
        if overrides:
            clash = sorted(set(overrides) & set(CONTROLLED))
            if clash:
                raise ConfigError(f"{clash} are set by the panel's own arguments (env=..., num_envs=..., "
                                  f"target=..., env_params=..., algorithm=...), not as config fields")
            unknown = sorted(set(overrides) - names)
            if unknown:
                raise ConfigError(f"unknown {cls.__name__} field(s) {unknown}; fields: {sorted(names - set(CONTROLLED))}")
        form = ConfigForm(cls, exclude=CONTROLLED)
        for name, value in values.items():
            if name in form.inputs and type(form.inputs[name]) is type(self.config_form.inputs[name]):
                form.inputs[name].value = value
        if overrides:
            form.set(**overrides)
        form.show_gpu_fields(self.target.value != "cpu")
        self.config_form = form
        self._update_accordion()

    def _build_env_form(self, env_params: dict | None):
        self.env_form = EnvParamsForm(self.env_name.value, env_params)
        self._update_accordion()

    def _update_accordion(self):
        if self.config_form is None or self.env_form is None:
            return
        self.forms.children = [self.config_form, self.env_form]
        try:
            n = self.env_form.num_agents()
            agents = f"{n} agent{'s' if n != 1 else ''}"
        except Exception:  # noqa: BLE001 - values the env refuses: the form says why
            agents = "agent count invalid"
        self.forms.titles = (f"Hyperparameters: {self.config_form.cls.__name__}",
                             f"Env parameters: {self.env_name.value} ({agents})")

    def _refresh_controls(self):
        n_gpus = gpu_count()
        on_gpu = self.target.value in ("cuda", "cuda-c", "auto") and n_gpus > 1
        self.gpus.max = max(1, n_gpus) if on_gpu else 1
        self.gpus.disabled = not on_gpu or self.mode.value != "train"
        if self.gpus.disabled:
            self.gpus.value = 1
        rollouts = self.mode.value == "rollouts"
        if self.config_form is not None:
            self.config_form.show_gpu_fields(self.target.value != "cpu")
        self.rollout_row.layout.display = "" if rollouts else "none"
        self.checkpoint.layout.display = "" if self.policy.value == "checkpoint" else "none"
        self.algorithm.disabled = rollouts
        self.hint.value = ("<span style='color:#666;font-size:12px'>Rollouts only use total_env_steps, "
                           "rollout_length (steps per iteration), log_every and seed of the form below; a "
                           "checkpoint brings its own env parameters.</span>" if rollouts else "")
        self.device_info.value = self._device_line()

    def set(self, **values) -> "TrainingPanel":
        """Set form fields by name: config fields, or env, num_envs, target, algorithm, mode,
        record_every, gpus, checkpoint, and env parameters as env_params={...}."""
        controls = {"env": self.env_name, "num_envs": self.num_envs, "target": self.target,
                    "algorithm": self.algorithm, "mode": self.mode, "record_every": self.record_every,
                    "gpus": self.gpus}
        for name in [n for n in ("env", "algorithm") if n in values]:  # these rebuild the forms first
            controls[name].value = values.pop(name)
        for name, value in list(values.items()):
            if name in controls:
                controls[name].value = value
            elif name == "checkpoint":
                self.checkpoint.value = str(value or "")
                self.policy.value = "checkpoint" if value else "random"
            elif name == "env_params":
                self._build_env_form(value)
            elif name == "record_replicas":
                self.record_replicas.value = ", ".join(str(r) for r in value)
            else:
                self.config_form.set(**{name: value})
        self._update_accordion()
        return self

    def spec(self) -> RunSpec:
        """The RunSpec the panel's fields describe (ConfigError names a bad field)."""
        values = self.config_form.values()
        env_params = self.env_form.values()
        data = {**values, "env": self.env_name.value, "num_envs": self.num_envs.value, "target": self.target.value,
                "env_params": env_params or None}
        config = cfg.from_dict(data, self.config_form.cls)
        try:
            replicas = tuple(int(r) for r in self.record_replicas.value.replace(",", " ").split())
        except ValueError:
            raise ConfigError(f"replicas to animate must be integers like '0, 1', got "
                              f"{self.record_replicas.value!r}") from None
        checkpoint = self.checkpoint.value.strip() if self.policy.value == "checkpoint" else None
        if self.mode.value == "rollouts" and self.policy.value == "checkpoint" and not checkpoint:
            raise ConfigError("policy 'checkpoint' needs the checkpoint's path")
        return RunSpec(config=config, mode=self.mode.value, checkpoint=checkpoint or None,
                       record_every=self.record_every.value, record_replicas=replicas or (0,),
                       world_size=self.gpus.value if self.mode.value == "train" else 1, policies=self.policies)

    # -- control --------------------------------------------------------------------------
    def _on_start(self, new: bool = False):
        try:
            self.start(new=new)
        except Exception:  # noqa: BLE001 - already shown in the panel
            pass

    def can_continue(self, spec: RunSpec | None = None) -> bool:
        """Whether Start would continue the last run: it trained in this process, ended by Stop (or by
        its budget, with a larger total_env_steps now), and the env, replicas, target and algorithm are unchanged."""
        prev = self.runner
        if prev is None or prev.running or prev.trainer is None or prev.error is not None or prev.spec.mode != "train":
            return False
        try:
            spec = spec or self.spec()
        except Exception:  # noqa: BLE001 - a bad field: Start will say so
            return False
        return same_experiment(prev.spec, spec) and prev.trainer.iteration < spec.total_iterations

    def start(self, new: bool = False) -> Runner:
        """Start a run with the panel's current values, in the background; returns its Runner.
        After Stop this continues the same run (same trainer, the iteration count goes on) unless
        `new` (the "New run" button) or the env, replicas, target or algorithm changed."""
        if self.runner is not None and (self.runner.running or (self._refresher and self._refresher.is_alive())):
            raise RuntimeError("a run is going: press Stop (or call panel.stop()) and wait for it first")
        self.error_html.value = ""
        try:
            spec = self.spec()
        except Exception as exc:
            self._show_error(exc, with_traceback=False)
            self._set_status(f"cannot start: {exc}", "error")
            raise
        resume = self.runner if not new and self.can_continue(spec) else None
        if resume is not None:
            spec = RunSpec(**{**spec.__dict__, "config": cfg.replace(spec.config, run_dir=resume.spec.config.run_dir)})
        elif not spec.config.run_dir and spec.world_size == 1:
            spec = RunSpec(**{**spec.__dict__,
                              "config": cfg.replace(spec.config, run_dir=default_run_dir(spec.config.env,
                                                                                         self.runs_root))})
        self.runner = Runner(spec, on_state=lambda _s: self._wake.set(), on_metrics=lambda _m: self._wake.set(),
                             on_trajectories=self._on_trajectories, resume=resume, env=self.given_env)
        if resume is not None:
            entry = next(r for r in self.runs if r.get("runner") is resume)
            entry["runner"] = self.runner
        else:
            self.runs.append({"label": f"run {len(self.runs) + 1}", "run_dir": spec.config.run_dir,
                              "config": cfg.to_dict(spec.config), "runner": self.runner})
        self._drawn_rows = -1
        self._pending = None
        if resume is None:
            self.animation = None
            self.progress.value = 0.0
        self.progress.bar_style = ""
        self.progress_text.value = ""
        self._set_controls_running(True)
        self._set_status(self._describe_state(self.runner))
        self._update_runs_table()
        self._refresher = threading.Thread(target=self._refresh_loop, args=(self.runner,), name="workbench-panel",
                                           daemon=True)
        self.runner.start()
        self._refresher.start()
        return self.runner

    def new_run(self) -> Runner:
        """Start a fresh run (a new trainer and run folder), whatever the last one was."""
        return self.start(new=True)

    def add_run(self, run_dir) -> dict:
        """Overlay the curves of a run folder (its metrics.csv and config.yaml) to compare with."""
        config, rows = read_run(run_dir)
        entry = {"label": os.path.basename(os.path.normpath(str(run_dir))), "run_dir": str(run_dir),
                 "config": config, "history": rows}
        self.runs.append(entry)
        self._update_runs_table()
        self._drawn_rows = -1
        self.curves.value = self._render_curves(self.runner)
        return entry

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

    def _render_curves(self, runner) -> bytes:
        history = list(runner.history) if runner is not None else []
        message = "" if history else (self._describe_state(runner) if runner is not None
                                      else "press Start: curves appear here")
        others = self._others(runner)
        if not history and others:  # nothing of this run yet: the runs to compare stand alone
            history = others.pop()[1]
        target = runner.spec.config.target_return if runner is not None else None
        return self.plot.render(history, message, target_return=target, others=others)

    def config_differences(self) -> tuple:
        """(keys, rows): the config fields whose values differ between this panel's runs, and per run
        (label, run_dir, {key: value})."""
        configs = [dict(e.get("config") or {}) for e in self.runs]
        keys = sorted({k for c in configs for k in c if k != "run_dir"})
        differing = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
        return differing, [(e["label"], e["run_dir"], {k: c.get(k) for k in differing})
                           for e, c in zip(self.runs, configs)]

    def _update_runs_table(self):
        if len(self.runs) < 2:
            self.runs_html.value = ""
            return
        keys, rows = self.config_differences()
        head = "".join(f"<th style='padding:0 8px'>{html.escape(k)}</th>" for k in keys)
        body = "".join(
            f"<tr><td style='padding:0 8px'><b>{html.escape(label)}</b></td>"
            f"<td style='padding:0 8px;font-family:monospace'>{html.escape(str(run_dir))}</td>"
            + "".join(f"<td style='padding:0 8px;font-family:monospace'>{html.escape(str(v))}</td>"
                      for v in values.values()) + "</tr>" for label, run_dir, values in rows)
        self.runs_html.value = (f"<div style='font-size:12px'><b>Runs compared</b> (curves overlaid on the return "
                                f"plot; the columns are the settings that differ)<table><tr><th>run</th>"
                                f"<th>folder</th>{head}</tr>{body}</table></div>")

    def stop(self) -> None:
        """Ask the run to stop at the end of its current iteration (sets a threading.Event)."""
        if self.runner is not None and self.runner.running:
            with self._lock:  # the redraw thread writes the status under the same lock
                self.runner.stop()
                self.stop_button.disabled = True
                self._set_status(f"stopping: at the end of the current iteration "
                                 f"({self._iteration_text(self.runner)})", "warning")

    def wait(self, timeout: float | None = None, raise_error: bool = True):
        """Block until the run and the panel's last redraw are done; returns the run's result
        (a TrainResult when training); raises the run's error (raise_error) or TimeoutError."""
        if self.runner is None:
            raise RuntimeError("nothing was started: call panel.start() first")
        start = time.perf_counter()
        result = self.runner.wait(timeout, raise_error=False)
        if self._refresher is not None:
            left = None if timeout is None else max(0.0, timeout - (time.perf_counter() - start))
            self._refresher.join(left)
            if self._refresher.is_alive():
                raise TimeoutError(f"the panel is still redrawing after {timeout} s")
        if self.runner.error is not None and raise_error:
            raise self.runner.error
        return result

    @property
    def history(self) -> list:
        return list(self.runner.history) if self.runner is not None else []

    @property
    def trainer(self):
        return self.runner.trainer if self.runner is not None else None

    @property
    def status(self) -> str:
        """The status line as plain text."""
        import re
        return html.unescape(re.sub(r"<[^>]+>", "", self.status_html.value)).strip()

    # -- redrawing (the panel's own thread) -----------------------------------------------------
    def _on_trajectories(self, trajectories, env):
        with self._lock:
            self._pending = (trajectories, env, self.runner.history[-1]["iteration"] if self.runner.history else 0)
        self._wake.set()

    def _refresh_loop(self, runner: Runner):
        try:
            self._refresh_until_done(runner)
        finally:
            self._update_runs_table()

    def _refresh_until_done(self, runner: Runner):
        while runner.running:
            self._wake.wait(self.redraw_interval)
            self._wake.clear()
            wait = self.redraw_interval - (time.perf_counter() - self._last_draw)
            if wait > 0 and runner.running:
                time.sleep(wait)  # at most one redraw per interval, however fast the metrics come
            self._redraw_safely(runner)
        self._redraw_safely(runner)
        self._set_controls_running(False)
        if runner.error is not None:
            self._show_error(runner.error, runner.traceback)

    def _redraw_safely(self, runner):
        try:
            self._redraw(runner)
        except Exception as exc:  # noqa: BLE001 - a drawing bug must show, not kill the thread silently
            import traceback
            self._show_error(exc, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        finally:
            self._last_draw = time.perf_counter()  # the interval counts from the end of a redraw

    def _redraw(self, runner: Runner):
        history = list(runner.history)
        if len(history) != self._drawn_rows:
            self._drawn_rows = len(history)
            self.curves.value = self._render_curves(runner)
            self.redraws += 1
        if history:
            last = history[-1]
            total = runner.spec.config.total_env_steps
            steps = float(last.get("env_steps", 0))
            frac = min(1.0, steps / max(total, 1))
            rate = float(last.get("env_steps_per_s", 0.0))
            if not runner.running:  # ended: this session's mean rate (time_s counts from its start), no ETA
                before = runner.resumed_from.history[-1]["env_steps"] if runner.resumed_from and \
                    runner.resumed_from.history else 0
                elapsed = float(last.get("time_s", 0.0))
                if elapsed > 0 and len(history) > len(runner.resumed_from.history if runner.resumed_from else []):
                    rate = (steps - float(before)) / elapsed
            eta = (total - steps) / rate if rate > 0 and runner.running else 0.0
            self.progress.value = frac
            self.progress_text.value = (f"<span style='font-family:monospace;font-size:12px'>{100 * frac:5.1f}% | "
                                        f"{_fmt_steps(steps)}env-steps | {_fmt_steps(rate)}env-steps/s | "
                                        f"ETA {_fmt_time(eta) if runner.running else '-'} | "
                                        f"{self._iteration_text(runner)}</span>")
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._show_trajectories(*pending)
        self.device_info.value = self._device_line()
        with self._lock:
            if not (runner.running and runner.stop_requested):  # else "stopping" stays until the run ends
                style = {"error": "error", "stopped": "warning", "finished": "success"}.get(runner.state, "")
                self._set_status(self._describe_state(runner), style)

    def _show_trajectories(self, trajectories, env, iteration):
        from workbench import render
        anim = render.show(trajectories, env, max_frames=self.max_frames, dpi=self.viewer_dpi)
        self.animation = anim
        replicas = ", ".join(str(t.get("replica")) for t in trajectories)
        self.viewer_title.value = (f"<b>Rollout viewer</b> <span style='color:#666'>last episode of replica(s) "
                                   f"{replicas}, pulled at iteration {iteration}</span>")
        self.viewer.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"text/html": anim.to_html(),
                                         "text/plain": f"<rollout animation of replica(s) {replicas}>"}},)

    # -- text -----------------------------------------------------------------------------
    def _device_line(self) -> str:
        try:
            line = device_summary(self.target.value)
        except Exception as exc:  # noqa: BLE001 - device queries must never break the panel
            line = f"device information unavailable: {exc}"
        gpus = gpu_count()
        ranks = f" | GPUs to use: {self.gpus.value} of {max(gpus, 1)}" if gpus > 1 else " | 1 device"
        return f"<span style='color:#444;font-size:12px;font-family:monospace'>{html.escape(line)}{ranks}</span>"

    @staticmethod
    def _iteration_text(runner) -> str:
        it = runner.history[-1]["iteration"] if runner.history else 0
        return f"iteration {it} / {runner.spec.total_iterations}"

    def _describe_state(self, runner) -> str:
        spec, c = runner.spec, runner.spec.config
        what = (f"training {c.algorithm.upper()}" if spec.mode == "train"
                else f"rollouts ({'policy of ' + os.path.basename(spec.checkpoint) if spec.checkpoint else 'random actions'})")
        agents = runner.env.num_agents if runner.env is not None else None
        size = f"{c.num_envs} replicas" + (f" x {agents} agents" if agents else "")
        ranks = f" on {spec.world_size} ranks" if spec.world_size > 1 else ""
        last = runner.history[-1] if runner.history else {}
        done = (f"{last.get('iteration', 0)} iterations, {_fmt_steps(float(last.get('env_steps', 0)))}env-steps"
                f" in {_fmt_time(float(last.get('time_s', 0.0)))}")
        state = runner.state
        if state in ("idle", "compiling"):
            return (f"compiling {c.env} for target {c.target}{ranks} (the first run of these parameters in this "
                    f"kernel compiles the env; later runs reuse it)...")
        folder = f"; run folder {c.run_dir}" if c.run_dir else ""
        if state == "running":
            going_on = "continuing " if runner.resumed_from is not None else ""
            return f"running: {going_on}{what} on {c.env}, {size}, target {c.target}{ranks}{folder}"
        if state == "stopped":
            more = "; Continue goes on, New run starts again" if spec.mode == "train" and spec.world_size == 1 else ""
            return f"stopped (Stop pressed) after {done}: {what} on {c.env}{folder}{more}"
        if state == "finished":
            reason = {"budget": "total_env_steps reached", "target_return": "target_return reached"}.get(
                runner.stopped_by, str(runner.stopped_by))
            ret = last.get("mean_return")
            ret = f", mean return {ret:.2f}" if isinstance(ret, float) and math.isfinite(ret) else ""
            return f"finished ({reason}) after {done}{ret}: {what} on {c.env}{folder}"
        return f"error: {type(runner.error).__name__}: {runner.error}"

    def _set_status(self, text: str, style: str = ""):
        colour = {"error": "#b00020", "warning": "#a15c00", "success": "#1b7f3a"}.get(style, "#222")
        self.status_html.value = f"<span style='color:{colour};font-size:13px'>{html.escape(text)}</span>"

    def _show_error(self, exc, traceback_text: str | None = None, with_traceback: bool = True):
        detail = ""
        if with_traceback and traceback_text:
            detail = (f"<details><summary>traceback</summary><pre style='font-size:11px;white-space:pre-wrap'>"
                      f"{html.escape(traceback_text)}</pre></details>")
        self.error_html.value = (f"<div style='border:1px solid #b00020;background:#fff0f0;padding:6px;"
                                 f"max-width:980px'><b style='color:#b00020'>{html.escape(type(exc).__name__)}</b>: "
                                 f"<span style='white-space:pre-wrap'>{html.escape(str(exc))}</span>{detail}</div>")

    def _set_controls_running(self, running: bool):
        self.start_button.disabled = running
        self.new_run_button.disabled = running
        self.stop_button.disabled = not running
        if not running:
            resumable = self.can_continue()
            self.start_button.description = "Continue" if resumable else "Start"
            self.start_button.tooltip = ("continue the stopped run (same trainer; the iteration count goes on)"
                                         if resumable else "start the run in the background")
        for control in (self.mode, self.env_name, self.target, self.num_envs, self.record_every,
                        self.record_replicas, self.policy, self.checkpoint):
            control.disabled = running
        self.algorithm.disabled = running or self.mode.value == "rollouts"
        if not running:
            self._refresh_controls()


def panel(env: str = "cartpole", **kwargs) -> TrainingPanel:
    """A TrainingPanel (see its doc); display it as the last line of a cell."""
    return TrainingPanel(env, **kwargs)
