"""On-device action sampling from policy outputs, written straight into an action tensor.

    sampler = Sampler("cuda", seed=0)                      # once per (target, device)
    sampler.categorical(logits, env.data["action"])        # logits [E, A, K] (or [E*A, K])
    sampler.multi_discrete(logits, nvec, out)              # logits [..., sum(nvec)], out [..., len(nvec)]
    sampler.gaussian(mean, std, out, low=-1.0, high=1.0)   # mean [..., d], std [d] or [..., d]

Every call launches one kernel (numba `njit(parallel=True)` over rows on `cpu`; numba-cuda on
`cuda` and `cuda-c`) on torch's current stream, then advances a device-side call counter. The
seed and the counter live in one int64 device tensor, so a call holds no per-call host scalar,
allocates nothing (given `out`, tensor bounds or bounds seen before), and never synchronises:
it can be captured in a CUDA graph (warm it up once before capturing, so the kernel is compiled).

Random numbers come from workbench.compiler.rng, compiled into the kernels: row i of call t draws from
`make_key(seed', i, 0, t, kind)` (seed' a salted hash of the seed, so the sampler's streams do not
coincide with an env's streams under the same seed). Row i is the flat index over the batch
dimensions, so [E, A, K] and [E*A, K] logits give the same actions. Same seed, same sequence of
calls and same shapes: same numbers, on every target (up to float32 rounding of exp, which moves
a draw only when it falls within ~1e-7 of a category boundary).

Tensors: logits/probs/mean/std float32; discrete `out` int8, int16 or int32 (an env's action dtype is
the smallest of these that holds its categories; a new `out` is int32), Gaussian
`out` float32; all on the sampler's device. `out` may be a strided view (for example
`env.data["action"][:, 2:5]`, the actions of agents 2..4); it must be a *view*: advanced indexing
such as `action[:, ids]` makes a copy, and writes into a copy never reach the env (sample into a
buffer and `action[:, ids] = buffer` instead). `out` may have any shape that torch can `view` as
the batch shape without a copy. Categories with logit -inf (or probability 0) are never drawn; a
row with no positive finite mass (all -inf, all zero, NaN) gets -1.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import WorkbenchError
from .sampling_kernels import BLOCK, build_kernels

_SEED_SALT = 0x3C6EF372FE94F82B
_ACTION_DTYPES = (torch.int8, torch.int16, torch.int32)  # the env's action dtypes (workbench.envdef.action_dtype)


class SamplingError(WorkbenchError, ValueError):
    """A sampling argument has the wrong type, dtype, shape or device; the message names it."""


def lanes_per_row(num_categories: int) -> int:
    """CUDA threads that share one categorical row: 1 for K <= 8, then about K/4, at most 32."""
    lanes = 1
    while lanes < 32 and lanes * 4 < num_categories:
        lanes *= 2
    return lanes if num_categories > 8 else 1


def _salted(seed: int) -> int:
    x = (int(seed) + _SEED_SALT) & 0xFFFFFFFFFFFFFFFF
    for mul in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB):
        x = ((x ^ (x >> 31)) * mul) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 29)) & 0x7FFFFFFFFFFFFFFF


class Sampler:
    """Samples actions on one target's device into given tensors; see the module docstring.

    target: "cpu", "cuda" or "cuda-c" (the last runs the numba-cuda kernels on the same device
    memory), a Target, or an Env (its target). device: the CUDA device (default: torch's current
    one). The seed and call counter are `state`, an int64 [2] device tensor.
    """

    def __init__(self, target="cpu", seed: int = 0, device=None):
        from ..compiler.targets import get_target
        if hasattr(target, "target") and hasattr(target, "store"):  # an Env
            target = target.target
        self.target = get_target(target) if isinstance(target, str) else target
        self.kind = "cpu" if self.target.name == "cpu" else "cuda"
        from ..compiler.targets.cuda import simulator_enabled
        self.simulated = self.kind == "cuda" and simulator_enabled()
        if self.kind == "cpu" or self.simulated:
            self.device = torch.device("cpu")
        else:
            self.device = (torch.device(device) if device is not None
                           else torch.device("cuda", torch.cuda.current_device()))
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        self.state = torch.zeros(2, dtype=torch.int64, device=self.device)
        self._counter = self.state[1:]
        self._kernels = build_kernels(self.kind)
        self._views: dict = {}
        self._consts: dict = {}
        self._streams: dict = {}
        self.reseed(seed)
        self._state_view = self._view(self.state)

    @classmethod
    def for_env(cls, env, seed: int | None = None) -> "Sampler":
        """A sampler on `env`'s target and device (seed defaults to the env's seed)."""
        return cls(env.target, seed=env.seed if seed is None else seed,
                   device=env.device if env.device.type == "cuda" else None)

    def reseed(self, seed: int) -> None:
        """Restart the streams from `seed` (writes the device state; do this outside graph capture)."""
        self.seed = int(seed)
        self.state.copy_(torch.tensor([_salted(self.seed), 0], dtype=torch.int64))

    @property
    def calls(self) -> int:
        """Calls made since the last reseed (reads the device counter: synchronises)."""
        return int(self.state[1])

    # -- public sampling calls ----------------------------------------------------------
    def categorical(self, logits: torch.Tensor, out: torch.Tensor | None = None, *,
                    probs: bool = False) -> torch.Tensor:
        """One category per row of `logits` [*B, K] (or probabilities [*B, K] with probs=True:
        non-negative, need not be normalised) into out [*B] int8, int16 or int32 (int32 when made here);
        returns out."""
        self._check_tensor("logits", logits, (torch.float32,), min_dim=1)
        if logits.shape[-1] < 1:
            raise SamplingError(f"logits must have at least one category in its last dimension, got shape "
                                f"{tuple(logits.shape)}")
        batch = tuple(logits.shape[:-1])
        dest = self._out("out", out, batch, _ACTION_DTYPES, "int32")
        x3, o2 = _rows(logits, "logits", 1), _rows(dest, "out", 0)
        n = x3.shape[0] * x3.shape[1]
        lanes = lanes_per_row(int(logits.shape[-1]))
        self._run("categorical", n, (n + BLOCK // lanes - 1) // (BLOCK // lanes), (x3, o2), (bool(probs),),
                  (lanes,))
        return dest if out is None else out

    def multi_discrete(self, logits: torch.Tensor, nvec, out: torch.Tensor | None = None, *,
                       probs: bool = False) -> torch.Tensor:
        """Component j of each row drawn from logits[..., offset_j : offset_j + nvec[j]];
        logits [*B, sum(nvec)] float32, out [*B, len(nvec)] int8, int16 or int32; returns out."""
        nvec_t = tuple(int(v) for v in (nvec.tolist() if isinstance(nvec, (torch.Tensor, np.ndarray)) else nvec))
        if not nvec_t or min(nvec_t) < 1:
            raise SamplingError(f"nvec must be a non-empty sequence of positive ints, got {nvec!r}")
        self._check_tensor("logits", logits, (torch.float32,), min_dim=1)
        if logits.shape[-1] != sum(nvec_t):
            raise SamplingError(f"logits has {logits.shape[-1]} entries in its last dimension; nvec={list(nvec_t)} "
                                f"needs sum(nvec)={sum(nvec_t)}")
        batch = tuple(logits.shape[:-1])
        dest = self._out("out", out, batch + (len(nvec_t),), _ACTION_DTYPES, "int32")
        offsets = self._const(("nvec", nvec_t), lambda: np.concatenate([[0], np.cumsum(nvec_t)]).astype(np.int64))
        x3, o3 = _rows(logits, "logits", 1), _rows(dest, "out", 1)
        n = x3.shape[0] * x3.shape[1]
        self._run("multi_discrete", n, (n * len(nvec_t) + BLOCK - 1) // BLOCK, (x3, o3), (offsets, bool(probs)))
        return dest if out is None else out

    def gaussian(self, mean: torch.Tensor, std, out: torch.Tensor | None = None, low=None, high=None) -> torch.Tensor:
        """clip(mean + std * N(0, 1), low, high): mean [*B, d] float32, std float, [d] or [*B, d],
        low/high None (unbounded), float, sequence of d, or float32 tensor [d]; out [*B, d]."""
        self._check_tensor("mean", mean, (torch.float32,), min_dim=1)
        d = int(mean.shape[-1])
        dest = self._out("out", out, tuple(mean.shape), (torch.float32,), "float32")
        if isinstance(std, torch.Tensor) and tuple(std.shape) == tuple(mean.shape):
            self._check_tensor("std", std, (torch.float32,), min_dim=1)
            std3, rs = _rows(std, "std", 1), 1
        else:
            std3, rs = self._bound("std", std, d, None, f" or the shape of mean {tuple(mean.shape)}")[None, None], 0
        lo = self._bound("low", low, d, -math.inf)
        hi = self._bound("high", high, d, math.inf)
        m3, o3 = _rows(mean, "mean", 1), _rows(dest, "out", 1)
        n = m3.shape[0] * m3.shape[1] * d
        self._run("gaussian", n, (n + BLOCK - 1) // BLOCK, (m3, std3, lo, hi, o3), (rs,))
        return dest if out is None else out

    # -- helpers --------------------------------------------------------------------------
    def _check_tensor(self, name, t, dtypes, min_dim):
        if not isinstance(t, torch.Tensor):
            raise SamplingError(f"{name} must be a torch.Tensor on {self.device}, got {type(t).__name__}")
        if t.dtype not in dtypes:
            names = [str(d).replace("torch.", "") for d in dtypes]
            wanted = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
            raise SamplingError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected {wanted}")
        if t.device.type != self.device.type or (self.device.type == "cuda" and t.device.index != self.device.index):
            raise SamplingError(f"{name} is on {t.device}; this sampler runs on {self.device} "
                                f"(target '{self.target.name}')")
        if t.dim() < min_dim:
            raise SamplingError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(t.shape)}")

    def _out(self, name, out, shape, dtypes, default):
        if out is None:
            return torch.empty(shape, dtype=getattr(torch, default), device=self.device)
        self._check_tensor(name, out, dtypes, min_dim=0)
        if tuple(out.shape) == shape:
            return out
        if out.numel() == math.prod(shape):
            try:
                return out.view(shape)
            except RuntimeError:
                pass
        raise SamplingError(f"{name} has shape {tuple(out.shape)}; expected {list(shape)} (or a tensor torch can "
                            f"view as that shape without a copy)")

    def _const(self, key, make):
        t = self._consts.get(key)
        if t is None:
            t = self._consts[key] = torch.as_tensor(make()).to(self.device)
        return t

    def _bound(self, name, value, d, default, alternative=""):
        """[d] float32 device tensor from a float, a sequence of d floats or a tensor [d] / [1] / []
        (host values are converted once and cached)."""
        if isinstance(value, torch.Tensor):
            self._check_tensor(name, value, (torch.float32,), min_dim=0)
            if value.dim() <= 1 and value.numel() == 1:
                return value.reshape(1).expand(d)
            if tuple(value.shape) == (d,):
                return value
            raise SamplingError(f"{name} has shape {tuple(value.shape)}; expected a scalar, [{d}]{alternative}")
        if value is None:
            if default is None:
                raise SamplingError(f"{name} must be given")
            value = default
        try:
            arr = np.broadcast_to(np.asarray(value, dtype=np.float32), (d,))
        except (TypeError, ValueError):
            raise SamplingError(f"{name} must be a float, a sequence of {d} floats or a float32 tensor [{d}], "
                                f"got {value!r}") from None
        return self._const((name, tuple(arr.tolist())), lambda: arr.copy())

    def _view(self, t):
        """Kernel-side array over `t` (cached by pointer and layout on CUDA, where making one costs ~20 us)."""
        if self.kind == "cpu" or self.simulated:
            return t.detach().numpy()
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        view = self._views.get(key)
        if view is None:
            from numba import cuda
            if len(self._views) > 256:
                self._views.clear()
            # owner=None: the view holds no reference; it is only used while a live tensor sits at
            # this exact pointer with this exact layout, which is then the memory it describes.
            view = self._views[key] = cuda.from_cuda_array_interface(t.detach().__cuda_array_interface__,
                                                                     owner=None, sync=False)
        return view

    def _run(self, name, work, grid, arrays, extra, cuda_extra=()):
        """Run the `name` driver: (*arrays, state, *extra) on cpu, then cuda_extra on cuda; the
        counter advances on the device (in the cpu driver, or by a torch op on the stream)."""
        if work == 0:
            self._counter.add_(1)
            return
        views = [self._view(a) if isinstance(a, torch.Tensor) else a for a in arrays]
        extra = tuple(self._view(a) if isinstance(a, torch.Tensor) else a for a in extra)
        if self.kind == "cpu":
            self._kernels.get("_cpu_" + name, views[1].dtype)(*views, self._state_view, *extra)  # views[1]: out
            return
        kernel = self._kernels.get("_cuda_" + name)
        args = (*views, self._state_view, *extra, *cuda_extra)
        if self.simulated:
            kernel[grid, BLOCK](*args)
        else:
            from numba import cuda
            handle = torch.cuda.current_stream(self.device).cuda_stream
            stream = self._streams.get(handle)
            if stream is None:
                stream = self._streams[handle] = cuda.external_stream(handle)
            kernel[grid, BLOCK, stream](*args)
        self._counter.add_(1)


def _rows(t: torch.Tensor, name: str, trailing: int) -> torch.Tensor:
    """View of t with exactly two batch dimensions before its `trailing` ones: [R, C, *tail]."""
    lead = t.dim() - trailing
    tail = tuple(t.shape[lead:])
    if lead == 2:
        return t
    if lead == 1:
        return t.unsqueeze(1)
    if lead == 0:
        return t.unsqueeze(0).unsqueeze(0)
    try:
        return t.view((-1, t.shape[lead - 1]) + tail)
    except RuntimeError:
        raise SamplingError(f"{name} has shape {tuple(t.shape)} and strides {t.stride()}, which cannot be viewed "
                            f"with its batch dimensions merged; pass it with at most 2 batch dimensions") from None
