"""The training panel: a form generated from the config dataclasses, runs in a background thread,
Stop through an Event, throttled live curves, errors shown in the panel, rollouts alone (random or
a checkpoint's policy) and the rollout viewer fed by recorded episodes."""
import html
import os
import textwrap
import threading
import time
import types
from pathlib import Path

import ipywidgets as widgets
import pytest
import torch

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn.config import ConfigError
from workbench.widgets import (ConfigForm, EnvParamsForm, LivePlot, Runner, RunSpec, TrainingPanel, agent_params,
                               device_summary)
from workbench.widgets.panel import CONTROLLED

pytestmark = pytest.mark.usefixtures("compiled_cartpole", "runs_in_tmp")
TIMEOUT = 300
TINY = dict(rollout_length=8, num_minibatches=1, update_epochs=1, log_every=1)


def tiny_panel(**kw):
    base = dict(target="cpu", num_envs=8, total_env_steps=8 * 8 * 6, **TINY)
    return TrainingPanel(**{**base, **kw})


def wait_for(predicate, timeout=TIMEOUT, what="condition"):
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# ---- the generated form ---------------------------------------------------------------------------

def test_form_has_one_widget_per_config_field_with_its_doc_as_tooltip():
    form = ConfigForm(cfg.PPOConfig, exclude=CONTROLLED)
    fields = [(n, d) for n, _k, _v, d in cfg.describe(cfg.PPOConfig) if n not in CONTROLLED]
    assert list(form.inputs) == [n for n, _ in fields]
    for name, doc in fields:
        assert form.inputs[name].tooltip == doc and doc
        assert form.inputs[name].description == name
        assert html.escape(doc) in "".join(c.value for row in form.children[1:] for c in row.children
                                           if isinstance(c, widgets.HTML))
    assert isinstance(form.inputs["update_epochs"], widgets.IntText)
    assert isinstance(form.inputs["lr"], widgets.FloatText)
    assert isinstance(form.inputs["anneal_lr"], widgets.Checkbox)
    assert form.inputs["hidden_sizes"].value == "64, 64"
    assert form.inputs["target_kl"].value == "" and form.inputs["target_kl"].placeholder == "None"
    defaults = {n: v for n, _k, v, _d in cfg.describe(cfg.PPOConfig) if n not in CONTROLLED}
    assert form.values() == defaults


def test_form_values_are_typed_and_bad_ones_named():
    form = ConfigForm(cfg.PPOConfig, exclude=CONTROLLED)
    form.inputs["hidden_sizes"].value = "32, 16"
    form.inputs["target_kl"].value = "0.02"
    form.inputs["lr"].value = 0.01
    form.inputs["anneal_lr"].value = False
    values = form.values()
    assert values["hidden_sizes"] == (32, 16) and values["target_kl"] == 0.02
    assert values["lr"] == 0.01 and values["anneal_lr"] is False
    config = cfg.from_dict({**values, "env": "cartpole"}, cfg.PPOConfig)
    assert config.hidden_sizes == (32, 16)
    form.inputs["hidden_sizes"].value = "wide"
    with pytest.raises(ConfigError, match=r"PPOConfig\.hidden_sizes: cannot read 'wide'"):
        form.values()


def test_panel_form_follows_the_algorithm_and_keeps_shared_values():
    panel = TrainingPanel("cartpole", target="cpu", lr=0.0123, clip_coef=0.3)
    assert panel.forms.titles[0] == "Hyperparameters: PPOConfig"
    assert panel.config_form.inputs["clip_coef"].value == 0.3
    panel.algorithm.value = "ddpg"
    assert panel.forms.titles[0] == "Hyperparameters: DDPGConfig"
    assert {"tau", "buffer_size", "exploration_noise"} <= set(panel.config_form.inputs)
    assert "clip_coef" not in panel.config_form.inputs
    assert "lr" not in panel.config_form.inputs  # DDPG learns at actor_lr and critic_lr: PPO's lr is not carried
    assert panel.spec().config.lr == cfg.DDPGConfig.lr
    assert panel.config_form.inputs["tau"].tooltip == cfg.DDPGConfig.__dataclass_fields__["tau"].metadata["doc"]
    with pytest.raises(ConfigError, match="unknown PPOConfig field"):
        TrainingPanel("cartpole", target="cpu", no_such_field=1)


def test_agents_are_set_through_the_envs_agent_parameters():
    assert agent_params("tag_continuous") == ["num_taggers", "num_runners"]
    assert agent_params("cartpole") == []
    panel = TrainingPanel("cartpole", target="cpu")
    assert "1</b> agent per replica (fixed by the env)" in panel.env_form.agent_count.value
    panel.env_name.value = "tag_continuous"
    assert panel.env_form.agent_names == ["num_taggers", "num_runners"]
    panel.env_form.inputs["num_runners"].value = 12
    assert "13</b> agents per replica" in panel.env_form.agent_count.value
    panel.num_envs.value = 3
    spec = panel.spec()
    assert spec.config.env == "tag_continuous" and spec.config.num_envs == 3
    assert spec.config.env_params == {"num_runners": 12}
    form = EnvParamsForm("tag_continuous", {"num_taggers": 0})
    assert "num_taggers must be an int &gt;= 1, got 0" in form.agent_count.value


def test_device_info_and_one_device():
    panel = TrainingPanel("cartpole", target="cpu")
    assert "cpu:" in panel.device_info.value and "GiB" in panel.device_info.value
    assert "1 device" in panel.device_info.value
    assert panel.gpus.value == 1 and panel.gpus.disabled
    assert device_summary("cpu").startswith("cpu: ")
    with pytest.raises(ConfigError, match=r"gpus=2: .* \d+ GPU\(s\) and target 'cpu'"):
        TrainingPanel("cartpole", target="cpu", gpus=2)


