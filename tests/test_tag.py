"""Tag games: hand-checked rule scenarios (state written into env.data, then one step with chosen
actions), invariants under random play, exact k-NN against a numpy brute force, cross-target
agreement and bad parameters. Each distinct parameter set costs a numba compile, so the tests
share a few module-level configurations."""
import numpy as np
import pytest
import torch

import workbench as wb
from conftest import HAS_GPU

# -- tag_continuous configurations ----------------------------------------------------------------
# radius = tagging_distance * grid_length = 1.0; reward terms chosen so every sum decodes uniquely
SMALL = dict(num_taggers=2, num_runners=6, grid_length=10.0, episode_length=4, tagging_distance=0.1,
             max_speed_tagger=1.0, max_speed_runner=0.5, edge_hit_penalty=-0.125, tag_reward_for_tagger=10.0,
             step_penalty_for_tagger=-0.25, tag_penalty_for_runner=-3.0, step_reward_for_runner=0.5,
             end_of_game_reward_for_runner=7.0, num_other_agents_observed=3)
FULL = dict(num_taggers=2, num_runners=3, grid_length=10.0, episode_length=5, tagging_distance=0.1,
            full_observation=1, runner_exits_game_after_tagged=0, tag_reward_for_tagger=10.0,
            tag_penalty_for_runner=-3.0)
BIG = dict(num_taggers=20, num_runners=1980, grid_length=100.0, episode_length=1000, tagging_distance=0.01,
           num_other_agents_observed=8, tag_reward_for_tagger=1.0, tag_penalty_for_runner=-1.0)
NOOP = 0
ACC_UP = 9  # +1.0: the last of 9 levels over [-1, 1]
ACC_DOWN = 1  # -1.0
TURN_LEFT = 20  # +pi/2: the last of 20 levels over [-pi/2, pi/2]
FAR = [(0.5, 0.5), (9.5, 9.5), (0.5, 9.5), (9.5, 0.5), (3.0, 3.0), (7.0, 7.0), (3.0, 7.0), (7.0, 3.0)]


@pytest.fixture(scope="module")
def small():
    return wb.make("tag_continuous", num_envs=2, target="cpu", seed=5, **SMALL)


def sim_or_gpu(name, num_envs, **params):
    """The cuda target: a real GPU when there is one, else numba's simulator (keep it tiny)."""
    return wb.make(name, num_envs=num_envs, target="cuda", seed=5, **params)


def pull(env, *names):
    return [env.data[n].cpu().numpy().copy() for n in names]


def place(env, e=0, pos=FAR, speed=None, heading=None, accel=None, in_game=None, t=0):
    """Write one replica's state: positions, kinematics, who is in the game, the clock."""
    d, n = env.data, env.num_agents
    nt = env.definition.params["num_taggers"]
    pos = list(pos) + list(FAR[len(pos):n])

    def put(name, values, dtype):
        d[name][e].copy_(torch.tensor(values, dtype=dtype))

    put("x", [p[0] for p in pos], torch.float32)
    put("y", [p[1] for p in pos], torch.float32)
    put("speed", speed or [0.0] * n, torch.float32)
    put("heading", heading or [0.0] * n, torch.float32)
    put("accel", accel or [0.0] * n, torch.float32)
    flags = in_game or [1] * n
    put("in_game", flags, torch.int32)
    d["runners_left"][e] = int(sum(flags[nt:]))
    d["t"][e] = t


def step(env, actions=None):
    """One step; `actions` maps agent -> (accel index, turn index) for replica 0, the rest no-op."""
    a = torch.zeros(tuple(env.data["action"].shape), dtype=torch.int32)
    for agent, act in (actions or {}).items():
        a[0, agent] = torch.tensor(act)
    obs, reward, done, info = env.step(a.to(env.device))
    return obs.cpu().numpy(), reward.cpu().numpy(), done.cpu().numpy(), {k: v.cpu().numpy() for k, v in info.items()}


# -- rules ---------------------------------------------------------------------------------------

def test_agent_groups_and_spaces(small):
    assert small.taggers == [0, 1] and small.runners == [2, 3, 4, 5, 6, 7]
    assert small.action_space.nvec == (10, 21)
    assert small.obs_shape == (7 * 3 + 8,)
    assert wb.make("tag_continuous", num_envs=1, target="cpu", **SMALL).data["x"].shape == (1, 8)


