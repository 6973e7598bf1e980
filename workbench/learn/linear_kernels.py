"""Triton kernel of padded_linear.py (imported on first use, so that TRITON_INTERPRET set by then is
honoured): a bf16 linear layer with its bias and activation (tanh or ReLU) in the matmul's epilogue."""
import triton
import triton.language as tl

from .fused_kernels import activation


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
    w += m.to(tl.int64) * w_member
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        a = tl.load(x + r[:, None] * K + k[None, :], mask=(local[:, None] < rows) & (k[None, :] < K), other=0.0)
        wt = tl.load(w + c[None, :] * wn + k[:, None] * wk, mask=(k[:, None] < K) & (c[None, :] < N), other=0.0)
        acc = tl.dot(a, wt, acc)
    bias = tl.load(b + m * b_member + c, mask=c < N, other=0.0).to(tl.float32)
    out = activation(acc + bias[None, :], ACT)
    tl.store(y + r[:, None] * N + c[None, :], out.to(y.dtype.element_ty),
             mask=(local[:, None] < rows) & (c[None, :] < N))
