// Tag on an integer grid in CUDA C: the phases of tag_grid.py (its module docstring has the rules and
// the block lists), whose declarations (PARAMS, STATE, spaces) the cuda-c target uses with these
// functions. Each phase has the name and the parameters of its Python twin, each helper mirrors the
// Python helper of the same name (tg_ prefixed).
//
// On a GPU each replica keeps its block lists in shared memory, not in the store's `blocks` (which then
// stays all zeros, as it is between launches on every target): the lists are rebuilt and read within
// one launch, and their slot claims and scattered reads were most of the step's L2 traffic. The
// first phase of each launch (`move`, `reset`) empties the replica's copy; lists too large for the
// budget below, and the host build, use `blocks` as the Python does.
//
// The arithmetic follows numba's on the Python: positions are int32, distances int64, rewards
// float32 with float64 parameters (a float32 combined with a float64 is computed in double), and an
// observation is an int divided by an int in double, stored as float32.

// ---- constants ---------------------------------------------------------------------------------

constexpr int TG_TAGGERS = 0;  // the kinds
constexpr int TG_RUNNERS = 1;
constexpr int TG_CAP = 8;                  // BLOCK_CAPACITY: ids listed per block
constexpr long long TG_NO_GAP = 1LL << 30;  // NO_GAP
constexpr int TG_SIDE = grid_length + 1;

// block_width(count, side): min(max(int(sqrt(2 * side^2 / count)), 1), side), in integers (the
// largest w with w^2 * count <= 2 * side^2 is the floor of the square root)
__host__ __device__ constexpr int tg_block_width(long long count)
{
    long long w = 1;
    while ((w + 1) * (w + 1) * count <= 2LL * TG_SIDE * TG_SIDE)
        ++w;
    return (int)(w < TG_SIDE ? w : TG_SIDE);
}

constexpr int TG_TAGGER_WIDTH = tg_block_width(num_taggers);
constexpr int TG_TAGGER_PER_SIDE = (TG_SIDE + TG_TAGGER_WIDTH - 1) / TG_TAGGER_WIDTH;
constexpr int TG_RUNNER_WIDTH = tg_block_width(num_runners);
constexpr int TG_RUNNER_PER_SIDE = (TG_SIDE + TG_RUNNER_WIDTH - 1) / TG_RUNNER_WIDTH;
constexpr int TG_RUNNER_FIRST = TG_TAGGER_PER_SIDE * TG_TAGGER_PER_SIDE;
constexpr int TG_BLOCKS = TG_RUNNER_FIRST + TG_RUNNER_PER_SIDE * TG_RUNNER_PER_SIDE;
static_assert(blocks_view::size == (long long)TG_BLOCKS * (TG_CAP + 1),
              "blocks is [E, block, 1 + BLOCK_CAPACITY] with tag_grid.py's block layout");
constexpr int TG_OBS = (int)(obs_view::size / NUM_AGENTS);  // obs.shape[2]
constexpr long long TG_LIST_INTS = (long long)TG_BLOCKS * (TG_CAP + 1);  // one replica's lists

#ifdef __CUDACC__
constexpr bool TG_SHARED = EPB * TG_LIST_INTS * 4 <= 32 * 1024;
__shared__ int tg_shared_lists[TG_SHARED ? EPB * TG_LIST_INTS : 1];  // the block's replicas, EPB of them
#else
constexpr bool TG_SHARED = false;
#endif

// ---- helpers -----------------------------------------------------------------------------------

// The replica's lists: [block][1 + TG_CAP] ints, a count and then the ids listed.
static __device__ __forceinline__ int* tg_lists(int env, blocks_view blocks)
{
#ifdef __CUDACC__
    if (TG_SHARED)
        return tg_shared_lists + (env % EPB) * TG_LIST_INTS;  // replica env is env % EPB of its block
#endif
    return &blocks(env, 0, 0);
}

// Empty the replica's shared copy, each agent a share (nothing to do where the lists are `blocks`,
// which clear_blocks leaves empty).
static __device__ __forceinline__ void tg_empty_shared_lists(int env, int agent)
{
#ifdef __CUDACC__
    if (TG_SHARED)
        for (long long i = agent; i < TG_LIST_INTS; i += NUM_AGENTS)
            tg_shared_lists[(env % EPB) * TG_LIST_INTS + i] = 0;
#endif
}

