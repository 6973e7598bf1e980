"""The learner's Triton kernels of fused.py (imported only when first used: Triton reads
TRITON_INTERPRET as it defines them), and the MLP helpers the rollout's kernels
(fused_rollout_kernels.py) share. fused.FusedGradients, FusedGAE and FusedMemberAdam launch them;
read those first."""
import triton
import triton.language as tl


@triton.jit
def dot(a, b, DOT: tl.constexpr):
    if DOT == 0:
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    elif DOT == 1:
        return tl.dot(a, b, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision="ieee")


@triton.jit
def tanh(x, APPROX: tl.constexpr):
    """tanh: the hardware's tanh.approx.f32 (max relative error about 2^-11, under bf16 dots whose
    error is larger) or 2 sigmoid(2x) - 1 (fp32 and tf32; Triton's interpreter)."""
    if APPROX:
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def activation(x, ACT: tl.constexpr):
    """A hidden layer's activation: tanh (ACT 0 or 1: tanh's two forms above, APPROX = ACT) or ReLU (ACT 2)."""
    if ACT == 2:
        return tl.maximum(x, 0.0)
    else:
        return tanh(x, ACT)


@triton.jit
def activation_derivative(dy, y, RELU: tl.constexpr):
    """A hidden layer's pre-activation gradient from its output y and the output's gradient dy: dy (1 - y^2)
    for tanh, dy where y > 0 for ReLU (RELU 1)."""
    if RELU:
        return tl.where(y > 0.0, dy, 0.0)
    else:
        return dy * (1.0 - y * y)


@triton.jit
def operand(w, DOT: tl.constexpr):
    """A weight tile in the dots' input type (bf16 under DOT 0), cast once outside a program's loop."""
    if DOT == 0:
        return w.to(tl.bfloat16)
    else:
        return w


@triton.jit
def weight_offsets(m, stride, IN: tl.constexpr, OUT: tl.constexpr, INP: tl.constexpr, OUTP: tl.constexpr,
                   STACKED: tl.constexpr):
    i = tl.arange(0, INP)[:, None]
    o = tl.arange(0, OUTP)[None, :]
    if STACKED:  # MemberLinear: [M, in, out], members `stride` elements apart
        off = m * stride + i * OUT + o
    else:  # nn.Linear: [out, in]
        off = o * IN + i
    return off, (i < IN) & (o < OUT)


@triton.jit
def grad_offsets(base, IN: tl.constexpr, OUT: tl.constexpr, INP: tl.constexpr, OUTP: tl.constexpr,
                 STACKED: tl.constexpr):
    """A weight gradient's offsets in a flat gradient row starting at `base` (MemberLinear's [in, out]
    layout, or nn.Linear's [out, in])."""
    i = tl.arange(0, INP)[:, None]
    o = tl.arange(0, OUTP)[None, :]
    if STACKED:
        off = base + i * OUT + o
    else:
        off = base + o * IN + i
    return off, (i < IN) & (o < OUT)


