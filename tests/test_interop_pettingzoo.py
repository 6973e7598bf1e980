"""env.as_pettingzoo(): PettingZoo's own parallel API test, and the same steps as the project's API."""
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.interop import AdapterError

pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test  # noqa: E402

from test_tag import SMALL as TAG_SMALL  # noqa: E402  (test_tag's small Tag: a full run compiles it once)


@pytest.fixture(scope="module")
def tag():
    return wb.make("tag_continuous", num_envs=3, target="cpu", seed=5, **TAG_SMALL)


def test_parallel_api_test_passes(tag):
    par = tag.as_pettingzoo(replica=1)
    assert par.possible_agents[:3] == ["taggers_0", "taggers_1", "runners_0"]
    parallel_api_test(par, num_cycles=50)


def test_single_agent_env_passes_too():
    parallel_api_test(wb.make("cartpole", num_envs=2, target="cpu").as_pettingzoo(replica=0), num_cycles=600)


def test_one_replica_follows_the_project_api(tag):
    par = tag.as_pettingzoo(replica=2)
    native = wb.make("tag_continuous", num_envs=3, target="cpu", seed=5, **TAG_SMALL)
    obs, _ = par.reset(seed=11)
    native_obs = native.reset(seed=11)
    for name, i in zip(par.possible_agents, range(native.num_agents)):
        np.testing.assert_array_equal(obs[name], native_obs[2, i].numpy())
    ended = False
    while not ended:
        actions = {name: par.action_space(name).sample() for name in par.agents}
        native.store["action"].copy_(tag.store["action"])
        native.store["action"][2] = torch.as_tensor(np.stack([actions[n] for n in par.possible_agents]))
        obs, rewards, term, trunc, infos = par.step(actions)
        n_obs, n_reward, n_done, n_info = native.step(native.store["action"])
        ended = bool(n_done[2])
        source = n_info["final_obs"] if ended else n_obs
        for name, i in zip(par.possible_agents, range(native.num_agents)):
            np.testing.assert_array_equal(obs[name], source[2, i].numpy())
            assert rewards[name] == float(n_reward[2, i])
            assert term[name] == bool(n_info["terminated"][2]) and trunc[name] == bool(n_info["truncated"][2])
    assert par.agents == [] and infos["runners_0"]["episode_length"] == TAG_SMALL["episode_length"]
    with pytest.raises(AdapterError, match="reset"):
        par.step({})


def test_batched_form_is_views_of_the_device_tensors(tag):
    batched = tag.as_pettingzoo()
    obs, _ = batched.reset(seed=3)
    assert set(obs) == set(batched.possible_agents) and obs["runners_5"].shape == (3,) + tag.obs_shape
    assert obs["runners_5"].data_ptr() == tag.store["obs"][:, 7].data_ptr()
    actions = {name: torch.randint(0, 10, (3, 2), dtype=torch.int32) for name in batched.possible_agents}
    for _ in range(TAG_SMALL["episode_length"]):
        obs, rewards, term, trunc, infos = batched.step(actions)
    assert bool(trunc["taggers_0"].all()) and torch.equal(rewards["taggers_1"], tag.store["reward"][:, 1])
    assert torch.equal(tag.store["action"][:, 4], actions["runners_2"])
    assert torch.equal(infos["runners_0"]["final_obs"], tag.info["final_obs"][:, 2])


def test_an_action_past_the_narrow_store_type_is_refused_not_wrapped(tag):
    """Tag's actions are stored as int8; 266 (10 modulo 256) must be refused, not stored as 10."""
    single = tag.as_pettingzoo(replica=0)
    single.reset(seed=2)
    actions = {name: np.array([0, 1]) for name in single.agents}
    actions["runners_1"] = np.array([266, 1])
    with pytest.raises(wb.ActionError, match="266"):
        single.step(actions)


