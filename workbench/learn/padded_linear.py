"""Padded linear layers of the learner's chunks on GPUs (policies.MLP while gradients are recorded:
Tag's 256-wide policies):

- LinearTanh and LinearReLU, y = act(x W^T + b), whose backward makes the pre-activation's gradient and
  the bias gradient in one kernel (fused_kernels.activation_backward_bias) where torch's autograd reads
  the [rows, out] gradient three times (the activation's backward, then the bias gradient's column
  sums, which torch reduces at about a third of the memory bandwidth);
- MemberLinearTanh, MemberLinearReLU and MemberLinearOut, the same for stacked members
  (members.MemberLinear's [M, in, out] weights: batched matmuls, each member's bias gradient its own);
- Chain, an MLP's layers as one function (policies.MLP's usual path), whose backward makes each hidden
  layer's pre-activation and bias gradients in the epilogue of the matmul that reaches it
  (linear_kernels.linear_backward_activation), where layer by layer that matmul's [rows, units]
  result is written, then read back beside the layer's output;
- all of them padded to multiples of 8 features in and out (output layers: `Linear`, and
  `LinearSplit` for a shared body's head and value), with zero columns: a [rows, 78] observation or
  a [rows, 42] head sends cuBLAS to kernels for 2- and 4-byte aligned rows, which took about 33 of
  the 148 ms of Tag's update at 1000 x 100 on an H100 (the aligned layers' GEMMs 16 ms).

In bf16 an activation layer's forward pass is one Triton kernel with the bias and activation in the
matmul's epilogue (linear_kernels.linear_activation), and in Chain the backward matmul into a hidden layer
is one Triton kernel too; the other matmuls stay cuBLAS's. The values are
those of nn.Linear (and its activation) in autocast's type, to bf16's rounding."""
from __future__ import annotations

import torch

BLOCK = 64  # rows per program of activation_backward_bias
ALIGN = 8  # features: 16-byte rows in bf16
GEMM_ROWS = 64  # rows per program of linear_kernels.linear_activation (64 x 256 tiles, 4 warps: the fastest tried)
# linear_kernels.linear_backward_activation's rows, columns, warps and stages a program: of 17 tried, the fastest
# over Tag's five shapes together on an H100 (bench/bench_backward_hidden.py; docs/benchmarks.md)
BACKWARD_TILE = (128, 128, 4, 3)


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _pad_columns(t: torch.Tensor, width: int) -> torch.Tensor:
    """t [rows, c] as [rows, width] (width >= c), the new columns zero; t itself when c == width."""
    if t.shape[1] == width:
        return t
    out = t.new_empty((t.shape[0], width))
    out[:, t.shape[1]:].zero_()
    out[:, :t.shape[1]].copy_(t)
    return out


def aligned_input(x: torch.Tensor) -> torch.Tensor:
    """x [rows, c] in autocast's type with its features padded to a multiple of 8 (zero columns): the
    observations once for both of an actor-critic's networks, whose first layers take either form."""
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
    return _pad_columns(x.to(dtype), _padded(x.shape[1]))


def _act_mode(act: str) -> int:
    """The kernels' activation switch (fused_kernels.activation) for act 'tanh' or 'relu'."""
    from . import fused
    return 2 if act == "relu" else fused._tanh_mode(0)


