"""The training panel with populations: the form's seeds and sweep fields (the sweep written as
"lr=1e-3,3e-4; ent_coef=0,0.01"), the live curve's median and interquartile band over the members,
the status line's member count and population summary, a sweep's ranked settings at the end, and
a population's run folder read back as its reports."""
import numpy as np
from pathlib import Path

import pytest

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn.config import ConfigError
from workbench.learn.ranking import population_curves, population_summary, ranking_text, sweep_settings
from workbench.widgets import TrainingPanel
from workbench.widgets.form import parse_sweep, sweep_text
from workbench.widgets.runfiles import read_run
from workbench.widgets.status import members_text

pytestmark = pytest.mark.usefixtures("compiled_cartpole")
TIMEOUT = 300
TINY = dict(target="cpu", num_envs=4, rollout_length=8, num_minibatches=1, update_epochs=1, log_every=1,
            total_env_steps=4 * 8 * 3)  # 3 iterations of 4 replicas x 8 steps per member


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def seeds_panel(runs_root):
    """A population of 2 seeds trained through the panel (no sweep)."""
    panel = TrainingPanel("cartpole", seeds=2, runs_root=runs_root, **TINY)
    panel.start()
    panel.wait(TIMEOUT)
    return panel


@pytest.fixture(scope="module")
def sweep_panel(runs_root):
    """2 seeds x 2 learning rates, the sweep typed into the form's field."""
    panel = TrainingPanel("cartpole", seeds=2, runs_root=runs_root, **TINY)
    panel.config_form.inputs["sweep"].value = "lr=1e-3,3e-3"
    panel.start()
    panel.wait(TIMEOUT)
    return panel


# ---- the form -------------------------------------------------------------------------------------

def test_sweep_text_is_parsed_into_the_grid():
    assert parse_sweep("lr=1e-3,3e-4; ent_coef=0,0.01") == {"lr": [1e-3, 3e-4], "ent_coef": [0.0, 0.01]}
    assert parse_sweep(" lr = 1e-3 3e-4 ;\nent_coef=0.01; ") == {"lr": [1e-3, 3e-4], "ent_coef": [0.01]}
    assert parse_sweep("lr=0.001\nclip_coef=0.1,0.3") == {"lr": [0.001], "clip_coef": [0.1, 0.3]}
    assert parse_sweep("{lr: [1e-3, 3e-4], ent_coef: 0.01}") == {"lr": [1e-3, 3e-4], "ent_coef": [0.01]}
    assert parse_sweep("") is None and parse_sweep("None") is None and parse_sweep("  ") is None
    grid = {"lr": [0.001, 0.0003], "ent_coef": [0.0, 0.01]}
    assert sweep_text(grid) == "lr=0.001,0.0003; ent_coef=0.0,0.01"
    assert parse_sweep(sweep_text(grid)) == grid and sweep_text(None) == ""


@pytest.mark.parametrize("text, why", [
    ("lr=abc", "lr's value 'abc' is not a number"),
    ("lr 1e-3", "'lr 1e-3' is not name=value,value"),
    ("lr=", "lr has no values"),
    ("lr=1e-3; lr=3e-4", "lr is given twice"),
    ("=1,2", "'=1,2' is not name=value,value"),
    ("{lr: [1e-3", "not a YAML mapping"),
])
def test_bad_sweep_text_is_refused_naming_the_field(text, why):
    with pytest.raises(ConfigError) as err:
        parse_sweep(text, "PPOConfig")
    message = str(err.value)
    assert message.startswith(f"PPOConfig.sweep: cannot read {text!r}: {why}")
    assert "e.g. lr=1e-3,3e-4; ent_coef=0,0.01" in message


