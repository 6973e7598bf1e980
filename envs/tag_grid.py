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

How it is computed (O(agents) per replica and step, no agent scans all the others):
  Cell maps. Two state arrays hold one int32 per cell of the (L+1)^2 grid and every replica:
      tagger_at and runner_at. They are all zeros between steps: each phase that writes a cell
      has a later phase that zeroes it again, so no phase clears a whole map and the state never
      depends on the order in which atomics ran.
  Tags. In `move` every tagger writes 1 to tagger_at at its new cell (the rule counts every
      tagger). In `tag` a runner in the game reads its cell there: nonzero means tagged, and the
      runner adds 1 to runner_at at its cell. In `settle` each tagger reads runner_at at its
      cell: the number of runners tagged there, its credit with shared_tag_reward=0 (tags_made);
      it zeroes its tagger_at cell; `clear_tag_counts` then zeroes its runner_at cell.
  Nearest opponent (partial observation). `bin_agents`: every agent in the game writes
      num_agents - id into its kind's map with atomic_max, so a cell holds its lowest id (the only
      one of that cell that can win a tie). `fill_blocks`: that lowest id claims a slot in a
      list of its kind's coarse block, a square of block_width(count) cells (about two agents a
      block when spread out): block_count [E, blocks] and block_members [E, blocks,
      BLOCK_CAPACITY], the taggers' blocks first, then the runners'. `observe_agent` searches
      square rings of the opponent's blocks outward from its own and stops once its best
      squared distance is below the square of the least distance (in cells, along x or y) to
      any block not yet searched: exact, ties to the lower id included. A block whose list
      overflowed (more occupied cells than BLOCK_CAPACITY) is read cell by cell from the map
      instead, so overflow costs time, never correctness, and many agents on one cell cost
      nothing. `clear_search` zeroes the map cells, the block counts and the used slots.
  Positions stay in [0, L] (the rules keep them there); state pushed from outside must too.
"""
import math

import numpy as np

from workbench.envdef import Box, Discrete, per_agent, per_env
from workbench.rng import randint

PARAMS = dict(num_taggers=10, num_runners=1, grid_length=10, episode_length=100, wall_hit_penalty=0.1,
              tag_reward_for_tagger=10.0, tag_penalty_for_runner=2.0, step_cost_for_tagger=0.01,
              full_observation=0, shared_tag_reward=1)

TAGGERS = 0  # planes of the cell maps: the taggers and the runners binned for the search ...
RUNNERS = 1
TAGS = 2  # ... and the taggers of this step's tag check
MAX_BLOCK_WIDTH = 5  # a block's occupancy mask has a bit per cell: at most 25 bits of an int32
NO_GAP = 1 << 30  # "no unsearched block on this side"


def block_width(count, side):
    """Side, in cells, of the search blocks of a kind with `count` agents on a `side` x `side`
    grid: about two agents a block when they are spread out, at most MAX_BLOCK_WIDTH."""
    return min(max(int(math.sqrt(2.0 * side * side / count)), 1), MAX_BLOCK_WIDTH, side)


def blocks_per_side(count, side):
    width = block_width(count, side)
    return (side + width - 1) // width


def _num_cells(p):
    return (p.grid_length + 1) ** 2


def _num_blocks(p):
    side = p.grid_length + 1
    return blocks_per_side(p.num_taggers, side) ** 2 + blocks_per_side(p.num_runners, side) ** 2


NUM_AGENTS = lambda p: p.num_taggers + p.num_runners  # noqa: E731
MAX_STEPS = "episode_length"
OBSERVATION = Box(shape=(lambda p: 5 * (p.num_taggers + p.num_runners) + 1 if p.full_observation else 6,))
ACTION = Discrete(5)
AGENT_GROUPS = lambda p: {"taggers": range(0, p.num_taggers),  # noqa: E731
                          "runners": range(p.num_taggers, p.num_taggers + p.num_runners)}
STATE = dict(x=per_agent("int32"), y=per_agent("int32"), in_game=per_agent("int32"),
             tags_made=per_agent("int32"), runners_left=per_env("int32"), tagged_now=per_env("int32"),
             cells=per_env("int32", (3, _num_cells)),  # [E, plane, cell]: num_agents - lowest id there, or 0
             masks=per_env("int32", (_num_blocks,)),  # [E, block]: a bit per occupied cell of the block
             binned_cell=per_agent("int32"))  # 1 + the agent's cell in its search plane, 0 when not binned


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
    return None


# -- helpers (compiled into the kernels with the phases) ------------------------------------

def cell(px, py):
    """Index of cell (px, py) in a plane of the cell maps."""
    return np.int64(px) + (grid_length + 1) * np.int64(py)


def blocks_of(kind):
    """(first block, block width, blocks per side) of one kind's search blocks, the taggers' first."""
    side = grid_length + 1
    tagger_side = blocks_per_side(num_taggers, side)
    if kind == RUNNERS:
        return tagger_side * tagger_side, block_width(num_runners, side), blocks_per_side(num_runners, side)
    return 0, block_width(num_taggers, side), tagger_side


def block_and_bit(kind, px, py):
    """(block index, mask bit) of cell (px, py) among one kind's blocks."""
    first, width, per_side = blocks_of(kind)
    b = first + px // width + per_side * (py // width)
    return b, np.int32(1 << ((px % width) + width * (py % width)))


def nearer(j, dx, dy, best, best_d2):
    """(id, squared distance) of the better of candidate j and the best so far (ties: lower id)."""
    d2 = dx * dx + dy * dy
    if best < 0 or d2 < best_d2 or (d2 == best_d2 and j < best):
        return j, d2
    return best, best_d2


