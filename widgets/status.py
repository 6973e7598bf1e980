"""What the panel says about a run, as text and HTML: its state (compiling, running, stopped,
finished, error), the progress line (percentage, env-steps, env-steps/s, ETA, iteration) and an
error box with its traceback. Functions of a Runner only: no widget is touched here."""
from __future__ import annotations

import html
import math
import os

from workbench.learn import population
from workbench.learn.ranking import population_summary, ranking_text, sweep_settings
from workbench.learn.report import returns_text  # noqa: F401 - the status line and the CLI say returns alike

STATUS_COLOURS = {"error": "#b00020", "warning": "#a15c00", "success": "#1b7f3a"}
RATE_WINDOW = 10  # iterations the progress line's rate averages over while a run goes


def fmt_steps(n: float) -> str:
    """A count and its k/M/G prefix, to be followed by the unit: "1.50 M", "950 "."""
    if n >= 1e9:
        return f"{n / 1e9:.2f} G"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} k"
    return f"{n:.0f} "


def fmt_time(s: float) -> str:
    """Seconds as s, min or h ("?" when not finite)."""
    if not math.isfinite(s):
        return "?"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def iteration_text(runner, history: list | None = None) -> str:
    """"iteration i / n" of the last metrics row of `history` (default: the run's, as it is now)."""
    history = runner.history if history is None else history
    it = history[-1]["iteration"] if history else 0
    return f"iteration {it} / {runner.spec.total_iterations}"


def members_text(config) -> str:
    """"a population of 8 members (2 seeds x 4 settings of lr, ent_coef)" or "a population of 8 seeds";
    "" for a single run (and for rollouts, which train nothing)."""
    members = population.size(config)
    if members <= 1:
        return ""
    swept = list(config.sweep or {})
    if not swept:
        return f"a population of {members} seeds"
    return (f"a population of {members} members ({config.seeds} seed{'s' if config.seeds != 1 else ''} x "
            f"{members // config.seeds} settings of {', '.join(swept)})")


def population_line(report: dict, target: float | None = None) -> str:
    """What the status line says of a population report: its returns over the members
    (`ranking.population_summary`: median, interquartile range, the best sweep setting); "" for a
    report of a single run or before any episode ended."""
    return population_summary(report, target=target) if report.get("members") else ""


def describe_state(runner) -> str:
    """The status line of a run in its current state (a population: its member count, and its
    returns over the members once an episode ended)."""
    spec, c = runner.spec, runner.spec.config
    what = (f"training {c.algorithm.upper()}" if spec.mode == "train"
            else f"rollouts "
                 f"({'policy of ' + os.path.basename(spec.checkpoint) if spec.checkpoint else 'random actions'})")
    members = members_text(c) if spec.mode == "train" else ""
    if members:
        what += f" as {members}"
    agents = runner.env.num_agents if runner.env is not None else None
    size = (f"{c.num_envs} replicas" + (" per member" if members else "")
            + (f" x {agents} agent{'s' if agents != 1 else ''}" if agents else ""))
    ranks = f" on {spec.world_size} ranks" if spec.world_size > 1 else ""
    last = runner.history[-1] if runner.history else {}
    done = (f"{last.get('iteration', 0)} iterations, {fmt_steps(float(last.get('env_steps', 0)))}env-steps"
            f" in {fmt_time(float(last.get('time_s', 0.0)))}")
    state = runner.state
    if state == "idle":  # (Continue, and a panel that reuses the env it was given: nothing compiles)
        going_on = "continuing " if runner.resumed_from is not None else ""
        return f"starting: {going_on}{what} on {c.env}, {size}, target {c.target}{ranks}..."
    if state == "compiling":
        return (f"compiling {c.env} for target {c.target}{ranks} (the first run of these parameters in this "
                f"kernel compiles the env; later runs reuse it)...")
    folder = f"; run folder {c.run_dir}" if c.run_dir else ""
    summary = population_line(last, c.target_return)
    if state == "running":
        going_on = "continuing " if runner.resumed_from is not None else ""
        phase = getattr(runner, "phase", None)
        going_on = f"{phase}; {going_on}" if phase else going_on
        return (f"running: {going_on}{what} on {c.env}, {size}, target {c.target}{ranks}"
                f"{'; ' + summary if summary else ''}{folder}")
    if state == "stopped":
        more = "; Continue goes on, New run starts again" if spec.mode == "train" and spec.world_size == 1 else ""
        return (f"stopped (Stop pressed) after {done}{', ' + summary if summary else ''}: "
                f"{what} on {c.env}{folder}{more}")
    if state == "finished":
        reason = {"budget": "total_env_steps reached", "target_return": "target_return reached"}.get(
            runner.stopped_by, str(runner.stopped_by))
        ret = summary or returns_text(last)
        known = next((m for m in reversed(runner.history) if returns_text(m)), None) if not ret else None
        if known is not None:  # (the last window ended no episode: say the last reported, as the CLI does)
            ret = f"{returns_text(known)} (the last reported, at iteration {known.get('iteration', '?')})"
        return f"finished ({reason}) after {done}{', ' + ret if ret else ''}: {what} on {c.env}{folder}"
    return f"error: {type(runner.error).__name__}: {runner.error}"