def test_the_panel_offers_seeds_sweep_and_rank_by_on_rows_of_their_own():
    panel = TrainingPanel("cartpole", target="cpu", seeds=4, sweep={"lr": [1e-3, 3e-4]})
    seeds, sweep, rank_by = (panel.config_form.inputs[n] for n in ("seeds", "sweep", "rank_by"))
    assert seeds.value == 4 and sweep.value == "lr=0.001,0.0003" and rank_by.value == "mean_return"
    assert "ent_coef=0,0.01" in sweep.placeholder
    rows = [row for row in panel.population.children[1:]]
    assert [row.children[0] for row in rows] == [seeds, sweep, rank_by]
    assert "Population" in panel.population.children[0].value
    in_accordion = [c for row in panel.config_form.children[1:] for c in row.children]
    assert not {seeds, sweep, rank_by} & set(in_accordion)  # shown once, on the population rows
    assert list(rank_by.options) == ["mean_return", "return/shared", "episode_length"]  # what cartpole reports
    rank_by.value = "-episode_length"  # (not a choice: the lowest first)
    assert panel.spec().config.rank_by == "-episode_length"
    rank_by.value = "return/shared"
    assert panel.spec().config.rank_by == "return/shared"
    rank_by.value = "  "  # (before: "rank_by is '', which this run does not report"; the placeholder says the default)
    assert panel.spec().config.rank_by == "mean_return"
    rank_by.value = "mean_return"
    panel.env_name.value = "tag_continuous"  # the env's teams and metrics become the choices
    assert {"return/taggers", "return/runners", "tag_rate", "survival"} <= set(rank_by.options)
    panel.env_name.value = "cartpole"
    sweep.value = "lr=1e-3,3e-3; ent_coef=0,0.01"
    config = panel.spec().config
    assert config.seeds == 4 and config.sweep == {"lr": [1e-3, 3e-3], "ent_coef": [0.0, 0.01]}
    assert members_text(config) == "a population of 16 members (4 seeds x 4 settings of lr, ent_coef)"
    panel.set(sweep=None, seeds=3)
    assert sweep.value == "" and panel.spec().config.sweep is None
    assert members_text(panel.spec().config) == "a population of 3 seeds"
    panel.algorithm.value = "a2c"  # the form is rebuilt: the row follows, the values stay
    assert panel.population.children[1].children[0] is panel.config_form.inputs["seeds"]
    assert panel.config_form.inputs["seeds"].value == 3
    panel.mode.value = "rollouts"  # rollouts step one env: no population
    assert panel.population.layout.display == "none"
    assert panel.spec().config.seeds == 1 and panel.spec().config.sweep is None


def test_a_bad_sweep_stops_start_with_a_message_naming_the_field(tmp_path):
    panel = TrainingPanel("cartpole", runs_root=str(tmp_path), **TINY)
    panel.config_form.inputs["sweep"].value = "lr=fast"
    with pytest.raises(ConfigError, match=r"PPOConfig\.sweep: cannot read 'lr=fast': lr's value 'fast'"):
        panel.start()
    assert "PPOConfig.sweep" in panel.error_html.value and panel.status.startswith("cannot start: PPOConfig.sweep")
    panel.config_form.inputs["sweep"].value = "tau=0.1,0.2"  # a name PPO members cannot differ in
    with pytest.raises(ConfigError, match=r"PPOConfig\.sweep names 'tau'"):
        panel.start()
    assert panel.runner is None


def test_a_rank_by_the_run_does_not_report_is_refused_by_set_and_by_start_before_any_file(tmp_path):
    panel = TrainingPanel("cartpole", seeds=2, runs_root=str(tmp_path), **TINY)
    with pytest.raises(ConfigError, match=r"PPOConfig\.rank_by is 'bogus', which this run does not report: name "
                                          r"one of \['mean_return', 'return/shared', 'episode_length'\]"):
        panel.set(rank_by="bogus")
    assert panel.config_form.values()["rank_by"] == "mean_return"  # nothing set
    panel.set(rank_by="-episode_length")  # a choice, the minus allowed
    panel.config_form.inputs["rank_by"].value = "return"  # typed into the field: the tables' name
    with pytest.raises(ConfigError, match="did you mean 'mean_return'"):
        panel.start()
    assert panel.runner is None and panel.runs == [] and list(tmp_path.iterdir()) == []  # no folder, no run


# ---- a population run -----------------------------------------------------------------------------

def test_a_population_run_draws_the_median_and_the_band_and_says_the_summary(seeds_panel):
    panel = seeds_panel
    history = panel.history
    last = history[-1]
    assert len(history) == 3 and last["num_members"] == 2 and [m["seed"] for m in last["members"]] == [0, 1]
    curve = population_curves(history)["curves"][0]
    assert curve["label"] == "policy median (2 members), IQR band"
    lines = panel.plot.lines
    median = lines["pop:median:0"]
    assert list(median.get_xdata()) == curve["steps"] and list(median.get_ydata()) == curve["median"]
    assert curve["median"][-1] == pytest.approx(last["return/shared"])
    band = np.concatenate([p.vertices for p in lines["pop:band:0"].get_paths()])
    assert band[:, 1].min() == pytest.approx(min(curve["q25"])) and band[:, 1].max() == pytest.approx(max(curve["q75"]))
    assert max(curve["q75"]) > min(curve["q25"])
    assert sorted(k for k in lines if k.startswith("pop:member:")) == ["pop:member:0:0", "pop:member:0:1"]
    assert not any(k.startswith("return/") for k in lines)  # the median replaces the single run's line
    assert panel.plot.axes["return"].get_title() == "episode return: median, IQR band over 2 members"
    labels = [t.get_text() for t in panel.plot.fig.legends[0].get_texts()]
    assert labels == [f"{panel.runs[0]['label']}: policy median (2 members), IQR band"]
    summary = population_summary(last)
    assert summary.startswith("median return ") and ("over 2 members" in summary or "of 2 members" in summary)
    assert panel.status.startswith("finished (total_env_steps reached) after 3 iterations")
    assert summary in panel.status and "training PPO as a population of 2 seeds on cartpole" in panel.status
    assert panel.ranking == ""  # no sweep: no settings to rank