def test_tag_at_exactly_the_radius_and_not_beyond(small):
    place(small, pos=[(2.0, 2.0), (8.0, 8.0), (2.0, 3.0), (8.0, 9.0001)])
    _, reward, done, _ = step(small)
    in_game, left = pull(small, "in_game", "runners_left")
    assert in_game[0].tolist() == [1, 1, 0, 1, 1, 1, 1, 1]
    assert left[0] == 5 and not done[0]
    np.testing.assert_allclose(reward[0], [-0.25 + 10.0, -0.25, 0.5 - 3.0, 0.5, 0.5, 0.5, 0.5, 0.5])


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_one_tagger_tags_two_runners_in_one_step(small, target):
    env = small if target == "cpu" else sim_or_gpu("tag_continuous", 1, **SMALL)
    # runners 2 and 3 both within reach of tagger 0 only; runner 4 equidistant (1.0) from both
    # taggers: the tie goes to the lower id, so tagger 0 collects three tags in one phase
    place(env, pos=[(5.0, 5.0), (5.0, 7.0), (5.5, 5.0), (5.0, 4.25), (5.0, 6.0)])
    _, reward, _, _ = step(env)
    assert reward[0, 0] == pytest.approx(-0.25 + 30.0)
    assert reward[0, 1] == pytest.approx(-0.25)
    np.testing.assert_allclose(reward[0, 2:5], [0.5 - 3.0] * 3)
    in_game, left = pull(env, "in_game", "runners_left")
    assert in_game[0].tolist() == [1, 1, 0, 0, 0, 1, 1, 1] and left[0] == 3


def test_tagged_runner_leaves_the_game(small):
    place(small, pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0)])
    step(small)
    assert pull(small, "in_game")[0][0, 2] == 0
    # it would accelerate and sits next to tagger 0: neither moves it nor tags it again
    obs, reward, _, _ = step(small, {2: (ACC_UP, NOOP)})
    x, y, speed, left, knn_id = pull(small, "x", "y", "speed", "runners_left", "knn_id")
    assert (x[0, 2], y[0, 2], speed[0, 2]) == (2.5, 2.0, 0.0)
    assert reward[0, 2] == 0.0 and reward[0, 0] == pytest.approx(-0.25) and left[0] == 5
    assert not obs[0, 2].any() and (knn_id[0, 2] == -1).all()
    assert 2 not in knn_id[0].ravel()  # nobody observes it


def test_walls_clip_and_penalise(small):
    pos = [(9.8, 5.0), (8.0, 8.0), (0.2, 0.1), (5.0, 9.9)]
    place(small, pos=pos, speed=[0.5, 0, 0.4, 0.3] + [0] * 4,
          heading=[0.0, 0.0, float(np.float32(np.pi)), float(np.float32(np.pi / 2))] + [0.0] * 4)
    _, reward, _, _ = step(small)
    x, y = pull(small, "x", "y")
    assert x[0, 0] == 10.0 and y[0, 0] == pytest.approx(5.0)
    assert x[0, 2] == 0.0 and y[0, 2] == pytest.approx(0.1, abs=1e-6)
    assert y[0, 3] == 10.0
    np.testing.assert_allclose(reward[0, :4], [-0.25 - 0.125, -0.25, 0.5 - 0.125, 0.5 - 0.125])
    # an agent out of the game pays nothing for sitting at the wall
    place(small, pos=[(2.0, 2.0), (8.0, 8.0), (10.0, 5.0)], in_game=[1, 1, 0] + [1] * 5)
    _, reward, _, _ = step(small, {2: (ACC_UP, NOOP)})
    assert reward[0, 2] == 0.0


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_speed_caps_turns_and_acceleration(small, target):
    env = small if target == "cpu" else sim_or_gpu("tag_continuous", 1, **SMALL)
    place(env, pos=[(1.0, 5.0), (8.0, 8.0), (5.0, 5.0)])
    step(env, {0: (ACC_UP, NOOP), 2: (ACC_UP, NOOP)})
    speed, accel, x = pull(env, "speed", "accel", "x")
    assert speed[0, 0] == 1.0 and speed[0, 2] == 0.5  # tagger cap 1.0, runner cap 0.5
    assert accel[0, 0] == 0.0 and accel[0, 2] == 0.0  # reset at the cap
    assert x[0, 0] == 2.0 and x[0, 2] == 5.5
    step(env, {0: (ACC_UP, TURN_LEFT), 2: (ACC_DOWN, NOOP)})
    speed, heading, x, y = pull(env, "speed", "heading", "x", "y")
    assert speed[0, 0] == 1.0 and heading[0, 0] == pytest.approx(np.pi / 2)
    assert x[0, 0] == pytest.approx(2.0, abs=1e-6) and y[0, 0] == pytest.approx(6.0)
    assert speed[0, 2] == 0.0 and x[0, 2] == 5.5  # braking below 0 stops at 0
    # a partial acceleration is kept while below the cap
    place(env, pos=[(2.0, 2.0), (8.0, 8.0)])
    step(env, {0: (6, NOOP)})  # +0.25
    assert pull(env, "speed")[0][0, 0] == 0.25 and pull(env, "accel")[0][0, 0] == 0.25
    step(env)
    assert pull(env, "speed")[0][0, 0] == 0.5


