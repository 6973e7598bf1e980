"""Signals stop a run as its sender asks, after the iteration and its checkpoint: Ctrl-C in a script
that calls wb.train stops the script (a KeyboardInterrupt naming the checkpoint), SIGTERM ends the
process (a scheduler's preemption is not a success), and the CLI exits 130 or 143."""
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = """
import os, signal, sys
import workbench as wb
sig = getattr(signal, sys.argv[2])
def press(iteration, metrics):
    if iteration == 2:
        os.kill(os.getpid(), sig)
    return True
for k in range(2):  # a loop over runs: a signal ends the loop, not only the run it came in
    print("run", k, flush=True)
    wb.train("cartpole", run_dir=f"{sys.argv[1]}/r{k}", target="cpu", num_envs=8, rollout_length=8,
             total_env_steps=10**6, hidden_sizes=[8], cpu_threads=1, log_every=1, progress=False, callback=press)
print("after the loop", flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_script_that_trains_in_a_loop(tmp_path, sig):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), sig], capture_output=True, text=True,
                         timeout=300)
    assert "run 0" in out.stdout and "run 1" not in out.stdout and "after the loop" not in out.stdout, out.stdout
    assert f"{sig}: stopping after this iteration and saving a checkpoint" in out.stderr
    assert (tmp_path / "r0" / "checkpoint.pt").is_file()
    if sig == "SIGINT":
        assert out.returncode == -signal.SIGINT  # (Python's exit on an uncaught KeyboardInterrupt)
        assert (f"KeyboardInterrupt: interrupted after 2 iterations: checkpoint saved to {tmp_path}/r0/checkpoint.pt; "
                f"continue with wb.train(resume='{tmp_path}/r0')") in out.stderr
    else:
        assert out.returncode == -signal.SIGTERM, out.stderr  # the process ends by the signal, as it was sent


def test_the_cli_exits_143_on_sigterm(tmp_path):
    job = subprocess.Popen([sys.executable, "-m", "workbench", "train", "cartpole", "--run-dir", str(tmp_path / "r"),
                            "--target", "cpu", "--num-envs", "8", "--rollout-length", "8", "--total-env-steps",
                            "100000000", "--set", "hidden_sizes=[8]", "cpu_threads=1", "log_every=1",
                            "progress=false"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "r" / "metrics.csv").exists():  # a first report: the handlers are in place
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    _out, err = job.communicate(timeout=120)
    assert job.returncode == 143, err
    assert "interrupted after" in err and "--resume" in err and (tmp_path / "r" / "checkpoint.pt").is_file()
