"""Tag on an integer grid: taggers chase runners (the rules of WarpDrive's TagGridWorld, with any
number of runners).

Agents 0 .. num_taggers-1 are taggers, the next num_runners agents are runners. Positions are
integer cells (x, y) in [0, L]^2 with L = grid_length (so L + 1 cells a side, as in WarpDrive).
Every replica draws its own start from the counter RNG: each agent on a uniform cell.

Actions are Discrete(5): 0 stay, 1 +x, 2 -x, 3 +y, 4 -y. One step:
  1. every agent in the game moves; a move off the grid is clipped back and costs
     wall_hit_penalty (subtracted, as in WarpDrive).
  2. after all have moved, a runner in the game is tagged when a tagger shares its cell. A tagged
     runner gets -tag_penalty_for_runner and leaves the game (in_game 0: it no longer moves,
     gets no reward and is not observed); a runner not tagged gets +step_cost_for_tagger.
  3. taggers: with shared_tag_reward=1 (WarpDrive's rule) every tagger gets
     tag_reward_for_tagger x (runners tagged this step) when that is > 0, else
     -step_cost_for_tagger. With shared_tag_reward=0 only the taggers on a tagged runner's cell
     are credited (once per runner they share a cell with), the others pay the step cost.
The episode terminates when every runner is tagged and is truncated at episode_length (the
framework's MAX_STEPS).

Observation (an agent out of the game sees zeros):
  partial (full_observation=0), 6 values, WarpDrive's layout:
      own x / L, own y / L, opponent x / L, opponent y / L, is_runner, t / episode_length
      where the opponent is the nearest runner still in the game for a tagger, the nearest
      tagger for a runner (squared distance, ties to the lower id; zeros when there is none).
  full (full_observation=1), 5 * num_agents + 1 values:
      x_j / L for every agent j, then y_j / L, is_runner_j, in_game_j, a one-hot of the agent
      itself, then t / episode_length (WarpDrive's layout with the in_game block added).

How it is computed: no agent scans all the others, so a step costs about O(agents) per replica.
Each kind has a grid of square blocks, block_width(count) cells a side (about two agents of
that kind a block when they are spread out): the taggers' blocks, then the runners', in the state
array blocks [E, block, 1 + BLOCK_CAPACITY], a count and then the ids listed there.
  - `list_taggers` (after `move`): every tagger lists itself in its block (an atomic slot claim).
  - `tag`: a runner reads its block's list of taggers for those on its own cell (crediting each,
    as before); a runner still in the game then lists itself in its block.
  - `observe_agent`: an agent searches the opponents' blocks in square rings outward from its
    own block, and stops once its best squared distance is below the square of the least
    distance (in cells, along x or y) from it to any block not yet searched: the result is exact,
    ties to the lower id included (taggers out of the game, listed for the tag check, are
    skipped).
  - `clear_blocks` empties the lists again (each agent a share of the blocks), so between steps
    the array is all zeros and never depends on the order in which the slot claims ran. After
    an auto-reset `list_after_reset` lists everyone again for the new episode's observation.
A block holding more than BLOCK_CAPACITY agents keeps counting but lists no more: whoever needs
its list (a runner's tag check, a search reaching that block) scans every agent of that kind
instead, so a crowded block costs time, never correctness.
"""
import math

import numpy as np

from workbench.envdef import Box, Discrete, check_ranges, per_agent, per_env
from workbench.envs.tag_continuous import TagDrawer
from workbench.rng import randint

PARAMS = dict(num_taggers=10, num_runners=1, grid_length=10, episode_length=100, wall_hit_penalty=0.1,
              tag_reward_for_tagger=10.0, tag_penalty_for_runner=2.0, step_cost_for_tagger=0.01,
              full_observation=0, shared_tag_reward=1)
