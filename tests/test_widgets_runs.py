"""The training panel's runs and what it refuses: a run folder holding a run is never overwritten
(one GPU or several), each new run gets a fresh folder, rollouts of a checkpoint run (and record)
its env, set() checks every value as the constructor does, an env registered again rebuilds its
form, switching the algorithm keeps only what the user changed, the curves and the viewer drop an
earlier run's artists, and paths that are no run folder are refused."""
import html
import types
from pathlib import Path

import pytest
import yaml

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.learn import config as cfg
from workbench.learn.config import ConfigError
from workbench.learn.runs import ResumeError
from workbench.runtime import registry
from workbench.widgets import LivePlot, Runner, RunSpec, TrainingPanel
from workbench.widgets.runfiles import RunFolderError, read_metrics
from workbench.widgets.viewer import EpisodeViewer

pytestmark = pytest.mark.usefixtures("compiled_cartpole", "runs_in_tmp")
TIMEOUT = 300
TINY = dict(target="cpu", num_envs=8, rollout_length=16, num_minibatches=1, update_epochs=1, log_every=1,
            total_env_steps=8 * 16 * 2)  # 2 iterations


@pytest.fixture
def cell_envs():
    """Env names a test registers as a %%warpenv cell would; removed from the registry after."""
    names = []
    yield names
    for name in names:
        registry._REGISTRY.pop(name, None)


def register_cell(names, name, shipped="cartpole", **params):
    names.append(name)
    return wb.register(name, registry.lookup(shipped).source, params=params or None)


def files_of(run_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}


# ---- run folders -----------------------------------------------------------------------------------

def test_a_run_folder_holding_a_run_is_refused_and_new_runs_get_fresh_folders(tmp_path):
    run_dir = tmp_path / "exp1"
    panel = TrainingPanel("cartpole", run_dir=str(run_dir), seed=1, **TINY)
    panel.start()
    panel.wait(TIMEOUT)
    before = files_of(run_dir)
    assert {"checkpoint.pt", "metrics.csv", "config.yaml"} <= set(before)
    panel.set(seed=2, total_env_steps=8 * 16 * 2)
    with pytest.raises(ResumeError, match=r"already holds a run \(checkpoint.pt, metrics.csv\)"):
        panel.new_run()
    assert panel.status.startswith("cannot start: run folder") and "run_dir" in panel.error_html.value
    assert files_of(run_dir) == before  # the trained policy, its metrics and config.yaml (seed 1) stay
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["seed"] == 1
    assert [m["iteration"] for m in read_metrics(run_dir / "metrics.csv")] == [1, 2]
    assert len(panel.runs) == 1
    other = TrainingPanel("cartpole", run_dir=str(run_dir), **TINY)  # another panel pointed at that run
    with pytest.raises(ResumeError, match="already holds a run"):
        other.start()
    assert other.runner is None and files_of(run_dir) == before
    fresh = TrainingPanel("cartpole", **TINY)  # no run_dir named: a fresh runs/cartpole-<date> per run
    fresh.start()
    fresh.wait(TIMEOUT)
    fresh.new_run()
    fresh.wait(TIMEOUT)
    first, second = (Path(r["run_dir"]) for r in fresh.runs)
    assert first != second and first.parent == second.parent == Path("runs")
    assert first.name.startswith("cartpole-") and second.name.startswith("cartpole-")
    assert [m["iteration"] for m in read_metrics(first / "metrics.csv")] == [1, 2]


def test_a_panel_run_of_a_cell_env_keeps_its_source_as_the_cli_does(tmp_path, cell_envs):
    register_cell(cell_envs, "pole_kept")
    run_dir = tmp_path / "cell_run"
    panel = TrainingPanel("pole_kept", run_dir=str(run_dir), **TINY)
    panel.start()
    panel.wait(TIMEOUT)
    assert (run_dir / "env_source.py").read_text() == registry.lookup("pole_kept").source
    assert not (tmp_path / "shipped").exists()
    shipped = TrainingPanel("cartpole", run_dir=str(tmp_path / "shipped"), **TINY)  # (every process has it)
    shipped.start()
    shipped.wait(TIMEOUT)
    assert not (tmp_path / "shipped" / "env_source.py").exists() and (tmp_path / "shipped" / "config.yaml").exists()