def test_live_plot_draws_returns_losses_and_throughput():
    plot = LivePlot()
    empty = plot.render([], "press Start")
    assert plot.axes == {}  # before a run: the message alone, no empty axes
    history = [{"iteration": i, "env_steps": 40_000 * i, "env_steps_per_s": 2500.0 + i, "return/shared": float(i),
                "policy_loss/shared": 0.1 * i, "value_loss/shared": 1.0 / i, "entropy/shared": 0.6}
               for i in range(1, 6)]
    image = plot.render(history, target_return=4.0)
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and image != empty
    assert list(plot.axes) == ["return", "policy_loss", "value_loss", "rate"]  # one axis per loss kind
    assert list(plot.lines["return/shared"].get_ydata()) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert plot.lines["return/shared"].get_label() == "policy"
    assert list(plot.lines["env_steps_per_s"].get_xdata()) == [40_000, 80_000, 120_000, 160_000, 200_000]
    assert list(plot.lines["env_steps_per_s"].get_ydata()) == pytest.approx([2.501, 2.502, 2.503, 2.504, 2.505])
    assert plot.axes["rate"].get_title() == "throughput (k env-steps/s)"
    assert plot.lines["policy_loss/shared"].axes is plot.axes["policy_loss"]
    assert plot.lines["value_loss/shared"].axes is plot.axes["value_loss"]
    assert list(plot.lines["target"].get_ydata()) == [4.0, 4.0]
    plot.fig.canvas.draw()
    ticks = [t.get_text() for t in plot.axes["return"].get_xticklabels() if t.get_text()]
    assert "120k" in ticks and all(len(t) <= 5 for t in ticks)


def test_live_plot_of_teams_and_of_rollouts_alone():
    from workbench.widgets.plots import fmt_count
    assert [fmt_count(v) for v in (950, 1500, 160_000, 2_400_000)] == ["950", "1.5k", "160k", "2.4M"]
    plot = LivePlot()
    history = [{"iteration": i, "env_steps": 100 * i, "env_steps_per_s": 2e6, "return/taggers": 1.0,
                "return/runners": -1.0, "policy_loss/taggers": 0.1, "policy_loss/runners": 0.2,
                "value_loss/taggers": 1.0, "value_loss/runners": 2.0, "episode_length": 50.0, "tag_rate": 0.3,
                "survival": 0.7} for i in range(1, 4)]
    plot.render(history, others=[("run 1", history)])
    assert list(plot.axes) == ["return", "policy_loss", "value_loss", "episode_length", "tag", "rate"]
    assert plot.lines["return/taggers"].get_color() == plot.lines["policy_loss/taggers"].get_color() == "tab:red"
    assert plot.lines["return/runners"].get_color() == "tab:blue"
    assert plot.lines["other:run 1:taggers"].axes is plot.axes["return"]
    plot.render(history, frozen=("runners",))  # (a fixed opponent is marked in the legend)
    assert plot.lines["return/runners"].get_label() == "runners (frozen)"
    assert plot.lines["return/taggers"].get_label() == "taggers"
    assert plot.axes["rate"].get_title() == "throughput (M env-steps/s)"
    rollouts = LivePlot()
    rollouts.render([{"iteration": 1, "env_steps": 10, "env_steps_per_s": 5.0, "return/policy": 1.0}])
    assert list(rollouts.axes) == ["return", "rate"]  # no loss axes without losses


def test_live_plot_rate_axis_follows_the_data_however_often_it_redraws():
    """The throughput axis spans the data (from zero, 10% headroom) at every redraw: it neither grows
    by itself from one redraw to the next nor keeps a larger run's scale."""
    plot = LivePlot()
    history = [{"iteration": i, "env_steps": 1000 * i, "env_steps_per_s": 20_000.0 + 1000 * (i % 3),
                "return/shared": 1.0} for i in range(1, 9)]
    for _ in range(60):  # a run's worth of redraws
        plot.render(history)
    assert plot.axes["rate"].get_title() == "throughput (k env-steps/s)"
    assert plot.axes["rate"].get_ylim() == pytest.approx((0.0, 22.0 * 1.1))
    plot.render(history + [{"iteration": 9, "env_steps": 9000, "env_steps_per_s": 25_000.0, "return/shared": 1.0}],
                label="cartpole-20260101-120000")
    assert plot.axes["rate"].get_ylim() == pytest.approx((0.0, 25.0 * 1.1))
    assert plot.lines["return/shared"].get_label() == "cartpole-20260101-120000"
    slow = [{**m, "env_steps_per_s": 500.0} for m in history]
    plot.render(slow)
    assert plot.axes["rate"].get_title() == "throughput (env-steps/s)"
    assert plot.axes["rate"].get_ylim() == pytest.approx((0.0, 550.0))


