"""Triton kernels of categorical.py (imported on first use, so that TRITON_INTERPRET set by then is
honoured): a Discrete or MultiDiscrete head's log-probability and entropy, and their gradient.

One row a lane: each head's columns are read in a loop (the row's bytes come from L1 after the
first pass): on an H100 at 234 k rows x 21 x 21, 19 us for the forward kernel against 240 to 1,000
us for [rows, columns] tiles, whose reductions over the padded width spilled registers."""
import triton
import triton.language as tl


@triton.jit
def head_moments(out, at, width, first, NMAX: tl.constexpr):
    """One head's columns [first, first + width) of the logits rows at `at` (element offsets [BLOCK]),
    width [BLOCK] the head's width (<= NMAX) on valid rows and 0 past the end: their log-sum-exp and the
    entropy H = lse - sum p x, float32 [BLOCK]. (A [BLOCK] bound, not valid & (j < n): Triton 3.9's
    interpreter refuses that mask.)"""
    valid = width > 0
    top = tl.full(at.shape, -float("inf"), tl.float32)
    for j in range(NMAX):
        x = tl.load(out + at + first + j, mask=j < width, other=-float("inf")).to(tl.float32)
        top = tl.maximum(top, x)
    top = tl.where(valid, top, 0.0)
    s = tl.zeros(at.shape, tl.float32) + tl.where(valid, 0.0, 1.0)  # rows past the end: s = 1, no NaN
    sx = tl.zeros(at.shape, tl.float32)
    for j in range(NMAX):
        here = j < width
        x = tl.load(out + at + first + j, mask=here, other=0.0).to(tl.float32)
        e = tl.where(here, tl.exp(x - top), 0.0)
        s += e
        sx += e * x
    lse = top + tl.log(s)
    return lse, lse - sx / s


@triton.jit
def logp_entropy(out, out_stride, actions, starts, logp, entropy, rows, HEADS: tl.constexpr, NMAX: tl.constexpr,
                 BLOCK: tl.constexpr):
    """Rows [BLOCK p, BLOCK (p + 1)) of logits out [N, D] (any float type, rows out_stride apart) and
    actions [N, HEADS] (each head's index within it; heads of at most NMAX columns): log pi(a|s) and
    the entropy, each summed over the heads, into logp and entropy [N] (float32)."""
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    at = r * out_stride
    lp = tl.zeros((BLOCK,), tl.float32)
    ent = tl.zeros((BLOCK,), tl.float32)
    for h in tl.static_range(HEADS):
        first = tl.load(starts + h)
        lse, H = head_moments(out, at, tl.where(valid, tl.load(starts + h + 1) - first, 0), first, NMAX)
        a = tl.load(actions + r * HEADS + h, mask=valid, other=0)
        lp += tl.load(out + at + first + a, mask=valid, other=0.0).to(tl.float32) - lse
        ent += H
    tl.store(logp + r, lp, mask=valid)
    tl.store(entropy + r, ent, mask=valid)


@triton.jit
def logp_entropy_backward(out, out_stride, actions, starts, g_logp, g_entropy, d_out_t, rows, HEADS: tl.constexpr,
                          NMAX: tl.constexpr, BLOCK: tl.constexpr):
    """The gradient of logp_entropy's outputs with respect to the logits: for g_logp and g_entropy
    [N], d_out_t [D, N] (contiguous, out's type; the gradient transposed) = g_logp (onehot(a) - p)
    - g_entropy p (log p + H), head by head. Transposed, a column's stores are contiguous across
    the lanes (a row's scattered 2-byte stores took eight times as long)."""
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = r < rows
    at = r * out_stride
    gl = tl.load(g_logp + r, mask=valid, other=0.0)
    ge = tl.load(g_entropy + r, mask=valid, other=0.0)
    for h in tl.static_range(HEADS):
        first = tl.load(starts + h)
        width = tl.where(valid, tl.load(starts + h + 1) - first, 0)
        lse, H = head_moments(out, at, width, first, NMAX)
        a = tl.load(actions + r * HEADS + h, mask=valid, other=0)
        for j in range(NMAX):
            here = j < width
            log_p = tl.load(out + at + first + j, mask=here, other=0.0).to(tl.float32) - lse
            p = tl.exp(log_p)
            d = gl * (tl.where(a == j, 1.0, 0.0) - p) - ge * p * (log_p + H)
            tl.store(d_out_t + (first + j).to(tl.int64) * rows + r, d.to(d_out_t.dtype.element_ty), mask=here)
