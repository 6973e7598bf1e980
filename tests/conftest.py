import os

import pytest
import torch

# Without a GPU the `cuda` target runs in numba's CUDA simulator; this must be set before numba.cuda loads.
HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

gpu_only = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")


@pytest.fixture(scope="session")
def nvrtc():
    """Skips unless the cuda-c target can compile here (cuda.core and NVRTC present)."""
    try:
        import cuda.core  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"cuda.core is not installed ({exc})")
    from workbench.targets.cuda_c import nvrtc_problem
    problem = nvrtc_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(params=["cpu", "cuda"])
def target(request):
    return request.param


def tiny(n_gpu: int, n_sim: int) -> int:
    """Replica count: full size on a GPU, tiny under the CUDA simulator."""
    return n_gpu if HAS_GPU else n_sim