def test_each_team_has_one_colour_in_the_panel_the_viewer_and_learning_curve_png(tmp_path):
    import numpy as np
    from PIL import Image
    from workbench.learn import report
    from workbench.notebook import drawers
    from workbench.widgets.plots import policy_colour
    assert drawers.GROUP_COLOURS is report.GROUP_COLOURS
    for i, name in enumerate(["taggers", "runners", "predators", "prey", "shared"]):
        assert policy_colour(name, i) == report.team_colour(name, i)
    assert report.team_colour("taggers", 1) == "tab:red" and report.team_colour("runners", 0) == "tab:blue"
    history = [{"iteration": i, "env_steps": 100 * i, "env_steps_per_s": 20_000.0, "return/taggers": 1.0 + i,
                "return/runners": -1.0 - i, "mean_return": 0.0} for i in range(1, 6)]
    plot = LivePlot()
    plot.render(history)
    assert plot.lines["return/taggers"].get_color() == "tab:red"
    assert plot.lines["return/runners"].get_color() == "tab:blue"
    path = report.plot_learning_curve(history, tmp_path / "learning_curve.png")
    pixels = np.asarray(Image.open(path).convert("RGB")).astype(int)

    def near(rgb):
        return int((np.abs(pixels - np.array(rgb)) <= 10).all(axis=-1).sum())
    assert near((214, 39, 40)) > 100 and near((31, 119, 180)) > 100  # tab:red taggers, tab:blue runners
    assert near((255, 127, 14)) == 0  # no tab:orange (matplotlib's second colour) for a team


def test_status_line_shows_each_teams_return_not_their_mean():
    import types
    from workbench.widgets.status import describe_state, returns_text
    teams = {"return/taggers": 1.25, "return/runners": -1.25, "mean_return": 0.0}
    assert returns_text(teams) == "returns taggers 1.25, runners -1.25"
    assert returns_text({"return/shared": 21.3, "mean_return": 21.3}) == "mean return 21.30"
    assert returns_text({"return/shared": float("nan")}) == ""
    config = wb.PPOConfig(env="tag_continuous", num_envs=4, target="cpu", run_dir="runs/tag")
    runner = types.SimpleNamespace(spec=RunSpec(config=config), env=None, state="finished", stopped_by="budget",
                                   resumed_from=None,
                                   history=[{"iteration": 3, "env_steps": 1200, "time_s": 2.0, **teams}])
    text = describe_state(runner)
    assert "returns taggers 1.25, runners -1.25" in text and "mean return" not in text
    runner.state, runner.phase = "running", "first iteration: compiling (compile=false skips it)"
    assert describe_state(runner).startswith("running: first iteration: compiling (compile=false skips it); ")


def test_env_parameters_have_their_docs_checkboxes_for_switches_and_gpu_fields_follow_the_target():
    form = EnvParamsForm("tag_continuous")
    assert form.inputs["grid_length"].tooltip.startswith("Side L of the square arena.")
    assert isinstance(form.inputs["full_observation"], widgets.Checkbox)
    form.inputs["full_observation"].value = True
    assert form.values() == {"full_observation": 1}
    notes = "".join(c.value for row in form.children if isinstance(row, widgets.HBox) for c in row.children
                    if isinstance(c, widgets.HTML))
    assert "Reward of a tagger per tag." in notes
    panel = TrainingPanel("cartpole", target="cpu")
    assert panel.config_form.rows["cuda_graph"].layout.display == "none"
    assert panel.config_form.rows["lr"].layout.display != "none"
    assert "animate an episode every" == panel.record_every.description


# ---- runs --------------------------------------------------------------------------------------

def test_panel_trains_in_the_background_and_shows_progress():
    panel = tiny_panel(record_every=2, record_replicas=(0, 1))
    first_image = panel.curves.value
    images = []
    panel.curves.observe(lambda change: images.append(change["new"]), names="value")
    runner = panel.start()
    assert isinstance(runner, Runner) and runner.spec.config.total_env_steps == 384
    assert panel.start_button.disabled and not panel.stop_button.disabled
    result = panel.wait(timeout=TIMEOUT)
    assert result.stopped_by == "budget" and result.iterations == 6 and len(panel.history) == 6
    assert panel.status.startswith("finished (total_env_steps reached) after 6 iterations")
    assert panel.progress.value == 1.0
    assert "100.0%" in panel.progress_text.value and "env-steps/s" in panel.progress_text.value
    assert images and images[-1] == panel.curves.value != first_image
    assert panel.plot.lines["return/shared"].get_xdata()[-1] == 384
    assert not panel.start_button.disabled and panel.stop_button.disabled
    # the recorded episodes of replicas 0 and 1 reached the viewer
    assert panel.animation is not None and len(panel.animation) == 2
    (output,) = panel.viewer.outputs
    assert output["data"]["text/html"].count("wb-player") == 2
    assert "replica(s) 0, 1" in panel.viewer_title.value
    assert panel.trainer.env.recorder is None and panel.error_html.value == ""


def test_stop_button_stops_within_an_iteration():
    panel = tiny_panel(total_env_steps=10**9)
    panel.start()
    wait_for(lambda: len(panel.history) >= 2, what="two iterations")
    at_stop = panel.trainer.iteration
    panel.stop_button.click()  # the button's handler only sets the run's Event
    assert panel.runner.stop_requested
    assert panel.status.startswith("stopping")
    result = panel.wait(timeout=TIMEOUT)
    assert result.stopped_by == "callback"
    assert at_stop <= result.iterations <= at_stop + 1
    assert panel.status.startswith(f"stopped (Stop pressed) after {result.iterations} iterations")
    assert panel.progress.value < 0.01
    assert not panel.start_button.disabled and panel.stop_button.disabled


