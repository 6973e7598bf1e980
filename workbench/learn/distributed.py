"""Training over processes with torch.distributed (NCCL between GPUs, gloo on CPUs), launched by torchrun.

Data parallel: every rank owns its own replicas on its own device, runs its rollouts locally and
all-reduces gradients before each optimiser step, so the ranks' parameters stay identical. Rank r
seeds its env with `rank_seed(seed, r)`.

A population (seeds, sweep) is instead split: rank r trains members [r * M / W, (r + 1) * M / W) as
a population of its own (`member_slice`), no gradient crosses ranks, and `MemberRanks` gathers the
members' reports, agrees on stopping and brings every member's state to rank 0's checkpoint.
"""
from __future__ import annotations

import atexit
import datetime
import os
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import WorkbenchError, WorkbenchWarning


class DistributedError(WorkbenchError, RuntimeError):
    pass


@dataclass(frozen=True)
class Context:
    rank: int
    local_rank: int
    world_size: int
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def rank_seed(seed: int, rank: int) -> int:
    """Distinct, reproducible env seed of each rank (rank 0 keeps `seed`)."""
    return seed + 1_000_003 * rank


def check_gpu_count(local_rank: int, gpus: int, target: str = "cuda") -> None:
    """A clear error when this rank has no GPU of its own for a GPU target."""
    if gpus == 0:
        raise DistributedError(f"target '{target}' needs a GPU and this node has none (no rank count fixes that); "
                               f"train on the CPU instead: --target cpu (torchrun --nproc-per-node N then runs N "
                               f"CPU ranks over gloo)")
    if local_rank >= gpus:
        raise DistributedError(f"local rank {local_rank} has no GPU: this node has {gpus} GPU(s); launch with "
                               f"torchrun --nproc-per-node {max(gpus, 1)} (or fewer), or train on the cpu target")


def init(target: str, timeout_s: float = 120.0) -> Context:
    """Join the process group torchrun set up; pick this rank's GPU for a GPU target."""
    if not dist.is_available():
        raise DistributedError("torch.distributed is not available in this torch build")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gpu = target in ("cuda", "cuda-c")
    if gpu:
        check_gpu_count(local_rank, torch.cuda.device_count(), target)
        torch.cuda.set_device(local_rank)
        from numba import cuda
        cuda.select_device(local_rank)
    backend = "nccl" if gpu else "gloo"
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            raise DistributedError("distributed training needs the rendezvous variables torchrun sets "
                                   "(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): launch with torchrun")
        kwargs = {"device_id": torch.device("cuda", local_rank)} if gpu else {}
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
        atexit.register(_leave)
    if dist.get_rank() != 0:  # every rank would give the same warning: rank 0 speaks for the job
        warnings.filterwarnings("ignore", category=WorkbenchWarning)
    return Context(dist.get_rank(), local_rank, dist.get_world_size(), backend)


def _leave():
    """Tear the process group down before the interpreter exits: left to exit, a gloo thread still
    joinable aborted a rank now and then (SIGABRT, so torchrun reported a finished run as failed)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def all_ranks(context: Context, value) -> list:
    """Every rank's `value` (any picklable object), in rank order."""
    out = [None] * context.world_size
    dist.all_gather_object(out, value)
    return out


def check_same_config(context: Context, config: dict) -> None:
    """Refuse a job whose ranks were given different configs (their iterations' collectives would not
    match: a hang until the timeout); `config` is this rank's config as a dict."""
    configs = all_ranks(context, config)
    differ = sorted(k for k in configs[0] if any(c.get(k) != configs[0].get(k) for c in configs[1:]))
    if differ:
        values = "; ".join(f"{k}: {[c.get(k) for c in configs]}" for k in differ)
        raise DistributedError(f"the ranks were given different configs ({values}, by rank): every rank must "
                               f"train the same iteration; launch every rank with the same config and flags")


class GradientSync:
    """All-reduces (averages) gradients and scalars across ranks; passed to the algorithms' updates."""

    def __init__(self, context: Context):
        self.context = context

    def gradients(self, parameters) -> None:
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.context.world_size
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out / self.context.world_size

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def any(self, flags, device) -> list:
        return any_rank(flags, device)

    def gather_to_main(self, obj) -> list | None:
        """obj of every rank, in rank order, on rank 0 (picklable host objects); None on the others."""
        out = [None] * self.context.world_size if self.context.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=0)


def any_rank(flags, device) -> list:
    """Each of `flags` (bools): whether it is set on any rank, for all of them in one all-reduce."""
    value = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [v > 0 for v in value.tolist()]


def member_slice(members: int, context: Context) -> tuple:
    """The members [start, stop) of a population of `members` that rank `context.rank` trains."""
    world = context.world_size
    if members < world or members % world:
        fits = [n for n in range(2, min(members // 2, 64) + 1) if members % n == 0]  # 2 members a rank at least
        raise DistributedError(f"a population of {members} members splits over ranks evenly, one block of members "
                               f"per rank; {world} ranks do not divide it: launch with torchrun --nproc-per-node "
                               f"{' or '.join(map(str, fits[:4])) or 1}, "
                               f"or change seeds/sweep to a multiple of {world}")
    per = members // world
    if per < 2:  # (one member a rank would train as an ordinary run, outside the population's collectives)
        raise DistributedError(f"a population split over {world} ranks needs at least 2 members per rank, it has "
                               f"{per}: launch fewer ranks (torchrun --nproc-per-node), or train each member as "
                               f"its own run")
    return context.rank * per, (context.rank + 1) * per


class MemberRanks:
    """The ranks of a population split over processes: each trains its own members; the reports,
    stop decisions and checkpoints are shared through the process group (collectives: every rank
    calls each method at the same point)."""

    def __init__(self, context: Context):
        self.context = context

    def gather(self, obj) -> list:
        """obj of every rank, in rank order (picklable host objects)."""
        out = [None] * self.context.world_size
        dist.all_gather_object(out, obj)
        return out

    def any(self, flags, device) -> list:
        return any_rank(flags, device)
