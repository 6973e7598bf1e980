"""Tag on a continuous square arena: taggers chase runners (the rules of WarpDrive's TagContinuous).

Agents 0 .. num_taggers-1 are taggers, the next num_runners agents are runners. Each agent has a
position (x, y) in [0, L]^2 (L = grid_length), a speed, a heading, an acceleration and an
in_game flag. Every replica draws its own start from the counter RNG: positions uniform in the
arena, a heading from {0, pi/2, pi, 3pi/2}, speed and acceleration 0, everyone in the game.

Actions are MultiDiscrete((num_acceleration_levels + 1, num_turn_levels + 1)): index 0 of each is
the no-op (0), index i >= 1 the i-th of num_*_levels values evenly spaced over [min, max] (as
numpy.linspace). The defaults give 10 x 21 actions. One step, per agent in the game:
    acceleration += da;  heading = (heading + dturn) mod 2pi
    speed = clip(speed + acceleration, 0, max_speed_tagger or max_speed_runner)
    acceleration = 0 when the speed sits at 0 or at the cap
    (x, y) += speed * (cos heading, sin heading), clipped to the arena; crossing a wall costs
    edge_hit_penalty (a value added to the reward, so <= 0 is a penalty).
Agents out of the game have speed and heading 0 and stay where they are.
After all have moved, a runner in the game whose nearest tagger is within the radius
tagging_distance * grid_length (as in WarpDrive; distance <= radius counts; ties go to the lower
tagger id) is tagged: the runner gets tag_penalty_for_runner, that tagger tag_reward_for_tagger
(one tagger can collect it from several runners in one step), and the runner leaves the game if
runner_exits_game_after_tagged. Agents in the game at the start of the step also get a per-step
term: step_penalty_for_tagger (taggers) or step_reward_for_runner (runners). On the episode's
last step (t + 1 == episode_length) every runner still in the game gets
end_of_game_reward_for_runner. The episode terminates when no runner is left and is truncated
at episode_length (the framework's MAX_STEPS). Sign conventions follow WarpDrive: every reward
parameter is added as given.

Observation of agent a (zeros, knn_id -1, when a is out of the game), 7 features per slot:
    slot i, at [7i : 7i + 7]: (x_j - x_a) / (sqrt2 L), (y_j - y_a) / (sqrt2 L),
        (speed_j - speed_a) / S, (acc_j - acc_a) / S, (heading_j - heading_a) / 2pi,
        type_j (1 tagger, 0 runner), in_game_j
        where S = max(max_speed_tagger, max_speed_runner) + 1e-10.
    partial (full_observation=0): k = num_other_agents_observed slots, the k nearest other agents
        still in the game, nearest first (ties by lower id); missing slots are zeros (flag 0).
        Their ids are in the state array knn_id [E, A, k] (-1 for an empty slot).
    full (full_observation=1): num_agents - 1 slots, every other agent in id order (agents out of
        the game included, with flag 0).
    then own state x/L, y/L, speed/S, acc/S, heading/2pi, type, in_game (= 1), then t/episode_length.
Size: 7k + 8 (partial) or 7(num_agents - 1) + 8 (full).

Neighbour search: each replica keeps a uniform grid of side G (about sqrt(num_agents / 2) cells
per side, or knn_cells_per_side) in state arrays: cell_count [E, G*G] and cell_members
[E, G*G, knn_cell_capacity]. A phase clears the counts, a phase bins every agent in the game
(atomic slot claim), then each agent searches rings of cells outward from its own until it has k
candidates and the k-th is nearer than anything outside the searched square: exact k-NN. A cell
holding more agents than its capacity makes that agent's search fall back to a scan of all
agents, so overflow costs time, never correctness. The tag check uses the same grid holding
only the taggers, searching the cells within the tagging radius. The cuda-c twin
(tag_continuous.cu) keeps the k nearest in registers while it searches, and in replicas of at most
128 agents scans every agent instead of the rings (the lanes then walk the same candidates in
step); every target finds the same exact k-NN.
"""
import math

import numpy as np

from workbench.envdef import Box, MultiDiscrete, check_ranges, per_agent, per_env
from workbench.render import PointsDrawer
from workbench.rng import randint, uniform_range