// blocks_of(kind): the first block, the block width and the blocks per side of one kind's blocks.
struct tg_blocks {
    int first, width, per_side;
};

static __device__ __forceinline__ tg_blocks tg_blocks_of(int kind)
{
    if (kind == TG_RUNNERS)
        return {TG_RUNNER_FIRST, TG_RUNNER_WIDTH, TG_RUNNER_PER_SIDE};
    return {0, TG_TAGGER_WIDTH, TG_TAGGER_PER_SIDE};
}

static __device__ __forceinline__ int tg_block_of(int kind, int px, int py)
{
    const tg_blocks k = tg_blocks_of(kind);
    return k.first + px / k.width + k.per_side * (py / k.width);
}

// Add the agent to its block's list (an atomic slot claim; the count still grows past capacity).
static __device__ __forceinline__ void tg_list_agent(int env, int agent, int kind, int px, int py, blocks_view blocks)
{
    int* list = tg_lists(env, blocks) + tg_block_of(kind, px, py) * (TG_CAP + 1);
    const int slot = wb_atomic_add(&list[0], 1);
    if (slot < TG_CAP)
        list[1 + slot] = agent;
}

// The better of candidate j and the best so far (ties: lower id).
static __device__ __forceinline__ void tg_nearer(int j, long long dx, long long dy, int& best, long long& best_d2)
{
    const long long d2 = dx * dx + dy * dy;
    if (best < 0 || d2 < best_d2 || (d2 == best_d2 && j < best)) {
        best = j;
        best_d2 = d2;
    }
}

struct alignas(8) tg_pair {
    float a, b;
};
static_assert(full_observation || TG_OBS == 6, "the partial observation is 6 floats, three pairs");

static __device__ __forceinline__ float tg_ratio(int value, int of)
{
    return (float)((double)value / (double)of);
}

// ---- reset -------------------------------------------------------------------------------------

__device__ void reset(int env, int agent, wb_key key, x_view x, y_view y, in_game_view in_game,
                      tags_made_view tags_made, int* runners_left, int* tagged_now)
{
    x(env, agent) = wb_randint(key, 0, grid_length + 1);
    y(env, agent) = wb_randint(key, 1, grid_length + 1);
    in_game(env, agent) = 1;
    tags_made(env, agent) = 0;
    tg_empty_shared_lists(env, agent);
    if (agent == 0) {
        runners_left[env] = num_runners;
        tagged_now[env] = 0;
    }
}

__device__ void list_after_reset(int env, int agent, x_view x, y_view y, blocks_view blocks)
{
    if (agent < num_taggers || !full_observation)
        tg_list_agent(env, agent, agent < num_taggers ? TG_TAGGERS : TG_RUNNERS, x(env, agent), y(env, agent), blocks);
}

// ---- step phases -------------------------------------------------------------------------------

__device__ void move(int env, int agent, action_view action, x_view x, y_view y, in_game_view in_game,
                     reward_view reward, tags_made_view tags_made, int* tagged_now)
{
    tg_empty_shared_lists(env, agent);
    if (agent == 0)
        tagged_now[env] = 0;
    tags_made(env, agent) = 0;
    if (in_game(env, agent) != 0) {
        const int act = action(env, agent);
        const int nx = x(env, agent) + (act == 1) - (act == 2);
        const int ny = y(env, agent) + (act == 3) - (act == 4);
        x(env, agent) = nx < 0 ? 0 : (nx > grid_length ? grid_length : nx);
        y(env, agent) = ny < 0 ? 0 : (ny > grid_length ? grid_length : ny);
        if (nx < 0 || nx > grid_length || ny < 0 || ny > grid_length)
            reward(env, agent) = (float)(-wall_hit_penalty);
    }
}

__device__ void list_taggers(int env, int agent, x_view x, y_view y, blocks_view blocks)
{
    if (agent < num_taggers)  // every tagger tags (taggers never leave the game)
        tg_list_agent(env, agent, TG_TAGGERS, x(env, agent), y(env, agent), blocks);
}