def test_end_of_game_bonus_on_the_last_step_only(small):
    place(small, pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0)], t=SMALL["episode_length"] - 2)
    _, reward, done, _ = step(small)
    assert not done[0] and reward[0, 3] == 0.5  # not yet the last step
    place(small, pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0)], in_game=[1, 1, 1, 0, 1, 1, 1, 1],
          t=SMALL["episode_length"] - 1)
    _, reward, done, info = step(small)
    assert done[0] and info["truncated"][0] and not info["terminated"][0]
    np.testing.assert_allclose(reward[0], [-0.25 + 10, -0.25, 0.5 - 3.0, 0.0, 7.5, 7.5, 7.5, 7.5])
    assert info["episode_length"][0] == SMALL["episode_length"]


def test_termination_truncation_and_both(small):
    everyone_tagged = [(2.0, 2.0), (8.0, 8.0), (2.5, 2.0), (2.0, 2.5), (1.5, 2.0), (8.5, 8.0), (8.0, 8.5),
                       (7.5, 8.0)]
    place(small, pos=everyone_tagged, t=1)
    _, reward, done, info = step(small)
    assert done[0] and info["terminated"][0] and not info["truncated"][0]
    assert info["episode_length"][0] == 2
    assert reward[0, 0] == pytest.approx(-0.25 + 30) and reward[0, 1] == pytest.approx(-0.25 + 30)
    t, in_game, left = pull(small, "t", "in_game", "runners_left")
    assert t[0] == 0 and in_game[0].all() and left[0] == 6  # the same step started a new episode
    assert info["final_obs"][0, 2:].sum() == 0  # tagged runners' last observation is empty
    place(small, t=SMALL["episode_length"] - 1)
    _, _, done, info = step(small)
    assert done[0] and info["truncated"][0] and not info["terminated"][0]
    place(small, pos=everyone_tagged, t=SMALL["episode_length"] - 1)
    _, reward, done, info = step(small)
    assert info["truncated"][0] and info["terminated"][0]
    assert (reward[0, 2:] == 0.5 - 3.0).all()  # tagged on the last step: no end bonus


def test_each_replica_draws_its_own_start():
    a, b, c = (wb.make("tag_continuous", num_envs=2, target="cpu", seed=s, **SMALL) for s in (5, 5, 6))
    x, y, heading, in_game, left = pull(a, "x", "y", "heading", "in_game", "runners_left")
    assert not np.array_equal(x[0], x[1]) and not np.array_equal(y[0], y[1])
    assert ((x >= 0) & (x <= 10) & (y >= 0) & (y <= 10)).all()
    assert set(np.round(heading.ravel() / (np.pi / 2)).astype(int)) <= {0, 1, 2, 3}
    assert in_game.all() and (left == 6).all()
    assert np.array_equal(pull(b, "x")[0], x) and not np.array_equal(pull(c, "x")[0], x)


