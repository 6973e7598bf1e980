"""env.as_gymnasium() against Gymnasium's own checkers and wrappers and the project's step API;
env.as_sb3() trained by Stable-Baselines3's PPO."""
import numpy as np
import pytest
import torch

import workbench as wb
from workbench.interop import AdapterError

gym = pytest.importorskip("gymnasium")
from gymnasium.utils.passive_env_checker import check_obs, check_space  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402

from test_tag import SMALL as TAG_SMALL  # noqa: E402  (test_tag's small Tag: a full run compiles it once)

E = 4


@pytest.fixture(scope="module")
def cartpole():
    return wb.make("cartpole", num_envs=E, target="cpu", seed=3)


def test_spaces_and_autoreset_mode_declared(cartpole):
    venv = cartpole.as_gymnasium()
    assert isinstance(venv, gym.vector.VectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.num_envs == E
    assert venv.single_observation_space == gym.make("CartPole-v1").observation_space
    assert venv.single_action_space == gym.spaces.Discrete(2)
    assert venv.observation_space == batch_space(venv.single_observation_space, E)
    assert venv.action_space == batch_space(venv.single_action_space, E)
    check_space(venv.single_observation_space, "observation", lambda s: None)
    obs, info = venv.reset(seed=1)
    check_obs(obs, venv.observation_space, "reset")
    obs2, *_ = venv.step(venv.action_space.sample())
    check_obs(obs2, venv.observation_space, "step")
    assert not np.shares_memory(obs, obs2), "returned observations must be fresh arrays"


def test_same_steps_as_the_project_api(cartpole):
    """Gymnasium adapter and native env, same seed and actions: identical obs, rewards, flags and final_obs."""
    venv = cartpole.as_gymnasium()
    native = wb.make("cartpole", num_envs=E, target="cpu", seed=9)
    obs, _ = venv.reset(seed=9)
    np.testing.assert_array_equal(obs, native.reset(seed=9)[:, 0].numpy())
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(80):
        actions = rng.integers(0, 2, E)
        obs, reward, term, trunc, infos = venv.step(actions)
        n_obs, n_reward, n_done, n_info = native.step(torch.as_tensor(actions, dtype=torch.int32).reshape(E, 1))
        np.testing.assert_array_equal(obs, n_obs[:, 0].numpy())
        np.testing.assert_array_equal(reward, n_reward[:, 0].numpy())
        np.testing.assert_array_equal(term, n_info["terminated"].numpy())
        np.testing.assert_array_equal(trunc, n_info["truncated"].numpy())
        done = term | trunc
        assert bool(infos) == bool(done.any())
        if done.any():
            ends += int(done.sum())
            np.testing.assert_array_equal(infos["_final_obs"], done)
            np.testing.assert_array_equal(infos["_final_info"], done)
            for i in range(E):
                if done[i]:
                    np.testing.assert_array_equal(infos["final_obs"][i], n_info["final_obs"][i, 0].numpy())
                    assert infos["final_obs"][i] in venv.single_observation_space
                    # SAME_STEP: the returned observation already starts the next episode
                    assert np.abs(obs[i]).max() <= 0.05
                    assert infos["final_info"]["episode_length"][i] == n_info["episode_length"][i]
                else:
                    assert infos["final_obs"][i] is None
    assert ends > 0, "the comparison must cover episode ends"


def test_gymnasium_episode_statistics_wrapper_agrees(cartpole):
    """Gymnasium's RecordEpisodeStatistics reads the declared SAME_STEP mode and counts the same episodes."""
    venv = gym.wrappers.vector.RecordEpisodeStatistics(cartpole.as_gymnasium())
    venv.reset(seed=4)
    venv.action_space.seed(4)
    checked = 0
    for _ in range(120):
        _, _, term, trunc, infos = venv.step(venv.action_space.sample())
        if "episode" in infos:
            done = infos["_episode"]
            np.testing.assert_allclose(infos["episode"]["r"][done], infos["final_info"]["episode_return"][done])
            np.testing.assert_array_equal(infos["episode"]["l"][done], infos["final_info"]["episode_length"][done])
            checked += int(done.sum())
    assert checked > 0


def test_an_action_past_the_narrow_store_type_is_refused_not_wrapped(cartpole):
    """CartPole's actions are stored as int8; 256 must be refused, not stored as 0."""
    env = cartpole.as_gymnasium()
    env.reset(seed=1)
    with pytest.raises(wb.ActionError, match="256"):
        env.step(np.array([0, 1, 256, 0]))
    env.step(np.array([0, 1, 1, 0]))  # good actions still step


def test_bad_actions_are_refused_by_name_not_truncated_or_reshaped(cartpole):
    env = cartpole.as_gymnasium()
    env.reset(seed=1)
    assert env.np_random_seed == 1
    for actions, words in ((np.full(4, 0.9), "got dtype torch.float64"), (np.ones((2, 2), int), r"got shape \[2, 2\]"),
                           (np.ones(3, int), r"got shape \[3\]"), (None, "got NoneType"), ("a", "got str")):
        with pytest.raises(AdapterError, match=r"integers of shape \[4\] \(Discrete\(n=2\)\).*" + words):
            env.step(actions)
    env.step(np.ones((4, 1), int))  # ([N, 1] is unambiguous)
    for seed in (-1, True):
        with pytest.raises(AdapterError, match="one int >= 0"):
            env.reset(seed=seed)
    with pytest.raises(AdapterError, match="options"):
        env.reset(options={"low": 0.1})
    env.close()
    with pytest.raises(AdapterError, match="after close"):
        env.step(np.ones(4, int))


def test_multi_agent_env_needs_flatten_and_says_what_to_call():
    tag = wb.make("tag_continuous", num_envs=2, target="cpu", seed=1, **TAG_SMALL)
    with pytest.raises(AdapterError, match=r"8 agents.*flatten_agents=True.*as_pettingzoo"):
        tag.as_gymnasium()
    venv = tag.as_gymnasium(flatten_agents=True)
    assert venv.num_envs == 2 * 8
    assert venv.single_action_space == gym.spaces.MultiDiscrete([10, 21])
    obs, _ = venv.reset(seed=2)
    native_obs = tag.store["obs"].reshape(16, -1).numpy()
    np.testing.assert_array_equal(obs, native_obs)
    obs, reward, term, trunc, _ = venv.step(venv.action_space.sample())
    np.testing.assert_array_equal(reward, tag.store["reward"].reshape(-1).numpy())
    np.testing.assert_array_equal(term, np.repeat(tag.info["terminated"].numpy(), 8))
    with pytest.raises(AdapterError, match="one int"):
        venv.reset(seed=[1, 2])


def test_sb3_ppo_learns_cartpole():
    """CI-sized: SB3's PPO on 8 CPU-target replicas beats a random policy (~22) by far."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecEnv
    venv = wb.make("cartpole", num_envs=8, target="cpu", seed=0).as_sb3()
    assert isinstance(venv, VecEnv)
    torch.manual_seed(0)
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=256, n_epochs=4, learning_rate=1e-3, seed=0,
                device="cpu", verbose=0)
    model.learn(total_timesteps=25_000)
    assert len(model.ep_info_buffer) > 0, "episode statistics reach SB3 through infos['episode']"
    evaluation = wb.make("cartpole", num_envs=8, target="cpu", seed=123).as_sb3()
    with pytest.warns(UserWarning, match="Monitor"):
        mean, _ = evaluate_policy(model, evaluation, n_eval_episodes=16, deterministic=True)

    class Random:
        def predict(self, obs, **kwargs):
            return np.random.default_rng(0).integers(0, 2, len(obs)), None

    random_mean, _ = evaluate_policy(Random(), evaluation, n_eval_episodes=16, warn=False)
    assert random_mean < 40 and mean > 100, (mean, random_mean)


def test_a_step_before_reset_or_a_reset_after_close_is_refused():
    """Before: step() before reset() played from the starts drawn when the env was made (Gymnasium's
    vector envs raise there), and reset() after close() went on."""
    venv = wb.make("cartpole", num_envs=4, target="cpu").as_gymnasium()
    with pytest.raises(AdapterError, match=r"step\(\) before reset\(\): call reset\(\) first"):
        venv.step(np.zeros(4, np.int64))
    venv.reset(seed=1)
    venv.step(np.zeros(4, np.int64))
    venv.close()
    with pytest.raises(AdapterError, match=r"reset\(\) after close\(\)"):
        venv.reset()
