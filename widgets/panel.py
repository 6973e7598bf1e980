"""The training panel: launch training or rollouts alone from a notebook and watch them live.

    from workbench.widgets import TrainingPanel
    panel = TrainingPanel("cartpole", target="cpu", num_envs=64)   # display it: the last line of a cell
    panel.start(); panel.wait()                                     # or press Start / Stop

The panel lays out its parts and drives them:

    controls.RunForm       what to run: the controls and the generated forms, read into a RunSpec
    runner.Runner          the run, in a background thread so the notebook stays usable
    curves.RunCurves       the live curves, the runs compared and the settings that differ
    viewer.EpisodeViewer   the episodes the run pulls, animated
    status                 the status line, progress line and error box

Stop only sets a threading.Event that the training callback reads. A second thread (here) redraws
the panel at most once per `redraw_interval` seconds (or per 5 redraws' time, where redrawing is
slow, so that it takes at most a fifth of the cores' time): the progress bar with env-steps/s and ETA,
the curves, device memory and, every `record_every` iterations, the viewer. Errors of either
thread land in the panel.
"""
from __future__ import annotations

import contextlib
import html
import re
import threading
import time
import weakref

import ipywidgets as widgets

from workbench.learn import config as cfg
from workbench.learn.population import latest_report

from .controls import CONTROLLED, RunForm  # noqa: F401 - CONTROLLED importable from here too
from .curves import RunCurves
from .device import device_summary, gpu_count  # noqa: F401 - importable from here too
from .jobs import CONTINUED, continued_config
from .runfiles import default_run_dir, refuse_held_run
from .runner import Runner, RunSpec, env_redefined, running_runs, same_experiment
from .status import (describe_state, error_box_html, iteration_text, notice_html, progress_line, ranking_html,
                     refused_text, state_style, status_line_html)
from .viewer import EpisodeViewer

# a redraw waits at least this many times the last one's duration (besides redraw_interval, however
# fast the metrics come): a redraw holds the interpreter, and on 2 cores it slowed training by half
REDRAW_SHARE = 5.0
# panels showing a Start refused because of a run (any panel's): the run's end clears their notices
_REFUSED = weakref.WeakKeyDictionary()  # {panel: the Runner that was going}


def _clear_refusals(runner) -> None:
    """Take down the notices of Starts refused (in any panel) while `runner`, now ended, went."""
    for panel, going in list(_REFUSED.items()):
        if going is runner:
            del _REFUSED[panel]
            if panel.notice_html.value == notice_html(refused_text(runner)):
                panel.notice_html.value = notice_html("\n".join(panel._notices))


