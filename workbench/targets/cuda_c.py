"""The `cuda-c` target: CUDA C env sources compiled at run time with NVRTC through cuda.core."""
from __future__ import annotations

import torch

from .cuda import simulator_enabled


class CudaCTarget:
    name = "cuda-c"
    device = torch.device("cuda")

    def availability(self):
        if simulator_enabled() or not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch on this machine (CUDA C needs a real GPU)"
        try:
            import cuda.core  # noqa: F401
        except ImportError as exc:
            return f"cuda.core is not installed ({exc}); pip install cuda-core"
        return None

    def view(self, tensor):
        return tensor

    def compile(self, defn):
        raise NotImplementedError("cuda-c target under construction")