@triton.jit
def minibatch_grad(
        obs, idx, idx_stride, actions, logp_old, values_old, advantages, returns, mask,
        count, count_stride, adv_mean, adv_std, moment_stride, coefs, members,
        w1, b1, w2, b2, w3, b3, strides, g1, gb1, g2, gb2, g3, gb3, g_stride, stats, stat_parts, rows,
        O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr, H1P: tl.constexpr, H2: tl.constexpr,
        H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr, STACKED: tl.constexpr,
        VALUE: tl.constexpr, PPO: tl.constexpr, NORM_ADV: tl.constexpr, CLIP_VALUE: tl.constexpr,
        DOT: tl.constexpr, TILES: tl.constexpr, TANH: tl.constexpr, SPLITS: tl.constexpr):
    """One program: tiles [split * TILES, (split + 1) * TILES) of member m's `rows` minibatch rows,
    through the policy's (VALUE=0) or the value function's (VALUE=1) MLP, loss and backward.

    With one program per member (SPLITS 1) it writes the weight gradients into row m of the flat
    gradients g* (rows g_stride apart) and adds the loss statistics to stats [6, members]; with
    several, into row m * SPLITS + split of a buffer of partial gradients and its statistics into
    stat_parts [members * SPLITS, 5], which split_sum adds up in a fixed order. No atomics: a
    minibatch's gradient is the same bits from run to run."""
    m = tl.program_id(0)
    split = tl.program_id(1)
    o_in = tl.arange(0, OP)
    cols = tl.arange(0, KP)
    h1c = tl.arange(0, H1P)
    h2c = tl.arange(0, H2P)
    W1, B1, W2, B2, W3, B3 = load_mlp(w1, b1, w2, b2, w3, b3, strides, m, O, OP, H1, H1P, H2, H2P, K, KP,
                                      STACKED)
    # the weights in the dots' type and the backward pass's transposes, made once, not per tile
    W1 = operand(W1, DOT)
    W2 = operand(W2, DOT)
    W3 = operand(W3, DOT)
    W2T = tl.trans(W2)
    W3T = tl.trans(W3)
    clip = tl.load(coefs + m)
    ent_coef = tl.load(coefs + members + m)
    vf_coef = tl.load(coefs + 2 * members + m)
    n_live = tl.load(count + m * count_stride)
    mean = 0.0
    std = 1.0
    if NORM_ADV:
        mean = tl.load(adv_mean + m * moment_stride)
        std = tl.load(adv_std + m * moment_stride)

    G1 = tl.zeros((OP, H1P), tl.float32)
    G2 = tl.zeros((H1P, H2P), tl.float32)
    G3 = tl.zeros((H2P, KP), tl.float32)
    GB1 = tl.zeros((H1P,), tl.float32)
    GB2 = tl.zeros((H2P,), tl.float32)
    GB3 = tl.zeros((KP,), tl.float32)
    s_pg = tl.zeros((BLOCK,), tl.float32)  # per-lane partial sums of the statistics
    s_v = tl.zeros((BLOCK,), tl.float32)
    s_ent = tl.zeros((BLOCK,), tl.float32)
    s_kl = tl.zeros((BLOCK,), tl.float32)
    s_cf = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, TILES):
        r = (split * TILES + k) * BLOCK + tl.arange(0, BLOCK)
        valid = r < rows
        sid = tl.load(idx + m * idx_stride + r, mask=valid, other=0)
        x = tl.load(obs + sid[:, None] * O + o_in[None, :], mask=valid[:, None] & (o_in[None, :] < O),
                    other=0.0).to(tl.float32)
        h1 = tanh(dot(x, W1, DOT) + B1[None, :], TANH)
        h2 = tanh(dot(h1, W2, DOT) + B2[None, :], TANH)
        out = dot(h2, W3, DOT) + B3[None, :]
        mk = tl.load(mask + sid, mask=valid, other=0.0)
        live = mk > 0
        weight = tl.where(live, mk / n_live, 0.0)
        if VALUE:
            value = tl.sum(tl.where(cols[None, :] == 0, out, 0.0), 1)
            ret = tl.load(returns + sid, mask=valid, other=0.0)
            err = value - ret
            if CLIP_VALUE:
                old = tl.load(values_old + sid, mask=valid, other=0.0)
                step = value - old
                inside = (step >= -clip) & (step <= clip)
                err_c = old + tl.minimum(tl.maximum(step, -clip), clip) - ret
                a1 = err * err
                a2 = err_c * err_c
                v = 0.5 * tl.maximum(a1, a2)
                d_inner = tl.where(inside, err_c, 0.0)
                dv = tl.where(a1 > a2, err, tl.where(a2 > a1, d_inner, 0.5 * err + 0.5 * d_inner))
            else:
                v = 0.5 * err * err
                dv = err
            s_v += weight * v
            d_out = tl.where(cols[None, :] == 0, (weight * vf_coef * dv)[:, None], 0.0)
        else:
            ok_k = cols[None, :] < K
            logits = tl.where(ok_k, out, -1e30)  # (finite: no 0 * inf in the padded columns)
            top = tl.max(logits, 1)
            e = tl.exp(logits - top[:, None])
            total = tl.sum(e, 1)
            logp_all = logits - top[:, None] - tl.log(total)[:, None]
            p = e / total[:, None]
            plogp = tl.where(ok_k, p * logp_all, 0.0)
            ent = -tl.sum(plogp, 1)
            a = tl.load(actions + sid, mask=valid, other=0)
            chosen = cols[None, :] == a[:, None]
            logp = tl.sum(tl.where(chosen, logp_all, 0.0), 1)
            adv = tl.load(advantages + sid, mask=valid, other=0.0)
            if NORM_ADV:
                adv = (adv - mean) / (std + 1e-8)
            if PPO:
                old = tl.load(logp_old + sid, mask=valid, other=0.0)
                log_ratio = tl.where(live, logp - old, 0.0)
                ratio = tl.exp(log_ratio)
                unclipped = -adv * ratio
                clipped = -adv * tl.minimum(tl.maximum(ratio, 1.0 - clip), 1.0 + clip)
                pg = tl.maximum(unclipped, clipped)
                inside = (ratio >= 1.0 - clip) & (ratio <= 1.0 + clip)
                d_logp = tl.where((unclipped > clipped) | inside, -adv * ratio, 0.0)
                s_kl += weight * ((ratio - 1.0) - log_ratio)
                s_cf += weight * (tl.abs(ratio - 1.0) > clip).to(tl.float32)
            else:
                pg = -adv * logp
                d_logp = -adv
            s_pg += weight * pg
            s_ent += weight * ent
            d_out = weight[:, None] * (d_logp[:, None] * (chosen.to(tl.float32) - p)
                                       + ent_coef * tl.where(ok_k, p * (logp_all + ent[:, None]), 0.0))
            d_out = tl.where(ok_k, d_out, 0.0)
        # backward through the MLP, the tile's activations still in registers
        G3 += dot(tl.trans(h2), d_out, DOT)
        GB3 += tl.sum(d_out, 0)
        d2 = dot(d_out, W3T, DOT) * (1.0 - h2 * h2)
        G2 += dot(tl.trans(h1), d2, DOT)
        GB2 += tl.sum(d2, 0)
        d1 = dot(d2, W2T, DOT) * (1.0 - h1 * h1)
        G1 += dot(tl.trans(x), d1, DOT)
        GB1 += tl.sum(d1, 0)

    row = m * SPLITS + split
    base = row.to(tl.int64) * g_stride
    off, ok = grad_offsets(base, O, H1, OP, H1P, STACKED)
    tl.store(g1 + off, G1, mask=ok)
    off, ok = grad_offsets(base, H1, H2, H1P, H2P, STACKED)
    tl.store(g2 + off, G2, mask=ok)
    off, ok = grad_offsets(base, H2, K, H2P, KP, STACKED)
    tl.store(g3 + off, G3, mask=ok)
    tl.store(gb1 + base + h1c, GB1, mask=h1c < H1)
    tl.store(gb2 + base + h2c, GB2, mask=h2c < H2)
    tl.store(gb3 + base + cols, GB3, mask=cols < K)
    # (the policy's and the value function's programs write different statistics: no two programs
    # write one place)
    if SPLITS == 1:
        if VALUE:
            add_stat(stats + members + m, tl.sum(s_v, 0))
        else:
            add_stat(stats + m, tl.sum(s_pg, 0))
            add_stat(stats + 2 * members + m, tl.sum(s_ent, 0))
            if PPO:
                add_stat(stats + 3 * members + m, tl.sum(s_kl, 0))
                add_stat(stats + 4 * members + m, tl.sum(s_cf, 0))
    else:
        if VALUE:
            tl.store(stat_parts + row * 5 + 1, tl.sum(s_v, 0))
        else:
            tl.store(stat_parts + row * 5, tl.sum(s_pg, 0))
            tl.store(stat_parts + row * 5 + 2, tl.sum(s_ent, 0))
            tl.store(stat_parts + row * 5 + 3, tl.sum(s_kl, 0))
            tl.store(stat_parts + row * 5 + 4, tl.sum(s_cf, 0))