def test_a_sweep_run_shows_its_ranked_settings(sweep_panel):
    panel = sweep_panel
    last = panel.history[-1]
    assert last["num_members"] == 4
    assert [(m["member"], m["seed"], m["lr"]) for m in last["members"]] == [
        (0, 0, 1e-3), (1, 1, 1e-3), (2, 2, 3e-3), (3, 3, 3e-3)]
    rows = sweep_settings(last)
    assert [row["members"] for row in rows] == [2, 2]
    table = ranking_text(rows)
    assert table.splitlines()[0].split()[:3] == ["rank", "lr", "members"]
    assert panel.ranking.endswith(table) and panel.ranking.startswith("Sweep settings ranked")
    assert "2 seeds" in panel.ranking and "by iteration 3" in panel.ranking
    assert "a population of 4 members (2 seeds x 2 settings of lr)" in panel.status
    best = rows[0]
    if not np.isnan(best["mean"]):
        assert f"best setting lr={best['values']['lr']:g}" in panel.status
    medians = {k: line for k, line in panel.plot.lines.items() if k.startswith("pop:median:")}
    assert len(medians) == 2  # one median and band per sweep setting
    assert panel.plot.axes["return"].get_title() == "episode return: median, IQR band over each setting's 2 members"
    labels = [t.get_text() for t in panel.plot.fig.legends[0].get_texts()]
    assert [label.split(": ", 1)[1] for label in labels[:2]] == ["lr=0.001", "lr=0.003"]


def test_a_changed_population_is_a_new_run_and_its_folder_reads_back_as_reports(seeds_panel):
    panel = seeds_panel
    assert panel.can_continue() is False  # the budget is spent
    panel.set(total_env_steps=4 * 8 * 5)
    assert panel.can_continue() is True
    panel.set(seeds=3)
    assert panel.can_continue() is False  # another population: a new run
    panel.set(seeds=2)
    config, rows = read_run(panel.runs[0]["run_dir"])
    assert config["seeds"] == 2 and len(rows) == len(panel.history)
    for read, live in zip(rows, panel.history):
        assert read["num_members"] == 2 and [m["member"] for m in read["members"]] == [0, 1]
        assert read["return/shared"] == pytest.approx(live["return/shared"], nan_ok=True)
        assert read["return_q75/shared"] == pytest.approx(live["return_q75/shared"], nan_ok=True)
    assert cfg.from_dict(config).seeds == 2


def test_continue_ranks_by_a_new_rank_by_and_the_folder_reads_back_with_it(runs_root):
    panel = TrainingPanel("cartpole", seeds=2, runs_root=runs_root, **TINY)
    panel.config_form.inputs["sweep"].value = "lr=1e-3,3e-3"
    panel.start()
    panel.wait(TIMEOUT)
    assert panel.history[-1]["rank_by"] == "mean_return"
    panel.set(total_env_steps=4 * 8 * 4, rank_by="episode_length")
    assert panel.can_continue() is True  # what ranks the members changes nothing they learn
    panel.start()
    panel.wait(TIMEOUT)
    assert panel.history[-1]["rank_by"] == "episode_length" and panel.trainer.config.rank_by == "episode_length"
    assert "episode_length mean ± std" in panel.ranking
    assert panel.plot.axes["return"].get_title().startswith("episode_length: median, IQR band")
    config, reports = read_run(panel.runs[0]["run_dir"])
    assert config["rank_by"] == "episode_length" and reports[-1]["rank_by"] == "episode_length"
    folder = Path(panel.runs[0]["run_dir"])  # the panel's run folder holds what the CLI's does
    assert (folder / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "ranking.csv").read_text().splitlines()[0].startswith("rank,lr,members,missing,episode_length_mean")
    with pytest.raises(ConfigError, match="rank_by is 'return/runners', which this run does not report"):
        panel.set(total_env_steps=4 * 8 * 5, rank_by="return/runners")  # checked against what the run reports
    assert panel.config_form.values()["total_env_steps"] == 4 * 8 * 4  # a refused set() sets nothing
    assert panel.trainer.config.rank_by == "episode_length" and panel.history[-1]["iteration"] == 4
