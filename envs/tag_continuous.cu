// Tag on a continuous arena in CUDA C: the phases of tag_continuous.py (its module docstring has the
// rules), whose declarations (PARAMS, STATE, spaces) the cuda-c target uses with these functions.
//
// Each phase has the name and the parameters of its Python twin, and each helper mirrors the
// Python helper of the same name (tc_ prefixed). The arithmetic follows what numba does with the
// Python: state arrays are float32, parameters and Python floats are float64, a float32 mixed
// with a float64 (or an int) is computed in double, a float32 with a float32 in float, and
// min/max/% are Python's (max(a, b) is `b > a ? b : a`, `%` takes the sign of the divisor).
// Products that feed a sum go through __dmul_rn/__dadd_rn (WB_FMUL/WB_FADD for float) so that
// the GPU compiler does not fuse them into an FMA the cpu target does not use: squared
// distances, and with them the tags and the k nearest neighbours, come out as on the cpu target.
//
// The per-replica grid (cell_count [E, G*G], cell_members [E, G*G, capacity]) is filled with
// atomic slot claims and emptied again after each use, as in the Python; which agent gets which
// slot of a cell depends on the order of the atomics, but no result does: the k-NN list is sorted
// by (squared distance, id) and the tagger of a runner is the nearest, ties to the lower id.

// ---- constants ---------------------------------------------------------------------------------

// At most 64 registers a thread (from 78): eight blocks of 128 lanes share a multiprocessor instead of
// six (H100, 1000 x 110 with k = 10: 113.6 -> 106.5 us a step; 100 x 110: 42.5 -> 43.6 us).
#define WB_MAX_REGISTERS 64

constexpr double TC_PI = 3.141592653589793;       // math.pi
constexpr double TC_TWO_PI = 6.283185307179586;   // TWO_PI = 2.0 * math.pi
constexpr double TC_SQRT2 = 1.4142135623730951;   // SQRT2 = math.sqrt(2.0)
constexpr double TC_NO_BOUND = 1.0e18;            // NO_BOUND

// The grid side G as the Python's grid_side() gives it, read back from the size of cell_count.
__host__ __device__ constexpr int tc_isqrt(long long n)
{
    long long s = 0;
    while ((s + 1) * (s + 1) <= n)
        ++s;
    return (int)s;
}
constexpr int TC_CELLS = (int)cell_count_view::size;                  // G * G
constexpr int TC_SIDE = tc_isqrt(TC_CELLS);                           // G
static_assert((long long)TC_SIDE * TC_SIDE == TC_CELLS, "cell_count must hold G * G cells");
static_assert(cell_members_view::size == (long long)TC_CELLS * knn_cell_capacity, "cell_members is [G*G, capacity]");
constexpr int TC_K = (int)(knn_id_view::size / NUM_AGENTS);           // knn_id.shape[2]
constexpr int TC_OBS = (int)(obs_view::size / NUM_AGENTS);            // obs.shape[2]
constexpr double TC_CELLS_PER_LENGTH = (double)TC_SIDE / (double)grid_length;   // side / grid_length
constexpr double TC_CELL_SIZE = (double)grid_length / (double)TC_SIDE;          // size = grid_length / side
constexpr double TC_NORM_POS = TC_SQRT2 * (double)grid_length;
constexpr double TC_NORM_SPEED =
    ((double)max_speed_runner > (double)max_speed_tagger ? (double)max_speed_runner : (double)max_speed_tagger) +
    1.0e-10;
constexpr double TC_RADIUS = (double)tagging_distance * (double)grid_length;
constexpr double TC_RADIUS2 = TC_RADIUS * TC_RADIUS;
constexpr double TC_REACH = TC_RADIUS * (1.0 + 1.0e-5) + (double)grid_length * 1.0e-6;
// Up to this many agents a replica's k-NN search scans every agent instead of the grid's rings: the
// lanes walk the same candidates in step (one broadcast load each, no divergence), where the
// rings send each lane through its own cells (H100, 100 x 110 with k = 10: 66 -> 52 us a step).
// The grid is then not filled for the observation at all; the result is the same exact k-NN.
constexpr int TC_SCAN_MAX = 128;

