"""Triton kernel of padded_linear.py (imported on first use, so that TRITON_INTERPRET set by then is
honoured): a bf16 linear layer with its bias and activation (tanh or ReLU) in the matmul's epilogue, and
the backward matmul into a hidden layer with its activation's derivative and bias gradient in the epilogue."""
import triton
import triton.language as tl

from .fused_kernels import activation, activation_derivative


@triton.jit
def tile_product(a, a_row, a_col, w, wk, wn, r, local, rows, c, K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, BK: tl.constexpr):
    """The [BM, BN] float32 tile A W of rows r (local row `local` < rows) and columns c: A's element (r, k) at
    a + r * a_row + k * a_col, W's (k, n) at w + k * wk + n * wn, both K deep."""
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        at = tl.load(a + r[:, None] * a_row + k[None, :] * a_col, mask=(local[:, None] < rows) & (k[None, :] < K),
                     other=0.0)
        wt = tl.load(w + k[:, None] * wk + c[None, :] * wn, mask=(k[:, None] < K) & (c[None, :] < N), other=0.0)
        acc = tl.dot(at, wt, acc)
    return acc


@triton.jit
def linear_activation(x, w, b, y, rows, w_member, b_member, wk, wn, K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
    """y = act(x W^T + b) (tanh, or ReLU for ACT 2: fused_kernels.activation) for program (p, q, m):
    rows [BM p, BM (p + 1)) of member m's `rows` (from row m * rows of x [M * rows, K] and y
    [M * rows, N], contiguous) and columns [BN q, BN (q + 1)); member m's W at w + m * w_member, its
    element (n, k) at n * wn + k * wk (nn.Linear's [N, K]: wn = K, wk = 1; MemberLinear's [M, K, N]:
    wn = 1, wk = N), its bias at b + m * b_member; float32 accumulation. Where torch writes
    x W^T + b and then reads and writes it again for the activation, the tile stays on chip."""
    m = tl.program_id(2)
    local = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    r = m.to(tl.int64) * rows + local
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tile_product(x, K, 1, w + m.to(tl.int64) * w_member, wk, wn, r, local, rows, c, K, N, BM, BN, BK)
    bias = tl.load(b + m * b_member + c, mask=c < N, other=0.0).to(tl.float32)
    out = activation(acc + bias[None, :], ACT)
    tl.store(y + r[:, None] * N + c[None, :], out.to(y.dtype.element_ty),
             mask=(local[:, None] < rows) & (c[None, :] < N))


@triton.jit
def linear_backward_activation(dz, w, y, dh, partials, rows, dz_row, dz_col, w_member, wk, wn, K: tl.constexpr,
                               N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                               RELU: tl.constexpr):
    """The gradient of a hidden layer's pre-activation from the next layer's, for program (p, q, m):
    dh = (dz W) * act'(y) with y = act(h) the hidden layer's output [M * rows, N] (tanh: 1 - y^2;
    RELU: y > 0), for rows [BM p, BM (p + 1)) of member m's `rows` and columns [BN q, BN (q + 1)),
    and dh's column sums over those rows into partials [M, programs, N] (the hidden layer's bias
    gradient, summed after in a fixed order). dz [M * rows, K] is the next layer's pre-activation
    gradient, its element (r, k) at r * dz_row + k * dz_col; member m's W of the next layer at
    w + m * w_member, its element (k, n) at k * wk + n * wn (nn.Linear's [K, N]: wk = N, wn = 1;
    MemberLinear's [M, N, K]: wk = 1, wn = K); float32 accumulation. Where cuBLAS writes dz W and a
    second kernel reads it back beside y, the tile stays on chip."""
    p = tl.program_id(0)
    m = tl.program_id(2)
    local = p.to(tl.int64) * BM + tl.arange(0, BM)
    r = m.to(tl.int64) * rows + local
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tile_product(dz, dz_row, dz_col, w + m.to(tl.int64) * w_member, wk, wn, r, local, rows, c, K, N, BM, BN,
                       BK)
    ok = (local[:, None] < rows) & (c[None, :] < N)
    at = r[:, None] * N + c[None, :]
    d = activation_derivative(acc, tl.load(y + at, mask=ok, other=0.0).to(tl.float32), RELU)
    tl.store(dh + at, d.to(dh.dtype.element_ty), mask=ok)
    tl.store(partials + (m * tl.num_programs(0) + p) * N + c, tl.sum(d, 0), mask=c < N)
