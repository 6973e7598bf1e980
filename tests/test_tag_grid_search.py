"""tag_grid's block lists and ring search against a plain numpy brute force of the rules.

Every step of random play (and of play started from crowded states: many agents on few cells,
lists that overflow, exact distance ties, agents on walls and corners, taggers out of the game)
is replayed by `reference_step`, which scans every pair of agents, and each observation is
recomputed by `reference_observe`. Positions, in_game, rewards, termination, observations and the
final observation of replicas that were auto-reset must all match."""
import numpy as np
import pytest
import torch

import workbench as wb

# 300 agents on a 31 x 31 grid: taggers' blocks 8 cells a side, runners' 2 (block_width)
MID = dict(num_taggers=30, num_runners=270, grid_length=30, episode_length=1000, wall_hit_penalty=0.5,
           tag_reward_for_tagger=10.0, tag_penalty_for_runner=3.0, step_cost_for_tagger=0.25, shared_tag_reward=0)
# the cuda target (numba's simulator without a GPU): keep it tiny
TINY = dict(num_taggers=3, num_runners=13, grid_length=4, episode_length=6, wall_hit_penalty=0.5,
            tag_reward_for_tagger=10.0, tag_penalty_for_runner=3.0, step_cost_for_tagger=0.25, shared_tag_reward=1)


def reference_observe(p, x, y, in_game, t):
    """Observations of one replica, [A, 6]: every agent scans every opponent in the game."""
    nt, n, L = p["num_taggers"], p["num_taggers"] + p["num_runners"], p["grid_length"]
    obs = np.zeros((n, 6), np.float32)
    ids = np.arange(n)
    for a in range(n):
        if not in_game[a]:
            continue
        runner = a >= nt
        opponents = ids[(ids < nt if runner else ids >= nt) & (in_game != 0)]
        ox = oy = 0.0
        if opponents.size:
            d2 = (x[opponents] - x[a]) ** 2 + (y[opponents] - y[a]) ** 2
            j = opponents[np.flatnonzero(d2 == d2.min())[0]]  # ties: the lowest id
            ox, oy = x[j] / L, y[j] / L
        obs[a] = [x[a] / L, y[a] / L, ox, oy, float(runner), t / p["episode_length"]]
    return obs


def reference_step(p, x, y, in_game, action):
    """One step of one replica by the rules: (x, y, in_game, reward, terminated)."""
    nt, L = p["num_taggers"], p["grid_length"]
    x, y, in_game = x.astype(np.int64), y.astype(np.int64), in_game.copy()
    reward = np.zeros(len(x), np.float32)
    playing = in_game != 0
    nx = x + np.where(action == 1, 1, 0) - np.where(action == 2, 1, 0)
    ny = y + np.where(action == 3, 1, 0) - np.where(action == 4, 1, 0)
    hit = playing & ((nx < 0) | (nx > L) | (ny < 0) | (ny > L))
    x = np.where(playing, np.clip(nx, 0, L), x)
    y = np.where(playing, np.clip(ny, 0, L), y)
    reward[hit] = np.float32(-p["wall_hit_penalty"])
    credits = np.zeros(nt, np.int64)
    tagged = 0
    for r in range(nt, len(x)):
        if not in_game[r]:
            continue
        here = (x[:nt] == x[r]) & (y[:nt] == y[r])  # every tagger tags, in the game or not
        if here.any():
            reward[r] = np.float32(np.float64(reward[r]) - p["tag_penalty_for_runner"])
            in_game[r] = 0
            credits += here
            tagged += 1
        else:
            reward[r] = np.float32(np.float64(reward[r]) + p["step_cost_for_tagger"])
    for g in range(nt):
        k = tagged if p["shared_tag_reward"] else credits[g]
        if k > 0:
            reward[g] = np.float32(np.float64(reward[g]) + p["tag_reward_for_tagger"] * k)
        else:
            reward[g] = np.float32(np.float64(reward[g]) - p["step_cost_for_tagger"])
    return x, y, in_game, reward, not in_game[nt:].any()


def pull(env, *names):
    return [env.data[n].cpu().numpy().copy() for n in names]