def test_start_after_stop_continues_the_run_and_new_run_starts_again(tmp_path):
    import yaml
    from workbench.widgets.runfiles import read_metrics
    panel = tiny_panel(total_env_steps=8 * 8 * 1000)
    panel.start()
    wait_for(lambda: len(panel.history) >= 2, what="two iterations")
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    trainer, stopped_at = panel.trainer, panel.trainer.iteration
    run_dir = tmp_path / panel.runner.spec.config.run_dir
    assert run_dir.parent.name == "runs" and run_dir.name.startswith("cartpole-")
    assert (run_dir / "config.yaml").exists() and (run_dir / "metrics.csv").exists()
    assert panel.start_button.description == "Continue"
    budget, lr = 8 * 8 * 10**6, trainer.config.lr  # a raised budget: config.yaml and the table follow it
    panel.set(total_env_steps=budget, lr=0.5)
    panel.start_button.click()
    assert f"lr={lr!r}" in panel.notice_html.value  # the form's lr is not the continued run's: said so
    assert "activation" not in panel.notice_html.value  # (the form leaves it unset: the run resolved it, no change)
    wait_for(lambda: len(panel.history) >= stopped_at + 2, what="two more iterations")
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    assert panel.trainer is trainer and panel.trainer.iteration > stopped_at
    assert [m["iteration"] for m in panel.history] == list(range(1, panel.trainer.iteration + 1))
    assert panel.runner.spec.config.run_dir == str(run_dir.relative_to(tmp_path))
    assert len(panel.runs) == 1
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["total_env_steps"] == budget == panel.trainer.config.total_env_steps
    assert saved["lr"] == panel.trainer.config.lr == lr
    assert panel.runs[0]["config"]["total_env_steps"] == budget
    # time goes on over Continue, in the panel's rows and in metrics.csv alike
    for rows in (panel.history, read_metrics(run_dir / "metrics.csv")):
        times = [m["time_s"] for m in rows]
        assert len(times) == panel.trainer.iteration and times == sorted(times)
        assert times[stopped_at] > times[stopped_at - 1]
    panel.set(lr=lr)
    panel.new_run_button.click()
    assert "A new run started in runs/cartpole-" in panel.notice_html.value and run_dir.name in panel.notice_html.value
    wait_for(lambda: panel.runner.trainer is not None and panel.history, what="the new run's first iteration")
    panel.set(lr=0.001)  # a field that differs shows in the comparison table once both runs are there
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    assert panel.trainer is not trainer and panel.history[0]["iteration"] == 1
    assert len(panel.runs) == 2 and panel.runs[1]["run_dir"] != panel.runs[0]["run_dir"]
    assert "Runs compared" in panel.runs_html.value and f"<b>{run_dir.name}</b>" in panel.runs_html.value
    # runs are named by their folders: the first run overlaid, the current one in the legend
    assert panel.plot.lines[f"other:{run_dir.name}:shared"].get_xdata().size > 0
    assert panel.plot.lines["return/shared"].get_label() == panel.runs[1]["label"] == \
        panel.runs[1]["run_dir"].split("/")[-1]
    other = TrainingPanel("cartpole", target="cpu", compare=[run_dir])
    assert other.runs[0]["history"][0]["iteration"] == 1 and other.runs[0]["config"]["env"] == "cartpole"
    assert other.plot.lines["return/shared"].get_label() == run_dir.name  # not "policy"


def test_the_runs_table_leaves_out_gpu_fields_between_cpu_runs():
    """A recorded run turns cuda_graph off: between CPU runs that says nothing, so it is no column."""
    from widgets.curves import RunCurves
    curves = RunCurves()
    base = {"env": "cartpole", "target": "cpu", "lr": 1e-3, "cuda_graph": True}
    curves.runs = [{"label": "a", "run_dir": "runs/a", "config": base, "history": []},
                   {"label": "b", "run_dir": "runs/b", "config": {**base, "lr": 3e-3, "cuda_graph": False},
                    "history": []}]
    assert curves.config_differences()[0] == ["lr"]
    curves.runs[1]["config"]["target"] = "cuda"
    assert curves.config_differences()[0] == ["cuda_graph", "lr", "target"]


def test_the_runs_table_compares_a_panel_run_as_its_trainer_resolved_it():
    """Before: a panel run's entry held the form's config (activation None), so beside a folder's
    config.yaml (activation tanh) the table showed a difference that was none."""
    from types import SimpleNamespace
    from widgets.curves import RunCurves
    from workbench.learn import config as cfg
    form = wb.PPOConfig(env="cartpole", target="cpu")
    resolved = cfg.replace(form, activation="tanh")
    curves = RunCurves()
    curves.runs = [{"label": "a", "run_dir": "runs/a", "config": cfg.to_dict(form),
                    "runner": SimpleNamespace(trainer=SimpleNamespace(config=resolved))},
                   {"label": "b", "run_dir": "runs/b", "config": cfg.to_dict(resolved), "history": []}]
    assert form.activation is None and curves.config_differences()[0] == []


def test_a_panel_reuses_the_env_a_cell_made():
    env = wb.make("cartpole", num_envs=6, target="cpu", max_steps=50)
    panel = TrainingPanel(env, total_env_steps=6 * 8 * 2, **TINY)
    assert panel.num_envs.value == 6 and panel.env_form.values() == {"max_steps": 50}
    panel.start()
    panel.wait(timeout=TIMEOUT)
    assert panel.trainer.env is env


def test_the_notebook_thread_stays_free_while_training():
    panel = tiny_panel(total_env_steps=10**9)
    panel.start()
    wait_for(lambda: len(panel.history) >= 1, what="the first iteration")
    ticks = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 0.5:  # this thread keeps running code meanwhile
        ticks += 1
        time.sleep(0.01)
    assert panel.runner.running and ticks >= 10
    with pytest.raises(RuntimeError, match="a run is going"):
        panel.start()
    assert "Start refused: a run is going" in panel.notice_html.value
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    # (before: the refusal stayed on after the run it named had ended)
    wait_for(lambda: "Start refused" not in panel.notice_html.value, what="the refusal's notice cleared")


