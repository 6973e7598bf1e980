"""A run folder holds one run at a time: a second process is refused while the first trains in it,
and the folder is free again once that process ends, however it ends. A run_dir that cannot be a
folder is named before anything compiles; a run that fails first leaves no empty folder."""
import os
import signal
import subprocess
import sys

import pytest

import workbench as wb
from workbench import cli
from workbench.learn import run_lock, trainer as trainer_module
from workbench.learn.config import ConfigError

SMALL = ["--target", "cpu", "--num-envs", "8", "--rollout-length", "8", "--total-env-steps", "128",
         "--set", "update_epochs=1", "hidden_sizes=[8]", "cpu_threads=1", "progress=false"]

HOLDER = ("import sys, time\nfrom workbench.learn import run_lock\nrun_lock.claim(sys.argv[1])\n"
          "print('held', flush=True)\ntime.sleep(120)\n")


@pytest.fixture
def held_elsewhere(tmp_path):
    """(folder, process): another process holding the folder's lock, as a run training there does."""
    folder = tmp_path / "busy"
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    yield folder, process
    process.kill()
    process.wait()


def test_a_second_run_into_a_folder_in_use_is_refused(held_elsewhere, capsys, monkeypatch):
    folder, process = held_elsewhere
    monkeypatch.setattr(trainer_module, "make_trainer", lambda *a, **k: pytest.fail("compiled before refusing"))
    assert cli.main(["train", "cartpole", "--run-dir", str(folder), *SMALL]) == 2
    assert f"run folder '{folder}' is in use: another process is training in it now" in capsys.readouterr().err
    with pytest.raises(run_lock.RunFolderInUseError, match="wait for that run to end"):
        wb.train("cartpole", run_dir=str(folder), target="cpu")
    assert not any(folder.iterdir()), "the refused runs wrote nothing"
    process.send_signal(signal.SIGKILL)  # the holder dies without a word: the OS frees the folder
    process.wait()
    monkeypatch.undo()
    assert cli.main(["train", "cartpole", "--run-dir", str(folder), *SMALL]) == 0
    assert (folder / "checkpoint.pt").is_file() and not run_lock.held(folder), "released when the run returned"


def test_a_resume_into_a_folder_in_use_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "cartpole", "--run-dir", str(run), *SMALL]) == 0
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        assert cli.main(["train", "--resume", str(run), "--total-env-steps", "256"]) == 2
        assert "is in use" in capsys.readouterr().err
    finally:
        process.kill()
        process.wait()
    assert cli.main(["train", "--resume", str(run), "--total-env-steps", "256"]) == 0


def test_two_new_runs_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("time.strftime", lambda fmt: "20261129-010203")
    first, second = (run_lock.new_folder("runs/cartpole-20261129-010203") for _ in range(2))
    assert (first, second) == ("runs/cartpole-20261129-010203", "runs/cartpole-20261129-010203-2")
    assert os.path.isdir(first) and os.path.isdir(second)


@pytest.mark.parametrize("make, words", [
    (lambda p: (p.write_text("x"), p)[1], "is a file, not a folder"),
    (lambda p: (p.write_text("x"), p / "run")[1], "cannot be made \\(Not a directory\\)"),
])
def test_a_run_dir_that_cannot_be_a_folder_is_named_before_the_compile(tmp_path, monkeypatch, make, words):
    path = make(tmp_path / "target")
    monkeypatch.setattr(trainer_module, "make_trainer", lambda *a, **k: pytest.fail("compiled before refusing"))
    with pytest.raises(ConfigError, match=f"run_dir '{path}' {words}"):
        wb.train("cartpole", run_dir=str(path), target="cpu")


def test_a_run_that_fails_before_writing_leaves_no_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def fail(*args, **kwargs):
        raise wb.EnvCompileError("no kernel today")
    monkeypatch.setattr(trainer_module, "make_trainer", fail)
    with pytest.raises(wb.EnvCompileError):
        wb.train("cartpole", target="cpu")  # a default folder, made when named
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    kept = tmp_path / "kept"
    (kept / "notes.txt").parent.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(wb.EnvCompileError):
        wb.train("cartpole", target="cpu", run_dir=str(kept))
    assert (kept / "notes.txt").read_text() == "mine" and not run_lock.held(kept)
