"""The training progress bar: returns carried over iterations in which no episode ended, one return
per team, and the time-to-target estimate."""
import io
import math

from workbench.learn.progress import ProgressBar


def _post(bar):
    return dict(item.split("=", 1) for item in bar.bar.postfix.split(", "))


def test_an_iteration_without_an_ended_episode_keeps_the_last_return():
    """Before: `return=-` whenever no episode ended in the iteration (DDPG's short iterations)."""
    bar = ProgressBar(10, file=io.StringIO())
    bar(1, {"mean_return": math.nan, "env_steps_per_s": 1500.0})
    assert _post(bar) == {"steps/s": "1.5k", "return": "-"}  # nothing ended yet
    bar(2, {"mean_return": -812.25, "env_steps_per_s": 2.5e6})
    bar(3, {"mean_return": math.nan, "env_steps_per_s": 2.5e6})
    assert _post(bar) == {"steps/s": "2.5M", "return": "-812.2"}
    bar.close()


def test_teams_get_one_return_each():
    bar = ProgressBar(10, file=io.StringIO())
    bar(1, {"mean_return": 0.0, "return/taggers": 3.0, "return/runners": math.nan})
    bar(2, {"mean_return": 0.0, "return/taggers": math.nan, "return/runners": -3.0})
    post = _post(bar)
    assert (post["return taggers"], post["return runners"]) == ("3", "-3") and "return" not in post
    bar.close()


def test_a_frozen_team_s_return_is_marked():
    bar = ProgressBar(10, file=io.StringIO(), frozen=("runners",))
    bar(1, {"mean_return": 3.0, "return/taggers": 3.0, "return/runners": -3.0})
    assert _post(bar)["return runners (frozen)"] == "-3" and "return taggers" in _post(bar)
    bar.close()


def test_time_to_target_follows_the_recent_slope():
    bar = ProgressBar(100, target_return=100.0, file=io.StringIO())
    assert bar.eta_to_target() is None
    bar.recent.extend([(0.0, 10.0), (1.0, 20.0), (2.0, 30.0)])
    assert math.isclose(bar.eta_to_target(), 7.0)  # 70 to go at 10 a second
    bar.recent.append((3.0, 25.0))
    assert math.isclose(bar.eta_to_target(), (100.0 - 25.0) / 5.0)
    bar.recent.extend([(4.0, 20.0), (5.0, 15.0), (6.0, 10.0), (7.0, 5.0), (8.0, 1.0)])
    assert bar.eta_to_target() is None  # falling: no estimate
    bar.recent.append((9.0, 120.0))
    assert bar.eta_to_target() == 0.0
    bar.close()


def test_time_to_target_follows_the_return_the_stop_waits_for():
    """The run stops when every policy of every member reaches the target: before, a population whose
    median had reached it (or one team of two) read "to target=~0s" while it trained on."""
    bar = ProgressBar(100, target_return=100.0, file=io.StringIO())
    for t, low in enumerate((10.0, 20.0, 30.0)):
        bar(t + 1, {"mean_return": 150.0, "return/shared": 150.0,
                    "members": [{"return/shared": 150.0}, {"return/shared": low}, {"return/shared": math.nan}]})
    assert [r for _, r in bar.recent] == [10.0, 20.0, 30.0]
    assert bar.eta_to_target() > 0  # (before: the median, 150, gave 0)
    bar(4, {"mean_return": 50.0, "return/taggers": 120.0, "return/runners": -20.0})
    assert bar.recent[-1][1] == -20.0
    bar.close()


def test_a_bar_written_to_a_log_file_updates_every_30_s_and_on_a_terminal_ten_times_a_second():
    """Before: ten updates a second went into a job's log (25 MB over a night under nohup)."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, interval in ((io.StringIO(), 30.0), (Terminal(), 0.1)):
        bar = ProgressBar(10, file=stream)
        assert bar.bar.mininterval == interval
        bar.close()


def test_a_bar_in_a_kernel_without_widgets_stays_interactive(monkeypatch):
    """Jupyter without ipywidgets (or qtconsole, Spyder): tqdm's plain bar on the kernel's stream, no terminal."""
    import sys
    import types
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", fake)
    bar = ProgressBar(10, file=io.StringIO())
    assert bar.bar.mininterval == 0.1
    bar.close()