def test_a_bare_runner_refuses_a_folder_holding_a_run(tmp_path):
    run_dir = tmp_path / "held"
    run_dir.mkdir()
    (run_dir / "metrics.csv").write_text("iteration,env_steps\n1,10\n")
    for mode in ("train", "rollouts"):
        config = wb.PPOConfig(env="cartpole", num_envs=8, target="cpu", run_dir=str(run_dir), total_env_steps=128)
        run = Runner(RunSpec(config=config, mode=mode)).start()
        run.wait(TIMEOUT, raise_error=False)
        assert isinstance(run.error, ResumeError) and run.trainer is None
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.csv"]


class FailingTorchrun:
    """subprocess.Popen's stand-in: torchrun that exits at once with status 2."""
    launched: list = []

    def __init__(self, cmd, **kwargs):
        FailingTorchrun.launched.append(cmd)
        self.pid = -1

    def poll(self):
        return 2


def test_several_ranks_refuse_a_held_folder_and_default_to_a_runs_folder(tmp_path, monkeypatch):
    from workbench.widgets import checks, jobs
    monkeypatch.setattr(checks, "gpu_count", lambda: 2)
    monkeypatch.setattr(jobs.subprocess, "Popen", FailingTorchrun)
    FailingTorchrun.launched = []
    held = tmp_path / "held"
    held.mkdir()
    (held / "metrics.csv").write_text("iteration,env_steps\n1,10\n")
    panel = TrainingPanel("cartpole", gpus=2, run_dir=str(held), **{**TINY, "target": "auto"})
    assert panel.spec().world_size == 2
    with pytest.raises(ResumeError, match="already holds a run"):
        panel.start()
    assert (held / "metrics.csv").read_text() == "iteration,env_steps\n1,10\n" and FailingTorchrun.launched == []
    panel.set(run_dir="")
    panel.start()
    panel.wait(TIMEOUT, raise_error=False)
    assert "exited with status 2" in str(panel.runner.error)
    run_dir = Path(panel.runner.spec.config.run_dir)
    assert run_dir.parent == Path("runs") and run_dir.name.startswith("cartpole-")
    (cmd,) = FailingTorchrun.launched
    assert cmd[cmd.index("--run-dir") + 1] == str(run_dir) and (run_dir / "panel_config.yaml").exists()


# ---- rollouts of a checkpoint ------------------------------------------------------------------------

def test_rollouts_of_a_checkpoint_refuse_another_env_and_record_the_checkpoints(tmp_path):
    config = wb.PPOConfig(env="cartpole", env_params={"max_steps": 100}, num_envs=8, target="cpu",
                          total_env_steps=128, rollout_length=8, num_minibatches=1, update_epochs=1)
    trainer = wb.make_trainer(config)
    trainer.train()
    checkpoint = str(trainer.save(tmp_path / "ck.pt"))
    panel = TrainingPanel("pendulum", mode="rollouts", checkpoint=checkpoint, target="cpu", num_envs=8,
                          env_params={"max_speed": 9.0})
    with pytest.raises(ConfigError, match="trained on env 'cartpole', but the panel's env is 'pendulum'"):
        panel.start()
    assert panel.runner is None and not Path("runs").exists()
    panel.set(env="cartpole", env_params={"max_steps": 50})
    with pytest.raises(ConfigError, match=r"env_params \{'max_steps': 50\} differ .* \(\{'max_steps': 100\}\)"):
        panel.spec()
    panel.set(env_params=None)
    spec = panel.spec()
    assert spec.config.env == "cartpole" and spec.config.env_params == {"max_steps": 100}


# ---- the form ------------------------------------------------------------------------------------------

def test_switching_the_algorithm_keeps_only_the_values_the_user_changed():
    panel = TrainingPanel("pendulum", target="cpu", lr=0.0123)
    panel.set(algorithm="a2c")
    config = panel.spec().config
    direct = TrainingPanel("pendulum", target="cpu", algorithm="a2c").spec().config
    for name in ("rollout_length", "gae_lambda", "ent_coef", "anneal_lr"):
        assert getattr(config, name) == getattr(direct, name) == getattr(cfg.A2CConfig, name)
    assert config.lr == 0.0123


