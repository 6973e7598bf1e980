import pytest

import workbench as wb
from conftest import tiny


@pytest.mark.parametrize("name", ["cartpole"])
def test_cpu_and_cuda_agree(name):
    report = wb.check_env(name, targets=("cpu", "cuda"), num_envs=tiny(1024, 3), steps=tiny(200, 12))
    assert report.targets == ("cpu", "cuda")
    assert "passed" in str(report)


def test_check_env_catches_a_target_that_disagrees(monkeypatch):
    original = wb.Env.step

    def corrupted(self, actions=None):
        out = original(self, actions)
        if self.target.name == "cuda":
            self.data["x_dot"][1] += 0.5
        return out

    monkeypatch.setattr(wb.Env, "step", corrupted)
    with pytest.raises(wb.ConsistencyError, match="'x_dot' differs between cpu and cuda after step 1"):
        wb.check_env("cartpole", targets=("cpu", "cuda"), num_envs=3, steps=3)


def test_check_report_keeps_the_largest_difference_per_array():
    """The report (and the magic's --verbose line, which prints it per array) is keyed by array name."""
    env = wb.make("cartpole", num_envs=4, target="cpu")
    report = wb.check_env("cartpole", targets=("cpu", "cpu"), num_envs=4, steps=20)
    floats = {name for name, tensor in env.store.items() if tensor.dtype.is_floating_point}
    assert set(report.max_abs_diff) == floats
    assert all(value == 0.0 for value in report.max_abs_diff.values())
    assert "theta: 0.00e+00" in str(report)


def test_check_env_seeds_replicas_in_blocks_as_a_population_does(monkeypatch):
    from workbench.runtime import env as env_module
    made = []
    original = env_module.make

    def recording(*args, **kwargs):
        made.append(kwargs.get("replicas_per_seed"))
        return original(*args, **kwargs)

    monkeypatch.setattr(env_module, "make", recording)
    # blocks of 2 seeded apart, stepped past several auto-resets on both targets
    report = wb.check_env("cartpole", targets=("cpu", "cuda"), num_envs=4, steps=tiny(60, 30), replicas_per_seed=2)
    assert "passed" in str(report) and made == [2, 2]
    made.clear()
    population_env = original("cartpole", num_envs=6, target="cpu", replicas_per_seed=3)
    wb.check_env(population_env, targets=("cpu", "cpu"), num_envs=6, steps=5)
    assert made == [3, 3]  # a given env's own blocks
    with pytest.raises(wb.WorkbenchError, match="replicas_per_seed must divide num_envs=4"):
        wb.check_env("cartpole", targets=("cpu",), num_envs=4, steps=2, replicas_per_seed=3)