__device__ void tag(int env, int agent, x_view x, y_view y, in_game_view in_game, reward_view reward,
                    tags_made_view tags_made, int* runners_left, int* tagged_now, blocks_view blocks)
{
    if (agent < num_taggers || in_game(env, agent) == 0)
        return;
    const int px = x(env, agent);
    const int py = y(env, agent);
    const int* list = tg_lists(env, blocks) + tg_block_of(TG_TAGGERS, px, py) * (TG_CAP + 1);
    const int n = list[0];
    const bool listed = n <= TG_CAP;
    int taggers_here = 0;
    for (int s = 0; s < (listed ? n : num_taggers); ++s) {  // the block's taggers, or all of them
        const int j = listed ? list[1 + s] : s;
        if (x(env, j) == px && y(env, j) == py) {
            taggers_here += 1;
            wb_atomic_add(&tags_made(env, j), 1);  // several runners may credit one tagger
        }
    }
    if (taggers_here > 0) {
        reward(env, agent) = (float)((double)reward(env, agent) - tag_penalty_for_runner);
        in_game(env, agent) = 0;
        wb_atomic_add(runners_left, env, -1);
        wb_atomic_add(tagged_now, env, 1);
    } else {
        reward(env, agent) = (float)((double)reward(env, agent) + step_cost_for_tagger);
        if (!full_observation)  // still in the game: listed for the taggers' search
            tg_list_agent(env, agent, TG_RUNNERS, px, py, blocks);
    }
}

__device__ void settle(int env, int agent, reward_view reward, tags_made_view tags_made, const int* runners_left,
                       const int* tagged_now, unsigned char* terminated)
{
    if (agent < num_taggers) {
        const int n = shared_tag_reward ? tagged_now[env] : tags_made(env, agent);
        if (n > 0)
            reward(env, agent) = (float)((double)reward(env, agent) + tag_reward_for_tagger * n);
        else
            reward(env, agent) = (float)((double)reward(env, agent) - step_cost_for_tagger);
    }
    if (agent == 0 && runners_left[env] <= 0)
        terminated[env] = 1;
}

// ---- observation phases ------------------------------------------------------------------------

// The nearest opponent in the game of an agent at (px, py): square rings of the opponents' blocks
// outward from its own block, until nothing outside the searched square can be as near; -1 if none.
static __device__ int tg_nearest_opponent(int env, bool runner, int px, int py, x_view x, y_view y,
                                          in_game_view in_game, blocks_view blocks)
{
    const tg_blocks k = tg_blocks_of(runner ? TG_TAGGERS : TG_RUNNERS);
    const int* lists = tg_lists(env, blocks);
    const int cx = px / k.width;
    const int cy = py / k.width;
    int best = -1;
    long long best_d2 = 0;
    bool overflow = false;
    int r_max = cx;
    r_max = k.per_side - 1 - cx > r_max ? k.per_side - 1 - cx : r_max;
    r_max = cy > r_max ? cy : r_max;
    r_max = k.per_side - 1 - cy > r_max ? k.per_side - 1 - cy : r_max;
    for (int r = 0; r <= r_max && !overflow; ++r) {
        const int gy_last = cy + r < k.per_side - 1 ? cy + r : k.per_side - 1;
        for (int gy = cy - r > 0 ? cy - r : 0; gy <= gy_last; ++gy) {
            int gx, gx_last, gx_step;
            if (gy == cy - r || gy == cy + r) {  // a whole row of the ring
                gx = cx - r > 0 ? cx - r : 0;
                gx_last = cx + r < k.per_side - 1 ? cx + r : k.per_side - 1;
                gx_step = 1;
            } else {  // its two ends
                gx = cx - r;
                gx_last = cx + r;
                gx_step = 2 * r;
            }
            for (; gx <= gx_last; gx += gx_step) {
                if (gx >= 0 && gx < k.per_side) {
                    const int* list = lists + (k.first + gx + k.per_side * gy) * (TG_CAP + 1);
                    const int n = list[0];
                    overflow = overflow || n > TG_CAP;
                    const int listed = n < TG_CAP ? n : TG_CAP;
                    for (int s = 1; s <= listed; ++s) {
                        const int j = list[s];
                        if (in_game(env, j) != 0)  // the taggers' lists hold every tagger
                            tg_nearer(j, (long long)x(env, j) - px, (long long)y(env, j) - py, best, best_d2);
                    }
                }
            }
        }
        // an agent in a block outside the searched square is at least `gap` cells away along x or y
        long long gap = TG_NO_GAP;
        if (cx - r > 0)
            gap = gap < (long long)px - (cx - r) * k.width + 1 ? gap : (long long)px - (cx - r) * k.width + 1;
        if (cx + r < k.per_side - 1)
            gap = gap < (long long)(cx + r + 1) * k.width - px ? gap : (long long)(cx + r + 1) * k.width - px;
        if (cy - r > 0)
            gap = gap < (long long)py - (cy - r) * k.width + 1 ? gap : (long long)py - (cy - r) * k.width + 1;
        if (cy + r < k.per_side - 1)
            gap = gap < (long long)(cy + r + 1) * k.width - py ? gap : (long long)(cy + r + 1) * k.width - py;
        if (best >= 0 && best_d2 < gap * gap)
            break;
    }
    if (overflow) {  // a list it needed was incomplete: scan every opponent instead
        best = -1;
        for (int j = runner ? 0 : num_taggers; j < (runner ? num_taggers : NUM_AGENTS); ++j)
            if (in_game(env, j) != 0)
                tg_nearer(j, (long long)x(env, j) - px, (long long)y(env, j) - py, best, best_d2);
    }
    return best;
}