def test_one_run_at_a_time_and_a_second_run_of_one_seed_computes_alike(monkeypatch):
    """A second start while a run goes (from any panel of this process, or a bare Runner) is refused
    with a notice; a new run after a finished one says so, and computes with the same thread counts
    (a process measures them once per kind of work), so one seed gives one result."""
    from workbench.learn import threads as thread_counts
    from workbench.widgets import running_runs
    for name in thread_counts.USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(thread_counts, "available_cores", lambda: 4)  # (two or fewer take one thread unmeasured)
    picks = iter([1, 2, 2, 1] * 3)  # a measurement repeated would pick other counts (a busy machine)

    def pick(candidates, setter, work):
        chosen = next(picks)
        setter(chosen)
        return chosen, {}
    monkeypatch.setattr(thread_counts, "pick", pick)
    monkeypatch.setattr(thread_counts, "_measured", {})  # measured afresh here, the counts forgotten after
    first = tiny_panel(total_env_steps=10**9)
    first.start()
    wait_for(lambda: len(first.history) >= 1, what="the first iteration")
    second = tiny_panel()
    with pytest.raises(RuntimeError, match="a run is going in this kernel"):
        second.start()
    assert "Start refused" in second.notice_html.value and first.runner.spec.config.run_dir in second.notice_html.value
    assert second.runner is None and running_runs() == [first.runner]
    with pytest.raises(RuntimeError, match="a run is going"):
        Runner(RunSpec(config=second.spec().config)).start()
    first.stop()
    first.wait(timeout=TIMEOUT)
    assert running_runs() == []
    # the other panel's refusal goes with the run it named (before: it stayed until its own next Start)
    wait_for(lambda: "Start refused" not in second.notice_html.value, what="the second panel's notice cleared")

    second.start()
    second.wait(timeout=TIMEOUT)
    one, threads = list(second.history), dict(second.trainer.threads)
    assert second.start_button.description == "Start"  # the budget is spent: Start is a new run
    second.start()
    assert "A new run started" in second.notice_html.value
    second.wait(timeout=TIMEOUT)
    two = second.history
    assert (first.trainer.threads["env"], first.trainer.threads["learner"], first.trainer.threads["how"]) == \
        (1, 2, "measured") and "reused" not in first.trainer.threads
    for chosen in (threads, second.trainer.threads):  # the same work again: the same counts, not measured again
        assert (chosen["env"], chosen["learner"], chosen["how"], chosen["reused"]) == (1, 2, "measured", True)
    keys = [k for k in one[0] if k.startswith(("return/", "policy_loss/", "value_loss/"))]
    assert [[m[k] for k in keys] for m in two] == [[m[k] for k in keys] for m in one]