def _linear_activation_bf16(x, w, b, act: str = "tanh"):
    """act(x w^T + b) for act 'tanh' or 'relu' in one kernel (linear_kernels.linear_activation), all bf16
    with K and N multiples of 8: x [rows, K], w [N, K] (nn.Linear's), b [N] -> [rows, N]; or, for
    stacked members, member m's rows of x [M * n, K] through w [M, K, N] and b [M, 1, N]
    (MemberLinear's) -> [M * n, N]. On an H100 at 234 k rows and 256 units (tanh) it took 88 and 133
    us for K = 80 and 256 against 144 and 173 us for cuBLAS's addmm and torch's tanh."""
    from . import fused
    rows, K = x.shape
    if w.dim() == 2:
        members, N, strides = 1, w.shape[0], (0, 0, 1, K)
    else:
        members, N, strides = w.shape[0], w.shape[2], (K * w.shape[2], w.shape[2], w.shape[2], 1)
    y = torch.empty((rows, N), dtype=x.dtype, device=x.device)
    n = rows // members
    BN = min(256, fused._pow2(N))
    fused._linear_kernels().linear_activation[(-(-n // GEMM_ROWS), -(-N // BN), members)](
        x, w, b, y, n, *strides, K=K, N=N, BM=GEMM_ROWS, BN=BN, BK=32, ACT=_act_mode(act), num_warps=4,
        num_stages=3)
    return y


def _padded_grad(dy: torch.Tensor, width: int, dtype) -> torch.Tensor:
    """A stacked output layer's gradient dy [rows, c] as [rows, width] in dtype, the new columns zero.
    When dy is column-major (categorical.LogProbEntropy's) or one column, the result is too (a view
    of a [width, rows] buffer), so that the copy reads and writes contiguously and the batched
    matmuls take it as it is (eight Tag members: 0.536 -> 0.444 s an iteration on an H100, with
    their forward kernel); otherwise row-major."""
    rows, c = dy.shape
    if dy.stride(0) == 1 or c == 1:
        buf = torch.empty((width, rows), dtype=dtype, device=dy.device)
        if width > c:
            buf[c:].zero_()
        buf[:c].copy_(dy.t())
        return buf.t()
    return _pad_columns(dy.to(dtype), width)


def _autocast_dtype(x):
    return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype


def _padded_layer(weight, bias, dtype, members: bool):
    """(weight, bias) in dtype padded to multiples of 8 features in and out, zeros in the new places:
    nn.Linear's [Np, Kp] and [Np], or MemberLinear's [M, Kp, Np] and [M, 1, Np]."""
    M, K, N = weight.shape if members else (1, weight.shape[1], weight.shape[0])
    Np, Kp = _padded(N), _padded(K)
    wc = weight.to(dtype)
    if (Np, Kp) != (N, K):
        wc = torch.nn.functional.pad(wc, (0, Np - N, 0, Kp - K) if members else (0, Kp - K, 0, Np - N))
    bc = bias.to(dtype)
    if Np != N:
        bc = torch.nn.functional.pad(bc, (0, Np - N))
    return wc.contiguous(), bc.contiguous()


def _layer(xc, wc, bc, act: str | None, members: bool):
    """act(xc wc^T + bc) [rows, Np] of padded operands (_padded_layer's; with `members`, member m's rows
    of xc through member m's layer); act 'tanh', 'relu' or None (an output layer)."""
    if act and xc.dtype == torch.bfloat16 and xc.is_cuda:
        return _linear_activation_bf16(xc, wc, bc, act)
    if members:
        y = torch.baddbmm(bc, xc.reshape(wc.shape[0], -1, wc.shape[1]), wc).reshape(-1, wc.shape[2])
    else:
        y = torch.addmm(bc, xc, wc.t())
    if act:
        y = y.tanh_() if act == "tanh" else y.relu_()
    return y


def _forward(ctx, x, weight, bias, act: str | None, members: bool = False):
    """x W^T + b for x [rows, in], weight [out, in] (nn.Linear's) and bias [out]; with `members`, member
    m's rows of x [M * n, in] through weight [M, in, out] and bias [M, 1, out] (MemberLinear's).
    Features padded in and out to multiples of 8, then act ('tanh', 'relu' or None: an output layer).
    Returns [rows, out], a view of [rows, out padded] when out is not a multiple of 8."""
    dtype = _autocast_dtype(x)
    with torch.autocast("cuda", enabled=False):
        wc, bc = _padded_layer(weight, bias, dtype, members)
        xc = _pad_columns(x.to(dtype), wc.shape[1])
        y = _layer(xc, wc, bc, act, members)
    N, K = (weight.shape[2], weight.shape[1]) if members else weight.shape
    ctx.save_for_backward(xc, wc, y if act else None)
    ctx.shape, ctx.act, ctx.members = (N, K), act, weight.shape[0] if members else 0
    return y if y.shape[1] == N else y[:, :N]


def _weight_grad(xc, dz, N: int, K: int, members: int):
    """The unpadded weight gradient from a layer's padded input xc [rows, Kp] and pre-activation
    gradient dz [rows, Np]: nn.Linear's [N, K], or for `members` M stacked ones [M, K, N]."""
    if not members:
        return (dz.t() @ xc)[:N, :K]
    xs, dzs = xc.reshape(members, -1, xc.shape[1]), dz.reshape(members, -1, dz.shape[1])
    return torch.bmm(xs.transpose(1, 2), dzs)[:, :K, :N]


def _input_grad(dz, wc, K: int, members: int):
    """dz [rows, Np] through a padded weight wc (nn.Linear's [Np, Kp], or [M, Kp, Np] for `members`)
    back to the layer's input: [rows, K]."""
    if not members:
        return (dz @ wc)[:, :K]
    return torch.bmm(dz.reshape(members, -1, dz.shape[1]), wc.transpose(1, 2))[:, :, :K].reshape(-1, K)


def _backward(ctx, dz):
    """dz: the pre-activation's gradient [rows, Np] -> (dx, dW) of the unpadded layer (for members,
    dW [M, in, out])."""
    xc, wc, _ = ctx.saved_tensors
    N, K = ctx.shape
    dx = _input_grad(dz, wc, K, ctx.members) if ctx.needs_input_grad[0] else None
    return dx, _weight_grad(xc, dz, N, K, ctx.members)


def _activation_grad(dy, y, act: str, members: int):
    """A hidden layer's pre-activation gradient dz [rows, H] from its output y [rows, H] and the
    output's gradient dy [rows, <= H], and each member's bias gradient [M, 1, H] (float32), in one
    kernel (fused_kernels.activation_backward_bias)."""
    from . import fused
    M = max(members, 1)
    n, H = y.shape[0] // M, y.shape[1]
    dy = _pad_columns(dy.to(y.dtype), H).contiguous()
    dz = torch.empty_like(y)
    programs = max(1, -(-n // BLOCK))
    partials = torch.empty((M, programs, H), dtype=torch.float32, device=y.device)
    fused._kernels().activation_backward_bias[(programs, M)](
        dy, y, dz, partials, n, H=H, HP=fused._pow2(H, 1), BLOCK=BLOCK, RELU=int(act == "relu"))
    return dz, partials.sum(1, keepdim=True)


class _ActivationLayer(torch.autograd.Function):
    """The backward of LinearTanh, LinearReLU and their members' forms: the pre-activation's gradient
    and each member's bias gradient in one kernel (fused_kernels.activation_backward_bias), then the
    matmuls."""

    @staticmethod
    def backward(ctx, dy):
        dz, db = _activation_grad(dy, ctx.saved_tensors[2], ctx.act, ctx.members)
        dx, dw = _backward(ctx, dz)
        db = db[:, :, :ctx.shape[0]]
        return dx, dw, db if ctx.members else db.reshape(-1)


class LinearTanh(_ActivationLayer):
    """y = tanh(x W^T + b) for x [N, in], W [out, in], b [out], in autocast's type when it is on."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, "tanh")


class LinearReLU(_ActivationLayer):
    """y = relu(x W^T + b) (WarpDrive's activation), as LinearTanh."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, "relu")


class MemberLinearTanh(_ActivationLayer):
    """LinearTanh for stacked members (members.MemberLinear's weight [M, in, out] and bias [M, 1, out]):
    member m's rows of x [M * n, in] through member m's layer, then tanh, in one batched matmul."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, "tanh", members=True)


class MemberLinearReLU(_ActivationLayer):
    """MemberLinearTanh with ReLU."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, "relu", members=True)


class Linear(torch.autograd.Function):
    """y = x W^T + b (an MLP's output layer) for x [N, in], W [out, in], b [out], in autocast's type
    when it is on; a view of a [N, out padded] result when out is not a multiple of 8."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, None)

    @staticmethod
    def backward(ctx, dy):
        _, wc, _ = ctx.saved_tensors
        # row-major: with the column-major form of _padded_grad Tag's iteration at 1000 x 100 took
        # 0.176 s against 0.167 (H100; cuBLAS's kernels for the transposed operand)
        dx, dw = _backward(ctx, _pad_columns(dy.to(wc.dtype), wc.shape[0]))
        return dx, dw, dy.float().sum(0)


class MemberLinearOut(torch.autograd.Function):
    """Linear (an MLP's output layer) for stacked members: MemberLinear's weight and bias."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        return _forward(ctx, x, weight, bias, None, members=True)

    @staticmethod
    def backward(ctx, dy):
        _, wc, _ = ctx.saved_tensors
        M, Np = wc.shape[0], wc.shape[2]
        dz = _padded_grad(dy, Np, wc.dtype)
        dx, dw = _backward(ctx, dz)
        return dx, dw, dz.reshape(M, -1, Np).sum(1, keepdim=True, dtype=torch.float32)[:, :, :ctx.shape[0]]


class LinearSplit(torch.autograd.Function):
    """A SharedActorCritic's output layer: (y[:, :-1] [N, out - 1], y[:, -1] [N]) of y = x W^T + b,
    whose backward writes both gradients into one padded [N, out padded] buffer, where autograd's
    slices would make each a zeroed [N, out] gradient, add them and pad the sum."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        y = _forward(ctx, x, weight, bias, None)
        return y[:, :-1], y[:, -1]

    @staticmethod
    def backward(ctx, d_head, d_value):
        xc, wc, _ = ctx.saved_tensors
        N = ctx.shape[0]
        dz = torch.empty((xc.shape[0], wc.shape[0]), dtype=wc.dtype, device=wc.device)
        dz[:, N:].zero_()
        for grad, part in ((d_head, dz[:, :N - 1]), (d_value, dz[:, N - 1])):
            part.zero_() if grad is None else part.copy_(grad)
        dx, dw = _backward(ctx, dz)
        return dx, dw, dz.sum(0, dtype=torch.float32)[:N]


def _backward_into_hidden(dz, wc, y, act: str, members: int):
    """The previous (hidden) layer's pre-activation gradient from a layer's dz [rows, Np] and padded
    weight wc (nn.Linear's [Np, Kp], or stacked [M, Kp, Np] for `members`) given that hidden layer's
    output y [rows, Kp]: (dz wc) * act'(y), and each member's bias gradient [M, 1, Kp] (float32). In
    bf16 on GPUs one kernel (linear_kernels.linear_backward_activation); elsewhere the matmul, then
    _activation_grad's kernel."""
    from . import fused
    if not (y.dtype == torch.bfloat16 and y.is_cuda):
        return _activation_grad(_input_grad(dz, wc, y.shape[1], members), y, act, members)
    M = max(members, 1)
    n, Kp, Np = y.shape[0] // M, y.shape[1], dz.shape[1]
    BM, BN, warps, stages = BACKWARD_TILE
    BN = min(BN, fused._pow2(Kp))
    programs = max(1, -(-n // BM))
    dh = torch.empty_like(y)
    partials = torch.empty((M, programs, Kp), dtype=torch.float32, device=y.device)
    strides = (Kp * Np, 1, Np) if members else (0, Kp, 1)
    fused._linear_kernels().linear_backward_activation[(programs, -(-Kp // BN), M)](
        dz, wc, y, dh, partials, n, dz.stride(0), dz.stride(1), *strides, K=Np, N=Kp, BM=BM, BN=BN,
        BK=32 if Np >= 32 else 16, RELU=int(act == "relu"), num_warps=warps, num_stages=stages)
    return dh, partials.sum(1, keepdim=True)


class Chain(torch.autograd.Function):
    """An MLP's layers as one function: x [rows, in] through linear layers (nn.Linear's weight [out, in]
    and bias [out], or, with `members`, MemberLinear's [M, in, out] and [M, 1, out]), each followed by
    its activation in `acts` ('tanh', 'relu', or None for an output layer, the last only). Forward as
    LinearTanh, LinearReLU and Linear (or their members' forms) one after another, the padded features
    carried from layer to layer; backward with each hidden layer's pre-activation and bias gradients
    made in the epilogue of the matmul that reaches it (_backward_into_hidden), where layer by layer
    the matmul's [rows, units] result is written and read back."""

    @staticmethod
    def forward(ctx, x, acts, members, *params):
        dtype = _autocast_dtype(x)
        padded, outputs = [], []
        with torch.autocast("cuda", enabled=False):
            for weight, bias in zip(params[0::2], params[1::2]):
                padded.append(_padded_layer(weight, bias, dtype, members))
            h = xc = _pad_columns(x.to(dtype), padded[0][0].shape[1])
            for (wc, bc), act in zip(padded, acts):
                h = _layer(h, wc, bc, act, members)
                outputs.append(h)
        ctx.save_for_backward(xc, *(wc for wc, _ in padded), *outputs)
        ctx.acts, ctx.members = acts, params[0].shape[0] if members else 0
        ctx.shapes = [(w.shape[2], w.shape[1]) if members else tuple(w.shape) for w in params[0::2]]
        N = ctx.shapes[-1][0]
        return h if h.shape[1] == N else h[:, :N]

    @staticmethod
    def backward(ctx, dy):
        L, M = len(ctx.acts), ctx.members
        xc, weights, outputs = ctx.saved_tensors[0], ctx.saved_tensors[1:L + 1], ctx.saved_tensors[L + 1:]
        if ctx.acts[-1] is None:  # as Linear's and MemberLinearOut's backward
            Np = outputs[-1].shape[1]
            dz = _padded_grad(dy, Np, outputs[-1].dtype) if M else _pad_columns(dy.to(outputs[-1].dtype), Np)
            db = dz.reshape(max(M, 1), -1, Np).sum(1, keepdim=True, dtype=torch.float32)
        else:
            dz, db = _activation_grad(dy, outputs[-1], ctx.acts[-1], M)
        grads = [None] * (2 * L)
        for i in reversed(range(L)):
            N, K = ctx.shapes[i]
            grads[2 * i] = _weight_grad(xc if i == 0 else outputs[i - 1], dz, N, K, M)
            grads[2 * i + 1] = db[:, :, :N] if M else db.reshape(-1)[:N]
            if i > 0:
                dz, db = _backward_into_hidden(dz, weights[i], outputs[i - 1], ctx.acts[i - 1], M)
        dx = _input_grad(dz, weights[0], ctx.shapes[0][1], M) if ctx.needs_input_grad[0] else None
        return (dx, None, None, *grads)


def serves(x: torch.Tensor) -> bool:
    """Whether these layers take x's layer: on GPUs while gradients are recorded, outside
    torch.compile (which fuses the layer itself), for 2-d inputs."""
    from . import fused
    return (x.is_cuda and torch.is_grad_enabled() and x.dim() == 2 and not torch.compiler.is_compiling()
            and fused.triton_missing() is None)
