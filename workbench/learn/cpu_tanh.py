"""tanh for the CPU learner: a rational function compiled by numba.

The hidden layers' tanh was the largest elementwise cost of a CPU population's iteration: torch's
CPU tanh takes about 3.2 ns an element at one thread (AVX2), 2 sigmoid(2x) - 1 about 1.3 ns, this
one about 0.5 ns (bench/bench_cpu_tanh.py). tanh(x) = x P(x^2) / Q(x^2) on [-c, c] and +-1 beyond,
the rational function Eigen and XLA use for float32 tanh, within 4e-7 of tanh (relative): one pass
over the activations, which LLVM vectorises. NaN stays NaN. The gradient is tanh's own, 1 - y^2
from the output. `tanh_ops` computes the same values, bit for bit, from torch's ops (no fused
multiply-adds on either side), for a traced, compiled or exported policy (whose gradient, where one
is taken, is then the rational function's own, within 2e-6 of 1 - y^2 and 0 past the clamp).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

CLAMP = np.float32(7.90531110763549805)  # tanh(c) rounds to 1 in float32
ALPHA = tuple(np.float32(a) for a in (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
                                      5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
                                      -2.76076847742355e-16))  # P's coefficients, x^0 .. x^12
BETA = tuple(np.float32(b) for b in (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
                                     1.19825839466702e-06))  # Q's, x^0 .. x^6


def _compiled(function):
    """`function` compiled by numba with numpy's error model (no check of each division, which kept the
    loop from vectorising), its machine code cached where numba finds a writable folder."""
    try:
        return numba.njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError:  # (no writable folder for numba's cache: compiled in every process)
        return numba.njit(nogil=True, error_model="numpy")(function)


def _tanh_into(x, y):  # pragma: no cover  (compiled)
    a0, a1, a2, a3, a4, a5, a6 = ALPHA
    b0, b1, b2, b3 = BETA
    for i in range(x.size):
        v = x[i]
        if v > CLAMP:
            v = CLAMP
        elif v < -CLAMP:
            v = -CLAMP
        v2 = v * v
        p = ((((((v2 * a6 + a5) * v2 + a4) * v2 + a3) * v2 + a2) * v2 + a1) * v2 + a0) * v
        q = ((v2 * b3 + b2) * v2 + b1) * v2 + b0
        y[i] = p / q


_tanh_into = _compiled(_tanh_into)


class _RationalTanh(torch.autograd.Function):
    """y = tanh(x) by the numba kernel (x float32 [...] on the CPU), its gradient g (1 - y^2)."""

    @staticmethod
    def forward(ctx, x):
        x = x.detach().contiguous()
        y = torch.empty_like(x)
        _tanh_into(x.view(-1).numpy(), y.view(-1).numpy())
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) for float32 x [...] on the CPU, with gradient (see the module's docstring); traced or
    compiled by torch, the same values from its ops."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return tanh_ops(x)
    return _RationalTanh.apply(x)


def tanh_ops(x: torch.Tensor) -> torch.Tensor:
    """`tanh`'s values from torch's elementwise ops (traceable and exportable; differentiable through them)."""
    a0, a1, a2, a3, a4, a5, a6 = (float(a) for a in ALPHA)
    b0, b1, b2, b3 = (float(b) for b in BETA)
    v = x.clamp(-float(CLAMP), float(CLAMP))
    v2 = v * v
    p = ((((((v2 * a6 + a5) * v2 + a4) * v2 + a3) * v2 + a2) * v2 + a1) * v2 + a0) * v
    q = ((v2 * b3 + b2) * v2 + b1) * v2 + b0
    return p / q
