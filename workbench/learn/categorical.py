"""A Discrete or MultiDiscrete head's log-probability and entropy in one kernel, and their gradient
with respect to the logits in one more, where torch's autograd takes about twenty passes over the
[rows, D] logits (the cast to float32, each head's log-softmax, gather, exp, product and sum, and
the same again backwards). Used by policies.ActionHead on GPUs while gradients are recorded (the
learner's chunks of the torch path: Tag's 21 x 21 heads)."""
from __future__ import annotations

import torch

BLOCK = 128  # rows per program, one a lane


def _programs(rows: int) -> int:
    return max(1, -(-rows // BLOCK))


class LogProbEntropy(torch.autograd.Function):
    """(log pi(a|s) [N], entropy [N]), float32, each summed over the heads, for logits out [N, D] (any
    float type) and actions [N, heads] (or [N] for one head) holding each head's index within it;
    starts [heads + 1] int32: the heads' first columns and D; widest: the widest head's columns."""

    @staticmethod
    def forward(ctx, out, actions, starts, widest):
        from . import fused
        if out.stride(1) != 1:
            out = out.contiguous()
        rows = out.shape[0]
        heads = starts.numel() - 1
        actions = actions.reshape(rows, heads).contiguous()
        logp = torch.empty(rows, dtype=torch.float32, device=out.device)
        entropy = torch.empty_like(logp)
        fused._categorical_kernels().logp_entropy[(_programs(rows),)](out, out.stride(0), actions, starts, logp,
                                                                       entropy, rows, HEADS=heads, NMAX=widest,
                                                                       BLOCK=BLOCK)
        ctx.save_for_backward(out, actions, starts)
        ctx.widest = widest
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        from . import fused
        out, actions, starts = ctx.saved_tensors
        widest = ctx.widest
        rows, D = out.shape
        zeros = None
        if g_logp is None or g_entropy is None:
            zeros = torch.zeros(rows, dtype=torch.float32, device=out.device)
        g_logp = zeros if g_logp is None else g_logp.float().contiguous()
        g_entropy = zeros if g_entropy is None else g_entropy.float().contiguous()
        d_out_t = torch.empty((D, rows), dtype=out.dtype, device=out.device)
        fused._categorical_kernels().logp_entropy_backward[(_programs(rows),)](
            out, out.stride(0), actions, starts, g_logp, g_entropy, d_out_t, rows, HEADS=starts.numel() - 1,
            NMAX=widest, BLOCK=BLOCK)
        return d_out_t.t(), None, None, None  # [N, D], column-major: the matmuls' backward takes it as it is


def serves(out: torch.Tensor) -> bool:
    """Whether LogProbEntropy takes a head's logits: on GPUs while gradients are recorded, outside
    torch.compile (which fuses the head itself), 2-d."""
    from . import fused
    return (out.is_cuda and torch.is_grad_enabled() and out.dim() == 2 and not torch.compiler.is_compiling()
            and fused.triton_missing() is None)