def test_redraws_are_throttled():
    panel = tiny_panel(num_envs=4, rollout_length=4, total_env_steps=4 * 4 * 150, redraw_interval=0.4)
    updates = []
    panel.curves.observe(lambda change: updates.append(time.perf_counter()), names="value")
    start = time.perf_counter()
    panel.start()
    panel.wait(timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    assert len(panel.history) == 150
    assert len(updates) < len(panel.history)
    assert len(updates) <= elapsed / 0.4 + 2
    gaps = [b - a for a, b in zip(updates, updates[1:-1])]  # the last redraw comes right after the end
    assert all(gap >= 0.3 for gap in gaps), gaps


def test_redraws_take_at_most_a_fifth_of_the_time_and_the_end_is_drawn_at_once(monkeypatch):
    """A slow redraw (here 0.3 s) spaces the next ones by five times its duration, whatever
    redraw_interval says; once the run ends, its last redraw (and wait(), and Start) do not wait out
    the interval."""
    import importlib
    panel_module = importlib.import_module("workbench.widgets.panel")
    slow = panel_module.TrainingPanel._redraw

    def slow_redraw(self, runner):
        time.sleep(0.3)
        slow(self, runner)

    monkeypatch.setattr(panel_module.TrainingPanel, "_redraw", slow_redraw)
    panel = tiny_panel(num_envs=4, rollout_length=4, total_env_steps=4 * 4 * 10**6, redraw_interval=0.05)
    updates = []
    panel.curves.observe(lambda change: updates.append(time.perf_counter()), names="value")
    panel.start()
    wait_for(lambda: len(updates) >= 3, what="three redraws")
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    gaps = [b - a for a, b in zip(updates, updates[1:3])]
    assert all(gap >= 5 * 0.3 - 0.05 for gap in gaps), gaps
    monkeypatch.setattr(panel_module.TrainingPanel, "_redraw", slow)
    panel = tiny_panel(redraw_interval=1000)  # (the first redraw comes at once: the one after the end must too)
    start = time.perf_counter()
    panel.start()
    panel.wait(timeout=TIMEOUT)
    assert time.perf_counter() - start < 60 and panel.status.startswith("finished")


def test_the_progress_line_rate_is_over_the_last_iterations_while_running():
    from workbench.widgets.status import RATE_WINDOW, fmt_steps, progress_line
    runner = types.SimpleNamespace(running=True, spec=types.SimpleNamespace(config=wb.PPOConfig(total_env_steps=10**6),
                                                                         total_iterations=1000),
                                   resumed_from=None, trainer=None, history=[])
    # one iteration in ten took ten times as long (a redraw, a checkpoint): the rate shown stays near the mean
    history = [{"iteration": i + 1, "env_steps": 1000 * (i + 1), "time_s": 0.1 * (i + 1) + 0.9 * (i >= 19),
                "env_steps_per_s": 1000 / (1.0 if i == 19 else 0.1)} for i in range(20)]
    history[19]["env_steps_per_s"] = 1000.0
    _frac, text = progress_line(runner, history)
    expected = 1000 * RATE_WINDOW / (history[-1]["time_s"] - history[-RATE_WINDOW - 1]["time_s"])
    assert f"| {fmt_steps(expected)}env-steps/s |" in text and fmt_steps(expected) == "5.3 k", text


def test_a_population_progress_line_says_a_member_steps_and_the_members_rate_from_one_snapshot():
    """Before: a population's line showed each member's env-steps with a rate per member beside the plot's
    rate of all members, and its iteration from the live history beside the steps of the snapshot drawn."""
    from workbench.widgets.status import fmt_steps, progress_line
    history = [{"iteration": i + 1, "env_steps": 1000 * (i + 1), "time_s": 0.1 * (i + 1), "num_members": 8,
                "members": [{}] * 8} for i in range(5)]
    runner = types.SimpleNamespace(running=True, spec=types.SimpleNamespace(config=wb.PPOConfig(total_env_steps=10**5),
                                                                         total_iterations=100),
                                   resumed_from=None, trainer=None, history=history + [dict(history[-1], iteration=9)])
    _frac, text = progress_line(runner, history)
    assert f"5.0 kenv-steps a member | {fmt_steps(8 * 10000.0)}env-steps/s (8 members) |" in text, text
    assert text.endswith("iteration 5 / 100</span>"), text
    # the first report's rate is the report's own, the members' together already (not times the members again);
    # the ETA from a member's rate against a member's remaining steps
    first = [dict(history[0], env_steps_per_s=80000.0)]
    _frac, text = progress_line(runner, first)
    assert f"| {fmt_steps(80000.0)}env-steps/s (8 members) | ETA 9.9 s |" in text, text


def test_errors_in_the_training_thread_are_shown(monkeypatch):
    from workbench.learn.trainer import Trainer

    def broken_update(self):
        raise RuntimeError("the update exploded")

    monkeypatch.setattr(Trainer, "_on_policy_iteration", broken_update)
    panel = tiny_panel()
    panel.start()
    assert panel.wait(timeout=TIMEOUT, raise_error=False) is None
    assert panel.status == "error: RuntimeError: the update exploded"
    assert "the update exploded" in panel.error_html.value
    assert "traceback" in panel.error_html.value and "broken_update" in panel.error_html.value
    assert not panel.start_button.disabled
    with pytest.raises(RuntimeError, match="the update exploded"):
        panel.wait()


def test_bad_fields_are_shown_and_nothing_starts():
    panel = tiny_panel()
    panel.config_form.inputs["hidden_sizes"].value = "wide"
    panel.start_button.click()
    assert panel.runner is None
    assert "hidden_sizes" in panel.error_html.value and panel.status.startswith("cannot start")
    panel.config_form.inputs["hidden_sizes"].value = "16"
    panel.config_form.inputs["gamma"].value = 2.0  # typed into the form: Start shows why it refuses
    with pytest.raises(ConfigError):
        panel.start()
    assert "gamma must be in [0, 1]" in panel.error_html.value


@pytest.mark.parametrize("values, words", [
    ({"lr": -1.0}, "lr must be > 0, got -1.0"), ({"gamma": 2.0}, "gamma must be in [0, 1]"),
    ({"activation": "gelu"}, "activation must be tanh or relu"),
    ({"record_replicas": [8]}, "record_replicas [8] out of range: the run's env has 8 replicas, indices 0 .. 7"),
    ({"seeds": 2, "record_replicas": [16]}, "16 replicas (8 per member x 2 members)"),
    ({"lr": 1e-3, "gamma": -0.5}, "gamma must be in [0, 1]")])
def test_set_and_the_constructor_refuse_a_value_out_of_its_range_and_change_nothing(values, words):
    panel = tiny_panel(num_envs=8)
    before = {name: widget.value for name, widget in panel.config_form.inputs.items()}
    replicas = panel.run_form.record_replicas.value
    with pytest.raises(ConfigError) as info:
        panel.set(**values)
    assert words in str(info.value)
    assert {name: widget.value for name, widget in panel.config_form.inputs.items()} == before
    assert panel.run_form.record_replicas.value == replicas
    with pytest.raises(ConfigError, match=words.split(" ")[0]):
        tiny_panel(num_envs=8, **values)
    panel.set(seeds=2, record_replicas=[15])  # in range once the members are there


def test_set_checks_its_own_values_beside_the_forms():
    """set() weighs its values against what the form holds (the members a new algorithm keeps too), and
    a bad value typed into another field is Start's to name, not a reason to refuse set()."""
    panel = tiny_panel(num_envs=4)
    panel.set(seeds=4)
    panel.set(algorithm="a2c", record_replicas=[10])  # 4 replicas x 4 members, kept across the switch
    assert panel.run_form.record_replicas.value == "10" and panel.config_form.inputs["seeds"].value == 4
    panel.config_form.inputs["gamma"].value = 7.0
    panel.set(lr=1e-3, record_replicas=[0])
    with pytest.raises(ConfigError, match="lr must be > 0"):
        panel.set(lr=-1.0)
    with pytest.raises(ConfigError, match="gamma must be in"):
        panel.spec()


def test_errors_before_training_are_shown_too(monkeypatch):
    from workbench.learn import trainer as trainer_module

    def refused(*args, **kwargs):
        raise ConfigError("the env refuses these parameters")
    monkeypatch.setattr(trainer_module, "make_trainer", refused)
    panel = tiny_panel(env_params=None)
    panel.start()
    panel.wait(timeout=TIMEOUT, raise_error=False)
    assert panel.runner.state == "error"
    assert "the env refuses these parameters" in panel.error_html.value


def test_rollouts_alone_with_random_actions_and_the_viewer():
    panel = tiny_panel(mode="rollouts", num_envs=8, total_env_steps=8 * 8 * 5, record_every=1)
    assert panel.algorithm.disabled and panel.rollout_row.layout.display == ""
    panel.start()
    result = panel.wait(timeout=TIMEOUT)
    assert panel.trainer is None
    assert result["iterations"] == 5 and result["env_steps"] == 320 and result["stopped_by"] == "budget"
    last = panel.history[-1]
    assert last["env_steps_per_s"] > 0 and "return/policy" in last
    assert sum(h["episodes"] for h in panel.history) > 0  # (random CartPole ends an episode about every 22 steps)
    assert "episode_length" in last
    assert not any("loss" in k for k in last)
    assert panel.status.startswith("finished") and "rollouts (random actions)" in panel.status
    assert panel.animation is not None and "wb-player" in panel.viewer.outputs[0]["data"]["text/html"]
    # a fixed policy: the return axis says its points are per window, and shades the env-steps before
    # every replica ran an episode's step limit (500), where only short episodes can have ended
    from workbench.widgets.curves import warmup_steps
    assert panel.plot.axes["return"].get_title() == "episode return per window (no learning)"
    assert warmup_steps(panel.runner) == 8 * 500
    span = panel.plot.lines["warmup"]
    assert span.axes is panel.plot.axes["return"] and span.get_label() == "early: only short episodes have ended"
    assert span.get_x() == 0 and span.get_width() == 8 * 500


def test_rollouts_alone_with_a_checkpoint_policy(tmp_path):
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=128, **TINY)
    trainer = wb.make_trainer(config)
    trainer.train()
    path = trainer.save(tmp_path / "ck.pt")
    panel = tiny_panel(mode="rollouts", num_envs=5, total_env_steps=5 * 8 * 3, checkpoint=str(path))
    assert panel.policy.value == "checkpoint" and panel.checkpoint.layout.display == ""
    panel.start()
    result = panel.wait(timeout=TIMEOUT)
    assert result["iterations"] == 3
    loaded = panel.trainer
    assert loaded is not None and loaded.env.num_envs == 5 and loaded.iteration == trainer.iteration
    for a, b in zip(trainer.models["shared"].parameters(), loaded.models["shared"].parameters()):
        assert torch.equal(a, b)
    assert "policy of ck.pt" in panel.status
    panel.policy.value = "checkpoint"
    panel.checkpoint.value = ""
    with pytest.raises(ConfigError, match="needs the checkpoint's path"):
        panel.start()


