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
