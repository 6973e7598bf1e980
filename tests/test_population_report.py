"""A population's outputs: its sweep settings ranked (rows, table, CSV), its returns in one line, and
its learning curve (medians with interquartile bands) from synthetic population histories."""
import csv
import math

import numpy as np
import pytest

from workbench.learn import ranking, report
from workbench.learn.metrics import population_report

NAN = float("nan")


def member_report(base, k, returns, values=None, seed0=7):
    """A member's standalone-style report: returns {policy: value}."""
    out = dict(base, member=k, seed=seed0 + k, **(values or {}))
    for name, value in returns.items():
        out[f"return/{name}"] = value
        out[f"policy_loss/{name}"] = 0.1 * k
        out[f"entropy/{name}"] = 0.5
    finite = [v for v in returns.values() if not math.isnan(v)]
    out.update(episode_length=50.0 + k, episodes=10.0, mean_return=sum(finite) / len(finite) if finite else NAN,
               nonfinite=False)
    return out


def population_history(table, values=None, policies=("shared",), rank_by="mean_return"):
    """Reports built by metrics.population_report: table[t][k] is member k's return at report t (a
    tuple per policy for several policies); values[k]: member k's swept values."""
    history = []
    for t, row in enumerate(table, 1):
        base = {"iteration": t, "env_steps": 1000 * t, "env_steps_per_s": 6.0e5, "time_s": 0.5 * t}
        members = [member_report(base, k, dict(zip(policies, r if isinstance(r, tuple) else (r,))),
                                 values[k] if values else None) for k, r in enumerate(row)]
        history.append(population_report(base, members, list(policies), rank_by=rank_by))
    return history


# 6 members: lr 1e-3 for members 0-2, 3e-4 for members 3-5 (3 seeds each)
SWEEP = [{"lr": 1e-3}] * 3 + [{"lr": 3e-4}] * 3
TABLE = [[NAN] * 6,
         [10.0, 20.0, NAN, 40.0, 30.0, 35.0],
         [100.0, 120.0, NAN, 200.0, 150.0, 190.0]]


def test_sweep_settings_rank_settings_by_their_seeds_mean_return_with_nan_members_missing():
    final = population_history(TABLE, SWEEP)[-1]
    assert ranking.swept_names(final) == ["lr"]
    rows = ranking.sweep_settings(final)
    assert [row["values"] for row in rows] == [{"lr": 3e-4}, {"lr": 1e-3}]
    assert [row["rank"] for row in rows] == [1, 2]
    best, second = rows
    assert best["members"] == 3 and best["missing"] == 0
    assert best["mean"] == pytest.approx(np.mean([200, 150, 190]))
    assert best["std"] == pytest.approx(np.std([200, 150, 190], ddof=1))
    assert (best["best_member"], best["best_value"]) == (3, 200.0)
    assert second["members"] == 3 and second["missing"] == 1
    assert second["mean"] == pytest.approx(110.0)
    assert second["std"] == pytest.approx(np.std([100, 120], ddof=1))
    assert (second["best_member"], second["best_value"]) == (1, 120.0)


def test_settings_with_every_member_nan_come_last_and_one_member_has_no_std():
    grid = [{"lr": lr, "ent_coef": e} for lr in (1e-3, 3e-4) for e in (0.0, 0.01)]
    final = population_history([[5.0, NAN, 7.0, 3.0]], grid)[-1]
    rows = ranking.sweep_settings(final)
    assert ranking.swept_names(final) == ["lr", "ent_coef"]
    assert [row["values"] for row in rows] == [grid[2], grid[0], grid[3], grid[1]]
    assert [row["mean"] for row in rows[:3]] == [7.0, 5.0, 3.0] and all(math.isnan(row["std"]) for row in rows[:3])
    last = rows[-1]
    assert math.isnan(last["mean"]) and math.isnan(last["std"]) and last["best_member"] is None
    assert (last["members"], last["missing"]) == (1, 1)


def test_an_explicit_swept_list_decides_the_settings():
    final = population_history(TABLE, SWEEP)[-1]
    (row,) = ranking.sweep_settings(final, swept=[])
    assert row["values"] == {} and (row["members"], row["missing"]) == (6, 1)
    assert row["mean"] == pytest.approx(np.mean([100, 120, 200, 150, 190]))
    assert row["std"] == pytest.approx(np.std([100, 120, 200, 150, 190], ddof=1))
    assert (row["best_member"], row["best_value"]) == (3, 200.0)
    by_seed = ranking.sweep_settings(final, swept=["seed"])
    assert len(by_seed) == 6 and by_seed[0]["values"] == {"seed": 10} and by_seed[-1]["values"] == {"seed": 9}


