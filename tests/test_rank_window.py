"""rank_window: a population's members ranked by the mean of their values over the last share of training,
not by one report's (against means computed here from the reports), in the ranking, the best member and
the closing line."""
import math

import pytest

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn.population import best_member, final_ranking, latest_report, member_label


def history():
    """Two members over 10 reports (100 env-steps apart): member 0 at 100 until its last report's 300,
    member 1 at 200 throughout but NaN (no episode ended) in the last report."""
    reports = []
    for i in range(1, 11):
        zero = 300.0 if i == 10 else 100.0
        one = math.nan if i == 10 else 200.0
        members = [{"member": 0, "seed": 0, "iteration": i, "env_steps": 100 * i, "mean_return": zero,
                    "return/shared": zero, "episodes": 4.0, "lr": 0.001},
                   {"member": 1, "seed": 1, "iteration": i, "env_steps": 100 * i, "mean_return": one,
                    "return/shared": one, "episodes": 0.0 if i == 10 else 2.0, "lr": 0.003}]
        reports.append({"iteration": i, "env_steps": 100 * i, "rank_by": "mean_return", "members": members})
    return reports


def test_the_window_means_each_members_values_over_the_last_share_of_training():
    last = latest_report(history())  # (member 0's latest value, member 1's latest finite one)
    assert [m["mean_return"] for m in last["members"]] == [300.0, 200.0] and best_member(last) == 0
    windowed = latest_report(history(), 0.5)  # (reports at 500 .. 1000 env-steps: six of member 0, five of 1)
    zero, one = windowed["members"]
    assert zero["mean_return"] == pytest.approx((5 * 100 + 300) / 6) and zero["window_reports"] == 6
    assert zero["return/shared"] == zero["mean_return"] and zero["episodes"] == 24
    assert one["mean_return"] == 200.0 and one["window_reports"] == 5 and one["lr"] == 0.003
    assert best_member(history(), 0.5) == 1
    rows, text = final_ranking(history(), "runs/x", 0.5)
    assert [row["values"]["lr"] for row in rows] == [0.003, 0.001]
    assert "the mean of its values in its reports of the last 50% of training (from 500 env-steps on)" in text


def test_a_population_ranks_and_picks_its_best_over_the_window(tmp_path):
    run = tmp_path / "run"
    config = wb.PPOConfig(env="cartpole", num_envs=8, rollout_length=16, num_minibatches=2, update_epochs=1,
                          target="cpu", seeds=2, sweep={"lr": [1e-3, 3e-3]}, rank_window=0.5, log_every=1,
                          total_env_steps=8 * 16 * 6, cpu_threads=1, run_dir=str(run))
    trainer, result = wb.train(config, progress=False)
    windowed = latest_report(trainer.history, 0.5)
    rows, _ = final_ranking(trainer.history, run, 0.5)
    for row in rows:  # (each setting's mean over its seeds of the members' window means)
        group = [m["mean_return"] for m in windowed["members"] if m["lr"] == row["values"]["lr"]]
        assert row["mean"] == pytest.approx(sum(group) / len(group))
    best = wb.load_policy(run, member="best")
    assert best.member_of["member"] == best_member(trainer.history, 0.5)
    assert "over the last 50% of training" in member_label(best.member_of)
    assert (run / "ranking.csv").exists()


def test_a_window_outside_zero_to_one_is_refused_by_name():
    with pytest.raises(cfg.ConfigError, match=r"rank_window must be in \[0, 1\] \(a share of training\)"):
        wb.PPOConfig(rank_window=1.5)