MAX_AGENTS = 10_000
TWO_PI = 2.0 * math.pi
SQRT2 = math.sqrt(2.0)
NO_BOUND = 1.0e18

PARAMS = dict(
    num_taggers=1, num_runners=10, grid_length=10.0, episode_length=100,
    max_speed_tagger=1.0, max_speed_runner=1.0,
    max_acceleration=1.0, min_acceleration=-1.0, max_turn=math.pi / 2, min_turn=-math.pi / 2,
    num_acceleration_levels=9, num_turn_levels=20,
    edge_hit_penalty=0.0, full_observation=0, num_other_agents_observed=2,
    tagging_distance=0.01, tag_reward_for_tagger=1.0, step_penalty_for_tagger=0.0,
    tag_penalty_for_runner=-1.0, step_reward_for_runner=0.0, end_of_game_reward_for_runner=1.0,
    runner_exits_game_after_tagged=1, knn_cell_capacity=16, knn_cells_per_side=0,
)
PARAM_DOCS = dict(
    num_taggers="Taggers per replica (agents 0 .. num_taggers-1).", num_runners="Runners per replica.",
    grid_length="Side L of the square arena.", episode_length="Steps before truncation.",
    max_speed_tagger="Speed cap of a tagger.", max_speed_runner="Speed cap of a runner.",
    max_acceleration="Greatest acceleration step.", min_acceleration="Least acceleration step.",
    max_turn="Greatest turn per step (rad).", min_turn="Least turn per step (rad).",
    num_acceleration_levels="Acceleration actions besides the no-op.",
    num_turn_levels="Turn actions besides the no-op.",
    edge_hit_penalty="Reward added when an agent hits a wall (<= 0 is a penalty).",
    full_observation="Whether each agent observes every other agent (else its nearest k).",
    num_other_agents_observed="k: the nearest agents in a partial observation.",
    tagging_distance="Tag radius as a fraction of grid_length.", tag_reward_for_tagger="Reward of a tagger per tag.",
    step_penalty_for_tagger="Reward added to a tagger every step.",
    tag_penalty_for_runner="Reward added to a runner when tagged.",
    step_reward_for_runner="Reward added to a runner every step in the game.",
    end_of_game_reward_for_runner="Reward of a runner still in the game at the last step.",
    runner_exits_game_after_tagged="Whether a tagged runner leaves the game.",
    knn_cell_capacity="Agents a neighbour-search cell lists (more: a slower scan, same result).",
    knn_cells_per_side="Neighbour-search grid side (0: about sqrt(agents / 2)).",
)


def cells_per_side(n_agents, override):
    """Side of the neighbour grid: about two agents per cell when all are in the game."""
    if override > 0:
        return override
    return min(max(int(math.sqrt(n_agents / 2.0)), 1), 256)


def _side_of(p):
    return cells_per_side(p.num_taggers + p.num_runners, p.knn_cells_per_side)


def _obs_size(p):
    slots = p.num_taggers + p.num_runners - 1 if p.full_observation else p.num_other_agents_observed
    return 7 * slots + 8


NUM_AGENTS = lambda p: p.num_taggers + p.num_runners  # noqa: E731
MAX_STEPS = "episode_length"
OBSERVATION = Box(shape=(_obs_size,))
ACTION = MultiDiscrete((lambda p: p.num_acceleration_levels + 1, lambda p: p.num_turn_levels + 1))
ACTIVE = "in_game"  # runners out of the game are left out of the learner's losses and statistics
AGENT_GROUPS = lambda p: {"taggers": range(0, p.num_taggers),  # noqa: E731
                          "runners": range(p.num_taggers, p.num_taggers + p.num_runners)}
STATE = dict(
    x=per_agent(), y=per_agent(), speed=per_agent(), heading=per_agent(), accel=per_agent(),
    in_game=per_agent("int32"),
    grid_slot=per_agent("int32"),
    runners_left=per_env("int32"),
    cell_count=per_env("int32", (lambda p: _side_of(p) ** 2,)),
    cell_members=per_env("int32", (lambda p: _side_of(p) ** 2, "knn_cell_capacity")),
    knn_d2=per_agent("float32", (lambda p: max(1, p.num_other_agents_observed),)),
    knn_id=per_agent("int32", (lambda p: max(1, p.num_other_agents_observed),)),
)


