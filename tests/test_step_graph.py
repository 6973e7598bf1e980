"""On a GPU, Env.step replays its launch from a CUDA graph: same results as direct launches,
including after a reset with a new seed (the graph is captured again for the new seed)."""
import pytest
import torch

import workbench as wb
from conftest import gpu_only


@gpu_only
@pytest.mark.parametrize("name,target,params", [
    ("cartpole", "cuda", {}), ("cartpole", "cuda-c", {}),
    ("tag_continuous", "cuda", dict(num_taggers=4, num_runners=60)),
])
def test_graph_replayed_steps_equal_direct_launches(name, target, params):
    if target not in wb.available_targets():
        pytest.skip(f"{target} is not available here")
    graphed = wb.make(name, num_envs=512, target=target, seed=3, **params)
    direct = wb.make(name, num_envs=512, target=target, seed=3, **params)
    direct.step_graphs = False
    for seed_change in (None, 11):
        if seed_change is not None:
            graphed.reset(seed=seed_change)
            direct.reset(seed=seed_change)
        for _ in range(120):
            direct.step(graphed.sample_actions().clone())
            graphed.step()
        torch.cuda.synchronize()
        assert graphed._step_graph is not None and graphed._step_graph[0] == (graphed.seed, graphed.replicas_per_seed, False)
        for key in direct.store:
            assert torch.equal(graphed.store[key], direct.store[key]), key
    assert int(direct.store["episode"].sum()) > 0