// Double products and sums the compiler may not contract into an FMA.
#ifdef __CUDACC__
#define TC_DMUL(a, b) __dmul_rn((a), (b))
#define TC_DADD(a, b) __dadd_rn((a), (b))
#else
#define TC_DMUL(a, b) ((a) * (b))
#define TC_DADD(a, b) ((a) + (b))
#endif

// ---- helpers -----------------------------------------------------------------------------------

// Python's max(a, b) and min(a, b) (numba: the second argument wins only when strictly better).
static __device__ __forceinline__ double tc_max(double a, double b) { return b > a ? b : a; }
static __device__ __forceinline__ double tc_min(double a, double b) { return b < a ? b : a; }
static __device__ __forceinline__ int tc_imax(int a, int b) { return b > a ? b : a; }
static __device__ __forceinline__ int tc_imin(int a, int b) { return b < a ? b : a; }

// Python's float a % b: fmod, then the sign of the divisor; a zero remainder is +0 (b > 0).
static __device__ __forceinline__ double tc_py_mod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0.0) {
        if ((b < 0.0) != (m < 0.0))
            m += b;
    } else {
        m = b < 0.0 ? -0.0 : 0.0;
    }
    return m;
}

static __device__ __forceinline__ int tc_cell_of(double v)
{
    const long long c = (long long)(v * TC_CELLS_PER_LENGTH);  // int() truncates toward zero
    if (c < 0)
        return 0;
    if (c >= TC_SIDE)
        return TC_SIDE - 1;
    return (int)c;
}

static __device__ __forceinline__ double tc_accel_value(int i)
{
    if (i <= 0)
        return 0.0;
    if (num_acceleration_levels == 1)
        return (double)min_acceleration;
    return (double)min_acceleration + ((double)max_acceleration - (double)min_acceleration) * (double)(i - 1) /
                                          (double)(num_acceleration_levels - 1);
}

static __device__ __forceinline__ double tc_turn_value(int i)
{
    if (i <= 0)
        return 0.0;
    if (num_turn_levels == 1)
        return (double)min_turn;
    return (double)min_turn + ((double)max_turn - (double)min_turn) * (double)(i - 1) / (double)(num_turn_levels - 1);
}

static __device__ __forceinline__ void tc_clear_cells(int env, int agent, cell_count_view cell_count)
{
    for (long long c = agent; c < TC_CELLS; c += NUM_AGENTS)
        cell_count(env, c) = 0;
}

static __device__ __forceinline__ int tc_agent_cell(int env, int agent, x_view x, y_view y)
{
    return tc_cell_of(x(env, agent)) + TC_SIDE * tc_cell_of(y(env, agent));
}

static __device__ void tc_grid_insert(int env, int agent, x_view x, y_view y, cell_count_view cell_count,
                                      cell_members_view cell_members, grid_slot_view grid_slot)
{
    const int c = tc_agent_cell(env, agent, x, y);
    const int slot = wb_atomic_add(&cell_count(env, c), 1);
    if (slot < knn_cell_capacity) {
        cell_members(env, c, slot) = agent;
        grid_slot(env, agent) = slot;
    } else {
        grid_slot(env, agent) = -1;
    }
}

// Undo this agent's insert and clear its share of the counts: the grid is all zeros after each use.
static __device__ void tc_grid_remove(int env, int agent, x_view x, y_view y, cell_count_view cell_count,
                                      cell_members_view cell_members, grid_slot_view grid_slot)
{
    const int slot = grid_slot(env, agent);
    if (slot >= 0) {
        cell_members(env, tc_agent_cell(env, agent, x, y), slot) = 0;
        grid_slot(env, agent) = -1;
    }
    tc_clear_cells(env, agent, cell_count);
}

