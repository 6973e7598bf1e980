"""The complete example in docs/writing-an-env.md works as written."""
import re
from pathlib import Path

import pytest
import torch

import workbench as wb

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing-an-env.md"


def example_source():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]


def test_docs_example_runs_and_agrees_across_targets():
    wb.register("chase", example_source())
    env = wb.make("chase", num_envs=64, target="cpu", num_agents=16)
    assert env.obs_shape == (2,) and tuple(env.data["position"].shape) == (64, 16)
    for _ in range(20):
        obs, reward, done, info = env.step(env.sample_actions())
    assert bool(torch.isfinite(obs).all()) and float(reward.max()) <= 0.0
    # enough steps for agents to reach the target (a phase racing on `hits` differs across targets), and
    # episodes cut at 10 steps so that the time limit's reset and final observations are compared too
    report = wb.check_env("chase", targets=("cpu", "cuda"), num_envs=4, steps=24, num_agents=4, half_width=2.0,
                          max_steps=10)
    assert report.targets == ("cpu", "cuda") and report.episodes_finished > 0 and report.caveat == ""
    with pytest.raises(wb.WorkbenchError, match="half_width=0.0"):  # (its PARAM_RANGES: an inf observation otherwise)
        wb.make("chase", num_envs=2, target="cpu", half_width=0.0)