PARAM_RANGES = dict(grid_length="(0, inf)", tagging_distance="(0, inf)", max_speed_tagger="[0, inf)",
                    max_speed_runner="[0, inf)", max_acceleration="(-inf, inf)", min_acceleration="(-inf, inf)",
                    max_turn="(-inf, inf)", min_turn="(-inf, inf)", edge_hit_penalty="(-inf, inf)",
                    tag_reward_for_tagger="(-inf, inf)", step_penalty_for_tagger="(-inf, inf)",
                    tag_penalty_for_runner="(-inf, inf)", step_reward_for_runner="(-inf, inf)",
                    end_of_game_reward_for_runner="(-inf, inf)")


def validate_params(p):
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    for name in ("num_taggers", "num_runners"):
        v = getattr(p, name)
        if not is_int(v) or v < 1:
            return f"{name} must be an int >= 1, got {v!r}"
    n = p.num_taggers + p.num_runners
    if n > MAX_AGENTS:
        return (f"num_taggers + num_runners = {n} agents do not fit: this env takes at most {MAX_AGENTS} "
                f"agents per replica")
    if not p.grid_length > 0:
        return f"grid_length (the arena side) must be positive, got {p.grid_length!r}"
    if not p.tagging_distance > 0:
        return (f"tagging_distance must be positive (the radius is tagging_distance * grid_length), "
                f"got {p.tagging_distance!r}")
    if not is_int(p.episode_length) or p.episode_length < 1:
        return f"episode_length must be an int >= 1, got {p.episode_length!r}"
    for name in ("max_speed_tagger", "max_speed_runner"):
        if not getattr(p, name) >= 0:
            return f"{name} must be >= 0, got {getattr(p, name)!r}"
    for name in ("num_acceleration_levels", "num_turn_levels"):
        v = getattr(p, name)
        if not is_int(v) or v < 0:
            return f"{name} must be an int >= 0 (the no-op is added to it), got {v!r}"
    for name in ("full_observation", "runner_exits_game_after_tagged"):
        if getattr(p, name) not in (0, 1):
            return f"{name} must be 0 or 1, got {getattr(p, name)!r}"
    k = p.num_other_agents_observed
    if not p.full_observation and (not is_int(k) or k < 1 or k > n - 1):
        return (f"num_other_agents_observed must be an int in [1, {n - 1}] (the other agents: "
                f"num_taggers + num_runners - 1), got {k!r}")
    if not is_int(p.knn_cell_capacity) or p.knn_cell_capacity < 1:
        return f"knn_cell_capacity must be an int >= 1, got {p.knn_cell_capacity!r}"
    if not is_int(p.knn_cells_per_side) or not 0 <= p.knn_cells_per_side <= 4096:
        return f"knn_cells_per_side must be an int in [0, 4096] (0: automatic), got {p.knn_cells_per_side!r}"
    if p.min_acceleration > p.max_acceleration or p.min_turn > p.max_turn:
        return "min_acceleration/min_turn must not exceed max_acceleration/max_turn"
    return check_ranges(p, PARAM_RANGES)


# -- helpers (compiled into the kernels with the phases) ------------------------------------

def grid_side():
    return cells_per_side(num_taggers + num_runners, knn_cells_per_side)


def cell_of(v, side):
    c = int(v * (side / grid_length))
    if c < 0:
        return 0
    if c >= side:
        return side - 1
    return c


def accel_value(i):
    if i <= 0:
        return 0.0
    if num_acceleration_levels == 1:
        return min_acceleration
    return min_acceleration + (max_acceleration - min_acceleration) * (i - 1) / (num_acceleration_levels - 1)


def turn_value(i):
    if i <= 0:
        return 0.0
    if num_turn_levels == 1:
        return min_turn
    return min_turn + (max_turn - min_turn) * (i - 1) / (num_turn_levels - 1)


def clear_cells(env, agent, cell_count):
    c = agent
    while c < cell_count.shape[1]:
        cell_count[env, c] = 0
        c += NUM_AGENTS


def agent_cell(env, agent, x, y):
    side = grid_side()
    return cell_of(x[env, agent], side) + side * cell_of(y[env, agent], side)