// Squared distance in float32, as the Python computes dx * dx + dy * dy on float32 values.
static __device__ __forceinline__ float tc_d2(float dx, float dy)
{
    return WB_FADD(WB_FMUL(dx, dx), WB_FMUL(dy, dy));
}

// The agent's k nearest so far, sorted by (squared distance, id), held in registers during the
// search (every index below is a constant once the loops are unrolled) and written to knn_d2 /
// knn_id once at the end: an insertion into the state arrays cost a global store and load per
// shifted slot. Empty slots hold (+inf, INT_MAX), after every real candidate.
#ifdef __CUDACC__
#define TC_INF __int_as_float(0x7f800000)
#else
#define TC_INF INFINITY
#endif

struct tc_topk {
    float d2[TC_K];
    int id[TC_K];
};

static __device__ __forceinline__ bool tc_before(float d2, int j, float d2_other, int j_other)
{
    return d2 < d2_other || (d2 == d2_other && j < j_other);
}

static __device__ __forceinline__ void tc_topk_clear(tc_topk& best)
{
#pragma unroll
    for (int i = 0; i < TC_K; ++i) {
        best.d2[i] = TC_INF;
        best.id[i] = 0x7fffffff;
    }
}

// Insert agent j into the top-k; the new count of filled slots.
static __device__ __forceinline__ int tc_knn_consider(int env, int j, float px, float py, x_view x, y_view y,
                                                      int found, tc_topk& best)
{
    const float d2 = tc_d2(x(env, j) - px, y(env, j) - py);
    if (found < TC_K)
        found += 1;
    if (!tc_before(d2, j, best.d2[TC_K - 1], best.id[TC_K - 1]))
        return found;
#pragma unroll
    for (int i = TC_K - 1; i > 0; --i) {  // slot i takes slot i - 1, the candidate, or stays
        if (tc_before(d2, j, best.d2[i - 1], best.id[i - 1])) {
            best.d2[i] = best.d2[i - 1];
            best.id[i] = best.id[i - 1];
        } else if (tc_before(d2, j, best.d2[i], best.id[i])) {
            best.d2[i] = d2;
            best.id[i] = j;
        }
    }
    if (tc_before(d2, j, best.d2[0], best.id[0])) {
        best.d2[0] = d2;
        best.id[0] = j;
    }
    return found;
}

// Replicas scanned whole (at most TC_SCAN_MAX agents) read every agent's position and flag from shared
// memory: bin_agents copies them there (each agent its own), observe_agent's scan reads them (H100,
// k = 10, steady state: 100 x 110 44.6 -> 41.0 us a step, 1000 x 110 105.5 -> 99.3 us). The host
// build reads the arrays.
struct tc_seen {
    float x, y;
    int in_game;
};
#ifdef __CUDACC__
constexpr bool TC_STAGED = NUM_AGENTS <= TC_SCAN_MAX;
__shared__ tc_seen tc_staged[TC_STAGED ? EPB * NUM_AGENTS : 1];
#else
constexpr bool TC_STAGED = false;
static tc_seen tc_staged[1];
#endif

static __device__ __forceinline__ int tc_knn_consider_at(int j, float xj, float yj, float px, float py, int found,
                                                         tc_topk& best)
{
    const float d2 = tc_d2(xj - px, yj - py);
    if (found < TC_K)
        found += 1;
    if (!tc_before(d2, j, best.d2[TC_K - 1], best.id[TC_K - 1]))
        return found;
#pragma unroll
    for (int i = TC_K - 1; i > 0; --i) {
        if (tc_before(d2, j, best.d2[i - 1], best.id[i - 1])) {
            best.d2[i] = best.d2[i - 1];
            best.id[i] = best.id[i - 1];
        } else if (tc_before(d2, j, best.d2[i], best.id[i])) {
            best.d2[i] = d2;
            best.id[i] = j;
        }
    }
    if (tc_before(d2, j, best.d2[0], best.id[0])) {
        best.d2[0] = d2;
        best.id[0] = j;
    }
    return found;
}

