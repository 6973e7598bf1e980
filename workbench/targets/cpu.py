"""The `cpu` target: the env's per-agent code through numba `njit`, replicas spread over cores
with `prange`, agents of a replica looped in order (so a phase boundary needs no barrier)."""
from __future__ import annotations

import numba
import torch

from ..codegen import Layout
from ._numba import build_namespace, compile_error

_PRELUDE = '''
def atomic_add(array, index, value):
    old = array[index]
    array[index] = old + value
    return old


def atomic_max(array, index, value):
    old = array[index]
    if value > old:
        array[index] = value
    return old


def atomic_min(array, index, value):
    old = array[index]
    if value < old:
        array[index] = value
    return old
'''


class CpuKernels:
    def __init__(self, defn, ns):
        self.defn = defn
        self._reset = numba.njit(parallel=True)(ns["_wb_reset"])
        self._step = numba.njit(parallel=True)(ns["_wb_step"])
        self.driver_source = ns["_wb_driver_source"]

    def _run(self, fn, n_envs, seed, views):
        try:
            fn(n_envs, seed, *views)
        except numba.core.errors.NumbaError as exc:
            raise compile_error(self.defn, "cpu", exc) from None

    def reset(self, n_envs, seed, views):
        self._run(self._reset, n_envs, seed, views)

    def step(self, n_envs, seed, views):
        self._run(self._step, n_envs, seed, views)


class CpuTarget:
    name = "cpu"
    device = torch.device("cpu")

    def availability(self):
        return None

    def view(self, tensor):
        return tensor.numpy()

    def compile(self, defn):
        ns = build_namespace(defn, prelude=_PRELUDE, wrap_device=numba.njit, extra={"prange": numba.prange},
                             layout=Layout(1, 1), gpu=False)
        return CpuKernels(defn, ns)