def grid_insert(env, agent, x, y, cell_count, cell_members, grid_slot):
    c = agent_cell(env, agent, x, y)
    slot = atomic_add(cell_count, (env, c), np.int32(1))
    if slot < knn_cell_capacity:
        cell_members[env, c, slot] = agent
        grid_slot[env, agent] = slot
    else:
        grid_slot[env, agent] = -1


def grid_remove(env, agent, x, y, cell_count, cell_members, grid_slot):
    """Undo this agent's insert and clear its share of the counts: after every use the grid is all
    zeros again, so the state does not depend on the order in which the atomics ran."""
    slot = grid_slot[env, agent]
    if slot >= 0:
        cell_members[env, agent_cell(env, agent, x, y), slot] = 0
        grid_slot[env, agent] = -1
    clear_cells(env, agent, cell_count)


def knn_consider(env, agent, j, px, py, x, y, found, knn_d2, knn_id):
    """Insert agent j into a's sorted top-k (by squared distance, then id); returns the new count."""
    dx = x[env, j] - px
    dy = y[env, j] - py
    d2 = dx * dx + dy * dy
    last = num_other_agents_observed - 1
    if found > last:
        worst = knn_d2[env, agent, last]
        if d2 > worst or (d2 == worst and j > knn_id[env, agent, last]):
            return found
        pos = last
    else:
        pos = found
        found += 1
    while pos > 0:
        prev = knn_d2[env, agent, pos - 1]
        if d2 < prev or (d2 == prev and j < knn_id[env, agent, pos - 1]):
            knn_d2[env, agent, pos] = prev
            knn_id[env, agent, pos] = knn_id[env, agent, pos - 1]
            pos -= 1
        else:
            break
    knn_d2[env, agent, pos] = d2
    knn_id[env, agent, pos] = j
    return found


def knn_scan_cell(env, agent, c, px, py, x, y, cell_count, cell_members, found, knn_d2, knn_id):
    """Consider every member of cell c; -1 when the cell overflowed (its list is incomplete)."""
    n = cell_count[env, c]
    if n > knn_cell_capacity:
        return -1
    for s in range(n):
        j = np.int64(cell_members[env, c, s])
        if j != agent:
            found = knn_consider(env, agent, j, px, py, x, y, found, knn_d2, knn_id)
    return found


def knn_search(env, agent, x, y, in_game, cell_count, cell_members, knn_d2, knn_id):
    """Exact k nearest other agents in the game, by rings of grid cells; returns how many were found."""
    side = grid_side()
    size = grid_length / side
    px = x[env, agent]
    py = y[env, agent]
    cx = cell_of(px, side)
    cy = cell_of(py, side)
    rmax = max(max(cx, side - 1 - cx), max(cy, side - 1 - cy))
    found = 0
    r = 0
    while r <= rmax:
        x0 = cx - r
        x1 = cx + r
        y0 = cy - r
        y1 = cy + r
        gy = max(y0, 0)
        while gy <= min(y1, side - 1) and found >= 0:
            if gy == y0 or gy == y1:
                gx = max(x0, 0)
                gx_stop = min(x1, side - 1)
                gx_step = 1
            else:
                gx = x0
                gx_stop = x1
                gx_step = x1 - x0
            while gx <= gx_stop and found >= 0:
                if gx >= 0 and gx < side:
                    found = knn_scan_cell(env, agent, gx + side * gy, px, py, x, y, cell_count, cell_members,
                                          found, knn_d2, knn_id)
                gx += gx_step
            gy += 1
        if found < 0:
            break
        if found == num_other_agents_observed:
            # nearest point outside the searched square; the margin covers float32 rounding of d2
            bound = NO_BOUND
            if x0 > 0:
                bound = min(bound, px - x0 * size)
            if x1 < side - 1:
                bound = min(bound, (x1 + 1) * size - px)
            if y0 > 0:
                bound = min(bound, py - y0 * size)
            if y1 < side - 1:
                bound = min(bound, (y1 + 1) * size - py)
            if bound > 0 and knn_d2[env, agent, num_other_agents_observed - 1] < bound * bound * (1.0 - 1.0e-6):
                break
        r += 1
    if found < 0:
        found = 0
        for j in range(np.int64(NUM_AGENTS)):
            if j != agent and in_game[env, j] != 0:
                found = knn_consider(env, agent, j, px, py, x, y, found, knn_d2, knn_id)
    return found