// Consider every member of cell c; -1 when the cell overflowed (its list is incomplete).
static __device__ __forceinline__ int tc_knn_scan_cell(int env, int agent, int c, float px, float py, x_view x,
                                                       y_view y, cell_count_view cell_count,
                                                       cell_members_view cell_members, int found, tc_topk& best)
{
    const int n = cell_count(env, c);
    if (n > knn_cell_capacity)
        return -1;
    for (int s = 0; s < n; ++s) {
        const int j = cell_members(env, c, s);
        if (j != agent)
            found = tc_knn_consider(env, j, px, py, x, y, found, best);
    }
    return found;
}

// Exact k nearest other agents in the game into `best`, by rings of grid cells (or a scan of every
// agent: TC_SCAN_MAX); how many were found.
static __device__ int tc_knn_search(int env, int agent, x_view x, y_view y, in_game_view in_game,
                                    cell_count_view cell_count, cell_members_view cell_members, tc_topk& best)
{
    const float px = x(env, agent);
    const float py = y(env, agent);
    if (NUM_AGENTS <= TC_SCAN_MAX) {
        tc_topk_clear(best);
        int found = 0;
        if (TC_STAGED) {
            const tc_seen* seen = tc_staged + (env % EPB) * NUM_AGENTS;  // replica env is env % EPB of its block
            for (int j = 0; j < NUM_AGENTS; ++j) {
                const tc_seen other = seen[j];
                if (j != agent && other.in_game != 0)
                    found = tc_knn_consider_at(j, other.x, other.y, px, py, found, best);
            }
            return found;
        }
        for (int j = 0; j < NUM_AGENTS; ++j)
            if (j != agent && in_game(env, j) != 0)
                found = tc_knn_consider(env, j, px, py, x, y, found, best);
        return found;
    }
    const int cx = tc_cell_of(px);
    const int cy = tc_cell_of(py);
    const int rmax = tc_imax(tc_imax(cx, TC_SIDE - 1 - cx), tc_imax(cy, TC_SIDE - 1 - cy));
    tc_topk_clear(best);
    int found = 0;
    for (int r = 0; r <= rmax; ++r) {
        const int x0 = cx - r;
        const int x1 = cx + r;
        const int y0 = cy - r;
        const int y1 = cy + r;
        for (int gy = tc_imax(y0, 0); gy <= tc_imin(y1, TC_SIDE - 1) && found >= 0; ++gy) {
            int gx, gx_stop, gx_step;
            if (gy == y0 || gy == y1) {  // a full row of the ring
                gx = tc_imax(x0, 0);
                gx_stop = tc_imin(x1, TC_SIDE - 1);
                gx_step = 1;
            } else {  // its two side cells
                gx = x0;
                gx_stop = x1;
                gx_step = x1 - x0;
            }
            for (; gx <= gx_stop && found >= 0; gx += gx_step) {
                if (gx >= 0 && gx < TC_SIDE)
                    found = tc_knn_scan_cell(env, agent, gx + TC_SIDE * gy, px, py, x, y, cell_count, cell_members,
                                             found, best);
            }
        }
        if (found < 0)
            break;
        if (found == num_other_agents_observed) {
            // nearest point outside the searched square; the margin covers float32 rounding of d2
            double bound = TC_NO_BOUND;
            if (x0 > 0)
                bound = tc_min(bound, TC_DADD((double)px, -TC_DMUL((double)x0, TC_CELL_SIZE)));
            if (x1 < TC_SIDE - 1)
                bound = tc_min(bound, TC_DADD(TC_DMUL((double)(x1 + 1), TC_CELL_SIZE), -(double)px));
            if (y0 > 0)
                bound = tc_min(bound, TC_DADD((double)py, -TC_DMUL((double)y0, TC_CELL_SIZE)));
            if (y1 < TC_SIDE - 1)
                bound = tc_min(bound, TC_DADD(TC_DMUL((double)(y1 + 1), TC_CELL_SIZE), -(double)py));
            if (bound > 0 && (double)best.d2[TC_K - 1] < TC_DMUL(TC_DMUL(bound, bound), 1.0 - 1.0e-6))
                break;
        }
    }
    if (found < 0) {  // an overflowed cell: scan every agent in the game
        tc_topk_clear(best);
        found = 0;
        for (int j = 0; j < NUM_AGENTS; ++j)
            if (j != agent && in_game(env, j) != 0)
                found = tc_knn_consider(env, j, px, py, x, y, found, best);
    }
    return found;
}