def state_style(runner) -> str:
    """The colour of the status line for the run's state: "error", "warning", "success" or ""."""
    return {"error": "error", "stopped": "warning", "finished": "success"}.get(runner.state, "")


def progress_line(runner, history: list) -> tuple:
    """(fraction of total_env_steps done, the progress line as HTML) after the metrics `history`.
    While running the rate is that of the last RATE_WINDOW iterations and an ETA follows; once
    ended, the mean rate since Start or Continue (time_s goes on over the run's earlier sessions)
    and no ETA."""
    last = history[-1]
    total = runner.spec.config.total_env_steps
    steps = float(last.get("env_steps", 0))
    frac = min(1.0, steps / max(total, 1))
    # a population's env_steps are each member's (its budget's), its env_steps_per_s the members' together:
    # `rate` is a member's, shown times the members (as plotted)
    members = last.get("num_members") or len(last.get("members") or ()) or 1
    rate = float(last.get("env_steps_per_s", 0.0)) / members
    window = history[-RATE_WINDOW - 1:]  # while running: the rate over the last iterations, not one's
    elapsed = float(last.get("time_s", 0.0)) - float(window[0].get("time_s", 0.0))
    if runner.running and len(window) > 1 and elapsed > 0:
        rate = (steps - float(window[0].get("env_steps", 0))) / elapsed
    if not runner.running:
        earlier = runner.resumed_from.history if runner.resumed_from else []
        before = earlier[-1] if earlier else {}
        elapsed = float(last.get("time_s", 0.0)) - float(before.get("time_s", 0.0))
        if elapsed > 0 and last.get("iteration", 0) > before.get("iteration", 0):  # (a report since Continue)
            rate = (steps - float(before.get("env_steps", 0))) / elapsed
    eta = (total - steps) / rate if rate > 0 and runner.running else 0.0
    counted = f"env-steps a member | {fmt_steps(rate * members)}env-steps/s ({members} members)" if members > 1 \
        else f"env-steps | {fmt_steps(rate)}env-steps/s"
    text = (f"<span style='font-family:monospace;font-size:12px'>{100 * frac:5.1f}% | "
            f"{fmt_steps(steps)}{counted} | "
            f"ETA {fmt_time(eta) if runner.running else '-'} | {iteration_text(runner, history)}</span>")
    return frac, text


def ranking_html(report: dict) -> str:
    """The sweep settings of a population report ranked by their seeds' final value of the run's
    ranking statistic (`ranking.ranking_text`; mean return unless config.rank_by names another), as
    HTML; "" for a report without a sweep."""
    rows = sweep_settings(report) if report.get("members") else []
    if not rows or not rows[0]["values"]:
        return ""
    seeds = rows[0]["members"]
    stat = "mean return" if rows[0]["key"] == "mean_return" else rows[0]["key"]
    return (f"<div style='font-size:12px;max-width:980px'><b>Sweep settings ranked</b> <span style='color:#666'>"
            f"by the mean over each setting's members ({seeds} seed{'s' if seeds != 1 else ''}) of their latest "
            f"{html.escape(stat)} (by iteration {report.get('iteration', '?')}); best (member): the best of its members"
            f"</span>\n<pre style='font-size:12px;margin:2px 0'>"
            f"{html.escape(ranking_text(rows, report.get('iteration')))}</pre></div>")


def status_line_html(text: str, style: str = "") -> str:
    """The status line as HTML, coloured by `style` ("error", "warning", "success" or "")."""
    colour = STATUS_COLOURS.get(style, "#222")
    return f"<span style='color:{colour};font-size:13px'>{html.escape(text)}</span>"


def notice_html(text: str) -> str:
    """An amber line for what the panel did instead of what was asked (empty text: nothing)."""
    if not text:
        return ""
    return (f"<div style='border-left:3px solid {STATUS_COLOURS['warning']};padding:2px 6px;font-size:12px;"
            f"max-width:980px;white-space:pre-wrap'>{html.escape(text)}</div>")


def refused_text(going) -> str:
    """Why Start is refused while the run `going` (a Runner of this process) goes on."""
    folder = going.spec.config.run_dir
    where = f" (run folder {folder})" if folder else ""
    return (f"Start refused: a run is going in this kernel{where}; two runs at once would share its cores. Stop "
            f"it first (its panel's Stop, panel.stop(), or workbench.widgets.running_runs()[0].stop()), or wait "
            f"for it (panel.wait()).")


def error_box_html(exc, traceback_text: str | None = None, with_traceback: bool = True) -> str:
    """A red box naming the error, with its traceback folded under it."""
    detail = ""
    if with_traceback and traceback_text:
        detail = (f"<details><summary>traceback</summary><pre style='font-size:11px;white-space:pre-wrap'>"
                  f"{html.escape(traceback_text)}</pre></details>")
    return (f"<div style='border:1px solid #b00020;background:#fff0f0;padding:6px;"
            f"max-width:980px'><b style='color:#b00020'>{html.escape(type(exc).__name__)}</b>: "
            f"<span style='white-space:pre-wrap'>{html.escape(str(exc))}</span>{detail}</div>")