PARAM_DOCS = dict(
    num_taggers="Taggers per replica (agents 0 .. num_taggers-1).", num_runners="Runners per replica.",
    grid_length="Side L of the grid (L + 1 cells a side).", episode_length="Steps before truncation.",
    wall_hit_penalty="Cost of a move off the grid.", tag_reward_for_tagger="Reward of a tagger per runner tagged.",
    tag_penalty_for_runner="Cost to a runner of being tagged.",
    step_cost_for_tagger="Cost to a tagger of a step without a tag.",
    full_observation="Whether each agent observes every agent (else the nearest opponent).",
    shared_tag_reward="Whether every tagger shares the reward of a tag (else only the taggers on the cell).",
)

TAGGERS = 0  # the kinds
RUNNERS = 1
BLOCK_CAPACITY = 8  # ids listed per block; a fuller block makes its readers scan every agent of its kind
NO_GAP = 1 << 30  # "no unsearched block on this side"


def block_width(count, side):
    """Side, in cells, of the blocks of a kind with `count` agents on a `side` x `side` grid:
    about two agents a block when they are spread out."""
    return min(max(int(math.sqrt(2.0 * side * side / count)), 1), side)


def blocks_per_side(count, side):
    width = block_width(count, side)
    return (side + width - 1) // width


def _num_blocks(p):
    side = p.grid_length + 1
    return blocks_per_side(p.num_taggers, side) ** 2 + blocks_per_side(p.num_runners, side) ** 2


NUM_AGENTS = lambda p: p.num_taggers + p.num_runners  # noqa: E731
MAX_STEPS = "episode_length"
OBSERVATION = Box(low=0.0, high=1.0,  # (positions over the grid, flags, the clock over the episode)
                  shape=(lambda p: 5 * (p.num_taggers + p.num_runners) + 1 if p.full_observation else 6,))
ACTION = Discrete(5)
ACTIVE = "in_game"  # runners out of the game are left out of the learner's losses and statistics
AGENT_GROUPS = lambda p: {"taggers": range(0, p.num_taggers),  # noqa: E731
                          "runners": range(p.num_taggers, p.num_taggers + p.num_runners)}
STATE = dict(x=per_agent("int32"), y=per_agent("int32"), in_game=per_agent("int32"),
             tags_made=per_agent("int32"), runners_left=per_env("int32"), tagged_now=per_env("int32"),
             blocks=per_env("int32", (_num_blocks, BLOCK_CAPACITY + 1)))  # [E, block, (count, ids...)]


PARAM_RANGES = dict(wall_hit_penalty="(-inf, inf)", tag_reward_for_tagger="(-inf, inf)",
                    tag_penalty_for_runner="(-inf, inf)", step_cost_for_tagger="(-inf, inf)")


def validate_params(p):
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    for name in ("num_taggers", "num_runners", "grid_length", "episode_length"):
        v = getattr(p, name)
        if not is_int(v) or v < 1:
            return f"{name} must be an int >= 1, got {v!r}"
    cells = (p.grid_length + 1) ** 2
    if p.num_taggers + p.num_runners > cells:
        return (f"num_taggers + num_runners = {p.num_taggers + p.num_runners} agents do not fit on the "
                f"{cells} cells of a grid with grid_length={p.grid_length}")
    for name in ("full_observation", "shared_tag_reward"):
        if getattr(p, name) not in (0, 1):
            return f"{name} must be 0 or 1, got {getattr(p, name)!r}"
    return check_ranges(p, PARAM_RANGES)


# -- helpers (compiled into the kernels with the phases) ------------------------------------

def blocks_of(kind):
    """(first block, block width, blocks per side) of one kind's blocks, the taggers' first."""
    side = grid_length + 1
    tagger_side = blocks_per_side(num_taggers, side)
    if kind == RUNNERS:
        return tagger_side * tagger_side, block_width(num_runners, side), blocks_per_side(num_runners, side)
    return 0, block_width(num_taggers, side), tagger_side


def block_of(kind, px, py):
    first, width, per_side = blocks_of(kind)
    return first + px // width + per_side * (py // width)


def list_agent(env, agent, kind, px, py, blocks):
    """Add the agent to its block's list (an atomic slot claim; the count still grows past capacity)."""
    b = block_of(kind, px, py)
    slot = atomic_add(blocks, (env, b, 0), np.int32(1))
    if slot < BLOCK_CAPACITY:
        blocks[env, b, 1 + slot] = agent