// The nearer of tagger j and the current best within the radius (ties: lower id).
static __device__ __forceinline__ void tc_nearer_tagger(int env, int j, float px, float py, x_view x, y_view y,
                                                        int& best, float& best_d2)
{
    const float d2 = tc_d2(x(env, j) - px, y(env, j) - py);
    if ((double)d2 <= TC_RADIUS2 && (best < 0 || d2 < best_d2 || (d2 == best_d2 && j < best))) {
        best = j;
        best_d2 = d2;
    }
}

// Nearest tagger within the tagging radius of (px, py), or -1; the grid holds the taggers.
static __device__ int tc_tagger_in_reach(int env, float px, float py, x_view x, y_view y,
                                         cell_count_view cell_count, cell_members_view cell_members)
{
    const int gx0 = tc_cell_of((double)px - TC_REACH);
    const int gx1 = tc_cell_of((double)px + TC_REACH);
    const int gy0 = tc_cell_of((double)py - TC_REACH);
    const int gy1 = tc_cell_of((double)py + TC_REACH);
    int best = -1;
    float best_d2 = 0.0f;
    bool scan_all = (long long)(gx1 - gx0 + 1) * (gy1 - gy0 + 1) > num_taggers;
    if (!scan_all) {
        for (int gy = gy0; gy <= gy1; ++gy)
            for (int gx = gx0; gx <= gx1; ++gx) {
                const int c = gx + TC_SIDE * gy;
                const int n = cell_count(env, c);
                if (n > knn_cell_capacity) {
                    scan_all = true;
                } else {
                    for (int s = 0; s < n; ++s)
                        tc_nearer_tagger(env, cell_members(env, c, s), px, py, x, y, best, best_d2);
                }
            }
    }
    if (scan_all) {
        best = -1;
        for (int j = 0; j < num_taggers; ++j)
            tc_nearer_tagger(env, j, px, py, x, y, best, best_d2);
    }
    return best;
}

static __device__ void tc_write_slot(obs_view obs, int env, int agent, int o, int j, x_view x, y_view y,
                                     speed_view speed, heading_view heading, accel_view accel, in_game_view in_game)
{
    obs(env, agent, o) = (float)((double)(x(env, j) - x(env, agent)) / TC_NORM_POS);
    obs(env, agent, o + 1) = (float)((double)(y(env, j) - y(env, agent)) / TC_NORM_POS);
    obs(env, agent, o + 2) = (float)((double)(speed(env, j) - speed(env, agent)) / TC_NORM_SPEED);
    obs(env, agent, o + 3) = (float)((double)(accel(env, j) - accel(env, agent)) / TC_NORM_SPEED);
    obs(env, agent, o + 4) = (float)((double)(heading(env, j) - heading(env, agent)) / TC_TWO_PI);
    obs(env, agent, o + 5) = j < num_taggers ? 1.0f : 0.0f;
    obs(env, agent, o + 6) = in_game(env, j) != 0 ? 1.0f : 0.0f;
}

// ---- reset -------------------------------------------------------------------------------------

__device__ void reset(int env, int agent, wb_key key, x_view x, y_view y, speed_view speed, heading_view heading,
                      accel_view accel, in_game_view in_game, int* runners_left)
{
    x(env, agent) = wb_uniform_range(key, 0, 0.0f, (float)grid_length);
    y(env, agent) = wb_uniform_range(key, 1, 0.0f, (float)grid_length);
    heading(env, agent) = (float)(wb_randint(key, 2, 4) * (0.5 * TC_PI));
    speed(env, agent) = 0.0f;
    accel(env, agent) = 0.0f;
    in_game(env, agent) = 1;
    if (agent == 0)
        runners_left[env] = num_runners;
}