def test_ranking_text_is_a_table_of_the_values_best_first():
    rows = ranking.sweep_settings(population_history(TABLE, SWEEP)[-1])
    lines = ranking.ranking_text(rows).splitlines()
    assert len(lines) == 3
    assert lines[0].split()[:4] == ["rank", "lr", "members", "missing"]
    assert "return mean ± std" in lines[0] and "best (member)" in lines[0]
    std = np.std([200, 150, 190], ddof=1)
    assert lines[1].split()[:4] == ["1", "0.0003", "3", "0"]
    assert f"180.00 ± {std:.2f}" in lines[1] and "200.00 (#3)" in lines[1]
    assert lines[2].split()[:4] == ["2", "0.001", "3", "1"]
    assert f"110.00 ± {np.std([100, 120], ddof=1):.2f}" in lines[2] and "120.00 (#1)" in lines[2]
    assert lines[0].index("best (member)") == lines[1].index("200.00 (#3)") == lines[2].index("120.00 (#1)")


def test_ranking_csv_round_trips(tmp_path):
    grid = [{"lr": lr, "ent_coef": e} for lr in (1e-3, 3e-4) for e in (0.0, 0.01)]
    rows = ranking.sweep_settings(population_history([[5.0, NAN, 7.0, 3.0]], grid)[-1])
    path = ranking.write_ranking_csv(rows, tmp_path / "out" / "ranking.csv")
    with path.open(newline="") as fh:
        back = list(csv.DictReader(fh))
    assert list(back[0]) == ["rank", "lr", "ent_coef", "members", "missing", "return_mean", "return_std",
                             "return_stderr", "return_ci95", "episodes", "oldest_iteration", "best_member",
                             "best_return", "ranked_by"]
    assert len(back) == len(rows) and {read["ranked_by"] for read in back} == {"mean_return"}
    for row, read in zip(rows, back):
        assert int(read["rank"]) == row["rank"]
        assert {k: float(read[k]) for k in ("lr", "ent_coef")} == row["values"]
        assert (int(read["members"]), int(read["missing"])) == (row["members"], row["missing"])
        for field, key in (("return_mean", "mean"), ("return_std", "std"), ("best_return", "best_value")):
            assert float(read[field]) == row[key] or (math.isnan(float(read[field])) and math.isnan(row[key]))
        assert (int(read["best_member"]) if read["best_member"] else None) == row["best_member"]


def test_population_summary_says_the_median_and_quartiles_over_the_members():
    returns = [480.0, 500.0, 470.0, 500.0, 460.0, 490.0]
    final = population_history([returns])[-1]
    q25, median, q75 = np.percentile(returns, [25, 50, 75])
    text = f"median return {median:.2f} (IQR {q25:.2f} to {q75:.2f}) over 6 members"
    assert ranking.population_summary(final) == text
    assert ranking.population_summary(final, target=475) == text + "; 4 of 6 reached 475"
    assert final["return/shared"] == pytest.approx(median)  # the report's own median agrees
    assert final["return_q25/shared"] == pytest.approx(q25) and final["return_q75/shared"] == pytest.approx(q75)
    missing = population_history([[480.0, NAN, 470.0]])[-1]
    assert ranking.population_summary(missing) == "median return 475.00 (IQR 472.50 to 477.50) over 2 of 3 members"
    assert ranking.population_summary(population_history([[NAN, NAN]])[-1]) == ""


def test_population_summary_per_team_and_with_the_best_setting():
    final = population_history([[(1.0, -1.0), (2.0, -2.0), (3.0, -3.0)]], policies=("taggers", "runners"))[-1]
    assert ranking.population_summary(final, target=-2.5) == (
        "returns taggers median 2.00 (IQR 1.50 to 2.50), runners median -2.00 (IQR -2.50 to -1.50) over 3 members; "
        "2 of 3 reached -2.5")
    swept = ranking.population_summary(population_history(TABLE, SWEEP)[-1])
    assert swept.startswith("median return 150.00 (IQR 120.00 to 190.00) over 5 of 6 members")
    assert swept.endswith("; best setting lr=0.0003 (mean 180.00 over 3 seeds)")
    # (before: "over 3 seeds" for a setting whose mean had two behind it)
    missing = ranking.population_summary(population_history([[100.0, 120.0, NAN, 200.0, NAN, 190.0]], SWEEP)[-1])
    assert missing.endswith("; best setting lr=0.0003 (mean 195.00 over 2 seeds of 3)")


