"""env.as_torchrl(): TorchRL's check_env_specs, a SyncDataCollector, and the same steps as the project's API."""
import pytest
import torch

import workbench as wb
from workbench.interop import AdapterError

pytest.importorskip("torchrl")
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
try:
    from torchrl.collectors import SyncDataCollector  # noqa: E402
except ImportError:  # torchrl >= 0.14 names it Collector
    from torchrl.collectors import Collector as SyncDataCollector  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

from test_tag import SMALL as TAG_SMALL  # noqa: E402  (test_tag's small Tag: a full run compiles it once)

E = 4


@pytest.fixture(scope="module")
def cartpole():
    return wb.make("cartpole", num_envs=E, target="cpu", seed=2)


@pytest.fixture(scope="module")
def tag():
    return wb.make("tag_continuous", num_envs=2, target="cpu", seed=5, **TAG_SMALL)


def test_check_env_specs_single_agent(cartpole):
    env = cartpole.as_torchrl()
    check_env_specs(env)
    assert env.batch_size == (E,) and env.device == cartpole.device
    assert env.full_observation_spec["agents", "observation"].shape == (E, 1, 4)
    assert env.full_action_spec["agents", "action"].space.n == 2


@pytest.mark.parametrize("group_map", ["agents", "policies"])
def test_check_env_specs_multi_agent(tag, group_map):
    env = tag.as_torchrl(group_map=group_map)
    check_env_specs(env)
    groups = {"agents": 8} if group_map == "agents" else {"taggers": 2, "runners": 6}
    for group, n in groups.items():
        assert env.full_observation_spec[group, "observation"].shape == (2, n) + tag.obs_shape
        assert env.full_action_spec[group, "action"].shape == (2, n, 2)
        assert env.full_reward_spec[group, "reward"].shape == (2, n, 1)
    td = env.rollout(TAG_SMALL["episode_length"] + 2, break_when_any_done=False)
    assert td["next", "done"][:, TAG_SMALL["episode_length"] - 1].all()


def test_rollout_follows_the_project_api(cartpole):
    """Long enough for episode ends: ("next", obs) is the final observation, the next root obs the restart."""
    env = cartpole.as_torchrl()
    env.set_seed(7)
    td = env.rollout(200, break_when_any_done=False)
    native = wb.make("cartpole", num_envs=E, target="cpu", seed=7)
    native.reset(seed=7)
    obs = native.reset().clone()  # set_seed reseeds, then rollout resets once more
    ends = 0
    for t in range(200):
        torch.testing.assert_close(td["agents", "observation"][:, t], obs, rtol=0, atol=0)
        obs, reward, done, info = native.step(td["agents", "action"][:, t])
        last = torch.where(done.reshape(E, 1, 1), info["final_obs"], obs)
        torch.testing.assert_close(td["next", "agents", "observation"][:, t], last, rtol=0, atol=0)
        torch.testing.assert_close(td["next", "agents", "reward"][:, t, :, 0], reward, rtol=0, atol=0)
        assert torch.equal(td["next", "terminated"][:, t, 0], info["terminated"])
        ends += int(done.sum())
        obs = obs.clone()
    assert ends > 0


def test_sync_data_collector_runs(cartpole):
    env = cartpole.as_torchrl()
    net = torch.nn.Linear(4, 2)
    policy = TensorDictModule(lambda obs: net(obs).argmax(-1), in_keys=[("agents", "observation")],
                              out_keys=[("agents", "action")])
    collector = SyncDataCollector(env, policy, frames_per_batch=E * 16, total_frames=E * 48, device=cartpole.device)
    batches = [batch for batch in collector]
    collector.shutdown()
    assert len(batches) == 3
    assert batches[0]["next", "agents", "reward"].shape == (E, 16, 1, 1)
    assert batches[-1]["collector", "traj_ids"].max() >= E - 1


def test_a_partial_reset_of_running_replicas_restarts_those_alone(cartpole):
    """(what a StepCounter(max_steps) transform asks for) the others' arrays stay as they were."""
    from torchrl.envs import StepCounter, TransformedEnv
    env = cartpole.as_torchrl()
    env.reset()
    env.rand_step(env.reset())
    before = {name: t.clone() for name, t in cartpole.store.items() if t.dim() and t.shape[0] == E}
    mask = torch.zeros((E, 1), dtype=torch.bool)
    mask[1] = True
    env._reset(TensorDict({"_reset": mask}, batch_size=(E,)))
    for name, saved in before.items():
        kept = torch.ones(E, dtype=torch.bool)
        kept[1] = False
        assert torch.equal(cartpole.store[name][kept], saved[kept]), name
    assert int(cartpole.store["t"][1]) == 0 and int(cartpole.store["episode"][1]) == int(before["episode"][1]) + 1
    assert not torch.equal(cartpole.store["obs"][1], before["obs"][1])
    limited = TransformedEnv(cartpole.as_torchrl(), StepCounter(max_steps=5))
    rollout = limited.rollout(12, break_when_any_done=False)
    assert int(rollout["next", "step_count"].max()) == 5 and bool(rollout["next", "truncated"].any())
    with pytest.raises(AdapterError, match="group_map must be"):
        cartpole.as_torchrl(group_map="teams")


def test_bad_actions_and_seeds_are_refused_by_name(cartpole):
    env = cartpole.as_torchrl()
    td = env.reset()
    with pytest.raises(AdapterError, match=r"has no \('agents', 'action'\)"):
        env.step(td)
    td["agents", "action"] = torch.full((E, 1), 0.7)  # (would be truncated to 0)
    with pytest.raises(AdapterError, match="integers of shape \\[4, 1\\].*got dtype torch.float32"):
        env.step(td)
    with pytest.raises(AdapterError, match="set_seed takes one int for all replicas"):
        env.set_seed("a")