// ---- step phases -------------------------------------------------------------------------------

__device__ void move(int env, int agent, action_view action, x_view x, y_view y, speed_view speed,
                     heading_view heading, accel_view accel, in_game_view in_game, reward_view reward,
                     cell_count_view cell_count)
{
    tc_clear_cells(env, agent, cell_count);  // the grid is left empty after each use; this only guards pushed state
    const bool playing = in_game(env, agent) != 0;
    const bool tagger = agent < num_taggers;
    const double cap = tagger ? (double)max_speed_tagger : (double)max_speed_runner;
    double acc = (double)accel(env, agent) + tc_accel_value(action(env, agent, 0));
    double h = tc_py_mod((double)heading(env, agent) + tc_turn_value(action(env, agent, 1)), TC_TWO_PI);
    double v = tc_min(cap, tc_max(0.0, (double)speed(env, agent) + acc));
    if (!playing) {
        h = 0.0;
        v = 0.0;
    }
    if (v <= 0.0 || v >= cap)
        acc = 0.0;
    const double nx = TC_DADD((double)x(env, agent), TC_DMUL(v, cos(h)));
    const double ny = TC_DADD((double)y(env, agent), TC_DMUL(v, sin(h)));
    const bool hit = nx < 0.0 || nx > (double)grid_length || ny < 0.0 || ny > (double)grid_length;
    x(env, agent) = (float)tc_min(tc_max(nx, 0.0), (double)grid_length);
    y(env, agent) = (float)tc_min(tc_max(ny, 0.0), (double)grid_length);
    speed(env, agent) = (float)v;
    heading(env, agent) = (float)h;
    accel(env, agent) = (float)acc;
    double r = 0.0;
    if (playing) {
        r = tagger ? (double)step_penalty_for_tagger : (double)step_reward_for_runner;
        if (hit)
            r += (double)edge_hit_penalty;
    }
    reward(env, agent) = (float)r;
}

__device__ void bin_taggers(int env, int agent, x_view x, y_view y, cell_count_view cell_count,
                            cell_members_view cell_members, grid_slot_view grid_slot)
{
    if (agent < num_taggers)
        tc_grid_insert(env, agent, x, y, cell_count, cell_members, grid_slot);
}

__device__ void tag_runners(int env, int agent, const int* t, x_view x, y_view y, in_game_view in_game,
                            reward_view reward, int* runners_left, cell_count_view cell_count,
                            cell_members_view cell_members)
{
    if (agent < num_taggers || in_game(env, agent) == 0)
        return;
    const int tagger = tc_tagger_in_reach(env, x(env, agent), y(env, agent), x, y, cell_count, cell_members);
    if (tagger >= 0) {
        reward(env, agent) = (float)((double)reward(env, agent) + (double)tag_penalty_for_runner);
        // several runners may credit the same tagger in this phase
        wb_atomic_add(&reward(env, tagger), (float)tag_reward_for_tagger);
        if (runner_exits_game_after_tagged) {
            in_game(env, agent) = 0;
            wb_atomic_add(runners_left, env, -1);
        }
    }
    if (in_game(env, agent) != 0 && t[env] + 1 == MAX_STEPS)
        reward(env, agent) = (float)((double)reward(env, agent) + (double)end_of_game_reward_for_runner);
}

__device__ void finish(int env, int agent, x_view x, y_view y, const int* runners_left, unsigned char* terminated,
                       cell_count_view cell_count, cell_members_view cell_members, grid_slot_view grid_slot)
{
    if (agent == 0 && runners_left[env] <= 0)
        terminated[env] = 1;
    if (agent < num_taggers)
        tc_grid_remove(env, agent, x, y, cell_count, cell_members, grid_slot);
    else
        tc_clear_cells(env, agent, cell_count);
}