def nearer(j, dx, dy, best, best_d2):
    """(id, squared distance) of the better of candidate j and the best so far (ties: lower id)."""
    d2 = dx * dx + dy * dy
    if best < 0 or d2 < best_d2 or (d2 == best_d2 and j < best):
        return j, d2
    return best, best_d2


# -- reset ---------------------------------------------------------------------------------

def reset(env, agent, key, x, y, in_game, tags_made, runners_left, tagged_now):
    x[env, agent] = randint(key, 0, grid_length + 1)
    y[env, agent] = randint(key, 1, grid_length + 1)
    in_game[env, agent] = 1
    tags_made[env, agent] = 0
    if agent == 0:
        runners_left[env] = num_runners
        tagged_now[env] = 0


def list_after_reset(env, agent, x, y, blocks):
    if agent < num_taggers or not full_observation:
        list_agent(env, agent, TAGGERS if agent < num_taggers else RUNNERS, x[env, agent], y[env, agent], blocks)


RESET = [reset, list_after_reset]


# -- step phases ---------------------------------------------------------------------------

def move(env, agent, action, x, y, in_game, reward, tags_made, tagged_now):
    if agent == 0:
        tagged_now[env] = 0
    tags_made[env, agent] = 0
    if in_game[env, agent] != 0:
        act = action[env, agent]
        nx = x[env, agent]
        ny = y[env, agent]
        if act == 1:
            nx += 1
        elif act == 2:
            nx -= 1
        elif act == 3:
            ny += 1
        elif act == 4:
            ny -= 1
        hit = nx < 0 or nx > grid_length or ny < 0 or ny > grid_length
        x[env, agent] = min(max(nx, 0), grid_length)
        y[env, agent] = min(max(ny, 0), grid_length)
        if hit:
            reward[env, agent] = -wall_hit_penalty


def list_taggers(env, agent, x, y, blocks):
    if agent < num_taggers:  # every tagger tags (taggers never leave the game)
        list_agent(env, agent, TAGGERS, x[env, agent], y[env, agent], blocks)


def tag(env, agent, x, y, in_game, reward, tags_made, runners_left, tagged_now, blocks):
    if agent < num_taggers or in_game[env, agent] == 0:
        return
    px = x[env, agent]
    py = y[env, agent]
    b = block_of(TAGGERS, px, py)
    n = blocks[env, b, 0]
    taggers_here = 0
    for s in range(n if n <= BLOCK_CAPACITY else num_taggers):  # the block's taggers, or all of them
        j = np.int64(blocks[env, b, 1 + s] if n <= BLOCK_CAPACITY else s)
        if x[env, j] == px and y[env, j] == py:
            taggers_here += 1
            atomic_add(tags_made, (env, j), np.int32(1))  # several runners may credit one tagger
    if taggers_here > 0:
        reward[env, agent] -= tag_penalty_for_runner
        in_game[env, agent] = 0
        atomic_add(runners_left, env, np.int32(-1))
        atomic_add(tagged_now, env, np.int32(1))
    else:
        reward[env, agent] += step_cost_for_tagger
        if not full_observation:  # still in the game: listed for the taggers' search
            list_agent(env, agent, RUNNERS, px, py, blocks)


def settle(env, agent, reward, tags_made, runners_left, tagged_now, terminated):
    if agent < num_taggers:
        n = tagged_now[env] if shared_tag_reward else tags_made[env, agent]
        if n > 0:
            reward[env, agent] += tag_reward_for_tagger * n
        else:
            reward[env, agent] -= step_cost_for_tagger
    if agent == 0 and runners_left[env] <= 0:
        terminated[env] = 1


STEP = [move, list_taggers, tag, settle]


# -- observation phases --------------------------------------------------------------------

