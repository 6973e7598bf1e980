"""`python -m workbench demo` ends by listing what its run folder holds, read from the disk."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench import cli
from workbench.learn import runs
from workbench.notebook import render


@pytest.mark.parametrize("ffmpeg", [True, False], ids=["with-ffmpeg", "without-ffmpeg"])
def test_demo_lists_the_files_of_its_run_folder(tmp_path, monkeypatch, capsys, ffmpeg):
    def training(config, **kwargs):
        run_dir = Path(config.run_dir)
        run_dir.mkdir(parents=True)
        for name in ("config.yaml", "metrics.csv", "checkpoint.pt", "learning_curve.png"):
            (run_dir / name).write_text("x")
        return SimpleNamespace(), SimpleNamespace(stopped_by="target_return")

    def animation(trainer, path, **kwargs):
        path = Path(path).with_suffix(".html")
        path.write_text("<html></html>")
        if ffmpeg:
            path.with_suffix(".mp4").write_bytes(b"\0")
        return path

    monkeypatch.setattr(cli, "run_training", training)
    monkeypatch.setattr(render, "record_policy_animation", animation)
    run_dir = tmp_path / "demo"
    assert cli.main(["demo", "--target", "cpu", "--run-dir", str(run_dir)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    files = "checkpoint.pt, config.yaml, learning_curve.png, metrics.csv, policy.html"
    files += ", policy.mp4" if ffmpeg else ""
    assert last == f"run folder {run_dir}: {files}"


def test_run_folder_contents_marks_folders_and_an_empty_one(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics.csv").write_text("")
    assert runs.run_folder_contents(tmp_path) == f"run folder {tmp_path}: logs/, metrics.csv"
    assert runs.run_folder_contents(tmp_path / "absent") == f"run folder {tmp_path / 'absent'}: nothing"


def test_envs_lists_agents_spaces_and_what_each_env_is(capsys):
    from workbench.cli import main
    assert main(["envs"]) == 0
    listed = capsys.readouterr().out
    assert "(the rules of WarpDrive's TagGridWorld, with any number of runners)." in listed  # (whole summaries)
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:] if line.strip()}
    assert rows["cartpole"][1:4] == ["1", "Box(4,)", "Discrete(2)"] and "CartPole-v1" in rows["cartpole"][4]
    assert rows["tag_continuous"][1:3] == ["11", "Box(22,)"]
    assert main(["envs", "tag_grid"]) == 0
    out = capsys.readouterr().out
    assert "tag_grid: Box(6,) in [0, 1] observations, Discrete(5) actions, 11 agent(s)" in out
    assert "  num_taggers = 1" in out and "Tag on an integer grid" in out
    assert main(["envs", "tag_gird"]) == 2
    assert "did you mean 'tag_grid'?" in capsys.readouterr().err
