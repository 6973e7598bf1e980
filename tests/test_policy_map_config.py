"""The policy map as a config field (YAML, --set, Python): AGENT_GROUPS names resolved to agent ids, kept in
the run folder's config.yaml and used again by --resume and evaluate; errors name the group and the fix."""
import subprocess
import sys

import pytest

import workbench as wb
from workbench.learn.config_env import check_before_compile
from workbench.learn.groups import PolicyMapError

TAG = dict(num_taggers=2, num_runners=3, episode_length=10)


def tag_config(**kw):
    return wb.A2CConfig(**{"env": "tag_continuous", "env_params": TAG, "num_envs": 4, "rollout_length": 4,
                           "target": "cpu", "cpu_threads": 1, **kw})


def test_group_names_and_ids_resolve_and_python_s_map_overrides():
    trainer = wb.make_trainer(tag_config(policies={"shared": ["taggers", "runners"]}))
    assert [(g.name, g.ids) for g in trainer.groups] == [("shared", [0, 1, 2, 3, 4])]
    mixed = wb.make_trainer(tag_config(policies={"a": ["taggers", 2], "b": [3, 4]}))
    assert [(g.name, g.ids) for g in mixed.groups] == [("a", [0, 1, 2]), ("b", [3, 4])]
    env = wb.make("tag_continuous", num_envs=4, target="cpu", **TAG)
    direct = wb.Trainer(env, tag_config(policies={"all": "runners", "taggers": "taggers"}))  # (a lone name)
    assert [(g.name, g.ids) for g in direct.groups] == [("all", [2, 3, 4]), ("taggers", [0, 1])]
    given = wb.make_trainer(tag_config(policies={"shared": ["taggers", "runners"]}), policies={"x": [0, 1, 2, 3, 4]})
    assert [g.name for g in given.groups] == ["x"]


@pytest.mark.parametrize("policies, words", [
    ({"shared": ["tagger", "runners"]}, ["policy 'shared' names group 'tagger'", "['runners', 'taggers']",
                                         "did you mean taggers?"]),
    ({"shared": ["taggers"]}, ["agents [2, 3, 4] belong to no policy"]),
    ({"x": {"a": 1}}, ["policy 'x' must list groups or agent ids"]),
])
def test_a_wrong_map_is_named_before_anything_compiles(policies, words):
    with pytest.raises(PolicyMapError) as info:
        wb.make_trainer(tag_config(policies=policies))
    for word in words:
        assert word in str(info.value)


def test_the_panel_s_checks_size_minibatches_by_the_config_s_map():
    ppo = wb.PPOConfig(env="tag_continuous", env_params=TAG, num_envs=4, rollout_length=4, num_minibatches=5,
                       target="cpu", policies={"shared": ["taggers", "runners"]})
    check_before_compile(ppo)  # 4 x 4 x 5 samples of one policy split in 5
    with pytest.raises(wb.WorkbenchError, match="policy .taggers."):
        check_before_compile(wb.PPOConfig(**{**ppo.__dict__, "policies": None}))  # (4 x 4 x 2 are not)


def test_the_cli_trains_resumes_and_evaluates_one_policy_over_both_teams(tmp_path):
    run = tmp_path / "run"
    common = ["--set", "progress=false", "--set", "cpu_threads=1"]
    train = [sys.executable, "-m", "workbench", "train", "tag_continuous", "--set", "algorithm=a2c", "--target", "cpu",
             "--run-dir", str(run), "--total-env-steps", "320", "--set", "num_envs=4",
             "--set", "policies={shared: [taggers, runners]}",
             "--set", "env_params={num_taggers: 2, num_runners: 3, episode_length: 10}", *common]
    subprocess.run(train, check=True, capture_output=True, text=True)
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"return/shared", "group_return/taggers", "group_return/runners"} <= set(header)
    assert "policies:\n  shared:\n  - taggers\n  - runners" in (run / "config.yaml").read_text()
    resumed = subprocess.run([sys.executable, "-m", "workbench", "train", "--resume", str(run), "--total-env-steps",
                              "640", *common], check=True, capture_output=True, text=True)
    assert "continuing" in resumed.stdout
    rows = (run / "metrics.csv").read_text().splitlines()
    assert rows[-1].split(",")[1] == "640" and "return/taggers" not in rows[0].split(",")
    evaluated = subprocess.run([sys.executable, "-m", "workbench", "evaluate", str(run), "--random", "shared"],
                               check=True, capture_output=True, text=True)
    assert "tag_rate" in evaluated.stdout
    lines = {line.split()[0]: line.split() for line in evaluated.stdout.splitlines() if line.strip()}
    taggers, runners = float(lines["group_return/taggers"][1]), float(lines["group_return/runners"][1])
    assert taggers != runners and taggers * runners <= 0  # (Tag: what the taggers win, the runners lose)
