"""The CPU's tanh forms, forward and forward plus backward, ns per element over a population
minibatch's activations (8 x 1024 x 64): torch's tanh, 2 sigmoid(2x) - 1 (the default MLPs' CPU form
until 2026-11-29) and cpu_tanh's rational function (policies.Tanh's CPU form since), at 1 and 2 threads.

    python bench/bench_cpu_tanh.py
"""
import json

import torch

import _common  # noqa: F401  (a checkout without `pip install -e .`)
from _common import median_seconds
from workbench.learn import cpu_tanh


def per_element_ns(fn, n: int, repeats: int = 40) -> float:
    fn()  # (warm-up)
    return round(median_seconds(fn, "cpu", repeats)[0] * 1e9 / n, 2)


class SigmoidForm(torch.autograd.Function):
    """2 sigmoid(2x) - 1 with tanh's backward from the output (policies.Tanh's CPU form until 2026-11-29)."""

    @staticmethod
    def forward(ctx, x):
        y = (x * 2.0).sigmoid_().mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def main():
    forms = {"torch_tanh": torch.tanh, "sigmoid_form": SigmoidForm.apply, "rational": cpu_tanh.tanh}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        x = (torch.randn(8 * 1024 * 64) * 2).requires_grad_()
        result = {"threads": threads, "cpu": torch.backends.cpu.get_cpu_capability()}
        for name, form in forms.items():
            result[f"{name}_ns"] = per_element_ns(lambda: form(x), x.numel())
            result[f"{name}_fwd_bwd_ns"] = per_element_ns(lambda: form(x).sum().backward(), x.numel())
        print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