def test_a_bare_runners_rollouts_refuse_another_envs_checkpoint(tmp_path):
    """(the panel refuses before Start; a Runner built from a spec had rolled out the checkpoint's env
    under the spec's name)"""
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=128, **TINY)
    path = wb.make_trainer(config).save(tmp_path / "ck.pt")
    spec = RunSpec(config=wb.PPOConfig(env="acrobot", num_envs=4, target="cpu", total_env_steps=64,
                                       run_dir=str(tmp_path / "rollouts"), **TINY),
                   mode="rollouts", checkpoint=str(path))
    run = Runner(spec).start()
    with pytest.raises(ConfigError, match="holds policies trained on env 'cartpole', but the run's env is 'acrobot'"):
        run.wait(timeout=TIMEOUT)
    assert run.state == "error"


def test_runner_works_without_any_widget():
    seen, states = [], []
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=8 * 8 * 3, **TINY)
    run = Runner(RunSpec(config=config), on_metrics=seen.append, on_state=states.append)
    assert run.state == "idle"
    result = run.start().wait(timeout=TIMEOUT)
    assert result.iterations == 3 and [m["iteration"] for m in seen] == [1, 2, 3]
    assert states == ["compiling", "running", "finished"] and run.state == "finished"
    with pytest.raises(ValueError, match="mode must be"):
        RunSpec(config=config, mode="evaluate")


def test_runner_writes_the_forms_logger(tmp_path):
    """The logger chosen in the panel's form (here tensorboard) records the run, as from the CLI."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=8 * 8 * 3, logger="tensorboard",
                          run_dir=str(tmp_path / "run"), **TINY)
    run = Runner(RunSpec(config=config))
    run.start().wait(timeout=TIMEOUT)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("return/shared")] == [m["env_steps"] for m in run.history]


def test_stop_during_compilation_ends_the_run_before_training():
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=10**9, **TINY)
    gate = threading.Event()
    run = Runner(RunSpec(config=config), on_state=lambda s: s == "compiling" and gate.wait(5))
    run.start()
    run.stop()
    gate.set()
    run.wait(timeout=TIMEOUT)
    assert run.state == "stopped" and run.history == [] and run.trainer.iteration == 0


@pytest.mark.slow
def test_several_ranks_run_under_torchrun_and_stop(tmp_path):
    """GPUs > 1 launches `python -m workbench train` under torchrun (here 2 cpu ranks over gloo); the
    panel reads its metrics.csv and Stop interrupts it."""
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=10**9,
                          run_dir=str(tmp_path / "run"), **TINY)
    seen = []
    run = Runner(RunSpec(config=config, world_size=2), on_metrics=seen.append)
    run.start()
    wait_for(lambda: len(seen) >= 2, what="two metrics rows from the ranks")
    assert seen[1]["env_steps"] == 2 * 8 * 8 * 2  # replica steps of both ranks
    assert run.state == "running"
    run.stop()
    result = run.wait(timeout=60)
    assert run.state == "stopped" and result["stopped_by"] == "callback"
    assert result["iterations"] >= 2 and (tmp_path / "run" / "metrics.csv").exists()
    assert "training cartpole with PPO" in run.log_path.read_text()


def test_ranks_end_with_the_process_that_started_them(tmp_path):
    """A script (or a notebook kernel shut down) that exits while its multi-rank run trains: the ranks
    get SIGINT, save their checkpoint and end (before: torchrun's own session trained on to its budget)."""
    import subprocess
    import sys
    script = tmp_path / "start_and_leave.py"
    script.write_text(textwrap.dedent(f"""
        import time
        import workbench as wb
        from workbench.widgets import Runner, RunSpec
        config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=10**9,
                              run_dir={str(tmp_path / "run")!r}, rollout_length=8, num_minibatches=1,
                              update_epochs=1, log_every=1)
        seen = []
        Runner(RunSpec(config=config, world_size=2), on_metrics=seen.append).start()
        end = time.perf_counter() + {TIMEOUT}
        while len(seen) < 2 and time.perf_counter() < end:
            time.sleep(0.1)
        print("rows", len(seen))
        """))
    done = subprocess.run([sys.executable, str(script)], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=TIMEOUT + 60)
    assert done.stdout.startswith("rows") and int(done.stdout.split()[1]) >= 2, done.stderr[-2000:]
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_holds(pid, str(tmp_path / "run"))]
    assert not left, f"processes of the run outlived the script that started them: pids {left}"
    assert (tmp_path / "run" / "checkpoint.pt").exists()