@pytest.mark.parametrize("values, words", [
    (dict(gpus=4), ["gpus=4", "use gpus=1"]),
    (dict(record_every=-5), ["record_every", "-5", ">= 0"]),
    (dict(mode="eval"), ["mode", "'eval'", "'rollouts'"]),
    (dict(target="tpu"), ["target", "'tpu'", "'cpu'"]),
    (dict(algorithm="sac"), ["algorithm", "'sac'", "'ppo'"]),
    (dict(env_params={"length": "abc"}), ["length", "'abc'", "not a number"]),
    (dict(num_envs="many"), ["num_envs", "'many'"]),
    (dict(lr="fast"), ["lr", "'fast'", "a number"]),
    (dict(record_replicas="first"), ["record_replicas", "'first'"]),
    (dict(env_params={"max_steps": -3}), ["env_params", "max_steps=-3 is out of range", "[1, inf)"]),
    (dict(logger="bogus"), ["logger", "'bogus'", "tensorboard"]),
    (dict(learning_rate=1e-3), ["learning_rate", "did you mean 'lr'"]),
])
def test_set_checks_values_as_the_constructor_does_and_changes_nothing(values, words):
    panel = TrainingPanel("cartpole", target="cpu", num_envs=8)
    before = panel.spec()
    with pytest.raises(ConfigError) as info:
        panel.set(num_envs=16, **values) if "num_envs" not in values else panel.set(**values)
    for word in words:
        assert word in str(info.value)
    after = panel.spec()
    assert (after.config, after.world_size, after.record_every, after.mode) == \
        (before.config, before.world_size, before.record_every, before.mode)
    with pytest.raises(ConfigError, match="gpus=4"):
        TrainingPanel("cartpole", target="cpu", gpus=4)
    with pytest.raises(ConfigError, match="mode must be one of"):
        TrainingPanel("cartpole", target="cpu", mode="eval")


def test_an_env_registered_after_the_panel_is_offered(cell_envs):
    panel = TrainingPanel("cartpole", target="cpu")
    register_cell(cell_envs, "pole_offered")
    panel.set(env="pole_offered")
    assert panel.env_name.value == "pole_offered" and "pole_offered" in panel.env_name.options
    assert panel.spec().config.env == "pole_offered"
    register_cell(cell_envs, "pole_displayed")
    panel._repr_mimebundle_()  # displayed again
    assert "pole_displayed" in panel.env_name.options and panel.env_name.value == "pole_offered"


def test_an_env_registered_again_rebuilds_its_form_and_the_run_gets_what_it_shows(cell_envs):
    register_cell(cell_envs, "pole_cell")
    panel = TrainingPanel("pole_cell", target="cpu", env_params={"length": 1.0})
    register_cell(cell_envs, "pole_cell", max_steps=50)  # the cell re-ran with other parameters
    spec = panel.spec()
    assert panel.env_form.inputs["max_steps"].value == 50 and panel.env_form.inputs["length"].value == 1.0
    assert spec.config.env_params == {"length": 1.0}
    notice = html.unescape(panel.notice_html.value)
    assert "'pole_cell' was registered again" in notice and "values you changed: {'length': 1.0}" in notice
    panel.env_form.inputs["max_steps"].value = 500  # the earlier default, asked for now
    assert panel.spec().config.env_params == {"length": 1.0, "max_steps": 500}
    register_cell(cell_envs, "tag_cell", "tag_continuous")
    panel.set(env="tag_cell")
    register_cell(cell_envs, "tag_cell", "tag_continuous", num_runners=7)
    panel.spec()
    agents = registry.definition("tag_cell").num_agents
    assert panel.env_form.inputs["num_runners"].value == 7 and f"({agents} agents)" in panel.forms.titles[1]


def test_an_env_made_before_its_cell_ran_again_is_not_said_reused(cell_envs):
    register_cell(cell_envs, "pole_made")
    made = types.SimpleNamespace(name="pole_made", definition=registry.definition("pole_made", max_steps=50),
                                 num_envs=4, target=types.SimpleNamespace(name="cpu"))
    assert "reused (no compile)" in TrainingPanel(made).status
    source = registry.lookup("pole_made").source
    wb.register("pole_made", source.replace("length=0.5", "length=0.75"))  # the cell re-ran, its source changed
    panel = TrainingPanel(made)
    assert panel.given_env is None and "reused" not in panel.status and "earlier definition" in panel.status


