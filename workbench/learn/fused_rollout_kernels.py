"""The rollout's Triton kernels of fused.py (imported only when first used): the policy step,
V(final observation) of truncated replicas, the step's bookkeeping and the members' uniforms.
fused.FusedPolicyStep, fused_record.FusedStepRecord and fused.FusedUniform launch them; read those first."""
import triton
import triton.language as tl

from .fused_kernels import activation, dot, load_mlp, mlp_out, operand


@triton.jit
def policy_step(
        obs, obs_row, obs_col, noise, aw1, ab1, aw2, ab2, aw3, ab3, cw1, cb1, cw2, cb2, cw3, cb3, strides, actions,
        logp, values, rows, obs_out, env_action, n, agents, first,
        O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr,
        H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr, STACKED: tl.constexpr,
        DOT: tl.constexpr, TANH: tl.constexpr, RECORD: tl.constexpr):
    """One program: BLOCK of member m's `rows` rollout rows (rows grouped by member) of obs [N, O] (element
    (r, i) at obs + r * obs_row + i * obs_col: an observation that is the env's state is column-major): the policy's
    logits, an action by the Gumbel-max trick on the uniform `noise` [N, K], its log-probability and
    the value, written into actions, logp and values [N]. RECORD: also the observations into obs_out
    [N, O] (the rollout buffer's step, in its type) and the actions into the env's action array
    env_action [E, agents] (row r: agent first + r % n of replica r // n). Grid: (tiles, M), the tiles
    on the first axis, which holds 2^31 - 1 programs where the others hold 65535."""
    m = tl.program_id(1)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    row = m.to(tl.int64) * rows + r
    o_in = tl.arange(0, OP)
    cols = tl.arange(0, KP)
    x = tl.load(obs + row[:, None] * obs_row + o_in[None, :] * obs_col, mask=valid[:, None] & (o_in[None, :] < O),
                other=0.0).to(tl.float32)
    W1, B1, W2, B2, W3, B3 = load_mlp(aw1, ab1, aw2, ab2, aw3, ab3, strides, m, O, OP, H1, H1P, H2, H2P, K, KP,
                                      STACKED)
    out = mlp_out(x, W1, B1, W2, B2, W3, B3, DOT, TANH)
    ok_k = cols[None, :] < K
    logits = tl.where(ok_k, out, -1e30)
    u = tl.load(noise + row[:, None] * K + cols[None, :], mask=valid[:, None] & ok_k, other=0.5)
    u = tl.minimum(tl.maximum(u, 1e-10), 1.0)
    perturbed = tl.where(ok_k, logits - tl.log(-tl.log(u)), -3e30)
    best = tl.max(perturbed, 1)
    action = tl.min(tl.where(perturbed == best[:, None], cols[None, :], KP), 1)  # the first maximum, as argmax
    top = tl.max(logits, 1)
    lse = top + tl.log(tl.sum(tl.exp(logits - top[:, None]), 1))
    chosen = tl.sum(tl.where(cols[None, :] == action[:, None], logits, 0.0), 1)
    W1, B1, W2, B2, W3, B3 = load_mlp(cw1, cb1, cw2, cb2, cw3, cb3, strides + 6, m, O, OP, H1, H1P, H2, H2P, 1, KP,
                                      STACKED)
    value = tl.sum(tl.where(cols[None, :] == 0, mlp_out(x, W1, B1, W2, B2, W3, B3, DOT, TANH), 0.0), 1)
    tl.store(actions + row, action.to(tl.int64), mask=valid)
    tl.store(logp + row, chosen - lse, mask=valid)
    tl.store(values + row, value, mask=valid)
    if RECORD:
        tl.store(obs_out + row[:, None] * O + o_in[None, :],
                 x.to(obs_out.dtype.element_ty, fp_downcast_rounding="rtne"),
                 mask=valid[:, None] & (o_in[None, :] < O))
        tl.store(env_action + (row // n) * agents + first + row % n, action.to(env_action.dtype.element_ty),
                 mask=valid)


@triton.jit
def truncated_values(final_obs, truncated, terminated, cw1, cb1, cw2, cb2, cw3, cb3, strides, final_values, E, rows,
                     AGENTS: tl.constexpr, O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr,
                     H1P: tl.constexpr, H2: tl.constexpr, H2P: tl.constexpr, KP: tl.constexpr,
                     BLOCK: tl.constexpr, STACKED: tl.constexpr, DOT: tl.constexpr, TANH: tl.constexpr):
    """One program: BLOCK of member m's `rows` rows (replicas x agents) of rollout step t: the value
    of the final observation final_obs [T, E * AGENTS, O] where the replica was truncated (and not
    terminated) at t, else 0, into final_values [T, E * AGENTS]. The critic runs only for tiles
    holding a truncation (a time limit is reached by few replicas per step). Grid: (tiles, T, M)."""
    m = tl.program_id(2).to(tl.int64)
    t = tl.program_id(1).to(tl.int64)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    row = t * (E * AGENTS) + m * rows + r
    replica = t * E + (m * rows + r) // AGENTS
    trunc = tl.load(truncated + replica, mask=valid, other=0.0)
    term = tl.load(terminated + replica, mask=valid, other=0.0)
    flag = trunc * (1.0 - term)
    value = tl.zeros((BLOCK,), tl.float32)
    if tl.max(flag, 0) > 0:
        o_in = tl.arange(0, OP)
        cols = tl.arange(0, KP)
        x = tl.load(final_obs + row[:, None] * O + o_in[None, :], mask=valid[:, None] & (o_in[None, :] < O),
                    other=0.0).to(tl.float32)
        W1, B1, W2, B2, W3, B3 = load_mlp(cw1, cb1, cw2, cb2, cw3, cb3, strides, m, O, OP, H1, H1P, H2, H2P, 1, KP,
                                          STACKED)
        out = mlp_out(x, W1, B1, W2, B2, W3, B3, DOT, TANH)
        value = tl.sum(tl.where(cols[None, :] == 0, out, 0.0), 1) * flag
    tl.store(final_values + row, value, mask=valid)


@triton.jit
def step_record(done, terminated, truncated, final_obs, reward, last_return, last_length, active,
                terminated_out, truncated_out, final_obs_out, reward_out, mask_out, sums, per_member, sums_stride,
                start, return_col, length_col, count_col, metric_col, metric_start,
                A: tl.constexpr, N: tl.constexpr, NP: tl.constexpr, O: tl.constexpr, OP: tl.constexpr,
                METRIC_N: tl.constexpr, SHARED: tl.constexpr, FINAL: tl.constexpr, MASK: tl.constexpr,
                METRIC: tl.constexpr, BLOCK: tl.constexpr):
    """One program: BLOCK of member m's `per_member` replicas after an env step, for the policy group
    of agents [start, start + N) (collection's Collector.step_outcome and EpisodeStats.after_step are
    the reference): the group's rewards [E, A] -> reward_out [E, N] and, with MASK, its agents still
    in the game (active != 0) -> mask_out [E, N] (the rollout's mask of the next step); the ended
    episodes' mean return over the group's agents added to column return_col of the member's row of
    sums [M, K]. SHARED (one group's launch a step): also the terminations and truncations [E] (as
    floats), the ended episodes' length and count (columns length_col, count_col), with FINAL their
    final observations [E, A, O] into final_obs_out, and with METRIC Tag's runners tagged (agents
    [metric_start, metric_start + METRIC_N) whose final observation is all zeros) into metric_col.
    Grid: (tiles, M)."""
    m = tl.program_id(1)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < per_member
    e = m.to(tl.int64) * per_member + i
    ended = tl.load(done + e, mask=ok, other=0).to(tl.float32)
    a = tl.arange(0, NP)
    here = ok[:, None] & (a[None, :] < N)
    at = e[:, None] * A + start + a[None, :]
    out = e[:, None] * N + a[None, :]
    tl.store(reward_out + out, tl.load(reward + at, mask=here, other=0.0), mask=here)
    if MASK:
        tl.store(mask_out + out, (tl.load(active + at, mask=here, other=0) != 0).to(tl.float32), mask=here)
    returns = tl.sum(tl.load(last_return + at, mask=here, other=0.0), 1) / N
    row = sums + m * sums_stride
    tl.atomic_add(row + return_col, tl.sum(ended * returns, 0))
    if SHARED:
        tl.store(terminated_out + e, tl.load(terminated + e, mask=ok, other=0).to(tl.float32), mask=ok)
        tl.store(truncated_out + e, tl.load(truncated + e, mask=ok, other=0).to(tl.float32), mask=ok)
        length = tl.load(last_length + e, mask=ok, other=0).to(tl.float32)
        tl.atomic_add(row + length_col, tl.sum(ended * length, 0))
        tl.atomic_add(row + count_col, tl.sum(ended, 0))
        if FINAL or METRIC:
            # agent by agent, over the replicas whose episode ended (the others' rows are not read)
            o = tl.arange(0, OP)
            take = (ended[:, None] > 0) & (o[None, :] < O)
            tagged = tl.zeros((BLOCK,), dtype=tl.float32)
            if tl.max(ended, 0) > 0:
                for jj in range(A if FINAL else METRIC_N):
                    j = jj if FINAL else metric_start + jj
                    rows = (e * A + j)[:, None] * O + o[None, :]
                    x = tl.load(final_obs + rows, mask=take, other=0.0)
                    # (rows of episodes that did not end keep stale, finite values the critic's pass multiplies by 0)
                    if FINAL:
                        tl.store(final_obs_out + rows, x, mask=take)
                    if METRIC:
                        out_of_game = tl.max((x != 0).to(tl.float32), 1) == 0
                        counted = (j >= metric_start) & (j < metric_start + METRIC_N)
                        tagged += (out_of_game & counted).to(tl.float32)
            if METRIC:
                tl.atomic_add(row + metric_col, tl.sum(ended * tagged, 0))


@triton.jit
def mix32(x):
    """streams._mix on int64 values in [0, 2**32)."""
    x = ((x ^ (x >> 16)) * 0x21F0AAAD) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


@triton.jit
def member_uniform(keys, counter, out, n, offset, site_term, row, row_stride, member_stride, BLOCK: tl.constexpr):
    """Element offset + i of member m's uniform stream at the counter's iteration and the call site
    (site_term: the site's hashed term) into out at m * member_stride + (i // row) * row_stride +
    i % row (a contiguous [M, n]: row = row_stride = member_stride = n), the same bits and floats as
    streams.MemberStreams.uniform's torch ops (its reference) in one pass."""
    m = tl.program_id(1).to(tl.int64)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    call = mix32((tl.load(counter) * 0x9E3779B9 + site_term) & 0xFFFFFFFF)
    member = mix32(tl.load(keys + m) ^ call)
    index = ((i + offset).to(tl.int64) * 0x9E3779B9) & 0xFFFFFFFF
    bits = mix32((member + index) & 0xFFFFFFFF)
    place = m * member_stride + (i // row) * row_stride + i % row
    tl.store(out + place, ((bits >> 8).to(tl.float32) + 0.5) * 5.9604644775390625e-08, mask=ok)


@triton.jit
def sample_heads(x, u, valid, starts, actions, r, env_action, slot, HEADS: tl.constexpr, DP: tl.constexpr,
                 SEND: tl.constexpr):
    """Head outputs x [BLOCK, DP] (float32) and uniform noise u [BLOCK, DP] of rows r: each head h's
    action (columns [starts[h], starts[h + 1])) by the Gumbel-max trick, its index within the head
    stored into actions [N, HEADS] (and with SEND into env_action at slot + h); returns log pi(a|s)
    summed over the heads [BLOCK]."""
    cols = tl.arange(0, DP)
    u = tl.minimum(tl.maximum(u, 1e-10), 1.0)
    perturbed = x - tl.log(-tl.log(u))
    total = tl.zeros((x.shape[0],), tl.float32)
    for h in tl.static_range(HEADS):
        first = tl.load(starts + h)
        last = tl.load(starts + h + 1)
        inside = (cols[None, :] >= first) & (cols[None, :] < last)
        p = tl.where(inside, perturbed, -float("inf"))
        best = tl.max(p, 1)
        action = tl.min(tl.where(inside & (p == best[:, None]), cols[None, :], DP), 1)  # the first maximum
        logits = tl.where(inside, x, -float("inf"))
        top = tl.max(logits, 1)
        lse = top + tl.log(tl.sum(tl.where(inside, tl.exp(logits - top[:, None]), 0.0), 1))
        chosen = tl.sum(tl.where(cols[None, :] == action[:, None], x, 0.0), 1)
        total += chosen - lse
        tl.store(actions + r.to(tl.int64) * HEADS + h, (action - first).to(tl.int64), mask=valid)
        if SEND:
            tl.store(env_action + slot + h, (action - first).to(env_action.dtype.element_ty), mask=valid)
    return total


@triton.jit
def head_sample(out, out_stride, noise, starts, actions, logp, rows, HEADS: tl.constexpr, D: tl.constexpr,
                DP: tl.constexpr, BLOCK: tl.constexpr):
    """Discrete and MultiDiscrete heads: for rows [BLOCK] of head outputs out [N, D] (any float
    type) and uniform noise [N, D], each head's action and log pi(a|s) summed over the heads
    (sample_heads) into actions [N, HEADS] and logp [N] (compiled.policy_step with
    ActionHead.sample and log_prob is the reference)."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    cols = tl.arange(0, DP)
    ok = valid[:, None] & (cols[None, :] < D)
    x = tl.load(out + r[:, None].to(tl.int64) * out_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    u = tl.load(noise + r[:, None].to(tl.int64) * D + cols[None, :], mask=ok, other=0.5)
    tl.store(logp + r, sample_heads(x, u, valid, starts, actions, r, actions, r, HEADS, DP, False), mask=valid)


@triton.jit
def tile_offsets(IN: tl.constexpr, OUT: tl.constexpr, r0, c0, R: tl.constexpr, C: tl.constexpr,
                 STACKED: tl.constexpr):
    """Offsets within one member's weight, and bounds, of the tile [r0:r0 + R, c0:c0 + C] of the
    weight as [in, out]: STACKED 1 holds it as MemberLinear's [in, out], 0 (nn.Linear) and 2 (a
    stacked copy laid out as nn.Linear's, members.nn_linear_layout) as [out, in]."""
    i = r0 + tl.arange(0, R)[:, None]
    o = c0 + tl.arange(0, C)[None, :]
    if STACKED == 1:
        off = i * OUT + o
    else:
        off = o * IN + i
    return off, (i < IN) & (o < OUT)


@triton.jit
def member_base(x, m, stride, STACKED: tl.constexpr):
    """Member m's first element of a stacked parameter x (members `stride` elements apart)."""
    if STACKED:
        return x + m.to(tl.int64) * stride
    else:
        return x


@triton.jit
def wide_mlp(obs, row, valid, w1, b1, w2, b2, w3, b3, strides, m, O: tl.constexpr, OP: tl.constexpr,
             H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr, H2P: tl.constexpr, K: tl.constexpr,
             KP: tl.constexpr, KC: tl.constexpr, NC: tl.constexpr, BLOCK: tl.constexpr, STACKED: tl.constexpr,
             DOT: tl.constexpr, TANH: tl.constexpr):
    """Rows `row` of obs [N, O] through linear, tanh, linear, tanh, linear (ReLU for TANH 2:
    fused_kernels.activation) -> [BLOCK, KP] float32,
    for layers too wide to hold whole (mlp_out): the first layer takes the observations KC features
    at a time, the second hidden layer is made NC units at a time and each chunk goes straight into
    the output layer's dot, so no weight matrix is ever whole in registers (the tiles come from
    L2) and no activation leaves the program. The loops are not unrolled: unrolled, the compiler
    hoists every tile's loads and runs out of registers."""
    h1c = tl.arange(0, H1P)
    w1 = member_base(w1, m, tl.load(strides), STACKED)
    w2 = member_base(w2, m, tl.load(strides + 2), STACKED)
    w3 = member_base(w3, m, tl.load(strides + 4), STACKED)
    acc = tl.zeros((BLOCK, H1P), tl.float32)
    for k0 in range(0, OP, KC):
        f = k0 + tl.arange(0, KC)
        x = tl.load(obs + row[:, None] * O + f[None, :], mask=valid[:, None] & (f[None, :] < O), other=0.0)
        off, ok = tile_offsets(O, H1, k0, 0, KC, H1P, STACKED)
        acc += dot(operand(x.to(tl.float32), DOT), operand(tl.load(w1 + off, mask=ok, other=0.0), DOT), DOT)
    B1 = tl.load(member_base(b1, m, tl.load(strides + 1), STACKED) + h1c, mask=h1c < H1, other=0.0).to(tl.float32)
    h1 = operand(activation(acc + B1[None, :], TANH), DOT)
    out = tl.zeros((BLOCK, KP), tl.float32)
    for n0 in range(0, H2P, NC):
        off, ok = tile_offsets(H1, H2, 0, n0, H1P, NC, STACKED)
        W2 = operand(tl.load(w2 + off, mask=ok, other=0.0), DOT)
        c = n0 + tl.arange(0, NC)
        B2 = tl.load(member_base(b2, m, tl.load(strides + 3), STACKED) + c, mask=c < H2, other=0.0).to(tl.float32)
        h2 = operand(activation(dot(h1, W2, DOT) + B2[None, :], TANH), DOT)
        off, ok = tile_offsets(H2, K, n0, 0, NC, KP, STACKED)
        out += dot(h2, operand(tl.load(w3 + off, mask=ok, other=0.0), DOT), DOT)
    kc = tl.arange(0, KP)
    B3 = tl.load(member_base(b3, m, tl.load(strides + 5), STACKED) + kc, mask=kc < K, other=0.0).to(tl.float32)
    return out + B3[None, :]


@triton.jit
def wide_policy_step(
        obs, noise, aw1, ab1, aw2, ab2, aw3, ab3, cw1, cb1, cw2, cb2, cw3, cb3, strides, starts, actions, logp,
        values, rows, obs_out, env_action, n, agents, first, members, sms,
        O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr,
        H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, C1: tl.constexpr, C1P: tl.constexpr,
        C2: tl.constexpr, C2P: tl.constexpr, HEADS: tl.constexpr, KC: tl.constexpr, NC: tl.constexpr,
        BLOCK: tl.constexpr,
        STACKED: tl.constexpr, DOT: tl.constexpr, TANH: tl.constexpr, RECORD: tl.constexpr, SHARED: tl.constexpr,
        PERSIST: tl.constexpr):
    """policy_step for wide layers (wide_mlp) and discrete or MultiDiscrete heads (sample_heads):
    program (tile, m) takes BLOCK of member m's `rows` rows (tiles on the grid's first axis, which
    holds 2^31 - 1 programs where the others hold 65535); actions [N, HEADS], logp and values [N].
    RECORD: also the observations into obs_out [N, O] and the actions into the env's action array
    env_action [E, agents, HEADS] (row r: agent first + r % n of replica r // n). SHARED: one MLP
    (aw*) whose output column K is the value (SharedActorCritic); the cw* are not read.
    PERSIST R > 0 (stacked members of many rows): a grid of sms * R programs, the (member, tile)
    items cut into sms runs of consecutive items, program p taking every R-th item of run p % sms:
    a program's items are mostly one member's, whose weights its earlier tiles left in L1."""
    if PERSIST == 0:
        wide_policy_tile(tl.program_id(1), tl.program_id(0), obs, noise, aw1, ab1, aw2, ab2, aw3, ab3, cw1, cb1,
                         cw2, cb2, cw3, cb3, strides, starts, actions, logp, values, rows, obs_out, env_action, n,
                         agents, first, O, OP, H1, H1P, H2, H2P, K, KP, C1, C1P, C2, C2P, HEADS, KC, NC, BLOCK,
                         STACKED, DOT, TANH, RECORD, SHARED)
    else:
        p = tl.program_id(0)
        tiles = (rows + BLOCK - 1) // BLOCK
        work = tiles.to(tl.int64) * members
        s = p % sms
        start = s * work // sms
        end = (s + 1) * work // sms
        for w in range(start + p // sms, end, PERSIST):
            wide_policy_tile((w // tiles).to(tl.int32), (w % tiles).to(tl.int32), obs, noise, aw1, ab1, aw2, ab2,
                             aw3, ab3, cw1, cb1, cw2, cb2, cw3, cb3, strides, starts, actions, logp, values, rows,
                             obs_out, env_action, n, agents, first, O, OP, H1, H1P, H2, H2P, K, KP, C1, C1P, C2,
                             C2P, HEADS, KC, NC, BLOCK, STACKED, DOT, TANH, RECORD, SHARED)


@triton.jit
def wide_policy_tile(
        m, tile, obs, noise, aw1, ab1, aw2, ab2, aw3, ab3, cw1, cb1, cw2, cb2, cw3, cb3, strides, starts, actions,
        logp, values, rows, obs_out, env_action, n, agents, first,
        O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr,
        H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, C1: tl.constexpr, C1P: tl.constexpr,
        C2: tl.constexpr, C2P: tl.constexpr, HEADS: tl.constexpr, KC: tl.constexpr, NC: tl.constexpr,
        BLOCK: tl.constexpr,
        STACKED: tl.constexpr, DOT: tl.constexpr, TANH: tl.constexpr, RECORD: tl.constexpr, SHARED: tl.constexpr):
    """wide_policy_step's work for tile `tile` of member m's rows."""
    r = tile * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    row = m.to(tl.int64) * rows + r
    cols = tl.arange(0, KP)
    out = wide_mlp(obs, row, valid, aw1, ab1, aw2, ab2, aw3, ab3, strides, m, O, OP, H1, H1P, H2, H2P, K + SHARED,
                   KP, KC, NC, BLOCK, STACKED, DOT, TANH)
    u = tl.load(noise + row[:, None] * K + cols[None, :], mask=valid[:, None] & (cols[None, :] < K), other=0.5)
    slot = ((row // n) * agents + first + row % n) * HEADS  # (with RECORD) the env's action entries
    chosen = sample_heads(out, u, valid, starts, actions, row, env_action, slot, HEADS, KP, RECORD)
    if SHARED:
        value = tl.sum(tl.where(cols[None, :] == K, out, 0.0), 1)
    else:
        v = wide_mlp(obs, row, valid, cw1, cb1, cw2, cb2, cw3, cb3, strides + 6, m, O, OP, C1, C1P, C2, C2P, 1, 16,
                     KC, NC, BLOCK, STACKED, DOT, TANH)
        value = tl.sum(tl.where(tl.arange(0, 16)[None, :] == 0, v, 0.0), 1)
    tl.store(logp + row, chosen, mask=valid)
    tl.store(values + row, value, mask=valid)
    if RECORD:
        for k0 in range(0, OP, KC):
            f = k0 + tl.arange(0, KC)
            here = valid[:, None] & (f[None, :] < O)
            x = tl.load(obs + row[:, None] * O + f[None, :], mask=here, other=0.0)
            tl.store(obs_out + row[:, None] * O + f[None, :],
                     x.to(tl.float32).to(obs_out.dtype.element_ty, fp_downcast_rounding="rtne"), mask=here)


@triton.jit
def wide_truncated_values(final_obs, truncated, terminated, cw1, cb1, cw2, cb2, cw3, cb3, strides, out, rows, n,
                          agents, first, O: tl.constexpr, OP: tl.constexpr, C1: tl.constexpr, C1P: tl.constexpr,
                          C2: tl.constexpr, C2P: tl.constexpr, KC: tl.constexpr, NC: tl.constexpr,
                          BLOCK: tl.constexpr, STACKED: tl.constexpr, DOT: tl.constexpr, TANH: tl.constexpr,
                          V: tl.constexpr, VP: tl.constexpr):
    """truncated_values of one step for a group's wide critic: rows r of member m's `rows` (replica
    r // n, agent first + r % n of the env's `agents`) get V(final_obs [E, agents, O]) where their
    replica was truncated and not terminated (truncated, terminated [E] floats), else 0, into
    out [E * n]. The critic's output column V - 1 of its V (padded: VP) is the value (V = 1, or a
    SharedActorCritic's D + 1). Tiles without a truncation skip the critic (most steps have none).
    Grid: (tiles, M)."""
    m = tl.program_id(1)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    row = m.to(tl.int64) * rows + r
    replica = row // n
    flag = tl.load(truncated + replica, mask=valid, other=0.0) * (1.0 - tl.load(terminated + replica, mask=valid,
                                                                                other=0.0))
    value = tl.zeros((BLOCK,), tl.float32)
    if tl.max(flag, 0) > 0:
        v = wide_mlp(final_obs, replica * agents + first + row % n, valid, cw1, cb1, cw2, cb2, cw3, cb3, strides, m,
                     O, OP, C1, C1P, C2, C2P, V, VP, KC, NC, BLOCK, STACKED, DOT, TANH)
        value = tl.sum(tl.where(tl.arange(0, VP)[None, :] == V - 1, v, 0.0), 1) * flag
    tl.store(out + row, value, mask=valid)
