"""A linear layer followed by tanh, whose backward pass makes the pre-activation's gradient and the
bias gradient in one kernel (fused_kernels.tanh_backward_bias) where torch's autograd reads the
[rows, out] gradient three times (tanh's backward, then the bias gradient's column sums, which
torch reduces at about a third of the memory bandwidth). Used by policies.MLP on GPUs while
gradients are recorded (the learner's chunks of the torch path: Tag's 256-wide policies); the
forward pass and the weight and input gradients stay cuBLAS's."""
from __future__ import annotations

import torch

BLOCK = 64  # rows per program


class LinearTanh(torch.autograd.Function):
    """y = tanh(x W^T + b) for x [N, in], W [out, in], b [out], in autocast's type when it is on."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
        with torch.autocast("cuda", enabled=False):
            xc, wc = x.to(dtype), weight.to(dtype)
            y = torch.addmm(bias.to(dtype), xc, wc.t()).tanh_()
        ctx.save_for_backward(xc, wc, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        from . import fused
        xc, wc, y = ctx.saved_tensors
        rows, H = y.shape
        dy = dy.contiguous().to(y.dtype)
        dz = torch.empty_like(y)
        programs = max(1, -(-rows // BLOCK))
        partials = torch.empty((programs, H), dtype=torch.float32, device=y.device)
        fused._kernels().tanh_backward_bias[(programs,)](dy, y, dz, partials, rows, H=H, HP=fused._pow2(H, 1),
                                                          BLOCK=BLOCK)
        dx = dz @ wc if ctx.needs_input_grad[0] else None
        return dx, dz.t() @ xc, partials.sum(0)


def serves(x: torch.Tensor) -> bool:
    """Whether LinearTanh takes x's layer: on GPUs while gradients are recorded, outside
    torch.compile (which fuses the layer itself), for 2-d inputs."""
    from . import fused
    return (x.is_cuda and torch.is_grad_enabled() and x.dim() == 2 and not torch.compiler.is_compiling()
            and fused.triton_missing() is None)
