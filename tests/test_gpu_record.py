"""bench/gpu_record.py: the GPU suite's record, written from pytest's output, and its status line."""
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_record", ROOT / "bench" / "gpu_record.py")
gpu_record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_record)

LOG = """\
........F.....s.....F
=================================== FAILURES ===================================
___________________ test_c_rng_equals_python_rng ___________________
E   AttributeError: module 'workbench' has no attribute 'rng'
=========================== short test summary info ============================
FAILED tests/test_cuda_c.py::test_c_rng_equals_python_rng - AttributeError: module 'workbench' has no attr...
FAILED tests/test_training.py::test_ppo_learns_cartpole_far_above_random - assert 120.0 > 400
ERROR tests/test_tag.py::test_setup - RuntimeError: boom
2 failed, 171 passed, 1 skipped, 1 error, 3 warnings in 812.40s (0:13:32)
"""


def test_parse_pytest_counts_and_failing_names():
    result = gpu_record.parse_pytest(LOG)
    assert (result["passed"], result["failed"], result["skipped"], result["errors"]) == (171, 2, 1, 1)
    assert result["failing"] == ["tests/test_cuda_c.py::test_c_rng_equals_python_rng",
                                 "tests/test_training.py::test_ppo_learns_cartpole_far_above_random",
                                 "tests/test_tag.py::test_setup"]


def test_write_puts_the_record_in_every_out(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text(LOG)
    outs = [tmp_path / "out" / "gpu-record.md", tmp_path / "docs" / "gpu-record.md"]
    gpu_record.main(["write", str(log), "--commit", "abc1234", "--device", "NVIDIA H100",
                     *sum((["--out", str(o)] for o in outs), [])])
    for out in outs:
        text = out.read_text()
        assert "- commit: abc1234" in text and "- device: NVIDIA H100" in text
        assert "171 passed, 2 failed, 1 skipped, 1 errors" in text
        assert "  - tests/test_cuda_c.py::test_c_rng_equals_python_rng" in text
    assert gpu_record.read_commit(outs[0]) == "abc1234"


def test_a_cut_off_run_says_so(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text("....F..\n")
    gpu_record.main(["write", str(log), "--commit", "abc", "--out", str(tmp_path / "r.md")])
    assert "no pytest summary line found" in (tmp_path / "r.md").read_text()


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture()
def repo(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "envs").mkdir()
    (tmp_path / "README.md").write_text("x")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_status_counts_gpu_commits_after_the_record(repo):
    record = repo / "docs" / "gpu-record.md"
    assert "is missing" in gpu_record.status(record)
    record.write_text(gpu_record.render("none", "none", "none", gpu_record.parse_pytest("")))
    assert "names no commit" in gpu_record.status(record)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
    record.write_text(gpu_record.render(head.stdout.strip(), "H100", "today", gpu_record.parse_pytest(LOG)))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "record")
    assert "0 commit(s) touching kernels" in gpu_record.status(record)
    (repo / "envs" / "new_env.py").write_text("x")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "an env")
    (repo / "README.md").write_text("y")
    _git(repo, "commit", "-qam", "docs only")
    line = gpu_record.status(record)
    assert f"is for commit {head.stdout.strip()} (171 passed, 2 failed" in line
    assert "1 commit(s) touching kernels" in line


def test_status_of_a_commit_missing_from_the_clone(repo):
    record = repo / "docs" / "gpu-record.md"
    record.write_text(gpu_record.render("0123abc", "H100", "today", gpu_record.parse_pytest(LOG)))
    assert "not in this clone's history" in gpu_record.status(record)


def test_the_shipped_record_names_a_run_and_status_reads_it():
    record = ROOT / "docs" / "gpu-record.md"
    commit = gpu_record.read_commit(record)
    assert commit is not None and len(commit) >= 7, "docs/gpu-record.md names no commit"
    counts = re.search(r"^- result: (\d+) passed, (\d+) failed", record.read_text(), re.M)
    assert counts is not None and int(counts.group(1)) > 0, "docs/gpu-record.md holds no run's counts"
    assert gpu_record.status(record).startswith(f"GPU record: docs/gpu-record.md is for commit {commit} (")