def test_invariants_under_random_play(small):
    """Positions stay in the arena, the runner count matches the flags, and every reward decodes
    into the rule's terms, with the tags paid to taggers equal to the tags suffered by runners."""
    small.reset(seed=11)
    nt, L, last = SMALL["num_taggers"], SMALL["grid_length"], SMALL["episode_length"] - 1
    runner_terms = {(wall, tag, bonus): 0.5 - 0.125 * wall - 3.0 * tag + 7.0 * bonus
                    for wall in (0, 1) for tag in (0, 1) for bonus in (0, 1)}
    checked_tags = 0
    for _ in range(150):
        before_in, before_left, before_t = pull(small, "in_game", "runners_left", "t")
        small.sample_actions()
        _, reward, done, info = small.step(small.data["action"])
        reward, done, terminated = reward.numpy(), done.numpy(), info["terminated"].numpy()
        x, y, speed, in_game, left = pull(small, "x", "y", "speed", "in_game", "runners_left")
        assert ((x >= 0) & (x <= L) & (y >= 0) & (y <= L)).all()
        assert (left == in_game[:, nt:].sum(1)).all() and in_game[:, :nt].all()
        assert (speed[:, :nt] <= 1.0).all() and (speed[:, nt:] <= 0.5).all()
        for e in range(small.num_envs):
            tagged = 0
            for r in range(nt, small.num_agents):
                if not before_in[e, r]:
                    assert reward[e, r] == 0.0  # out of the game: no terms at all
                    continue
                (wall, tag, bonus), = [k for k, v in runner_terms.items() if abs(v - reward[e, r]) < 1e-5]
                assert bonus == (not tag and before_t[e] == last)
                tagged += tag
            paid = 0
            for g in range(nt):
                rest = reward[e, g] + 0.25  # 10 per tag, minus 0.125 at a wall
                wall = abs(rest % 10.0 - 9.875) < 1e-4
                n = (rest + 0.125 * wall) / 10.0
                assert abs(n - round(n)) < 1e-5
                paid += round(n)
            assert paid == tagged
            if not done[e]:
                assert before_left[e] - left[e] == tagged
            assert bool(terminated[e]) == (tagged == before_left[e])
            checked_tags += tagged
    assert checked_tags > 0


# -- observations and k-NN -------------------------------------------------------------------------

def brute_knn(x, y, in_game, k):
    """k nearest other agents in the game per agent, by float32 squared distance then id (-1 pads)."""
    dx = x[None, :] - x[:, None]
    dy = y[None, :] - y[:, None]
    d2 = dx * dx + dy * dy
    d2[:, in_game == 0] = np.inf
    np.fill_diagonal(d2, np.inf)
    order = np.argsort(d2, axis=1, kind="stable")[:, :k]
    ids = np.where(np.take_along_axis(d2, order, 1) < np.inf, order, -1)
    ids[in_game == 0] = -1
    return ids


def check_observation(env, e, k):
    x, y, sp, acc, hd, in_game, knn_id, obs, t = (a[e] for a in pull(env, "x", "y", "speed", "accel", "heading",
                                                                     "in_game", "knn_id", "obs", "t"))
    p = env.definition.params
    expected = brute_knn(x, y, in_game, k)
    np.testing.assert_array_equal(knn_id, expected)
    L, s = p["grid_length"], max(p["max_speed_tagger"], p["max_speed_runner"]) + 1e-10
    nt = p["num_taggers"]
    for a in np.flatnonzero(in_game)[:300]:
        for i, j in enumerate(expected[a]):
            slot = obs[a, 7 * i:7 * i + 7]
            if j < 0:
                assert not slot.any()
                continue
            want = [(x[j] - x[a]) / (np.sqrt(2) * L), (y[j] - y[a]) / (np.sqrt(2) * L), (sp[j] - sp[a]) / s,
                    (acc[j] - acc[a]) / s, (hd[j] - hd[a]) / (2 * np.pi), float(j < nt), 1.0]
            np.testing.assert_allclose(slot, want, atol=1e-6)
        own = [x[a] / L, y[a] / L, sp[a] / s, acc[a] / s, hd[a] / (2 * np.pi), float(a < nt), 1.0,
               t / p["episode_length"]]
        np.testing.assert_allclose(obs[a, 7 * k:], own, atol=1e-6)
    assert not obs[in_game == 0].any()


def test_observation_pads_when_fewer_than_k_remain(small):
    place(small, in_game=[1, 1, 0, 0, 0, 0, 0, 1])
    step(small)
    knn_id = pull(small, "knn_id")[0]
    assert knn_id[0, 0].tolist() == [7, 1, -1]  # from (0.5, 0.5): (7, 3) then (9.5, 9.5), then a padded slot
    check_observation(small, 0, 3)


def test_knn_small_after_random_play(small):
    small.reset(seed=3)
    for _ in range(5):
        small.sample_actions()
        small.step(small.data["action"])
        for e in range(small.num_envs):
            check_observation(small, e, 3)


