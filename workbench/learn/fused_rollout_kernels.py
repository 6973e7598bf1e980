"""The rollout's Triton kernels of fused.py (imported only when first used): the policy step,
V(final observation) of truncated replicas, the step's bookkeeping and the members' uniforms.
fused.FusedPolicyStep, FusedStepRecord and FusedUniform launch them; read those first."""
import triton
import triton.language as tl

from .fused_kernels import load_mlp, mlp_out


@triton.jit
def policy_step(
        obs, noise, aw1, ab1, aw2, ab2, aw3, ab3, cw1, cb1, cw2, cb2, cw3, cb3, strides, actions, logp, values, rows,
        obs_out, env_action, n, agents, first,
        O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr,
        H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr, STACKED: tl.constexpr,
        DOT: tl.constexpr, TANH: tl.constexpr, RECORD: tl.constexpr):
    """One program: BLOCK of member m's `rows` rollout rows (rows grouped by member): the policy's
    logits, an action by the Gumbel-max trick on the uniform `noise` [N, K], its log-probability and
    the value, written into actions, logp and values [N]. RECORD: also the observations into obs_out
    [N, O] (the rollout buffer's step, in its type) and the actions into the env's action array
    env_action [E, agents] (row r: agent first + r % n of replica r // n)."""
    m = tl.program_id(0)
    r = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    row = m * rows + r
    o_in = tl.arange(0, OP)
    cols = tl.arange(0, KP)
    x = tl.load(obs + row[:, None] * O + o_in[None, :], mask=valid[:, None] & (o_in[None, :] < O),
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
        tl.store(obs_out + row[:, None] * O + o_in[None, :], x.to(obs_out.dtype.element_ty, fp_downcast_rounding="rtne"),
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
    holding a truncation (a time limit is reached by few replicas per step)."""
    m = tl.program_id(0)
    t = tl.program_id(1)
    r = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
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
def step_record(done, terminated, truncated, final_obs, reward, last_return, last_length,
                terminated_out, truncated_out, final_obs_out, reward_out, sums, per_member, sums_stride,
                A: tl.constexpr, AP: tl.constexpr, O: tl.constexpr, OP: tl.constexpr, FINAL: tl.constexpr,
                BLOCK: tl.constexpr):
    """One program: BLOCK of member m's `per_member` replicas after an env step (collection's
    Collector.step_outcome and EpisodeStats.after_step are the reference): the step's terminations
    and truncations [E] (as floats), rewards [E, A] and, where the episode ended (FINAL), the final
    observations [E, A, O] into the rollout's step; the ended episodes' mean return over the agents,
    length and count added to the member's row of sums [M, 3]."""
    m = tl.program_id(0)
    e = m * per_member + tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK) < per_member
    ended = tl.load(done + e, mask=ok, other=0).to(tl.float32)
    tl.store(terminated_out + e, tl.load(terminated + e, mask=ok, other=0).to(tl.float32), mask=ok)
    tl.store(truncated_out + e, tl.load(truncated + e, mask=ok, other=0).to(tl.float32), mask=ok)
    a = tl.arange(0, AP)
    here = ok[:, None] & (a[None, :] < A)
    at = e[:, None] * A + a[None, :]
    tl.store(reward_out + at, tl.load(reward + at, mask=here, other=0.0), mask=here)
    returns = tl.sum(tl.load(last_return + at, mask=here, other=0.0), 1) / A
    length = tl.load(last_length + e, mask=ok, other=0).to(tl.float32)
    tl.atomic_add(sums + m * sums_stride, tl.sum(ended * returns, 0))
    tl.atomic_add(sums + m * sums_stride + 1, tl.sum(ended * length, 0))
    tl.atomic_add(sums + m * sums_stride + 2, tl.sum(ended, 0))
    if FINAL:  # (rows of episodes that did not end keep stale, finite values the critic's pass multiplies by 0)
        o = tl.arange(0, OP)
        rows = (e[:, None] * A + a[None, :])[:, :, None] * O + o[None, None, :]
        where = (here & (ended[:, None] > 0))[:, :, None] & (o[None, None, :] < O)
        tl.store(final_obs_out + rows, tl.load(final_obs + rows, mask=where, other=0.0), mask=where)


@triton.jit
def mix32(x):
    """streams._mix on int64 values in [0, 2**32)."""
    x = ((x ^ (x >> 16)) * 0x21F0AAAD) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


@triton.jit
def member_uniform(keys, counter, out, n, offset, site_term, BLOCK: tl.constexpr):
    """out [M, n]: element offset + i of member m's uniform stream at the counter's iteration and the
    call site (site_term: the site's hashed term), the same bits and floats as
    streams.MemberStreams.uniform's torch ops (its reference) in one pass."""
    m = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    call = mix32((tl.load(counter) * 0x9E3779B9 + site_term) & 0xFFFFFFFF)
    member = mix32(tl.load(keys + m) ^ call)
    index = ((i + offset).to(tl.int64) * 0x9E3779B9) & 0xFFFFFFFF
    bits = mix32((member + index) & 0xFFFFFFFF)
    tl.store(out + m * n + i, ((bits >> 8).to(tl.float32) + 0.5) * 5.9604644775390625e-08, mask=ok)


@triton.jit
def head_sample(out, out_stride, noise, starts, actions, logp, rows, HEADS: tl.constexpr, D: tl.constexpr,
                DP: tl.constexpr, BLOCK: tl.constexpr):
    """Discrete and MultiDiscrete heads: for rows [BLOCK] of head outputs out [N, D] (any float
    type) and uniform noise [N, D], each head h's action (columns [starts[h], starts[h + 1])) by
    the Gumbel-max trick, its index within the head into actions [N, HEADS], and log pi(a|s) summed
    over the heads into logp [N] (compiled.policy_step with ActionHead.sample and log_prob is the
    reference)."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    cols = tl.arange(0, DP)
    ok = valid[:, None] & (cols[None, :] < D)
    x = tl.load(out + r[:, None].to(tl.int64) * out_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    u = tl.load(noise + r[:, None].to(tl.int64) * D + cols[None, :], mask=ok, other=0.5)
    u = tl.minimum(tl.maximum(u, 1e-10), 1.0)
    perturbed = x - tl.log(-tl.log(u))
    total = tl.zeros((BLOCK,), tl.float32)
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
    tl.store(logp + r, total, mask=valid)