def _cmdline_holds(pid: str, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def test_the_panel_says_when_the_first_iteration_compiles(monkeypatch):
    from workbench.learn.trainer import Trainer
    seen, train = [], Trainer.train

    def announcing(self, callback=None, num_iterations=None):  # (the CPU target compiles nothing to announce)
        callback.phase("first iteration: compiling (compile=false skips it)")
        wait_for(lambda: panel.status.startswith("running: first iteration: compiling"), what="the phase shown")
        seen.append(panel.status)
        callback.phase("training")
        seen.append(panel.runner.phase)
        return train(self, callback, num_iterations)

    monkeypatch.setattr(Trainer, "train", announcing)
    panel = tiny_panel(total_env_steps=8 * 8 * 2, redraw_interval=0.01)
    panel.start()
    panel.wait(timeout=TIMEOUT)
    assert panel.runner.state == "finished" and len(seen) == 2 and seen[1] is None, (panel.status, seen)
    assert "cartpole" in seen[0] and not panel.status.startswith("running")


def test_status_words_read_as_english():
    from workbench.widgets.status import describe_state, fmt_time
    assert [fmt_time(s) for s in (0.4, 9.94, 12.0, 90.0, 7200.0)] == ["0.4 s", "9.9 s", "12 s", "1.5 min", "2.0 h"]
    panel = tiny_panel(total_env_steps=8 * 8 * 10**6)
    panel.start()
    wait_for(lambda: panel.history, what="the first iteration")
    running = describe_state(panel.runner)
    panel.stop()
    panel.wait(timeout=TIMEOUT)
    assert "8 replicas x 1 agent," in running, running
    assert " in 0 s" not in describe_state(panel.runner)


def test_a_long_panel_run_keeps_redrawing_and_its_final_rate_counts_from_continue(monkeypatch):
    """Thinning the history stalls its length: the curves redraw on reports received, and a continued
    run's final rate compares iterations, not lengths."""
    from workbench.learn import metrics as metrics_module
    from workbench.widgets.status import fmt_steps, progress_line
    from widgets.curves import RunCurves
    monkeypatch.setattr(metrics_module, "HISTORY_REPORTS", 64)
    config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", total_env_steps=8 * 8 * 3, **TINY)
    run = Runner(RunSpec(config=config))
    drawn, curves = [], RunCurves()
    monkeypatch.setattr(curves, "render", lambda runner: b"png")
    for i in range(1, 301):
        run.report({"iteration": i, "env_steps": 100 * i, "time_s": 0.01 * i})
        drawn.append(curves.redraw(run, run.reports))
    assert all(drawn) and run.reports == 300 and len(run.history) <= 66
    finished = types.SimpleNamespace(running=False, spec=types.SimpleNamespace(config=config, total_iterations=400),
                                     resumed_from=types.SimpleNamespace(history=[{"iteration": 200, "env_steps": 20000,
                                                                                 "time_s": 2.0}] * 70),
                                     trainer=None, history=run.history)
    _frac, text = progress_line(finished, run.history)
    assert f"| {fmt_steps(10000 / 1.0)}env-steps/s |" in text  # (10000 env-steps in the 1 s since Continue)


def test_a_finished_status_says_the_last_reported_return_where_the_last_window_ended_none():
    """Before: a run whose last report ended no episode (long Tag episodes) finished saying no return."""
    from workbench.widgets.status import describe_state
    nan = float("nan")
    history = [{"iteration": 4, "env_steps": 400, "time_s": 1.0, "return/shared": 12.5, "mean_return": 12.5},
               {"iteration": 5, "env_steps": 500, "time_s": 1.2, "return/shared": nan, "mean_return": nan}]
    runner = types.SimpleNamespace(spec=types.SimpleNamespace(mode="train", config=wb.PPOConfig(env="cartpole"),
                                                              world_size=1, checkpoint=None),
                                   env=None, history=history, state="finished", stopped_by="budget",
                                   resumed_from=None)
    line = describe_state(runner)
    assert line.startswith("finished (total_env_steps reached) after 5 iterations") and \
        "mean return 12.50 (the last reported, at iteration 4)" in line, line