def test_knn_and_tags_at_scale_match_brute_force():
    """2000 agents in one replica: random positions plus a 200-agent clump (cells overflow and the
    search falls back to a scan), 18 taggers in one cell (the tag check's grid overflows),
    agents on cell boundaries, at walls and corners, and exact distance ties."""
    env = wb.make("tag_continuous", num_envs=1, target="cpu", seed=1, **BIG)
    n, nt, L = env.num_agents, BIG["num_taggers"], BIG["grid_length"]
    rng = np.random.default_rng(0)
    x = rng.uniform(0, L, n).astype(np.float32)
    y = rng.uniform(0, L, n).astype(np.float32)
    x[:18], y[:18] = rng.uniform(70.0, 70.9, 18), rng.uniform(70.0, 70.9, 18)  # taggers in one cell
    x[20:40], y[20:40] = rng.uniform(69.5, 71.4, 20), rng.uniform(69.5, 71.4, 20)  # runners among them
    x[100:300], y[100:300] = rng.uniform(50, 51, 200), rng.uniform(50, 51, 200)  # an overflowing clump
    side = 31  # the automatic grid side for 2000 agents: int(sqrt(1000))
    b = np.arange(300, 400)
    x[b] = (np.float32(L / side) * (b % 31)).astype(np.float32)  # on cell boundaries
    y[b] = (np.float32(L / side) * (b // 31)).astype(np.float32)
    x[400], y[400] = 20.0, 20.0  # four neighbours at exactly the same distance
    x[401:405] = [21.0, 19.0, 20.0, 20.0]
    y[401:405] = [20.0, 20.0, 21.0, 19.0]
    x[500:525], y[500:525] = 0.0, rng.uniform(0, L, 25)  # on walls
    x[525:550], y[525:550] = rng.uniform(0, L, 25), L
    x[550:560], y[550:560] = 0.0, 0.0  # stacked in a corner: distance-0 ties
    x[560:570], y[560:570] = L, L
    d = env.data
    d["x"][0] = torch.from_numpy(x)
    d["y"][0] = torch.from_numpy(y)
    for name in ("speed", "accel", "heading"):
        d[name].zero_()
    in_game = np.ones(n, np.int32)
    in_game[rng.choice(np.arange(nt, n), 300, replace=False)] = 0  # some runners already out
    in_game[400:405] = 1
    d["in_game"][0] = torch.from_numpy(in_game)
    d["runners_left"][0] = int(in_game[nt:].sum())

    for k in range(4):
        before = pull(env, "in_game")[0][0]
        if k == 0:
            env.step(torch.zeros_like(d["action"]))  # nobody moves: speeds are 0
        else:
            env.sample_actions()
            env.step(d["action"])
        px, py, after, reward = (a[0] for a in pull(env, "x", "y", "in_game", "reward"))
        if k == 0:
            assert np.array_equal(px, x) and np.array_equal(py, y)
        # tags: each runner in the game goes to its nearest tagger within the radius (ties: lower id)
        dx = px[None, :nt] - px[nt:, None]
        dy = py[None, :nt] - py[nt:, None]
        d2 = dx * dx + dy * dy
        reach = (d2 <= 1.0) & (before[nt:, None] == 1)
        tagged = reach.any(1)
        nearest = np.argmin(np.where(reach, d2, np.inf), axis=1)
        np.testing.assert_array_equal(after[nt:], before[nt:] & ~tagged)
        credit = np.bincount(nearest[tagged], minlength=nt)
        np.testing.assert_allclose(reward[:nt], credit.astype(np.float32))
        if k == 0:
            assert tagged.sum() >= 10 and credit[:18].sum() >= 5
        check_observation(env, 0, BIG["num_other_agents_observed"])
    counts, members = pull(env, "cell_count", "cell_members")
    assert not counts.any() and not members.any()  # the grid is left empty after each use


def test_full_observation_and_runners_that_stay():
    env = wb.make("tag_continuous", num_envs=1, target="cpu", **FULL)
    assert env.obs_shape == (7 * 4 + 8,)
    place(env, pos=[(2.0, 2.0), (8.0, 8.0), (2.5, 2.0), (5.0, 5.0), (9.0, 1.0)], in_game=[1, 1, 1, 1, 0])
    obs, reward, done, _ = step(env)
    x, y, in_game, left = (a[0] for a in pull(env, "x", "y", "in_game", "runners_left"))
    assert in_game.tolist() == [1, 1, 1, 1, 0] and left == 2 and not done[0]  # tagged runner 2 stays in
    assert reward[0, 2] == -3.0 and reward[0, 0] == 10.0
    o = obs[0, 3]  # runner 3 sees agents 0, 1, 2, 4 in id order, the one out of the game flagged 0
    for slot, j in enumerate([0, 1, 2, 4]):
        assert o[7 * slot] == pytest.approx((x[j] - x[3]) / (np.sqrt(2) * 10.0))
        assert o[7 * slot + 1] == pytest.approx((y[j] - y[3]) / (np.sqrt(2) * 10.0))
        assert o[7 * slot + 5] == float(j < 2) and o[7 * slot + 6] == float(j != 4)
    assert o[28:].tolist() == pytest.approx([0.5, 0.5, 0, 0, 0, 0, 1, 1 / 5])
    assert not obs[0, 4].any()
    _, reward, _, _ = step(env)
    assert reward[0, 2] == -3.0  # tagged again while still within reach


@pytest.mark.parametrize("params", [SMALL, FULL])
def test_cpu_and_cuda_agree(params):
    report = wb.check_env("tag_continuous", targets=("cpu", "cuda"), num_envs=2, steps=5, **params)
    assert report.episodes_finished > 0  # the auto-reset path is compared too


# -- tag_grid ---------------------------------------------------------------------------------------

GRID = dict(num_taggers=2, num_runners=6, grid_length=5, episode_length=6, wall_hit_penalty=0.5,
            tag_reward_for_tagger=10.0, tag_penalty_for_runner=3.0, step_cost_for_tagger=0.25, shared_tag_reward=0)
GRID_WD = dict(GRID, shared_tag_reward=1, full_observation=1)  # WarpDrive's shared tag reward
STAY, RIGHT, LEFT, UP, DOWN = range(5)
CORNERS = [(0, 0), (5, 5), (0, 5), (5, 0), (2, 2), (3, 3), (2, 4), (4, 1)]


@pytest.fixture(scope="module")
def grid():
    return wb.make("tag_grid", num_envs=2, target="cpu", seed=2, **GRID)


def place_grid(env, pos=CORNERS, in_game=None, t=0, e=0):
    d, n = env.data, env.num_agents
    pos = list(pos) + list(CORNERS[len(pos):n])
    d["x"][e].copy_(torch.tensor([p[0] for p in pos], dtype=torch.int32))
    d["y"][e].copy_(torch.tensor([p[1] for p in pos], dtype=torch.int32))
    flags = in_game or [1] * n
    d["in_game"][e].copy_(torch.tensor(flags, dtype=torch.int32))
    d["runners_left"][e] = int(sum(flags[2:]))
    d["t"][e] = t


def step_grid(env, actions=None):
    a = torch.zeros(tuple(env.data["action"].shape), dtype=torch.int32)
    for agent, act in (actions or {}).items():
        a[0, agent] = act
    obs, reward, done, info = env.step(a.to(env.device))
    return obs.cpu().numpy(), reward.cpu().numpy(), done.cpu().numpy(), {k: v.cpu().numpy() for k, v in info.items()}


def test_grid_moves_walls_and_step_costs(grid):
    assert grid.taggers == [0, 1] and grid.runners == list(range(2, 8)) and grid.action_space.n == 5
    place_grid(grid, pos=[(1, 1), (5, 5), (0, 3), (3, 0), (2, 2), (4, 4), (1, 4), (4, 2)])
    _, reward, _, _ = step_grid(grid, {0: RIGHT, 1: UP, 2: LEFT, 3: DOWN, 4: UP, 5: DOWN, 6: RIGHT, 7: LEFT})
    x, y = (a[0] for a in pull(grid, "x", "y"))
    assert list(zip(x.tolist(), y.tolist())) == [(2, 1), (5, 5), (0, 3), (3, 0), (2, 3), (4, 3), (2, 4), (3, 2)]
    np.testing.assert_allclose(reward[0], [-0.25, -0.25 - 0.5, 0.25 - 0.5, 0.25 - 0.5, 0.25, 0.25, 0.25, 0.25])


def test_grid_tag_is_checked_after_everyone_moved(grid):
    # tagger 0 and runner 2 swap cells (no tag); runner 3 walks into tagger 1's cell (tag);
    # runner 4 sits where tagger 0 was (tagger 0 left it)
    place_grid(grid, pos=[(1, 1), (4, 4), (2, 1), (4, 3), (1, 1)])
    _, reward, _, _ = step_grid(grid, {0: RIGHT, 2: LEFT, 3: UP})
    in_game = pull(grid, "in_game")[0][0]
    assert in_game.tolist() == [1, 1, 1, 0, 1, 1, 1, 1]
    np.testing.assert_allclose(reward[0, :5], [-0.25, 10.0, 0.25, -3.0, 0.25])


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_grid_two_runners_one_tagger_and_two_taggers_one_runner(grid, target):
    env = grid if target == "cpu" else sim_or_gpu("tag_grid", 1, **GRID)
    # runners 2 and 3 step onto tagger 0's cell; tagger 1 steps onto the cell of runners 4 and 5
    place_grid(env, pos=[(2, 2), (4, 3), (1, 2), (2, 3), (4, 4), (4, 4)])
    _, reward, _, _ = step_grid(env, {2: RIGHT, 3: DOWN, 1: UP})
    in_game, left = pull(env, "in_game", "runners_left")
    assert in_game[0].tolist() == [1, 1, 0, 0, 0, 0, 1, 1] and left[0] == 2
    # tagger 0 credited for runners 2 and 3; tagger 1 for runners 4 and 5 (both on its new cell)
    np.testing.assert_allclose(reward[0, :6], [20.0, 20.0, -3.0, -3.0, -3.0, -3.0])
    # two taggers on one runner's cell: both credited (shared_tag_reward=0 credits every tagger there)
    place_grid(env, pos=[(3, 3), (3, 3), (3, 4), (0, 0), (5, 5), (0, 5), (5, 0), (1, 4)])
    _, reward, _, _ = step_grid(env, {2: DOWN})
    np.testing.assert_allclose(reward[0, :3], [10.0, 10.0, -3.0])


def test_grid_tagged_runner_leaves_and_observations(grid):
    place_grid(grid, pos=[(1, 1), (5, 5), (1, 2), (4, 4), (0, 0)], t=2)
    obs, _, _, _ = step_grid(grid, {2: DOWN})
    assert pull(grid, "in_game")[0][0, 2] == 0
    # partial observation: own x, y, nearest opponent x, y (a tagger sees the nearest runner in the
    # game, ties to the lower id), is_runner, t / episode_length
    assert obs[0, 0].tolist() == pytest.approx([0.2, 0.2, 0.0, 0.0, 0.0, 0.5])  # runner 4 at (0,0)
    assert obs[0, 1].tolist() == pytest.approx([1.0, 1.0, 0.8, 0.8, 0.0, 0.5])  # runner 3 at (4,4)
    assert obs[0, 3].tolist() == pytest.approx([0.8, 0.8, 1.0, 1.0, 1.0, 0.5])  # its nearest tagger: 1
    assert not obs[0, 2].any()
    _, reward, _, _ = step_grid(grid, {2: UP})  # tagger 0 still shares the tagged runner's cell
    x, y, left = pull(grid, "x", "y", "runners_left")
    assert (x[0, 2], y[0, 2]) == (1, 1) and reward[0, 2] == 0.0 and reward[0, 0] == -0.25 and left[0] == 5


def test_grid_termination_truncation_and_both(grid):
    stacked = [(2, 2), (4, 4), (2, 2), (2, 2), (2, 2), (4, 4), (4, 4), (4, 4)]
    place_grid(grid, pos=stacked, t=1)
    _, reward, done, info = step_grid(grid)
    assert done[0] and info["terminated"][0] and not info["truncated"][0]
    assert reward[0, :2].tolist() == [30.0, 30.0] and info["episode_length"][0] == 2
    assert pull(grid, "in_game")[0][0].all() and pull(grid, "t")[0][0] == 0
    place_grid(grid, t=GRID["episode_length"] - 1)
    _, _, done, info = step_grid(grid)
    assert done[0] and info["truncated"][0] and not info["terminated"][0]
    place_grid(grid, pos=stacked, t=GRID["episode_length"] - 1)
    _, _, done, info = step_grid(grid)
    assert info["truncated"][0] and info["terminated"][0]


def test_grid_invariants_under_random_play(grid):
    grid.reset(seed=4)
    x0, y0 = pull(grid, "x", "y")
    assert not (np.array_equal(x0[0], x0[1]) and np.array_equal(y0[0], y0[1]))  # per-replica starts
    tags = 0
    for _ in range(150):
        before_in, before_left = pull(grid, "in_game", "runners_left")
        grid.sample_actions()
        _, reward, done, info = grid.step(grid.data["action"])
        reward, done, terminated = reward.numpy(), done.numpy(), info["terminated"].numpy()
        x, y, in_game, left = pull(grid, "x", "y", "in_game", "runners_left")
        assert ((x >= 0) & (x <= 5) & (y >= 0) & (y <= 5)).all()
        assert (left == in_game[:, 2:].sum(1)).all() and in_game[:, :2].all()
        for e in range(grid.num_envs):
            tagged = []
            for r in range(2, 8):
                # a runner gets 0.25 (-0.5 at a wall), or -3 (-0.5) when tagged, or 0 once out
                allowed = (0.25, -0.25, -3.0, -3.5) if before_in[e, r] else (0.0,)
                assert min(abs(reward[e, r] - v) for v in allowed) < 1e-5
                if reward[e, r] < -2.0:
                    tagged.append(r)
            # a tagger gets -0.25 (-0.5 at a wall) or 10 per credited tag (-0.5 at a wall)
            paid = sum(0 if reward[e, g] < 0 else round(reward[e, g] / 10.0) for g in range(2))
            assert all(min(abs(reward[e, g] - v) for v in (-0.25, -0.75, 10 * round(reward[e, g] / 10),
                                                            10 * round(reward[e, g] / 10) - 0.5)) < 1e-5
                       for g in range(2))
            if not done[e]:
                assert before_left[e] - left[e] == len(tagged)
                # each tagged runner credits every tagger on its cell (shared_tag_reward=0)
                assert paid == sum(int(x[e, g] == x[e, r] and y[e, g] == y[e, r]) for r in tagged for g in range(2))
            assert bool(terminated[e]) == (len(tagged) == before_left[e])
            tags += len(tagged)
    assert tags > 0


def test_grid_shared_reward_and_full_observation():
    env = wb.make("tag_grid", num_envs=1, target="cpu", **GRID_WD)
    assert env.obs_shape == (5 * 8 + 1,)
    place_grid(env, pos=[(2, 2), (4, 4), (2, 3), (5, 0), (0, 0), (3, 3), (2, 4), (4, 1)],
               in_game=[1, 1, 1, 1, 1, 1, 1, 0], t=3)
    obs, reward, _, _ = step_grid(env, {2: DOWN})
    assert reward[0, :3].tolist() == pytest.approx([10.0, 10.0, -3.0])  # WarpDrive: every tagger is paid
    x, y = (a[0] for a in pull(env, "x", "y"))
    o = obs[0, 5]
    assert o[:8].tolist() == pytest.approx((x / 5).tolist()) and o[8:16].tolist() == pytest.approx((y / 5).tolist())
    assert o[16:24].tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    assert o[24:32].tolist() == [1, 1, 0, 1, 1, 1, 1, 0]
    assert o[32:40].tolist() == [0, 0, 0, 0, 0, 1, 0, 0] and o[40] == pytest.approx(4 / 6)
    assert not obs[0, 2].any() and not obs[0, 7].any()


@pytest.mark.parametrize("params", [GRID, GRID_WD])
def test_grid_cpu_and_cuda_agree(params):
    report = wb.check_env("tag_grid", targets=("cpu", "cuda"), num_envs=2, steps=14, **params)
    assert report.episodes_finished > 0  # the reset and final observations compared too


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, params, message", [
    ("tag_continuous", dict(num_taggers=0), "num_taggers must be an int >= 1"),
    ("tag_continuous", dict(num_runners=2.5), "num_runners must be an int >= 1"),
    ("tag_continuous", dict(num_taggers=10, num_runners=9_995), r"num_taggers \+ num_runners = 10005 agents do not fit"),
    ("tag_continuous", dict(num_runners=3, num_other_agents_observed=4),
     r"num_other_agents_observed must be an int in \[1, 3\]"),
    ("tag_continuous", dict(num_other_agents_observed=0), "num_other_agents_observed must be an int in"),
    ("tag_continuous", dict(tagging_distance=0.0), "tagging_distance must be positive"),
    ("tag_continuous", dict(tagging_distance=-0.1), "tagging_distance must be positive"),
    ("tag_continuous", dict(grid_length=0.0), "grid_length .* must be positive"),
    ("tag_continuous", dict(grid_length=-5), "grid_length .* must be positive"),
    ("tag_continuous", dict(max_speed_runner=-1.0), "max_speed_runner must be >= 0"),
    ("tag_continuous", dict(knn_cell_capacity=0), "knn_cell_capacity must be an int >= 1"),
    ("tag_grid", dict(num_runners=0), "num_runners must be an int >= 1"),
    ("tag_grid", dict(grid_length=0), "grid_length must be an int >= 1"),
    ("tag_grid", dict(grid_length=1, num_taggers=3, num_runners=2), "5 agents do not fit on the 4 cells"),
    ("tag_grid", dict(full_observation=2), "full_observation must be 0 or 1"),
])
def test_bad_parameters_name_the_parameter(name, params, message):
    with pytest.raises(wb.EnvDefinitionError, match=message):
        wb.make(name, num_envs=1, target="cpu", **params)