def test_returns_text_of_a_population_says_the_median_and_the_member_count():
    final = population_history([[480.0, 500.0, 470.0, 500.0]])[-1]
    text = report.returns_text(final)
    assert text == ranking.population_summary(final)
    assert "median return 490.00" in text and "over 4 members" in text
    assert report.returns_text({"return/shared": 21.3, "mean_return": 21.3}) == "mean return 21.30"
    teams = {"return/taggers": 1.25, "return/runners": -1.25}
    assert report.returns_text(teams) == "returns taggers 1.25, runners -1.25"


def test_population_curves_are_medians_and_quartiles_over_the_members_at_each_report():
    table = [[NAN] * 4, [1.0, 2.0, NAN, 4.0], [3.0, 5.0, 6.0, 9.0]]
    curves = ranking.population_curves(population_history(table))
    assert (curves["num_members"], curves["swept"], curves["settings"]) == (4, [], 1)
    (curve,) = curves["curves"]
    assert curve["label"] == "policy median (4 members), IQR band" and curve["team"] == "shared"
    assert curve["steps"] == [2000, 3000]  # the report where no member has a value is skipped
    expected = [np.nanpercentile(row, [25, 50, 75]) for row in table[1:]]
    assert np.allclose(np.array([curve["q25"], curve["median"], curve["q75"]]).T, expected)
    assert curve["members"][2] == ([3000], [6.0]) and curve["members"][0] == ([2000, 3000], [1.0, 3.0])
    many = ranking.population_curves(population_history([[float(k) for k in range(9)]]))
    assert many["curves"][0]["members"] == {} and many["curves"][0]["median"] == [4.0]


def test_population_curves_of_a_sweep_are_per_setting_over_its_seeds():
    curves = ranking.population_curves(population_history(TABLE, SWEEP))
    assert curves["swept"] == ["lr"] and curves["settings"] == 2
    first, second = curves["curves"]
    assert (first["label"], first["key"], first["team"]) == ("lr=0.001", "mean_return", None)
    assert second["label"] == "lr=0.0003"
    assert first["steps"] == second["steps"] == [2000, 3000]
    assert first["median"] == [15.0, 110.0] and first["q25"] == [12.5, 105.0]
    assert second["median"] == [35.0, 190.0]
    assert second["q75"] == pytest.approx([np.percentile([40, 30, 35], 75), np.percentile([200, 150, 190], 75)])
    assert first["members"] == {} and second["members"] == {}


def pixels_near(path, rgb):
    from PIL import Image
    pixels = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int((np.abs(pixels - np.array(rgb)) <= 10).all(axis=-1).sum())


BLUE, ORANGE, RED = (31, 119, 180), (255, 127, 14), (214, 39, 40)


def test_plot_returns_draws_a_line_per_team_and_marks_a_frozen_one():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    history = [{"env_steps": 10, "return/taggers": 1.0, "return/runners": math.nan},
               {"env_steps": 20, "return/taggers": 2.0, "return/runners": -2.0}]
    report.plot_returns(ax, history, frozen=("runners",))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["taggers", "runners (frozen)"]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[1.0, 2.0], [-2.0]]
    plt.close(fig)


def test_plot_population_draws_bands_lines_and_a_legend_per_curve():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    fig, ax = plt.subplots()
    table = [[(1.0, -1.0), (2.0, -2.0), (4.0, -4.0)], [(3.0, -3.0), (5.0, -5.0), (6.0, -6.0)]]
    assert report.plot_population(ax, population_history(table, policies=("taggers", "runners"))) == "3 members"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["taggers median (3 members), IQR band",
                                                                  "runners median (3 members), IQR band"]
    lines = ax.get_lines()
    assert len(lines) == 2 * (1 + 3)  # per team its median and each member
    medians = [line for line in lines if line.get_linewidth() > 1]
    assert [to_rgb(line.get_color()) for line in medians] == [to_rgb("tab:red"), to_rgb("tab:blue")]
    assert list(medians[0].get_ydata()) == [2.0, 5.0] and list(medians[1].get_ydata()) == [-2.0, -5.0]
    assert all(line.get_alpha() == pytest.approx(0.4) for line in lines if line.get_linewidth() < 1)
    assert len(ax.collections) == 2 and ax.collections[0].get_alpha() == pytest.approx(0.25)
    ax.clear()
    report.plot_population(ax, population_history(table, policies=("taggers", "runners")), frozen=("runners",))
    assert ax.get_legend().get_texts()[1].get_text() == "runners median (3 members), IQR band (frozen)"
    ax.clear()
    assert report.plot_population(ax, population_history(TABLE, SWEEP)) == "6 members, 2 settings"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr=0.001", "lr=0.0003"]
    assert [to_rgb(line.get_color()) for line in ax.get_lines()] == [to_rgb("tab:blue"), to_rgb("tab:orange")]
    plt.close(fig)