@triton.jit
def add_stat(at, value):
    tl.store(at, tl.load(at) + value)


@triton.jit
def split_sum(parts, grad, stat_parts, stats, members, P, SPLITS: tl.constexpr, SB: tl.constexpr,
              BLOCK: tl.constexpr, STATS: tl.constexpr):
    """Member m's gradient: the sum over its SPLITS rows of partial gradients parts [M * SPLITS, P],
    in a fixed order, into grad [M, P] (columns [c * BLOCK, (c + 1) * BLOCK) in program (m, c));
    program (m, 0) also adds the sums of stat_parts [M * SPLITS, 5] to stats [5, members] (its
    first STATS rows)."""
    m = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    s = tl.arange(0, SB)
    acc = tl.zeros((BLOCK,), tl.float32)
    for first in range(0, SPLITS, SB):
        rows = first + s
        part = tl.load(parts + (m * SPLITS + rows[:, None]) * P + col[None, :],
                       mask=(rows[:, None] < SPLITS) & (col[None, :] < P), other=0.0)
        acc += tl.sum(part, 0)
    tl.store(grad + m * P + col, acc, mask=col < P)
    if tl.program_id(1) == 0:
        k = tl.arange(0, 8)
        total = tl.zeros((8,), tl.float32)
        for first in range(0, SPLITS, SB):
            rows = first + s
            part = tl.load(stat_parts + (m * SPLITS + rows[:, None]) * 5 + k[None, :],
                           mask=(rows[:, None] < SPLITS) & (k[None, :] < STATS), other=0.0)
            total += tl.sum(part, 0)
        at = stats + k * members + m
        tl.store(at, tl.load(at, mask=k < STATS, other=0.0) + total, mask=k < STATS)


