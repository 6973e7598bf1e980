"""torch's CPU tanh against the default MLPs' CPU form (policies.Tanh: 2 sigmoid(2x) - 1), forward and
forward plus backward, ns per element over a population minibatch's activations (8 x 1024 x 64).

    python bench/bench_cpu_tanh.py
"""
import json
import statistics
import time

import torch

import _common  # noqa: F401  (a checkout without `pip install -e .`)
from workbench.learn.policies import Tanh


def per_element_ns(fn, n: int, repeats: int = 40) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e9 / n, 2)


def main():
    for threads in (1, 2):
        torch.set_num_threads(threads)
        x = (torch.randn(8 * 1024 * 64) * 2).requires_grad_()
        ours = Tanh()
        print("RESULT " + json.dumps({
            "threads": threads, "cpu": torch.backends.cpu.get_cpu_capability(),
            "torch_tanh_ns": per_element_ns(lambda: torch.tanh(x), x.numel()),
            "sigmoid_form_ns": per_element_ns(lambda: ours(x), x.numel()),
            "torch_tanh_fwd_bwd_ns": per_element_ns(lambda: torch.tanh(x).sum().backward(), x.numel()),
            "sigmoid_form_fwd_bwd_ns": per_element_ns(lambda: ours(x).sum().backward(), x.numel())}))


if __name__ == "__main__":
    main()