@pytest.mark.parametrize("case", ["standalone", "population", "sweep", "teams"])
def test_plot_learning_curve_writes_a_png_for_each_kind_of_history(tmp_path, case):
    if case == "standalone":
        history = [{"iteration": t, "env_steps": 1000 * t, "env_steps_per_s": 6.0e5, "return/shared": 10.0 * t,
                    "mean_return": 10.0 * t} for t in range(1, 4)]
    elif case == "population":
        history = population_history([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 8.0, 9.0], [7.0, 9.0, 12.0, 15.0]])
    elif case == "sweep":
        history = population_history(TABLE, SWEEP)
    else:
        history = population_history([[(1.0, -1.0), (2.0, -2.0)], [(3.0, -3.0), (5.0, -5.0)]],
                                     policies=("taggers", "runners"))
    path = report.plot_learning_curve(history, tmp_path / case / "learning_curve.png", "cartpole ppo")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blue, orange, red = (pixels_near(path, c) for c in (BLUE, ORANGE, RED))
    assert blue > 100  # the single policy, the first setting or the runners
    assert (orange > 100) == (case == "sweep") and (red > 100) == (case == "teams")


def test_a_member_without_an_episode_in_the_last_window_is_ranked_by_its_latest_return():
    """Long episodes and a short log window leave a member's last mean return NaN: the ranking and
    the best member take each member's latest finite report, not NaN for all."""
    from workbench.learn.population import best_member, latest_report
    table = [[10.0, 20.0, 30.0, 5.0, 1.0, 2.0], [NAN, 50.0, NAN, NAN, 3.0, NAN]]
    history = population_history(table, SWEEP)
    assert best_member(history[-1]) == 1  # of the last report alone: member 1's 50 beats member 4's 3
    latest = latest_report(history)
    assert [m["mean_return"] for m in latest["members"]] == [10.0, 50.0, 30.0, 5.0, 3.0, 2.0]
    assert [m["iteration"] for m in latest["members"]] == [1, 2, 1, 1, 2, 1]
    assert best_member(history) == 1 and best_member(population_history([[7.0, 1.0], [NAN, 2.0]])) == 0
    rows = ranking.sweep_settings(latest)
    assert [(r["values"]["lr"], r["mean"], r["missing"]) for r in rows] == [(1e-3, 30.0, 0), (3e-4, 10 / 3, 0)]