def test_record_replicas_are_checked_before_anything_is_compiled_or_written():
    with pytest.raises(ConfigError, match=r"record_replicas \[99\] out of range: .* 8 replicas, indices 0 \.\. 7"):
        TrainingPanel("cartpole", record_every=1, record_replicas=(99,), **TINY)
    panel = TrainingPanel("cartpole", record_every=1, **TINY)
    panel.record_replicas.value = "99"  # typed into the field: Start refuses it
    with pytest.raises(ConfigError, match=r"record_replicas \[99\] out of range: .* 8 replicas, indices 0 \.\. 7"):
        panel.start()
    assert panel.runner is None and not Path("runs").exists()
    with pytest.raises(ConfigError, match=r"record_replicas \[-1\]"):
        panel.set(record_replicas=[-1])
    panel.set(record_replicas=[15], seeds=2)  # a population's env: 8 replicas per member x 2 members
    assert panel.spec().record_replicas == (15,)
    with pytest.raises(ConfigError, match=r"16 replicas \(8 per member x 2 members\)"):
        panel.set(record_replicas=[16])
    panel.record_replicas.value = "16"
    with pytest.raises(ConfigError, match=r"16 replicas \(8 per member x 2 members\)"):
        panel.spec()


@pytest.mark.parametrize("typed, words", [
    (lambda panel: panel.set(num_minibatches=7), ["num_minibatches=7 does not divide", "8 x rollout_length 16"]),
    (lambda panel: setattr(panel.env_form.inputs["length"], "value", -1.0), ["env_params", "length=-1.0"]),
    (lambda panel: setattr(panel.config_form.inputs["logger"], "value", "bogus"), ["logger", "'bogus'"]),
])
def test_start_refuses_what_only_the_env_can_refuse_before_anything_is_compiled_or_written(typed, words):
    """Checks against the env (its parameters' ranges, the minibatch split of each policy's batch)
    and the logger's name: Start refuses them before a run folder is written or a run is added."""
    panel = TrainingPanel("cartpole", **TINY)
    typed(panel)
    with pytest.raises(ConfigError) as info:
        panel.start()
    for word in words:
        assert word in str(info.value)
    assert panel.runner is None and not Path("runs").exists() and not panel.runs
    assert all(word in html.unescape(panel.error_html.value) for word in words)


# ---- runs compared ---------------------------------------------------------------------------------------

def test_paths_that_are_no_run_folder_are_refused(tmp_path):
    panel = TrainingPanel("cartpole", target="cpu")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "ck.pt").write_bytes(b"")
    for path, why in ((tmp_path / "nonexistent", "does not exist"), (tmp_path / "empty", "holds no metrics.csv"),
                      (tmp_path / "empty" / "ck.pt", "a checkpoint outside a run folder")):
        with pytest.raises(RunFolderError, match=why + ".*holds metrics.csv") as info:
            panel.add_run(path)
        assert str(path) in str(info.value) and isinstance(info.value, WorkbenchError)
    with pytest.raises(RunFolderError, match="does not exist"):
        TrainingPanel("cartpole", target="cpu", compare=[tmp_path / "nonexistent"])
    assert panel.runs == []
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("iteration,env_steps,return/shared\n1,10,2.0\n")
    (run / "checkpoint.pt").write_bytes(b"")
    entry = panel.add_run(run / "checkpoint.pt")  # a checkpoint names its run folder
    assert entry["run_dir"] == str(run) and entry["history"][0]["iteration"] == 1


# ---- curves, viewer, Stop and Start ------------------------------------------------------------------