def nearer_tagger(env, j, px, py, x, y, r2, best, best_d2):
    """(id, d2) of the nearer of tagger j and the current best within r2 (ties: lower id)."""
    dx = x[env, j] - px
    dy = y[env, j] - py
    d2 = dx * dx + dy * dy
    if d2 <= r2 and (best < 0 or d2 < best_d2 or (d2 == best_d2 and j < best)):
        return j, d2
    return best, best_d2


def tagger_in_reach(env, px, py, x, y, cell_count, cell_members):
    """Nearest tagger within the tagging radius of (px, py), or -1; the grid holds the taggers."""
    radius = tagging_distance * grid_length
    r2 = radius * radius
    side = grid_side()
    reach = radius * (1.0 + 1.0e-5) + grid_length * 1.0e-6  # a superset of the disc's cells
    gx0 = cell_of(px - reach, side)
    gx1 = cell_of(px + reach, side)
    gy0 = cell_of(py - reach, side)
    gy1 = cell_of(py + reach, side)
    best = -1
    best_d2 = np.float32(0.0)
    scan_all = (gx1 - gx0 + 1) * (gy1 - gy0 + 1) > num_taggers
    if not scan_all:
        for gy in range(gy0, gy1 + 1):
            for gx in range(gx0, gx1 + 1):
                c = gx + side * gy
                n = cell_count[env, c]
                if n > knn_cell_capacity:
                    scan_all = True
                else:
                    for s in range(n):
                        best, best_d2 = nearer_tagger(env, np.int64(cell_members[env, c, s]), px, py, x, y, r2,
                                                      best, best_d2)
    if scan_all:
        best = -1
        for j in range(np.int64(num_taggers)):
            best, best_d2 = nearer_tagger(env, j, px, py, x, y, r2, best, best_d2)
    return best


def write_slot(obs, env, agent, o, j, x, y, speed, heading, accel, in_game):
    norm_pos = SQRT2 * grid_length
    norm_speed = max(max_speed_tagger, max_speed_runner) + 1.0e-10
    obs[env, agent, o] = (x[env, j] - x[env, agent]) / norm_pos
    obs[env, agent, o + 1] = (y[env, j] - y[env, agent]) / norm_pos
    obs[env, agent, o + 2] = (speed[env, j] - speed[env, agent]) / norm_speed
    obs[env, agent, o + 3] = (accel[env, j] - accel[env, agent]) / norm_speed
    obs[env, agent, o + 4] = (heading[env, j] - heading[env, agent]) / TWO_PI
    obs[env, agent, o + 5] = 1.0 if j < num_taggers else 0.0
    obs[env, agent, o + 6] = 1.0 if in_game[env, j] != 0 else 0.0


# -- reset ---------------------------------------------------------------------------------

def reset(env, agent, key, x, y, speed, heading, accel, in_game, runners_left):
    x[env, agent] = uniform_range(key, 0, 0.0, grid_length)
    y[env, agent] = uniform_range(key, 1, 0.0, grid_length)
    heading[env, agent] = randint(key, 2, 4) * (0.5 * math.pi)
    speed[env, agent] = 0.0
    accel[env, agent] = 0.0
    in_game[env, agent] = 1
    if agent == 0:
        runners_left[env] = num_runners


# -- step phases ---------------------------------------------------------------------------

def move(env, agent, action, x, y, speed, heading, accel, in_game, reward, cell_count):
    move_agent(np.int64(env), np.int64(agent), action, x, y, speed, heading, accel, in_game, reward, cell_count)