def test_a_learning_curve_without_any_episode_says_so_and_warns_nothing(tmp_path):
    import warnings
    history = [{"iteration": t, "env_steps": 1000 * t, "env_steps_per_s": 6.0e5, "return/shared": NAN,
                "mean_return": NAN} for t in range(1, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = report.plot_learning_curve(history, tmp_path / "learning_curve.png", "acrobot ppo")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# two teams pulling against each other: taggers' returns rise where the runners' fall
TEAMS = [[(1.0, 0.0), (NAN, NAN), (5.0, -6.0), (2.0, 1.0)],
         [(4.0, -3.0), (3.0, -1.0), (NAN, NAN), (2.5, 0.5)]]
TEAM_SWEEP = [{"lr": 1e-3}] * 2 + [{"lr": 3e-4}] * 2


def test_a_population_ranks_and_picks_its_best_member_by_its_rank_by(tmp_path):
    """rank_by (recorded in each population report) decides the settings' order, the best member,
    each member's latest finite entry, the table's and CSV's columns and the sweep's curves."""
    from workbench.learn.population import best_member, latest_report
    policies = ("taggers", "runners")
    by_mean = population_history(TEAMS, TEAM_SWEEP, policies)
    by_taggers = population_history(TEAMS, TEAM_SWEEP, policies, rank_by="return/taggers")
    assert by_mean[-1]["rank_by"] == "mean_return" and by_taggers[-1]["rank_by"] == "return/taggers"
    # member 2 has no episode in the last window: its latest finite entry is the first report's
    assert [m["return/taggers"] for m in latest_report(by_taggers)["members"]] == [4.0, 3.0, 5.0, 2.5]
    assert best_member(by_mean) == 3 and best_member(by_taggers) == 2  # mean returns 0.5, 1.0, -0.5, 1.5
    rows = ranking.sweep_settings(latest_report(by_taggers))
    assert [(r["key"], r["values"]["lr"], r["mean"], r["best_member"], r["best_value"]) for r in rows] == [
        ("return/taggers", 3e-4, 3.75, 2, 5.0), ("return/taggers", 1e-3, 3.5, 0, 4.0)]
    assert [r["values"]["lr"] for r in ranking.sweep_settings(latest_report(by_mean))] == [1e-3, 3e-4]
    assert [r["mean"] for r in ranking.sweep_settings(latest_report(by_taggers), key="mean_return")] == [0.75, 0.5]
    assert "return/taggers mean ± std" in ranking.ranking_text(rows).splitlines()[0]
    path = ranking.write_ranking_csv(rows, tmp_path / "ranking.csv")
    assert path.read_text().splitlines()[0] == ("rank,lr,members,missing,return/taggers_mean,return/taggers_std,"
                                                "return/taggers_stderr,return/taggers_ci95,episodes,oldest_iteration,"
                                                "best_member,best_return/taggers,ranked_by")
    assert ranking.population_summary(latest_report(by_taggers)).endswith(
        "; best setting lr=0.0003 (return/taggers mean 3.75 over 2 seeds)")
    curves = ranking.population_curves(by_taggers)["curves"]
    assert [c["label"] for c in curves] == ["lr=0.001 (return/taggers)", "lr=0.0003 (return/taggers)"]
    assert curves[0]["median"][-1] == 3.5  # the setting's members' taggers' returns at the last report


def test_a_rank_by_with_a_minus_ranks_the_lowest_first(tmp_path):
    """rank_by "-NAME": the settings' order, each setting's best member, the population's best member
    and the summary all take the lowest value of NAME as the best; the table says so."""
    from workbench.learn.population import best_member, latest_report
    policies = ("taggers", "runners")
    lowest = population_history(TEAMS, TEAM_SWEEP, policies, rank_by="-return/runners")
    highest = population_history(TEAMS, TEAM_SWEEP, policies, rank_by="return/runners")
    # the members' latest runners' returns: -3.0, -1.0, -6.0, 0.5
    assert best_member(lowest) == 2 and best_member(highest) == 3
    rows = ranking.sweep_settings(latest_report(lowest))
    assert [(r["key"], r["values"]["lr"], r["mean"], r["best_member"], r["best_value"]) for r in rows] == [
        ("return/runners", 3e-4, -2.75, 2, -6.0), ("return/runners", 1e-3, -2.0, 0, -3.0)]
    assert [r["values"]["lr"] for r in ranking.sweep_settings(latest_report(highest))] == [1e-3, 3e-4]
    assert "return/runners (lowest first) mean ± std" in ranking.ranking_text(rows).splitlines()[0]
    written = ranking.write_ranking_csv(rows, tmp_path / "r.csv").read_text().splitlines()
    assert written[0].endswith("return/runners_mean,return/runners_std,return/runners_stderr,return/runners_ci95,"
                               "episodes,oldest_iteration,best_member,best_return/runners,ranked_by")
    assert all(line.endswith(",-return/runners") for line in written[1:])  # the order, for a reader of the csv alone
    assert ranking.population_summary(latest_report(lowest)).endswith(
        "; best setting lr=0.0003 (return/runners mean -2.75 over 2 seeds, the lowest ranking first)")
    assert [c["label"] for c in ranking.population_curves(lowest)["curves"]] == [
        "lr=0.001 (return/runners)", "lr=0.0003 (return/runners)"]


def test_a_setting_of_one_member_shows_its_value_without_a_spread_and_says_one_seed():
    final = population_history([[10.0, 30.0]], [{"lr": 1e-3}, {"lr": 3e-4}])[-1]
    lines = ranking.ranking_text(ranking.sweep_settings(final)).splitlines()
    assert lines[1].split()[:4] == ["1", "0.0003", "1", "30.00"] and "±" not in lines[1] + lines[2]
    assert ranking.population_summary(final).endswith("; best setting lr=0.0003 (mean 30.00 over 1 seed)")


def test_a_run_closing_on_members_latest_values_says_from_which_iteration(tmp_path, capsys):
    """Before: a population whose last window held no episode end printed its members' earlier values
    as if they were the last iteration's (a single run's line said "the last reported, at iteration N")."""
    import workbench as wb
    trainer, result = wb.train("cartpole", num_envs=2, seeds=2, rollout_length=4, log_every=1, total_env_steps=240,
                               run_dir=str(tmp_path / "run"), progress=False)
    assert all(m["mean_return"] != m["mean_return"] for m in result.history[-1]["members"])  # NaN: no end
    from workbench.learn.population import latest_report
    oldest = min(m["iteration"] for m in latest_report(trainer.history)["members"])
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("stopped by")][-1]
    assert oldest < 30 and line.endswith(f"over 2 members (each member's latest value, the oldest from iteration "
                                         f"{oldest})")