def test_the_curves_of_a_new_run_drop_an_earlier_runs_lines():
    plot = LivePlot()
    teams = [{"iteration": i, "env_steps": 100 * i, "env_steps_per_s": 10.0, "return/a": 1.0, "return/b": 2.0,
              "policy_loss/a": 0.1, "policy_loss/b": 0.2} for i in (1, 2)]
    plot.render(teams, target_return=475.0, label="run1")
    assert {"target", "return/a", "return/b", "policy_loss/b"} <= set(plot.lines)
    shared = [{"iteration": i, "env_steps": 100 * i, "env_steps_per_s": 10.0, "return/shared": 1.0,
               "policy_loss/shared": 0.3} for i in (1, 2)]
    plot.render(shared, target_return=None, others=[("run1", teams)], label="run2")
    assert "target" not in plot.lines and not {"return/a", "return/b", "policy_loss/a"} & set(plot.lines)
    legend = [t.get_text() for t in plot.fig.legends[0].get_texts()]
    assert legend == ["run2", "run1 a", "run1 b"]  # this run, and the earlier one overlaid by name
    plot.render(shared, target_return=200.0, label="run2")
    assert plot.lines["target"].get_label() == "target 200"


def test_a_new_run_that_records_nothing_clears_the_viewer():
    viewer = EpisodeViewer()
    viewer.title.value = "<b>Rollout viewer</b> replica(s) 0"
    viewer.output.outputs = ({"output_type": "display_data", "metadata": {}, "data": {"text/plain": "anim"}},)
    viewer.new_run(continued=True)
    assert viewer.output.outputs and viewer.title.value
    viewer.new_run(continued=False)
    assert viewer.output.outputs == () and viewer.title.value == "" and viewer.animation is None


def test_stop_while_compiling_gives_a_result_and_a_raised_budget_says_continue(monkeypatch):
    from workbench.learn import trainer as trainer_module
    panel = TrainingPanel("cartpole", **TINY)
    make = trainer_module.make_trainer

    def make_then_stop(*args, **kwargs):  # Stop pressed while the env compiles
        made = make(*args, **kwargs)
        panel.runner.stop()
        return made
    monkeypatch.setattr(trainer_module, "make_trainer", make_then_stop)
    panel.start()
    result = panel.wait(TIMEOUT)
    assert result.stopped_by == "callback" and result.iterations == 0
    monkeypatch.setattr(trainer_module, "make_trainer", make)
    panel.new_run()
    panel.wait(TIMEOUT)
    assert panel.trainer.iteration == 2 and panel.start_button.description == "Start"  # its budget is spent
    panel.set(total_env_steps=8 * 16 * 3)
    assert panel.start_button.description == "Continue"
    panel.start()
    panel.wait(TIMEOUT)
    assert [m["iteration"] for m in panel.history] == [1, 2, 3]


def test_continue_works_for_a_cell_env_with_its_own_defaults_and_not_after_its_source_changed(cell_envs):
    """A %%warpenv cell with options (`--agents N`) registers parameters the run's trainer writes out
    in its config: Continue still continues. After the cell re-ran with another source, Start is a
    new run."""
    register_cell(cell_envs, "pole_options", max_steps=40)  # (as `--agents` sets num_agents)
    panel = TrainingPanel("pole_options", **TINY)
    panel.start()
    panel.wait(TIMEOUT)
    trainer = panel.trainer
    assert trainer.config.env_params == {"max_steps": 40} and panel.runner.spec.config.env_params is None
    panel.set(total_env_steps=8 * 16 * 3)
    assert panel.start_button.description == "Continue"
    panel.start_button.click()
    panel.wait(TIMEOUT)
    assert panel.runner.error is None and panel.trainer is trainer
    assert [m["iteration"] for m in panel.history] == [1, 2, 3]
    source = registry.lookup("cartpole").source
    wb.register("pole_options", source.replace("length=0.5", "length=0.75"), params={"max_steps": 40})
    panel.set(total_env_steps=8 * 16 * 4)
    assert panel.start_button.description == "Start" and not panel.can_continue()


def test_a_continue_that_cannot_go_on_says_why_in_the_panel(monkeypatch):
    import importlib
    panel_module = importlib.import_module("workbench.widgets.panel")
    panel = TrainingPanel("cartpole", **TINY)
    panel.start()
    panel.wait(TIMEOUT)
    panel.set(total_env_steps=8 * 16 * 3)
    monkeypatch.setattr(panel_module, "Runner", lambda *a, **k: (_ for _ in ()).throw(ValueError("cannot go on")))
    panel.start_button.click()
    assert "cannot go on" in html.unescape(panel.error_html.value) and "cannot start" in panel.status
