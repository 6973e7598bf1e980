import os

# In parallel workers (pytest-xdist) each worker gets its share of the cores: the trainer's own
# thread choice measures one process at a time and, beside N busy siblings, would oversubscribe
# the machine N-fold (a CPU learning test then runs many times slower than alone).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _name in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_share))

# the bounds-checked run before a registered env first trains (runtime.check.check_new_env) costs each test
# that trains its own source a debug compile; tests/test_check_new_env.py turns it on
os.environ.setdefault("WORKBENCH_CHECK_NEW_ENVS", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

# Without a GPU the `cuda` target runs in numba's CUDA simulator; this must be set before numba.cuda loads.
HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    # the fused Triton kernels' tests run them in Triton's interpreter: set before Triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

gpu_only = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")


@pytest.fixture(scope="session")
def nvrtc():
    """Skips unless the cuda-c target can compile here (cuda.core and NVRTC present)."""
    try:
        import cuda.core  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"cuda.core is not installed ({exc})")
    from workbench.compiler.targets.cuda_c import nvrtc_problem
    problem = nvrtc_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(params=["cpu", "cuda"])
def target(request):
    return request.param


def tiny(n_gpu: int, n_sim: int) -> int:
    """Replica count: full size on a GPU, tiny under the CUDA simulator."""
    return n_gpu if HAS_GPU else n_sim


@pytest.fixture
def triton_kernels(monkeypatch):
    """The fused Triton kernels on this machine: compiled on a GPU, else in Triton's interpreter for
    CPU tensors (which needs TRITON_INTERPRET=1 before Triton loads, as set above)."""
    if not HAS_GPU:
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("without a GPU the kernels run in Triton's interpreter: TRITON_INTERPRET=1 (tests/conftest.py)")
        from workbench.learn import fused
        monkeypatch.setattr(fused, "INTERPRET_ON_CPU", True)


@pytest.fixture(scope="module")
def compiled_cartpole():
    """CartPole compiled once for a test module (the kernel cache serves every later make)."""
    import workbench as wb
    return wb.make("cartpole", num_envs=4, target="cpu")


@pytest.fixture
def runs_in_tmp(tmp_path, monkeypatch):
    """Panels and wb.train write their run folders under runs/ of the working directory: a fresh one per test."""
    monkeypatch.chdir(tmp_path)
