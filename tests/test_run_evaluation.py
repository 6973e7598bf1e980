"""Evaluating a run folder (wb.evaluate_run, `python -m workbench evaluate`): every member of a
population at once, each member's numbers its own (as member k alone with seed + k), a table and a CSV
a results section can use, and a sweep's settings ranked with their intervals over seeds."""
import csv
import json
import math

import numpy as np
import pytest

import workbench as wb
from workbench import cli
from workbench.learn import ranking


@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("sweep") / "run"
    assert cli.main(["train", "cartpole", "--target", "cpu", "--seeds", "2", "--sweep", "lr=1e-3,3e-4",
                     "--num-envs", "8", "--set", "rollout_length=16", "num_minibatches=2", "--total-env-steps",
                     "1024", "--run-dir", str(run)]) in (0, 1)
    return run


def test_every_member_evaluated_at_once_equals_each_member_alone(population_run):
    """Sampled actions and random play come from one stream per member (before: torch's one global
    stream over all members' rows, so a member's numbers depended on the others)."""
    together = wb.evaluate_run(population_run, member="all", num_envs=4, seed=11)
    for label in ("trained", "random"):
        members = together[label]["members"]
        assert [m["member"] for m in members] == [0, 1, 2, 3] and [m["seed"] for m in members] == [0, 1, 2, 3]
        assert [m["lr"] for m in members] == [1e-3, 1e-3, 3e-4, 3e-4]
        assert [m["evaluation_seed"] for m in members] == [11, 12, 13, 14]
    for k in range(4):
        alone = wb.evaluate_run(population_run, member=k, num_envs=4, seed=11 + k)
        assert alone["trained"]["settings"]["member"].startswith(f"member {k} of 4")
        for label in ("trained", "random"):
            assert alone[label]["return/shared"] == together[label]["members"][k]["return/shared"]
            assert alone[label]["episodes"] == together[label]["members"][k]["episodes"] == 4