def move_agent(env, agent, action, x, y, speed, heading, accel, in_game, reward, cell_count):
    clear_cells(env, agent, cell_count)  # the grid is left empty after each use; this only guards pushed state
    playing = in_game[env, agent] != 0
    tagger = agent < num_taggers
    cap = max_speed_tagger if tagger else max_speed_runner
    acc = float(accel[env, agent]) + accel_value(action[env, agent, 0])
    h = (float(heading[env, agent]) + turn_value(action[env, agent, 1])) % TWO_PI
    v = min(cap, max(0.0, float(speed[env, agent]) + acc))
    if not playing:
        h = 0.0
        v = 0.0
    if v <= 0.0 or v >= cap:
        acc = 0.0
    nx = float(x[env, agent]) + v * math.cos(h)
    ny = float(y[env, agent]) + v * math.sin(h)
    hit = nx < 0.0 or nx > grid_length or ny < 0.0 or ny > grid_length
    x[env, agent] = min(max(nx, 0.0), grid_length)
    y[env, agent] = min(max(ny, 0.0), grid_length)
    speed[env, agent] = v
    heading[env, agent] = h
    accel[env, agent] = acc
    r = 0.0
    if playing:
        r = step_penalty_for_tagger if tagger else step_reward_for_runner
        if hit:
            r += edge_hit_penalty
    reward[env, agent] = r


def bin_taggers(env, agent, x, y, cell_count, cell_members, grid_slot):
    if agent < num_taggers:
        grid_insert(np.int64(env), np.int64(agent), x, y, cell_count, cell_members, grid_slot)


def tag_runners(env, agent, t, x, y, in_game, reward, runners_left, cell_count, cell_members):
    tag_runner(np.int64(env), np.int64(agent), t, x, y, in_game, reward, runners_left, cell_count, cell_members)


def tag_runner(env, agent, t, x, y, in_game, reward, runners_left, cell_count, cell_members):
    if agent < num_taggers or in_game[env, agent] == 0:
        return
    tagger = tagger_in_reach(env, x[env, agent], y[env, agent], x, y, cell_count, cell_members)
    if tagger >= 0:
        reward[env, agent] += tag_penalty_for_runner
        # several runners may credit the same tagger in this phase
        atomic_add(reward, (env, tagger), np.float32(tag_reward_for_tagger))
        if runner_exits_game_after_tagged:
            in_game[env, agent] = 0
            atomic_add(runners_left, env, np.int32(-1))
    if in_game[env, agent] != 0 and t[env] + 1 == MAX_STEPS:
        reward[env, agent] += end_of_game_reward_for_runner


def finish(env, agent, x, y, runners_left, terminated, cell_count, cell_members, grid_slot):
    if agent == 0 and runners_left[env] <= 0:
        terminated[env] = 1
    if agent < num_taggers:
        grid_remove(np.int64(env), np.int64(agent), x, y, cell_count, cell_members, grid_slot)
    else:
        clear_cells(np.int64(env), np.int64(agent), cell_count)


STEP = [move, bin_taggers, tag_runners, finish]


# -- observation phases --------------------------------------------------------------------

def bin_agents(env, agent, x, y, in_game, cell_count, cell_members, grid_slot, knn_id, obs):
    clear_share(np.int64(env), np.int64(agent), knn_id, obs)
    if not full_observation and in_game[env, agent] != 0:
        grid_insert(np.int64(env), np.int64(agent), x, y, cell_count, cell_members, grid_slot)


def clear_share(env, agent, knn_id, obs):
    """Zero the replica's observations and empty its k-NN lists, each agent a share of the elements
    (agent, agent + NUM_AGENTS, ...: on a GPU neighbouring lanes write neighbouring addresses, where
    a lane writing its own row wrote a line of its own); observe_agent then writes only the rows of
    the agents in the game."""
    fill_share(env, agent, obs, 0.0)
    fill_share(env, agent, knn_id, -1)


def fill_share(env, agent, array, value):
    """array[env] (viewed flat) = value at elements agent, agent + NUM_AGENTS, ... (row and column
    stepped, without a division per element)."""
    width = array.shape[2]
    step_rows = NUM_AGENTS // width
    step_cols = NUM_AGENTS % width
    row = agent // width
    col = agent % width
    while row < NUM_AGENTS:
        array[env, row, col] = value
        row += step_rows
        col += step_cols
        if col >= width:
            col -= width
            row += 1


def unbin_agents(env, agent, x, y, cell_count, cell_members, grid_slot):
    if not full_observation:
        grid_remove(np.int64(env), np.int64(agent), x, y, cell_count, cell_members, grid_slot)