@triton.jit
def gae(rewards, values, final_values, mask, terminated, truncated, next_value, gamma, lam, advantages,
        returns, columns, n, T: tl.constexpr, PER_REPLICA: tl.constexpr, BLOCK: tl.constexpr):
    """GAE over [T, columns] (columns = E * n, agent a of replica e at e * n + a), one column per
    lane, the recursion run backwards in time (gae.advantages is the reference)."""
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = c < columns
    e = c // n
    if PER_REPLICA:
        g = tl.load(gamma + e, mask=ok, other=0.0)
        lm = tl.load(lam + e, mask=ok, other=0.0)
    else:
        g = tl.load(gamma + e * 0, mask=ok, other=0.0)
        lm = tl.load(lam + e * 0, mask=ok, other=0.0)
    last = tl.zeros((BLOCK,), tl.float32)
    v_next = tl.load(next_value + c, mask=ok, other=0.0)
    for k in range(T):
        t = T - 1 - k
        term = tl.load(terminated + t * (columns // n) + e, mask=ok, other=0.0)
        trunc = tl.load(truncated + t * (columns // n) + e, mask=ok, other=0.0)
        replica_done = tl.where(term + trunc > 0, 1.0, 0.0)
        here = tl.load(mask + t * columns + c, mask=ok, other=0.0)
        after = tl.load(mask + (t + 1) * columns + c, mask=ok, other=0.0)
        left = here * (1.0 - after) * (1.0 - replica_done)
        done = tl.minimum(replica_done + left, 1.0)
        ended = tl.minimum(term + left, 1.0)
        value = tl.load(values + t * columns + c, mask=ok, other=0.0)
        final = tl.load(final_values + t * columns + c, mask=ok, other=0.0)
        reward = tl.load(rewards + t * columns + c, mask=ok, other=0.0)
        bootstrap = (1.0 - done) * v_next + done * (1.0 - ended) * final
        delta = reward + g * bootstrap - value
        last = delta + g * lm * (1.0 - done) * last
        tl.store(advantages + t * columns + c, last, mask=ok)
        tl.store(returns + t * columns + c, last + value, mask=ok)
        v_next = value


@triton.jit
def load_mlp(w1, b1, w2, b2, w3, b3, strides, m, O: tl.constexpr, OP: tl.constexpr, H1: tl.constexpr,
             H1P: tl.constexpr, H2: tl.constexpr, H2P: tl.constexpr, K: tl.constexpr, KP: tl.constexpr,
             STACKED: tl.constexpr):
    """Member m's three linear layers (weights [in, out] and biases) as float32 tiles, zero-padded.
    strides [6]: the member strides of w1, b1, w2, b2, w3, b3 (views of an optimiser's flat
    buffer, or tensors of their own)."""
    off, ok = weight_offsets(m, tl.load(strides), O, H1, OP, H1P, STACKED)
    W1 = tl.load(w1 + off, mask=ok, other=0.0).to(tl.float32)
    off, ok = weight_offsets(m, tl.load(strides + 2), H1, H2, H1P, H2P, STACKED)
    W2 = tl.load(w2 + off, mask=ok, other=0.0).to(tl.float32)
    off, ok = weight_offsets(m, tl.load(strides + 4), H2, K, H2P, KP, STACKED)
    W3 = tl.load(w3 + off, mask=ok, other=0.0).to(tl.float32)
    h1c = tl.arange(0, H1P)
    h2c = tl.arange(0, H2P)
    cols = tl.arange(0, KP)
    B1 = tl.load(b1 + m * tl.load(strides + 1) * STACKED + h1c, mask=h1c < H1, other=0.0).to(tl.float32)
    B2 = tl.load(b2 + m * tl.load(strides + 3) * STACKED + h2c, mask=h2c < H2, other=0.0).to(tl.float32)
    B3 = tl.load(b3 + m * tl.load(strides + 5) * STACKED + cols, mask=cols < K, other=0.0).to(tl.float32)
    return W1, B1, W2, B2, W3, B3


@triton.jit
def mlp_out(x, W1, B1, W2, B2, W3, B3, DOT: tl.constexpr, TANH: tl.constexpr):
    """x [rows, OP] through linear, tanh, linear, tanh, linear -> [rows, KP]."""
    h1 = tanh(dot(x, W1, DOT) + B1[None, :], TANH)
    h2 = tanh(dot(h1, W2, DOT) + B2[None, :], TANH)
    return dot(h2, W3, DOT) + B3[None, :]


@triton.jit
def member_sq_norms(grad, partials, steps, P, SPLITS: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    """The sum of squares of member m's gradient chunks [split * CHUNKS * BLOCK, ...) of its row of
    grad [M, P] into partials [M, SPLITS] (summed by member_adam in a fixed order: no atomics, so a
    step is the same from run to run); program (m, 0) also counts member m's step (steps[m] += 1,
    which member_adam, launched next, reads)."""
    m = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * CHUNKS * BLOCK
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(CHUNKS):
        o = start + c * BLOCK + tl.arange(0, BLOCK)
        g = tl.load(grad + m * P + o, mask=o < P, other=0.0)
        acc += g * g
    tl.store(partials + m * SPLITS + split, tl.sum(acc, 0))
    if split == 0:
        tl.store(steps + m, tl.load(steps + m) + 1.0)


@triton.jit
def minibatch_moments(order, order_stride, advantages, mask, count, mean, std, MB: tl.constexpr,
                      MINIBATCHES: tl.constexpr, MOMENTS: tl.constexpr, BLOCK: tl.constexpr):
    """Member m's minibatch j (sample ids order[m, j * MB:(j + 1) * MB]): its live count (at least 1)
    and, with MOMENTS, its advantages' mean and unbiased std over the live samples, into count,
    mean, std [M, MINIBATCHES] (rollout.masked_moments is the reference; two passes, as there)."""
    m = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    ids = order + m * order_stride + j * MB
    acc_n = tl.zeros((BLOCK,), tl.float32)
    acc_x = tl.zeros((BLOCK,), tl.float32)
    for first in range(0, MB, BLOCK):
        r = first + tl.arange(0, BLOCK)
        ok = r < MB
        sid = tl.load(ids + r, mask=ok, other=0)
        w = tl.load(mask + sid, mask=ok, other=0.0)
        acc_n += w
        if MOMENTS:
            acc_x += tl.load(advantages + sid, mask=ok, other=0.0) * w
    n = tl.maximum(tl.sum(acc_n, 0), 1.0)
    out = m * MINIBATCHES + j
    tl.store(count + out, n)
    if MOMENTS:
        mu = tl.sum(acc_x, 0) / n
        acc_v = tl.zeros((BLOCK,), tl.float32)
        for first in range(0, MB, BLOCK):
            r = first + tl.arange(0, BLOCK)
            ok = r < MB
            sid = tl.load(ids + r, mask=ok, other=0)
            w = tl.load(mask + sid, mask=ok, other=0.0)
            d = (tl.load(advantages + sid, mask=ok, other=0.0) - mu) * w
            acc_v += d * d
        tl.store(mean + out, mu)
        tl.store(std + out, tl.sqrt(tl.sum(acc_v, 0) / tl.maximum(n - 1.0, 1.0)))


@triton.jit
def member_adam(flat, grad, exp_avg, exp_avg_sq, lr, partials, max_norm, steps, P, beta1, beta2, eps,
                CLIP: tl.constexpr, NORM_PER_MEMBER: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P: tl.constexpr,
                BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    """One Adam step of member m's chunks of its row of flat [M, P] (members.MemberAdam.step is the
    reference): the gradient scaled to global norm at most max_norm (CLIP; partials [M, SPLITS] the
    parts of its squared norm, max_norm [M] or a float, <= 0 for none), then the moments' and the
    parameters' updates at its step steps[m] (steps [M, 1])."""
    m = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1) * CHUNKS * BLOCK
    scale = 1.0
    if CLIP:
        if NORM_PER_MEMBER:
            bound = tl.load(max_norm + m)
        else:
            bound = max_norm
        s = tl.arange(0, SPLITS_P)
        sq_norm = tl.sum(tl.load(partials + m * SPLITS + s, mask=s < SPLITS, other=0.0), 0)
        scale = tl.minimum(bound / (tl.sqrt(sq_norm) + 1e-6), 1.0)
        scale = tl.where(bound > 0, scale, 1.0)  # a member swept to max_grad_norm 0 is not clipped
    t = tl.load(steps + m)
    bias1 = 1.0 - tl.exp(t * tl.log(beta1))
    bias2_sqrt = tl.sqrt(1.0 - tl.exp(t * tl.log(beta2)))
    step_size = tl.load(lr + m) / bias1
    for c in range(CHUNKS):
        o = start + c * BLOCK + tl.arange(0, BLOCK)
        ok = o < P
        at = m * P + o
        g = tl.load(grad + at, mask=ok, other=0.0) * scale
        mean = tl.load(exp_avg + at, mask=ok, other=0.0)
        sq = tl.load(exp_avg_sq + at, mask=ok, other=0.0)
        mean = mean + (1.0 - beta1) * (g - mean)
        sq = beta2 * sq + (1.0 - beta2) * g * g
        w = tl.load(flat + at, mask=ok, other=0.0)
        w = w - step_size * mean / (tl.sqrt(sq) / bias2_sqrt + eps)
        tl.store(exp_avg + at, mean, mask=ok)
        tl.store(exp_avg_sq + at, sq, mask=ok)
        tl.store(flat + at, w, mask=ok)


@triton.jit
def activation_backward_bias(dy, y, dz, partials, rows, H: tl.constexpr, HP: tl.constexpr, BLOCK: tl.constexpr,
                             RELU: tl.constexpr = 0):
    """Program (p, m): rows [BLOCK p, BLOCK (p + 1)) of member m's `rows` rows (from row m * rows on;
    one member: M = 1) of a tanh (or ReLU) layer's output y and its gradient dy [M * rows, H]: the
    pre-activation's gradient dz = dy (1 - y^2) (with RELU, a ReLU layer's: dy where y > 0) (in dz's
    type) and its column sums into partials [M, programs, H] (the bias gradient's parts, summed after
    in a fixed order)."""
    p = tl.program_id(0)
    m = tl.program_id(1)
    local = p.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    r = m.to(tl.int64) * rows + local
    c = tl.arange(0, HP)
    ok = (local[:, None] < rows) & (c[None, :] < H)
    at = r[:, None] * H + c[None, :]
    g = tl.load(dy + at, mask=ok, other=0.0).to(tl.float32)
    out = tl.load(y + at, mask=ok, other=0.0).to(tl.float32)
    d = activation_derivative(g, out, RELU)
    tl.store(dz + at, d.to(dz.dtype.element_ty), mask=ok)
    tl.store(partials + (m * tl.num_programs(0) + p) * H + c, tl.sum(d, 0), mask=c < H)