def test_bad_actions_are_refused_by_name_not_truncated_or_broadcast(tag):
    single = tag.as_pettingzoo(replica=0)
    with pytest.raises(AdapterError, match=r"step\(\) before reset\(\)"):
        single.step({})
    single.reset(seed=2)
    good = {name: np.array([1, 2]) for name in single.agents}
    for actions, words in (({**good, "runners_0": np.array([1.9, 2.7])}, "got dtype torch.float64"),
                           ({**good, "runners_0": 3}, r"integers of shape \[2\].*got shape \[\]"),
                           ({"taggers_0": np.array([1, 1])}, r"no action for 7 agent\(s\) in the game")):
        with pytest.raises(AdapterError, match=words):
            single.step(actions)
    with pytest.raises(AdapterError, match="reset\\(seed=...\\) takes one int >= 0"):
        single.reset(seed="x")
    batched = tag.as_pettingzoo()
    batched.reset(seed=1)
    batched.step({"runners_0": np.zeros((3, 2), np.int64)})  # NumPy is taken too
    with pytest.raises(AdapterError, match=r"integers of shape \[3, 2\].*got shape \[2\]"):
        batched.step({"runners_0": torch.tensor([1, 2])})  # (not copied to every replica)


def test_a_tagged_runner_leaves_the_game_and_its_agents():
    """An agent whose ACTIVE flag drops is terminated in that step and then gets no more values."""
    env = wb.make("tag_continuous", num_envs=1, target="cpu", seed=0, num_taggers=10, num_runners=2,
                  tagging_distance=0.2)
    game = env.as_pettingzoo(replica=0)
    game.reset(seed=0)
    left = []
    while game.agents and not left:
        before = list(game.agents)
        obs, rewards, terms, truncs, infos = game.step({a: game.action_space(a).sample() for a in game.agents})
        left = [a for a in before if terms[a] and not truncs[a] and a not in game.agents]
    assert left and all(a.startswith("runners_") for a in left) and game.agents
    assert rewards[left[0]] < 0 and left[0] in obs
    obs, rewards, *_ = game.step({a: game.action_space(a).sample() for a in game.agents})
    assert left[0] not in obs and left[0] not in rewards


def test_the_spaces_hold_no_adapter_alive():
    import gc
    import weakref
    env = wb.make("cartpole", num_envs=2, target="cpu")
    game = env.as_pettingzoo(replica=0)
    assert game.observation_space("agent_0") is game.observation_space("agent_0")
    assert game.state_space.shape == (4,)
    ref = weakref.ref(env)
    del game, env
    gc.collect()
    assert ref() is None


def test_bad_replica_and_agent_names(tag):
    with pytest.raises(AdapterError, match=r"replica must be in \[0, 3\)"):
        tag.as_pettingzoo(replica=3)
    with pytest.raises(AdapterError, match="no agent named 'runner_0'"):
        tag.as_pettingzoo(replica=0).action_space("runner_0")


def test_a_refused_batched_step_changes_no_action_and_the_spaces_are_dicts_too():
    """Before: an action out of range stayed in the staged actions, so every later step that left its
    agent out was refused for a value the caller no longer gave; the error named the agent by its
    index. PettingZoo's ParallelEnv also declares observation_spaces and action_spaces as dicts."""
    env = wb.make("tag_grid", num_envs=4, target="cpu", num_taggers=2, num_runners=2)
    batched = env.as_pettingzoo()
    batched.reset(seed=0)
    with pytest.raises(wb.ActionError, match="action 7 of agent 'taggers_0' in replica 2 is out of range"):
        batched.step({"taggers_0": torch.tensor([0, 0, 7, 0])})
    batched.step({"runners_0": torch.zeros(4, dtype=torch.int64)})  # (taggers_0 keeps its last accepted action)
    assert env.store["action"][:, 0].tolist() == [0, 0, 0, 0]
    assert batched.observation_spaces["runners_1"] is batched.observation_space("runners_1")
    assert set(batched.action_spaces) == set(batched.possible_agents)