def test_cli_evaluates_every_member_into_a_table_a_csv_and_strict_json(population_run, tmp_path, capsys):
    out_csv, out_json = tmp_path / "members.csv", tmp_path / "members.json"
    assert cli.main(["evaluate", str(population_run), "--member", "all", "--num-envs", "4", "--seed", "11",
                     "--csv", str(out_csv), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "4 replicas a member x 1 episode(s) each" in printed and "member k: seed + k" in printed
    assert "trained, every member:" in printed and "random, every member:" in printed
    assert "sweep settings ranked by the evaluation" in printed and "95% interval" in printed
    with out_csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["label"], r["member"], r["lr"]) for r in rows[:4]] == [
        ("trained", "0", "0.001"), ("trained", "1", "0.001"), ("trained", "2", "0.0003"), ("trained", "3", "0.0003")]
    assert {"seed", "evaluation_seed", "episodes", "return/shared", "return/shared_stderr"} <= set(rows[0])
    saved = json.loads(out_json.read_text(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert saved["trained"]["settings"]["member"] == "every member (4)"
    assert [m["member"] for m in saved["trained"]["members"]] == [0, 1, 2, 3]
    mean = sum(float(r["return/shared"]) for r in rows[:4]) / 4
    assert saved["trained"]["return/shared"] == pytest.approx(mean)
    for member in saved["trained"]["members"]:  # every episode's values, each member's own
        returns, lengths = member["per_episode"]["return/shared"], member["per_episode"]["episode_length"]
        assert len(returns) == len(lengths) == member["episodes"] == 4
        assert sum(returns) / 4 == pytest.approx(member["return/shared"])
        assert returns == lengths  # (CartPole: +1 a step)
    assert not [k for k in rows[0] if "per_episode" in k] and "per_episode" not in printed  # (a statistic's columns)


def test_cli_evaluates_a_single_run_into_strict_json_with_every_episode(population_run, tmp_path, capsys):
    """One member exported as a run of its own: the table as ever, the JSON with each episode's values."""
    member = tmp_path / "member"
    assert cli.main(["export-member", str(population_run), "--member", "1", "--out", str(member)]) == 0
    out_json = tmp_path / "one.json"
    assert cli.main(["evaluate", str(member), "--num-envs", "3", "--episodes", "2", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "return/shared" in printed and "per_episode" not in printed
    saved = json.loads(out_json.read_text(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    for label in ("trained", "random"):
        lengths = saved[label]["per_episode"]["episode_length"]
        assert len(lengths) == saved[label]["episodes"] == 6
        assert sum(lengths) / 6 == pytest.approx(saved[label]["episode_length"])


def test_per_episode_values_are_each_counted_episode_in_replica_order(population_run):
    """Two episodes in each of three replicas: six values a statistic, replica 0's two first; their mean
    is the report's; without per_episode the report is the same, without the lists."""
    trainer = wb.load_policy(population_run, member=1, num_envs=3)
    from workbench.learn.evaluate import evaluate
    report = evaluate(trainer, episodes=2, seed=5, per_episode=True)
    lengths = report["per_episode"]["episode_length"]
    assert len(lengths) == report["episodes"] == 6 and all(v == int(v) >= 1 for v in lengths)
    assert sum(lengths) / 6 == pytest.approx(report["episode_length"])
    plain = evaluate(trainer, episodes=2, seed=5)
    assert "per_episode" not in plain and plain["episode_length"] == report["episode_length"]
    first = evaluate(trainer, episodes=1, seed=5, per_episode=True)["per_episode"]["episode_length"]
    assert first == lengths[0::2]  # (the same starts: each replica's first episode)


def test_a_settings_interval_is_the_t_interval_of_its_seeds_mean():
    members = [{"member": k, "lr": 0.1, "mean_return": v, "episodes": 3, "iteration": 9}
               for k, v in enumerate((1.0, 2.0, 3.0))]
    members.append({"member": 3, "lr": 0.2, "mean_return": 5.0, "episodes": 2, "iteration": 7})
    rows = ranking.sweep_settings({"members": members, "rank_by": "mean_return"}, ["lr"])
    top, single = rows
    assert top["values"] == {"lr": 0.2} and math.isnan(top["ci95"]) and top["episodes"] == 2
    assert single["std"] == pytest.approx(1.0) and single["stderr"] == pytest.approx(1 / math.sqrt(3))
    assert single["ci95"] == pytest.approx(4.303 / math.sqrt(3)) and single["episodes"] == 9
    text = ranking.ranking_text(rows, iteration=9)
    assert f"{2 - 4.303 / math.sqrt(3):.2f} to {2 + 4.303 / math.sqrt(3):.2f}" in text
    assert "the oldest from iteration 7, of 9" in text  # (member 3's value predates the report)
    assert "oldest" not in ranking.ranking_text(rows[1:], iteration=9)
    assert ranking.t975(40) == pytest.approx(2.021, abs=1e-3) and ranking.t975(100) == pytest.approx(1.984, abs=1e-3)


def test_one_member_evaluated_is_named_in_its_csv_and_replay_refuses_all(population_run, tmp_path, capsys):
    out_csv = tmp_path / "one.csv"
    assert cli.main(["evaluate", str(population_run), "--member", "2", "--num-envs", "2", "--random",
                     "--csv", str(out_csv)]) == 0
    with out_csv.open(newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert (row["member"], row["seed"], row["lr"]) == ("2", "2", "0.0003")
    assert cli.main(["evaluate", str(population_run), "--member", "9"]) == 2
    assert ("member (--member) must be an index in 0..3 or 'best' ('all' where every member plays at once: evaluate, "
            "load_policy)") in capsys.readouterr().err
    assert cli.main(["evaluate", str(population_run), "--env-param", "max_steps=[7"]) == 2
    capsys.readouterr()
    from workbench.learn.config import ConfigError
    with pytest.raises(ConfigError, match="replay plays one member"):
        wb.replay(population_run, member="all")
    with pytest.raises(ConfigError, match="num_envs must be >= 1, got 0"):
        wb.load_policy(population_run, num_envs=0)


def test_members_rank_by_a_statistic_training_renames():
    """Before: rank_by survival (training's name for Tag's runner_survival) found no such key in the
    evaluation's reports and ranked by return instead, silently."""
    from types import SimpleNamespace
    from workbench.learn.run_evaluation import learning_value, members_ranked
    reports = [{"member": k, "seed": k, "lr": lr, "return/taggers": ret, "runner_survival": survival,
                "stderr": {}} for k, (lr, ret, survival) in enumerate([(1e-3, 5.0, 0.2), (3e-3, 1.0, 0.9)])]
    assert learning_value(reports[1], "-survival") == ("survival", 0.9)
    config = SimpleNamespace(rank_by="survival", frozen=(), sweep={"lr": [1e-3, 3e-3]})
    rows = members_ranked({"members": reports}, config)
    assert [row["values"]["lr"] for row in rows] == [3e-3, 1e-3] and rows[0]["key"] == "survival"


def test_identical_episodes_have_no_standard_error():
    """Before: the means were summed in float32 beside float64 squares, so episodes that all return
    5.9999976 but end at different steps reported a standard error of about 1e-4."""
    import textwrap
    from workbench.learn.evaluate import evaluate
    from workbench.learn.trainer import make_trainer
    wb.register("constant_return", textwrap.dedent('''
        from workbench.envdef import Box, Discrete, per_env
        from workbench.rng import uniform
        NUM_AGENTS = 1
        MAX_STEPS = 50
        OBSERVATION = Box(shape=(1,))
        ACTION = Discrete(2)
        STATE = dict(x=per_env())

        def reset(env, x):
            x[env] = 0.0

        def step(env, agent, key, x, reward, terminated):
            end = uniform(key, 0) < 0.3
            reward[env, agent] = 5.9999976 if end else 0.0
            terminated[env] = 1 if end else 0

        def observe(env, agent, x, obs):
            obs[env, agent, 0] = x[env]
    '''))
    trainer = make_trainer(wb.PPOConfig(env="constant_return", num_envs=64, rollout_length=8, target="cpu"))
    report = evaluate(trainer, episodes=3)
    assert report["episodes"] == 192 and report["return/shared"] == float(np.float32(5.9999976))
    assert report["stderr"]["return/shared"] == 0.0 and report["stderr"]["episode_length"] > 0.0


def test_wb_evaluate_takes_a_run_folder_or_a_loaded_trainer(population_run):
    by_run = wb.evaluate(population_run, member=1, num_envs=4, seed=5, random_policies=())
    by_path_text = wb.evaluate(str(population_run), member=1, num_envs=4, seed=5, random_policies=())
    by_trainer = wb.evaluate(wb.load_policy(population_run, member=1, num_envs=4), seed=5, random_policies=())
    assert by_run["trained"]["return/shared"] == by_path_text["trained"]["return/shared"] \
        == by_trainer["trained"]["return/shared"]
    assert list(by_run) == ["trained"] and by_run["trained"]["settings"]["seed"] == 5


def test_wb_evaluate_stays_the_function_after_its_module_is_imported():
    import workbench.learn.evaluate  # noqa: F401  (the module's own name is workbench.learn.evaluate)
    assert callable(wb.evaluate) and wb.evaluate.__module__ == "workbench"