class TrainingPanel(widgets.VBox):
    """Train or run rollouts from a form generated from the config dataclasses, with live progress.

    env, mode ("train" or "rollouts"), algorithm ("ppo", "a2c", "ddpg"), target (default: the best
    present), num_envs (replicas), env_params (the env's PARAMS, e.g. num_runners=...), checkpoint
    (rollouts with its policy instead of random actions, on the env and env parameters it trained
    with: the form's env must be that one), record_every (animate the recorded episode of
    `record_replicas` every this many iterations; 0: never), gpus (data-parallel ranks, one per GPU),
    policies (the policy map), redraw_interval (seconds between two redraws at most), and any field
    of the algorithm's config as a keyword (lr=..., total_env_steps=...; run_dir: a folder that holds
    no run yet; left empty, each new run gets a fresh runs/<env>-<date>).

    A population (seeds=8, sweep={"lr": [1e-3, 3e-4]}: the form's Population row) draws each team's
    median over the members with the interquartile band (per sweep setting with a sweep), the status
    line says the member count and returns, and a sweep's settings are ranked at the end (`ranking`).

    Programmatic use: start() -> Runner, stop(), wait() -> the run's result (raises its error),
    set(**fields), spec() -> the RunSpec the form describes; history, status, ranking, trainer, animation.
    """

    def __init__(self, env="cartpole", *, mode: str = "train", algorithm: str = "ppo",
                 target: str | None = None, num_envs: int | None = None, env_params: dict | None = None,
                 checkpoint: str | None = None, record_every: int = 0, record_replicas=(0,), gpus: int = 1,
                 policies: dict | None = None, redraw_interval: float = 0.3, max_frames: int = 300,
                 viewer_dpi: int = 72, runs_root: str = "runs", compare=(), **config):
        self.given_env, given_note = None, ""
        if not isinstance(env, str):  # an Env a cell made: its name, replicas, target and parameters, no compile
            self.given_env, env_params, given_note = take_env(env, env_params)
            num_envs = num_envs or env.num_envs
            target = target or env.target.name
            env = env.name
        self.redraw_interval = float(redraw_interval)
        self.runner: Runner | None = None
        self.runs_root = runs_root
        self._refresher: threading.Thread | None = None
        self._wake = threading.Event()
        self._last_draw, self._last_draw_s = 0.0, 0.0
        self._lock, self._notices = threading.Lock(), []

        self.run_form = RunForm(env, mode=mode, algorithm=algorithm, target=target, num_envs=num_envs,
                                env_params=env_params, checkpoint=checkpoint, record_every=record_every,
                                record_replicas=record_replicas, gpus=gpus, policies=policies, config=config)
        for name in RunForm.WIDGETS:  # the controls stay the panel's attributes: panel.num_envs.value = 64
            setattr(self, name, getattr(self.run_form, name))
        self.run_curves = RunCurves()
        self.plot, self.curves, self.runs_html = self.run_curves.plot, self.run_curves.image, self.run_curves.table
        self.rollout_viewer = EpisodeViewer(max_frames, viewer_dpi)
        self.viewer_title, self.viewer = self.rollout_viewer.title, self.rollout_viewer.output

        self.title = widgets.HTML("<b style='font-size:14px'>warp-workbench</b> "
                                  "<span style='color:#666'>training panel</span>")
        self.start_button = _button("Start", "wb-start", "start the run in the background", button_style="success",
                                    icon="play")
        self.new_run_button = _button("New run", "wb-new-run", "start again from scratch (a fresh trainer and run "
                                      "folder); Start continues the run that Stop paused", icon="plus")
        self.stop_button = _button("Stop", "wb-stop", "stop at the end of the current iteration",
                                   button_style="danger", icon="stop", disabled=True)
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="260px"))
        self.progress.add_class("wb-progress")
        self.progress_text, self.status_html = _html("wb-progress-text"), _html("wb-status")
        self.notice_html, self.error_html = _html("wb-notice"), _html("wb-error")
        self.ranking_html = _html("wb-ranking")  # a sweep's settings ranked, once its run ended
        self.start_button.on_click(lambda _b: self._on_start())
        self.new_run_button.on_click(lambda _b: self._on_start(new=True))
        self.stop_button.on_click(lambda _b: self.stop())

        row = widgets.Layout(align_items="center", flex_flow="row wrap")
        super().__init__([
            self.title, self.device_info, *self.run_form.rows(row),
            widgets.HBox([self.start_button, self.stop_button, self.new_run_button, self.progress,
                          self.progress_text], layout=row),
            self.status_html, self.notice_html, self.error_html, self.curves, self.ranking_html, self.runs_html,
            self.viewer_title, self.viewer,
        ])
        self.add_class("wb-panel")
        for run_dir in compare:
            self.add_run(run_dir)
        self._set_status("ready: press Start (or call panel.start())" + given_note)
        self.run_form.show_device()
        self.run_form.on_notice = self._add_notice
        self.run_form.on_change = lambda: self.runner is not None and not self.runner.running and self._label_start()

    def _repr_mimebundle_(self, **kwargs):
        self.run_form.sync_registry()  # displayed again after an env was registered: offer it
        return super()._repr_mimebundle_(**kwargs)

    def _add_notice(self, text: str):
        self._notices += [text] if text else []
        self.notice_html.value = notice_html("\n".join(self._notices))

    # -- the form ---------------------------------------------------------------------------------
    config_form = property(lambda self: self.run_form.config_form, doc="The algorithm's config form (a ConfigForm).")
    env_form = property(lambda self: self.run_form.env_form, doc="The form of the env's parameters (an EnvParamsForm).")

    def set(self, **values) -> "TrainingPanel":
        """Set form fields by name: config fields, or env, num_envs, target, algorithm, mode,
        record_every, gpus, checkpoint, and env parameters as env_params={...}; a refused value raises
        ConfigError naming the field, the value and what it may be, and nothing is set."""
        self.run_form.set(**values)
        return self

    def spec(self) -> RunSpec:
        """The RunSpec the panel's fields describe (ConfigError names a bad field)."""
        return self.run_form.spec()

    # -- control ------------------------------------------------------------------------------------
    def _on_start(self, new: bool = False):
        with contextlib.suppress(Exception):  # already shown in the panel
            self.start(new=new)

    def can_continue(self, spec: RunSpec | None = None) -> bool:
        """Whether Start would continue the last run: it trained in this process, ended by Stop (or by
        its budget, with a larger total_env_steps now), and the env, replicas, target, algorithm and
        population (seeds, sweep) are unchanged."""
        prev = self.runner
        if prev is None or prev.running or prev.trainer is None or prev.error is not None or prev.spec.mode != "train":
            return False
        try:
            spec = spec or self.spec()
        except Exception:  # noqa: BLE001 - a bad field: Start will say so
            return False
        return (same_experiment(prev.spec, spec) and prev.trainer.iteration < spec.total_iterations
                and not env_redefined(prev.trainer.env))

    def start(self, new: bool = False) -> Runner:
        """Start a run with the panel's current values, in the background; returns its Runner.
        After Stop this continues the same run (same trainer, the iteration count goes on) unless
        `new` (the "New run" button) or the env, replicas, target, algorithm or population changed. Refused
        (RuntimeError, and a notice in the panel) while a run goes in this process."""
        going = running_runs()
        if not going and self._refresher is not None and self._refresher.is_alive():
            going = [self.runner]  # its run ended, its last redraw not yet
        if going:
            self.notice_html.value = notice_html(refused_text(going[0]))
            _REFUSED[self] = going[0]
            raise RuntimeError(refused_text(going[0]))
        self.error_html.value = self.notice_html.value = self.ranking_html.value = ""
        self._notices = []
        try:
            spec = self.spec()
            resume = self.runner if not new and self.can_continue(spec) else None
            spec, notice = prepare(spec, resume, self.run_curves.label_of(self.runner), self.runs_root)
            runner = Runner(spec, on_state=lambda _s: self._wake.set(), on_metrics=lambda _m: self._wake.set(),
                            on_trajectories=self._on_trajectories, resume=resume, env=self.given_env)
        except Exception as exc:
            self._show_error(exc, with_traceback=False)
            self._set_status(f"cannot start: {exc}", "error")
            raise
        self._add_notice(notice)
        self.runner = runner
        self.run_curves.add_runner(self.runner, resume)
        self.rollout_viewer.new_run(continued=resume is not None)
        if resume is None:
            self.progress.value = 0.0
        self.progress.bar_style = self.progress_text.value = ""
        self._set_controls_running(True)
        self._set_status(describe_state(self.runner))
        self.run_curves.update_table()
        self._refresher = threading.Thread(target=self._refresh_loop, args=(self.runner,), name="workbench-panel",
                                           daemon=True)
        self.runner.start()
        self._refresher.start()
        return self.runner

    def new_run(self) -> Runner:
        """Start a fresh run (a new trainer and run folder), whatever the last one was."""
        return self.start(new=True)

    def stop(self) -> None:
        """Ask the run to stop at the end of its current iteration (sets a threading.Event)."""
        if self.runner is not None and self.runner.running:
            with self._lock:  # the redraw thread writes the status under the same lock
                self.runner.stop()
                self.stop_button.disabled = True
                self._set_status(f"stopping: at the end of the current iteration ({iteration_text(self.runner)})",
                                 "warning")

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

    # -- the runs -----------------------------------------------------------------------------------
    @property
    def runs(self) -> list:
        """This panel's runs and the run folders added: {"label", "run_dir", "config", "runner" or "history"}."""
        return self.run_curves.runs

    def add_run(self, run_dir) -> dict:
        """Overlay the curves of a run folder (its metrics.csv and config.yaml; or the folder of a
        checkpoint.pt) to compare with; RunFolderError when the path holds no run."""
        return self.run_curves.add_folder(run_dir, self.runner)

    def config_differences(self) -> tuple:
        """(keys, rows): the config fields whose values differ between this panel's runs, and per run
        (label, run_dir, {key: value})."""
        return self.run_curves.config_differences()

    @property
    def history(self) -> list:
        """The metrics rows of the last run started (empty before any)."""
        return list(self.runner.history) if self.runner is not None else []

    @property
    def trainer(self):
        """The last run's Trainer (None before training, and for rollouts with random actions)."""
        return self.runner.trainer if self.runner is not None else None

    @property
    def animation(self):
        """The last animation the viewer showed (None before any)."""
        return self.rollout_viewer.animation

    @property
    def status(self) -> str:
        """The status line as plain text."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.status_html.value)).strip()

    @property
    def ranking(self) -> str:
        """The table of a sweep's settings ranked, as plain text, once its run ended ("" otherwise)."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.ranking_html.value)).strip()

    # -- redrawing (the panel's own thread) -----------------------------------------------------
    def _on_trajectories(self, trajectories, env):
        history = self.runner.history
        self.rollout_viewer.hand_over(trajectories, env, history[-1]["iteration"] if history else 0)
        self._wake.set()

    def _refresh_loop(self, runner: Runner):
        try:
            while runner.running:
                self._wake.wait(self.redraw_interval)
                self._wake.clear()
                interval = max(self.redraw_interval, REDRAW_SHARE * self._last_draw_s)  # (ends cut it short)
                runner.ended_within(interval - (time.perf_counter() - self._last_draw))
                self._redraw_safely(runner)
            self._redraw_safely(runner)
            if runner.history and runner.spec.mode == "train":
                self.ranking_html.value = ranking_html(latest_report(runner.history, runner.spec.config.rank_window))
            self._set_controls_running(False)
            _clear_refusals(runner)
            if runner.error is not None:
                self._show_error(runner.error, runner.traceback)
        finally:
            self.run_curves.update_table()

    def _redraw_safely(self, runner):
        start = time.perf_counter()
        try:
            self._redraw(runner)
        except Exception as exc:  # noqa: BLE001 - a drawing bug must show, not kill the thread silently
            import traceback
            self._show_error(exc, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        finally:
            self._last_draw = time.perf_counter()  # the interval counts from the end of a redraw
            self._last_draw_s = self._last_draw - start

    def _redraw(self, runner: Runner):
        history = list(runner.history)
        self.run_curves.redraw(runner, runner.reports)
        if history:
            self.progress.value, self.progress_text.value = progress_line(runner, history)
        self.rollout_viewer.show_pending()
        self.run_form.show_device()
        with self._lock:
            if not (runner.running and runner.stop_requested):  # else "stopping" stays until the run ends
                self._set_status(describe_state(runner), state_style(runner))

    def _set_status(self, text: str, style: str = ""):
        self.status_html.value = status_line_html(text, style)

    def _show_error(self, exc, traceback_text: str | None = None, with_traceback: bool = True):
        self.error_html.value = error_box_html(exc, traceback_text, with_traceback)

    def _set_controls_running(self, running: bool):
        self.start_button.disabled = running
        self.new_run_button.disabled = running
        self.stop_button.disabled = not running
        if not running:
            self._label_start()
        self.run_form.lock(running)

    def _label_start(self):  # Continue whenever Start would continue the last run (e.g. its budget raised)
        resumable = self.can_continue()
        self.start_button.description = "Continue" if resumable else "Start"
        self.start_button.tooltip = ("continue the stopped run (same trainer; the iteration count goes on)"
                                     if resumable else "start the run in the background")


def _button(description: str, css: str, tooltip: str, **kwargs) -> widgets.Button:
    button = widgets.Button(description=description, tooltip=tooltip, layout=widgets.Layout(width="100px"), **kwargs)
    button.add_class(css)
    return button


def _html(css: str) -> widgets.HTML:
    out = widgets.HTML("")
    out.add_class(css)
    return out


def prepare(spec: RunSpec, resume: Runner | None, previous: str | None, runs_root) -> tuple:
    """(the RunSpec to start, a notice for the panel or ""). A continued run (`resume`) trains its
    trainer's config with the form's budget and schedule in its folder, and the notice names the
    form's other changes, which only a new run applies; a new run trains in the form's run_dir,
    refused (ResumeError) when that folder holds a run already, as the CLI and wb.train refuse it,
    else in a fresh folder under `runs_root` (on one GPU or several), and after an earlier run
    (labelled `previous`) the notice says it is a new one."""
    config = spec.config
    if resume is not None:
        form = cfg.replace(config, run_dir=resume.spec.config.run_dir)
        config = continued_config(resume.trainer.config, form)
        # (a field the form leaves unset, None, resolved by the run: activation; init_from, read at a start only)
        left = [k for k in cfg.to_dict(config) if k not in CONTINUED + ("cuda_graph", "init_from")
                and getattr(form, k) is not None and getattr(form, k) != getattr(config, k)]
        notice = ("Continue goes on with this run's " + ", ".join(f"{k}={getattr(config, k)!r}" for k in left)
                  + " (the form's values apply to a New run)") if left else ""
        return RunSpec(**{**spec.__dict__, "config": config}), notice
    if not config.run_dir:
        config = cfg.replace(config, run_dir=default_run_dir(config.env, runs_root))
    refuse_held_run(config.run_dir)
    notice = (f"A new run started in {config.run_dir} ({previous} ended; it stays in the comparison)"
              if previous else "")
    return RunSpec(**{**spec.__dict__, "config": config}), notice


def take_env(env, env_params) -> tuple:
    """(the Env to reuse or None, env_params, a note for the status line) of a panel given the Env
    `env` a cell made: its parameters, and the env itself unless its env was registered again since
    (a %%warpenv cell re-ran): then a run compiles the definition registered now."""
    from workbench.runtime import registry
    if env_redefined(env):
        return None, env_params, (f"; the {env.name} env given was made from an earlier definition of "
                                  f"{env.name!r} (its cell ran again since): a run compiles the one registered "
                                  f"now, with its default parameters")
    defaults = registry.definition(env.name).params
    return (env, {**{k: v for k, v in env.definition.params.items() if defaults.get(k) != v}, **(env_params or {})},
            f"; the {env.name} env given is reused (no compile)")


def panel(env: str = "cartpole", **kwargs) -> TrainingPanel:
    """A TrainingPanel (see its doc); display it as the last line of a cell."""
    return TrainingPanel(env, **kwargs)
