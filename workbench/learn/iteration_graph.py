"""One training iteration replayed from a CUDA graph on GPU targets.

The first iteration runs eagerly on a side stream (optimiser state, gradients, torch.compile and the
allocator settle, and it is a real iteration of training), the second is captured whole, every later
one replays the graph. A capture that fails falls back to eager iterations for good, after a warning;
a checkpoint load (new optimiser state) starts again from an eager iteration.
"""
from __future__ import annotations

import warnings

import torch
from ..errors import WorkbenchWarning


_SIDE_STREAMS: dict = {}  # device index -> the side stream of first iterations


def _side_stream() -> torch.cuda.Stream:
    """One side stream per device for every trainer's first iteration: cuBLAS keeps a workspace (tens of
    MiB) for each stream it ran on until the process ends, so a new stream per trainer would leak one."""
    device = torch.cuda.current_device()
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream()
    return _SIDE_STREAMS[device]


class IterationGraph:
    """Runs `body()` (one iteration, allocating nothing that outlives it) eagerly or from a graph.

    state: "eager-first" -> "capture" -> "replay"; "eager" after a failed capture.
    generator: the torch.Generator the body draws from (its state advances on every replay)."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator
        self.graph = None
        self.state = "eager-first"

    def warming(self) -> bool:
        """The next `run` compiles or captures (its time is warm-up, not training)."""
        return self.state in ("eager-first", "capture")

    def run(self, body, why_not: str | None):
        """One iteration; `why_not`: the reason this iteration cannot be replayed (None: it can)."""
        if why_not is not None or self.state == "eager":
            body()
        elif self.state == "eager-first":
            side = _side_stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                body()
            torch.cuda.current_stream().wait_stream(side)
            self.state = "capture"
        elif self.state == "capture":
            self._capture(body)
        else:
            self.graph.replay()

    def _capture(self, body):
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.generator)
        try:
            with torch.cuda.graph(graph):
                body()
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager
            warnings.warn(f"CUDA graph capture of the training iteration failed ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]}); training goes on eagerly",
                          WorkbenchWarning, stacklevel=4)
            self.state = "eager"
            torch.cuda.synchronize()
            body()
        else:
            self.graph, self.state = graph, "replay"
            graph.replay()

    def invalidate(self):
        """Optimiser state or buffers were replaced (a checkpoint load): capture again."""
        self.graph = None
        if self.state != "eager":
            self.state = "eager-first"