def observe_agent(env, agent, t, x, y, speed, heading, accel, in_game, cell_count, cell_members, knn_d2, knn_id,
                  obs):
    write_obs(np.int64(env), np.int64(agent), t, x, y, speed, heading, accel, in_game, cell_count, cell_members, knn_d2,
              knn_id, obs)


def write_obs(env, agent, t, x, y, speed, heading, accel, in_game, cell_count, cell_members, knn_d2, knn_id, obs):
    k = knn_id.shape[2]
    if in_game[env, agent] == 0:  # (bin_agents zeroed its row and emptied its list)
        return
    if full_observation:
        slot = 0
        for j in range(NUM_AGENTS):
            if j != agent:
                write_slot(obs, env, agent, 7 * slot, j, x, y, speed, heading, accel, in_game)
                slot += 1
        base = 7 * (NUM_AGENTS - 1)
    else:
        found = knn_search(env, agent, x, y, in_game, cell_count, cell_members, knn_d2, knn_id)
        for i in range(found):  # (the slots past `found` hold bin_agents' zeros and -1)
            write_slot(obs, env, agent, 7 * i, knn_id[env, agent, i], x, y, speed, heading, accel, in_game)
        base = 7 * k
    norm_speed = max(max_speed_tagger, max_speed_runner) + 1.0e-10
    obs[env, agent, base] = x[env, agent] / grid_length
    obs[env, agent, base + 1] = y[env, agent] / grid_length
    obs[env, agent, base + 2] = speed[env, agent] / norm_speed
    obs[env, agent, base + 3] = accel[env, agent] / norm_speed
    obs[env, agent, base + 4] = heading[env, agent] / TWO_PI
    obs[env, agent, base + 5] = 1.0 if agent < num_taggers else 0.0
    obs[env, agent, base + 6] = 1.0
    obs[env, agent, base + 7] = t[env] / episode_length


observe = [bin_agents, observe_agent, unbin_agents]


# ---- the rollout viewer's drawing (workbench.render): host Python that no kernel compiles --------

class TagDrawer(PointsDrawer):
    """Taggers red, runners blue, one Line2D per team; a runner out of the game is a grey cross, and
    circled in black for the first frames after its tag; the caption counts tags and gives each
    team its return."""
    tag_mark_frames = 4  # a tag stays circled this many frames, so it is seen while playing

    def moving_artists(self, ax):
        artists = super().moving_artists(ax)
        self.in_game = np.asarray(self.traj["in_game"]) != 0
        (self.out,) = ax.plot([], [], "x", ls="none", ms=self.size, color="0.55", label="out of the game")
        # left[k, a]: agent a left the game between frames k - 1 and k (frame k is the first without it)
        left = np.zeros_like(self.in_game)
        left[1:] = self.in_game[:-1] & ~self.in_game[1:]
        self.tag_step = np.where(left.any(axis=0), left.argmax(axis=0), -1)
        self.tags_so_far = np.cumsum(left.sum(axis=1))
        (self.tag_ring,) = ax.plot([], [], "o", ls="none", ms=max(2.2 * self.size, 7.0), mfc="none", mec="black",
                                   mew=1.2, label="tagged")
        # taggers are few: drawn after the runners (blitting draws in list order) and larger, so runners
        # never hide them; the rings over everything
        taggers = [line for line in artists if line.get_label().startswith("taggers")]
        for line in taggers:
            line.set_markersize(max(1.8 * self.size, 5.0))
        return [line for line in artists if line not in taggers] + [self.out] + taggers + [self.tag_ring]

    def drawn_agents(self) -> int:
        """Agents drawn in the frame last set by `update` (in the game plus crossed out)."""
        return super().drawn_agents() + len(self.out.get_xdata())

    def update(self, k):
        playing = self.in_game[k]
        self.move_agents(k, shown=playing)
        gone = np.flatnonzero(~playing)
        self.out.set_data(self.xs[k][gone], self.ys[k][gone])
        since = k - self.tag_step
        recent = np.flatnonzero((self.tag_step >= 0) & (since >= 0) & (since < self.tag_mark_frames))
        self.tag_ring.set_data(self.xs[k][recent], self.ys[k][recent])
        self.set_info(k, f" tagged={int(self.tags_so_far[k])} out={len(gone)}")


RENDER = TagDrawer
