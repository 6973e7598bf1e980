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
"""
import numpy as np

from workbench.envdef import Box, Discrete, per_agent, per_env
from workbench.rng import randint

PARAMS = dict(num_taggers=10, num_runners=1, grid_length=10, episode_length=100, wall_hit_penalty=0.1,
              tag_reward_for_tagger=10.0, tag_penalty_for_runner=2.0, step_cost_for_tagger=0.01,
              full_observation=0, shared_tag_reward=1)

NUM_AGENTS = lambda p: p.num_taggers + p.num_runners  # noqa: E731
MAX_STEPS = "episode_length"
OBSERVATION = Box(shape=(lambda p: 5 * (p.num_taggers + p.num_runners) + 1 if p.full_observation else 6,))
ACTION = Discrete(5)
AGENT_GROUPS = lambda p: {"taggers": range(0, p.num_taggers),  # noqa: E731
                          "runners": range(p.num_taggers, p.num_taggers + p.num_runners)}
STATE = dict(x=per_agent("int32"), y=per_agent("int32"), in_game=per_agent("int32"),
             tags_made=per_agent("int32"), runners_left=per_env("int32"), tagged_now=per_env("int32"))


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


def reset(env, agent, key, x, y, in_game, tags_made, runners_left, tagged_now):
    x[env, agent] = randint(key, 0, grid_length + 1)
    y[env, agent] = randint(key, 1, grid_length + 1)
    in_game[env, agent] = 1
    tags_made[env, agent] = 0
    if agent == 0:
        runners_left[env] = num_runners
        tagged_now[env] = 0


def move(env, agent, action, x, y, in_game, reward, tags_made, tagged_now):
    if agent == 0:
        tagged_now[env] = 0
    tags_made[env, agent] = 0
    if in_game[env, agent] == 0:
        return
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


def tag(env, agent, x, y, in_game, reward, tags_made, runners_left, tagged_now):
    if agent < num_taggers or in_game[env, agent] == 0:
        return
    taggers_here = 0
    for j in range(num_taggers):
        if x[env, j] == x[env, agent] and y[env, j] == y[env, agent]:
            taggers_here += 1
            atomic_add(tags_made, (env, j), np.int32(1))  # several runners may credit one tagger
    if taggers_here > 0:
        reward[env, agent] -= tag_penalty_for_runner
        in_game[env, agent] = 0
        atomic_add(runners_left, env, np.int32(-1))
        atomic_add(tagged_now, env, np.int32(1))
    else:
        reward[env, agent] += step_cost_for_tagger


def settle(env, agent, reward, tags_made, runners_left, tagged_now, terminated):
    if agent < num_taggers:
        n = tagged_now[env] if shared_tag_reward else tags_made[env, agent]
        if n > 0:
            reward[env, agent] += tag_reward_for_tagger * n
        else:
            reward[env, agent] -= step_cost_for_tagger
    if agent == 0 and runners_left[env] <= 0:
        terminated[env] = 1


STEP = [move, tag, settle]


def observe(env, agent, t, x, y, in_game, obs):
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
    runner = agent >= num_taggers
    best = -1
    best_d2 = 0
    lo = 0 if runner else num_taggers
    hi = num_taggers if runner else NUM_AGENTS
    for j in range(lo, hi):
        if in_game[env, j] != 0:
            dx = x[env, j] - x[env, agent]
            dy = y[env, j] - y[env, agent]
            d2 = dx * dx + dy * dy
            if best < 0 or d2 < best_d2:
                best = j
                best_d2 = d2
    obs[env, agent, 0] = x[env, agent] / grid_length
    obs[env, agent, 1] = y[env, agent] / grid_length
    obs[env, agent, 2] = x[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 3] = y[env, best] / grid_length if best >= 0 else 0.0
    obs[env, agent, 4] = 1.0 if runner else 0.0
    obs[env, agent, 5] = t[env] / episode_length