// ---- observation phases ------------------------------------------------------------------------

// Zero the replica's observations and empty its k-NN lists, each agent a share of the elements:
// neighbouring lanes write neighbouring addresses (a lane writing its own 7k + 8 floats wrote a line
// of its own with each store); observe_agent then writes only the rows of the agents in the game.
static __device__ __forceinline__ void tc_clear_share(int env, int agent, knn_id_view knn_id, obs_view obs)
{
    float* rows = &obs(env, 0, 0);
    for (int i = agent; i < NUM_AGENTS * TC_OBS; i += NUM_AGENTS)
        rows[i] = 0.0f;
    int* ids = &knn_id(env, 0, 0);
    for (int i = agent; i < NUM_AGENTS * TC_K; i += NUM_AGENTS)
        ids[i] = -1;
}

__device__ void bin_agents(int env, int agent, x_view x, y_view y, in_game_view in_game, cell_count_view cell_count,
                           cell_members_view cell_members, grid_slot_view grid_slot, knn_id_view knn_id,
                           obs_view obs)
{
    tc_clear_share(env, agent, knn_id, obs);
    if (TC_STAGED && !full_observation)
        tc_staged[(env % EPB) * NUM_AGENTS + agent] = {x(env, agent), y(env, agent), in_game(env, agent)};
    if (!full_observation && NUM_AGENTS > TC_SCAN_MAX && in_game(env, agent) != 0)
        tc_grid_insert(env, agent, x, y, cell_count, cell_members, grid_slot);
}

__device__ void unbin_agents(int env, int agent, x_view x, y_view y, cell_count_view cell_count,
                             cell_members_view cell_members, grid_slot_view grid_slot)
{
    if (!full_observation)
        tc_grid_remove(env, agent, x, y, cell_count, cell_members, grid_slot);
}

__device__ void observe_agent(int env, int agent, const int* t, x_view x, y_view y, speed_view speed,
                              heading_view heading, accel_view accel, in_game_view in_game,
                              cell_count_view cell_count, cell_members_view cell_members, knn_d2_view knn_d2,
                              knn_id_view knn_id, obs_view obs)
{
    if (in_game(env, agent) == 0)  // (bin_agents zeroed its row and emptied its list)
        return;
    int base;
    if (full_observation) {
        int slot = 0;
        for (int j = 0; j < NUM_AGENTS; ++j)
            if (j != agent) {
                tc_write_slot(obs, env, agent, 7 * slot, j, x, y, speed, heading, accel, in_game);
                slot += 1;
            }
        base = 7 * (NUM_AGENTS - 1);
    } else {
        tc_topk best;
        const int found = tc_knn_search(env, agent, x, y, in_game, cell_count, cell_members, best);
        // the slots past `found` hold bin_agents' zeros and -1, and keep their knn_d2 (as the Python's
        // insertion leaves them)
#pragma unroll
        for (int i = 0; i < TC_K; ++i) {
            if (i < found) {
                knn_d2(env, agent, i) = best.d2[i];
                knn_id(env, agent, i) = best.id[i];
                tc_write_slot(obs, env, agent, 7 * i, best.id[i], x, y, speed, heading, accel, in_game);
            }
        }
        base = 7 * TC_K;
    }
    obs(env, agent, base) = (float)((double)x(env, agent) / (double)grid_length);
    obs(env, agent, base + 1) = (float)((double)y(env, agent) / (double)grid_length);
    obs(env, agent, base + 2) = (float)((double)speed(env, agent) / TC_NORM_SPEED);
    obs(env, agent, base + 3) = (float)((double)accel(env, agent) / TC_NORM_SPEED);
    obs(env, agent, base + 4) = (float)((double)heading(env, agent) / TC_TWO_PI);
    obs(env, agent, base + 5) = agent < num_taggers ? 1.0f : 0.0f;
    obs(env, agent, base + 6) = 1.0f;
    obs(env, agent, base + 7) = (float)((double)t[env] / (double)episode_length);
}