def bin_agent(env, agent, x, y, cells, masks, binned_cell):
    """Put an agent in the game on its kind's search plane: a cell keeps its lowest id, and the
    first agent on an empty cell sets the cell's bit in its block's mask."""
    kind = TAGGERS if agent < num_taggers else RUNNERS
    px = np.int64(x[env, agent])
    py = np.int64(y[env, agent])
    c = cell(px, py)
    if atomic_max(cells, (env, kind, c), np.int32(NUM_AGENTS - agent)) == 0:
        b, bit = block_and_bit(kind, px, py)
        atomic_add(masks, (env, b), bit)
    binned_cell[env, agent] = c + 1


def unbin_agent(env, agent, cells, masks, binned_cell):
    """Undo bin_agent (from binned_cell, not the position, which may have been set from outside):
    the cell's lowest id clears the cell and its bit."""
    c = np.int64(binned_cell[env, agent]) - 1
    if c < 0:
        return
    binned_cell[env, agent] = 0
    kind = TAGGERS if agent < num_taggers else RUNNERS
    if cells[env, kind, c] == NUM_AGENTS - agent:
        cells[env, kind, c] = 0
        b, bit = block_and_bit(kind, c % (grid_length + 1), c // (grid_length + 1))
        atomic_add(masks, (env, b), -bit)


# -- reset ---------------------------------------------------------------------------------

def reset(env, agent, key, x, y, in_game, tags_made, runners_left, tagged_now, cells, masks, binned_cell):
    unbin_agent(env, agent, cells, masks, binned_cell)
    x[env, agent] = randint(key, 0, grid_length + 1)
    y[env, agent] = randint(key, 1, grid_length + 1)
    in_game[env, agent] = 1
    tags_made[env, agent] = 0
    if agent == 0:
        runners_left[env] = num_runners
        tagged_now[env] = 0


def bin_after_reset(env, agent, x, y, cells, masks, binned_cell):
    if not full_observation:
        bin_agent(env, agent, x, y, cells, masks, binned_cell)


RESET = [reset, bin_after_reset]


# -- step phases ---------------------------------------------------------------------------

def move(env, agent, action, x, y, in_game, reward, tags_made, tagged_now, cells, masks, binned_cell):
    unbin_agent(env, agent, cells, masks, binned_cell)  # the last observation's binning
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
    if agent < num_taggers:  # every tagger tags (taggers never leave the game)
        atomic_max(cells, (env, TAGS, cell(x[env, agent], y[env, agent])), np.int32(NUM_AGENTS - agent))


def tag(env, agent, x, y, in_game, reward, tags_made, runners_left, tagged_now, cells, masks, binned_cell):
    if agent < num_taggers or in_game[env, agent] == 0:
        return
    lowest_tagger = cells[env, TAGS, cell(x[env, agent], y[env, agent])]
    if lowest_tagger != 0:
        reward[env, agent] -= tag_penalty_for_runner
        in_game[env, agent] = 0
        atomic_add(runners_left, env, np.int32(-1))
        atomic_add(tagged_now, env, np.int32(1))
        # credit the cell's lowest tagger; in `settle` the others on the cell copy its count
        atomic_add(tags_made, (env, NUM_AGENTS - lowest_tagger), np.int32(1))
    else:
        reward[env, agent] += step_cost_for_tagger
        if not full_observation:
            bin_agent(env, agent, x, y, cells, masks, binned_cell)


def settle(env, agent, x, y, in_game, reward, tags_made, runners_left, tagged_now, terminated, cells, masks,
           binned_cell):
    if agent < num_taggers:
        lowest = NUM_AGENTS - cells[env, TAGS, cell(x[env, agent], y[env, agent])]
        if lowest != agent:  # one credit per runner tagged on this tagger's cell
            tags_made[env, agent] = tags_made[env, lowest]
        n = tagged_now[env] if shared_tag_reward else tags_made[env, agent]
        if n > 0:
            reward[env, agent] += tag_reward_for_tagger * n
        else:
            reward[env, agent] -= step_cost_for_tagger
        if in_game[env, agent] != 0 and not full_observation:
            bin_agent(env, agent, x, y, cells, masks, binned_cell)
    if agent == 0 and runners_left[env] <= 0:
        terminated[env] = 1


STEP = [move, tag, settle]


# -- observation ---------------------------------------------------------------------------

def observe(env, agent, t, x, y, in_game, cells, masks, obs):
    if agent < num_taggers:  # this step's tag check is done: leave its plane all zeros
        cells[env, TAGS, cell(x[env, agent], y[env, agent])] = 0
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
    # the nearest opponent: square rings of the opponents' blocks outward from this agent's block
    runner = agent >= num_taggers
    kind = TAGGERS if runner else RUNNERS
    first, width, per_side = blocks_of(kind)
    side = grid_length + 1
    px = np.int64(x[env, agent])
    py = np.int64(y[env, agent])
    cx = px // width
    cy = py // width
    best = np.int64(-1)
    best_d2 = np.int64(0)
    r_max = max(max(cx, per_side - 1 - cx), max(cy, per_side - 1 - cy))
    r = 0
    while r <= r_max:
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
                    mask = masks[env, first + gx + per_side * gy]
                    k = 0
                    while mask != 0:  # each occupied cell of the block: its lowest id
                        if mask & 1:
                            fx = gx * width + k % width
                            fy = gy * width + k // width
                            j = np.int64(NUM_AGENTS - cells[env, kind, fx + side * fy])
                            best, best_d2 = nearer(j, fx - px, fy - py, best, best_d2)
                        mask >>= 1
                        k += 1
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
    obs[env, agent, 0] = x[env, agent] / grid_length
    obs[env, agent, 1] = y[env, agent] / grid_length
    obs[env, agent, 2] = x[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 3] = y[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 4] = 1.0 if runner else 0.0
    obs[env, agent, 5] = t[env] / episode_length