def place(env, e, x, y, in_game, t=0):
    """Write one replica's positions and flags (runners_left kept consistent)."""
    nt = env.definition.params["num_taggers"]
    d = env.data
    d["x"][e] = torch.as_tensor(np.asarray(x, np.int32)).to(env.device)
    d["y"][e] = torch.as_tensor(np.asarray(y, np.int32)).to(env.device)
    d["in_game"][e] = torch.as_tensor(np.asarray(in_game, np.int32)).to(env.device)
    d["runners_left"][e] = int(np.asarray(in_game)[nt:].sum())
    d["t"][e] = t


def overflowing_blocks(env, e):
    """How many of replica e's blocks (taggers', runners') hold more agents than their lists can."""
    ns, p = env.definition.namespace, env.definition.params
    nt, side = p["num_taggers"], p["grid_length"] + 1
    x, y, in_game = (v[e] for v in pull(env, "x", "y", "in_game"))
    found = []
    for ids, count in ((np.arange(nt), nt), (np.arange(nt, env.num_agents), p["num_runners"])):
        ids = ids[in_game[ids] != 0]
        width = ns["block_width"](count, side)
        _, per_block = np.unique((x[ids] // width) * side + y[ids] // width, return_counts=True)
        found.append(int((per_block > ns["BLOCK_CAPACITY"]).sum()))
    return tuple(found)


def play_and_compare(env, steps, actions_for, check_start=True):
    """Step `env` with actions_for(k) [E, A]; after each step compare every replica with the
    reference. Returns how many runners were tagged and how many replicas finished."""
    p = env.definition.params
    nt, L = p["num_taggers"], p["grid_length"]
    if check_start:  # the observation the env starts from
        x, y, in_game, t, obs = pull(env, "x", "y", "in_game", "t", "obs")
        for e in range(env.num_envs):
            np.testing.assert_allclose(obs[e], reference_observe(p, x[e], y[e], in_game[e], t[e]), rtol=0, atol=1e-6)
    tags = finished = 0
    for k in range(steps):
        bx, by, bin_game, bt = pull(env, "x", "y", "in_game", "t")
        action = actions_for(k).astype(np.int32)
        _, reward, done, info = env.step(torch.from_numpy(action).to(env.device))
        reward, done = reward.cpu().numpy(), done.cpu().numpy()
        terminated, final_obs = info["terminated"].cpu().numpy(), info["final_obs"].cpu().numpy()
        x, y, in_game, t, obs, blocks = pull(env, "x", "y", "in_game", "t", "obs", "blocks")
        assert not blocks.any()  # the lists are empty again after every step
        for e in range(env.num_envs):
            ex, ey, e_in, e_reward, e_term = reference_step(p, bx[e], by[e], bin_game[e], action[e])
            where = f"step {k}, replica {e}"
            np.testing.assert_allclose(reward[e], e_reward, rtol=1e-6, atol=1e-6, err_msg=where)
            assert bool(terminated[e]) == e_term, where
            e_obs = reference_observe(p, ex, ey, e_in, bt[e] + 1)
            if done[e]:  # auto-reset: the last observation was kept, the new episode observed
                np.testing.assert_allclose(final_obs[e], e_obs, rtol=0, atol=1e-6, err_msg=where)
                finished += 1
            else:
                np.testing.assert_array_equal(x[e], ex, err_msg=where)
                np.testing.assert_array_equal(y[e], ey, err_msg=where)
                np.testing.assert_array_equal(in_game[e], e_in, err_msg=where)
                np.testing.assert_allclose(obs[e], e_obs, rtol=0, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(obs[e], reference_observe(p, x[e], y[e], in_game[e], t[e]), rtol=0,
                                       atol=1e-6, err_msg=where)
            tags += int((bin_game[e][nt:] != 0).sum() - (e_in[nt:] != 0).sum())
        assert ((x >= 0) & (x <= L) & (y >= 0) & (y <= L)).all()
    return tags, finished


@pytest.fixture(scope="module")
def mid():
    return wb.make("tag_grid", num_envs=4, target="cpu", seed=3, **MID)


def test_random_play_matches_brute_force(mid):
    mid.reset(seed=11)
    rng = np.random.default_rng(0)
    tags, _ = play_and_compare(mid, 50, lambda k: rng.integers(0, 5, (mid.num_envs, mid.num_agents)))
    assert tags > 20


def crowded_start(env, rng):
    """Four hard starts, one a replica."""
    p = env.definition.params
    nt, n, L = p["num_taggers"], env.num_agents, p["grid_length"]
    # 0: the runners piled on three cells, the taggers on two cells of one block: every list they
    #    fill overflows, and nobody shares a cell with an opponent
    x = np.where(np.arange(n) < nt, 5, 0)
    y = np.where(np.arange(n) < nt, 5 + np.arange(n) % 2, 0)
    x[nt::3], y[nt::3] = L, L
    x[nt + 1::3], y[nt + 1::3] = 0, 1
    place(env, 0, x, y, np.ones(n, np.int32))
    # 1: exact ties: taggers on a lattice with runners midway between two or four of them, other
    #    runners at equal distances from one tagger, duplicates on shared cells
    x = rng.integers(0, L + 1, n)
    y = rng.integers(0, L + 1, n)
    lattice = [(6 * i, 6 * j) for i in range(1, 5) for j in range(1, 5)]
    for g in range(nt):
        x[g], y[g] = lattice[g % len(lattice)]
    ring = [(3, 0), (0, 3), (-3, 0), (0, -3), (3, 3), (-3, 3), (3, -3), (-3, -3), (1, 2), (2, 1)]
    for i, r in enumerate(range(nt, nt + 120)):
        cx, cy = lattice[i % len(lattice)]
        dx, dy = ring[i % len(ring)]
        x[r], y[r] = cx + dx, cy + dy
    place(env, 1, x, y, np.ones(n, np.int32))
    # 2: everyone on the walls and in the corners
    side = rng.integers(0, 4, n)
    along = rng.integers(0, L + 1, n)
    x = np.select([side == 0, side == 1], [0, L], along)
    y = np.select([side == 2, side == 3], [0, L], along)
    x[nt:nt + 40], y[nt:nt + 40] = 0, 0
    x[nt + 40:nt + 80], y[nt + 40:nt + 80] = L, 0
    place(env, 2, x, y, np.ones(n, np.int32))
    # 3: random cells, a third of the runners already out, two taggers out of the game (they still
    #    tag and are paid but are not observed), one runner left in a far corner
    x = rng.integers(0, L + 1, n)
    y = rng.integers(0, L + 1, n)
    in_game = np.ones(n, np.int32)
    in_game[rng.choice(np.arange(nt, n), (n - nt) // 3, replace=False)] = 0
    in_game[[3, 17]] = 0
    place(env, 3, x, y, in_game, t=7)


def test_crowded_starts_and_ties_match_brute_force(mid):
    mid.reset(seed=12)
    rng = np.random.default_rng(1)
    crowded_start(mid, rng)
    assert all(overflowing_blocks(mid, 0))  # lists of both kinds overflow in replica 0
    n = mid.num_agents

    def actions(k):  # first mostly standing still, so the crowds and ties last; then drifting
        a = rng.integers(0, 5, (mid.num_envs, n))  # toward one corner, piling agents up again
        if k < 8:
            return np.where(rng.random(a.shape) < 0.85, 0, a)
        toward = np.where(rng.random(a.shape) < 0.5, 2, 4)
        return np.where(rng.random(a.shape) < 0.6, toward, a)

    tags, _ = play_and_compare(mid, 30, actions, check_start=False)  # the pushed states' obs are stale
    assert tags > 50


def test_cuda_target_matches_brute_force():
    """The cuda target (a GPU, or numba's CUDA simulator): agents strided over lanes, atomics
    racing for slots; ten runners on one cell overflow the list of their one-cell block."""
    env = wb.make("tag_grid", num_envs=2, target="cuda", seed=4, **TINY)
    x = [0, 4, 4] + [2] * 10 + [0, 4, 1]
    y = [0, 4, 0] + [2] * 10 + [4, 1, 1]
    place(env, 0, x, y, np.ones(env.num_agents, np.int32))
    assert overflowing_blocks(env, 0)[1] == 1
    rng = np.random.default_rng(2)
    _, finished = play_and_compare(env, 10, lambda k: rng.integers(0, 5, (env.num_envs, env.num_agents)),
                                   check_start=False)
    assert finished > 0  # episodes of 6 steps: the auto-reset path is compared too