def observe_agent(env, agent, t, x, y, in_game, blocks, obs):
    if in_game[env, agent] == 0:
        for i in range(obs.shape[2]):
            obs[env, agent, i] = 0.0
        return
    if full_observation:
        for j in range(NUM_AGENTS):
            obs[env, agent, j] = x[env, j] / grid_length
            obs[env, agent, NUM_AGENTS + j] = y[env, j] / grid_length
            obs[env, agent, 2 * NUM_AGENTS + j] = 0.0 if j < num_taggers else 1.0
            obs[env, agent, 3 * NUM_AGENTS + j] = 1.0 if in_game[env, j] != 0 else 0.0
            obs[env, agent, 4 * NUM_AGENTS + j] = 1.0 if j == agent else 0.0
        obs[env, agent, 5 * NUM_AGENTS] = t[env] / episode_length
        return
    # the nearest opponent in the game: square rings of the opponents' blocks outward from this
    # agent's block, until nothing outside the searched square can be as near
    runner = agent >= num_taggers
    first, width, per_side = blocks_of(TAGGERS if runner else RUNNERS)
    px = np.int64(x[env, agent])
    py = np.int64(y[env, agent])
    cx = px // width
    cy = py // width
    best = np.int64(-1)
    best_d2 = np.int64(0)
    overflow = False
    r_max = max(max(cx, per_side - 1 - cx), max(cy, per_side - 1 - cy))
    r = 0
    while r <= r_max and not overflow:
        for gy in range(max(cy - r, 0), min(cy + r, per_side - 1) + 1):
            if gy == cy - r or gy == cy + r:  # a whole row of the ring
                gx = max(cx - r, 0)
                gx_last = min(cx + r, per_side - 1)
                gx_step = 1
            else:  # its two ends
                gx = cx - r
                gx_last = cx + r
                gx_step = 2 * r
            while gx <= gx_last:
                if gx >= 0 and gx < per_side:
                    b = first + gx + per_side * gy
                    n = blocks[env, b, 0]
                    overflow = overflow or n > BLOCK_CAPACITY
                    for s in range(1, min(n, BLOCK_CAPACITY) + 1):
                        j = np.int64(blocks[env, b, s])
                        if in_game[env, j] != 0:  # the taggers' lists hold every tagger
                            best, best_d2 = nearer(j, x[env, j] - px, y[env, j] - py, best, best_d2)
                gx += gx_step
        # an agent in a block outside the searched square is at least `gap` cells away along x or y
        gap = NO_GAP
        if cx - r > 0:
            gap = min(gap, px - (cx - r) * width + 1)
        if cx + r < per_side - 1:
            gap = min(gap, (cx + r + 1) * width - px)
        if cy - r > 0:
            gap = min(gap, py - (cy - r) * width + 1)
        if cy + r < per_side - 1:
            gap = min(gap, (cy + r + 1) * width - py)
        if best >= 0 and best_d2 < gap * gap:
            break
        r += 1
    if overflow:  # a list it needed was incomplete: scan every opponent instead
        best = np.int64(-1)
        for j in range(np.int64(0 if runner else num_taggers), np.int64(num_taggers if runner else NUM_AGENTS)):
            if in_game[env, j] != 0:
                best, best_d2 = nearer(j, x[env, j] - px, y[env, j] - py, best, best_d2)
    obs[env, agent, 0] = x[env, agent] / grid_length
    obs[env, agent, 1] = y[env, agent] / grid_length
    obs[env, agent, 2] = x[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 3] = y[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 4] = 1.0 if runner else 0.0
    obs[env, agent, 5] = t[env] / episode_length


def clear_blocks(env, agent, blocks):
    """Empty the lists again (each agent a share of the blocks), so the state never depends on
    the order in which the slot claims ran."""
    b = agent
    while b < blocks.shape[1]:
        for s in range(1, min(blocks[env, b, 0], BLOCK_CAPACITY) + 1):
            blocks[env, b, s] = 0
        blocks[env, b, 0] = 0
        b += NUM_AGENTS


observe = [observe_agent, clear_blocks]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

class TagGridDrawer(TagDrawer):
    """Tag's drawing (envs/tag_continuous.py) on the integer grid: agents as squares on the cells."""
    grid = True


RENDER = TagGridDrawer