__device__ void observe_agent(int env, int agent, const int* t, x_view x, y_view y, in_game_view in_game,
                              blocks_view blocks, obs_view obs)
{
    if (in_game(env, agent) == 0) {
        for (int i = 0; i < TG_OBS; ++i)
            obs(env, agent, i) = 0.0f;
        return;
    }
    if (full_observation) {
        for (int j = 0; j < NUM_AGENTS; ++j) {
            obs(env, agent, j) = tg_ratio(x(env, j), grid_length);
            obs(env, agent, NUM_AGENTS + j) = tg_ratio(y(env, j), grid_length);
            obs(env, agent, 2 * NUM_AGENTS + j) = j < num_taggers ? 0.0f : 1.0f;
            obs(env, agent, 3 * NUM_AGENTS + j) = in_game(env, j) != 0 ? 1.0f : 0.0f;
            obs(env, agent, 4 * NUM_AGENTS + j) = j == agent ? 1.0f : 0.0f;
        }
        obs(env, agent, 5 * NUM_AGENTS) = tg_ratio(t[env], episode_length);
        return;
    }
    const bool runner = agent >= num_taggers;
    const int px = x(env, agent);
    const int py = y(env, agent);
    const int best = tg_nearest_opponent(env, runner, px, py, x, y, in_game, blocks);
    // the row in three 8-byte stores, not six of 4 (rows are 24 bytes: H100, 2000 x 1000 agents, 268 -> 249 us a step)
    tg_pair* row = reinterpret_cast<tg_pair*>(&obs(env, agent, 0));
    row[0] = {tg_ratio(px, grid_length), tg_ratio(py, grid_length)};
    row[1] = {best >= 0 ? tg_ratio(x(env, best), grid_length) : 0.0f,
              best >= 0 ? tg_ratio(y(env, best), grid_length) : 0.0f};
    row[2] = {runner ? 1.0f : 0.0f, tg_ratio(t[env], episode_length)};
}

// Empty the lists again (each agent a share of the blocks), so the state never depends on the order
// in which the slot claims ran. (A shared copy is emptied by the next launch's first phase instead.)
__device__ void clear_blocks(int env, int agent, blocks_view blocks)
{
    if (TG_SHARED)
        return;
    for (int b = agent; b < TG_BLOCKS; b += NUM_AGENTS) {
        const int n = blocks(env, b, 0);
        const int listed = n < TG_CAP ? n : TG_CAP;
        for (int s = 1; s <= listed; ++s)
            blocks(env, b, s) = 0;
        blocks(env, b, 0) = 0;
    }
}
