"""The data store: named device tensors with their layout, allocated once, viewed by kernels, pulled on demand."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from ..compiler.envdef import ResolvedArray
from ..errors import InsufficientMemoryError, WorkbenchError

_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                 np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32,
                 np.dtype(np.int64): torch.int64, np.dtype(np.uint8): torch.uint8}


class StoreError(WorkbenchError, ValueError):
    pass


def free_memory_bytes(device) -> int | None:
    """Bytes that can still be allocated on `device` (host RAM for a CPU device); None if unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except ImportError:
        return None


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024


def check_fits(device, needed: int, what: str, fix: str = "") -> None:
    """Raise InsufficientMemoryError, before allocating, when `needed` bytes exceed the free memory of `device`."""
    free = free_memory_bytes(device)
    if free is not None and needed > free:
        where = "GPU memory" if torch.device(device).type == "cuda" else "host memory (RAM)"
        raise InsufficientMemoryError(f"{what} need {format_bytes(needed)} but only {format_bytes(free)} of {where} "
                                      f"is free on {device}{'; ' + fix if fix else ''}")


class DataStore(Mapping):
    """Named tensors on `device`. Layout "env": [E, *shape]; "agent": [E, A, *shape].

    `store[name]` is the live device tensor; `view(name)` the kernel-side array over the same
    memory (made once and cached); `pull(name)` a host numpy copy.
    """

    def __init__(self, target, num_envs: int, num_agents: int):
        self.target = target
        self.device = target.device
        self.num_envs = num_envs
        self.num_agents = num_agents
        self._tensors: dict = {}
        self._specs: dict = {}
        self._views: dict = {}
        self._shared: dict = {}  # views that allocate hands out (share_observed)

    def full_shape(self, spec: ResolvedArray) -> tuple:
        lead = (self.num_envs,) if spec.layout == "env" else (self.num_envs, self.num_agents)
        return lead + tuple(spec.shape)

    def bytes_needed(self, specs, views=()) -> int:
        """Bytes the arrays of `specs` take in this store's layout (those named in `views` take none)."""
        return sum(math.prod(self.full_shape(spec)) * np.dtype(spec.dtype).itemsize for spec in specs
                   if spec.name not in views)

    def allocate(self, spec: ResolvedArray) -> torch.Tensor:
        """Create a zeroed tensor for `spec` on the device (or take the view `share_observed` made for it)."""
        tensor = self._shared.pop(spec.name, None)
        if tensor is None:
            tensor = torch.zeros(self.full_shape(spec), dtype=_TORCH_DTYPES[spec.dtype], device=self.device)
        self._tensors[spec.name] = tensor
        self._specs[spec.name] = spec
        return tensor

    def share_observed(self, obs: ResolvedArray, columns: list) -> None:
        """Make the per-env state arrays `columns` (float32 [E] each) the rows of one [k, E] tensor and the
        observation `obs` ([E, 1, k]) a view of it, for `allocate` to take: obs[e, 0, i] is columns[i][e],
        so the observation is the state with no copy (envdef.observed_state)."""
        rows = torch.zeros((len(columns), self.num_envs), dtype=torch.float32, device=self.device)
        view = rows.t().unsqueeze(1)
        if tuple(view.shape) != self.full_shape(obs):
            raise StoreError(f"the observation {self.full_shape(obs)} is not the state arrays {list(columns)}")
        self._shared.update({spec.name: rows[i] for i, spec in enumerate(columns)}, **{obs.name: view})

    def pull(self, name: str) -> np.ndarray:
        """Host copy of `name` (synchronises with the device)."""
        return self[name].detach().cpu().numpy().copy()

    def view(self, name: str):
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = self.target.view(self[name])
        return view

    def spec(self, name: str) -> ResolvedArray:
        return self._specs[name]

    def snapshot(self) -> dict:
        """Device copies of every array (for check_env and tests)."""
        return {k: v.clone() for k, v in self._tensors.items()}

    def load_snapshot(self, snap: Mapping) -> None:
        """Copy a snapshot (`{name: tensor}`, as a checkpoint's env_state holds) into the store's arrays."""
        snap = dict(snap)
        if "episode_return" in snap and "episode_return" not in self._tensors:
            # a snapshot from before the running return moved into last_return (codegen's docstring)
            running, done = torch.as_tensor(snap.pop("episode_return")), torch.as_tensor(snap["done"])
            shape = (-1,) + (1,) * (running.dim() - 1)
            snap["last_return"] = torch.where(done.reshape(shape) != 0, torch.as_tensor(snap["last_return"]), running)
        for k, v in snap.items():
            self._tensors[k].copy_(torch.as_tensor(v).to(self.device))

    def __getitem__(self, name):
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"no array named '{name}' in the store; it holds {sorted(self._tensors)}") from None

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)

    def __repr__(self):
        rows = ", ".join(f"{k}: {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
                         for k, v in self._tensors.items())
        return f"DataStore({self.device}; {rows})"
