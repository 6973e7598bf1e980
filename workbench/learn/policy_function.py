"""A trained policy as a plain function of observations (`wb.policy`), for use outside the workbench: a
robot, a Gymnasium env, another simulator, a deployment.

    act = wb.policy("runs/pendulum-<date>")          # a PolicyFunction: a torch.nn.Module
    action = act(obs)                                # obs [O] or [B, O] (numpy or torch) -> the env's actions

A PolicyFunction holds copies of one policy's actor weights (a population's member: its own), the
run's observation statistics (frozen) and the action space's bounds, and nothing of the trainer or its
env. It acts as `Trainer.act` does: observations normalised as in training, then the distribution's
mode (deterministic) or a sample, in the env's units (Discrete: int64 [B]; MultiDiscrete: int64
[B, k]; Box: float32 [B, *shape] clipped to its bounds). `torch.jit.trace` and `torch.export` of it
give the same deterministic actions, and loading a saved trace needs no workbench (for the default
networks); loading a `torch.save` of the module itself does (its classes are the workbench's, and a
custom model's its own).
"""
from __future__ import annotations

import copy
import math
import warnings

import numba
import numpy as np
import torch
from torch import nn

from ..errors import ConfigError, TargetUnavailableError, WorkbenchError, WorkbenchWarning, did_you_mean
from .members import MemberLinear
from . import cpu_tanh
from .normaliser import normalised
from .policies import MLP, ActionHead, ActorCritic, CentralisedActorCritic, SharedActorCritic, Tanh
from .runs import load_policy


class PolicyFunctionError(WorkbenchError, ValueError):
    """Observations or a policy choice a PolicyFunction cannot take; the message names what it expects."""


class CpuTanh(nn.Module):
    """policies.Tanh without its autograd function or numba (traceable, and a saved trace needs no
    workbench): on the CPU the values training computed there (cpu_tanh's, bit for bit), torch.tanh
    elsewhere."""

    def forward(self, x):
        if x.device.type == "cpu" and x.dtype == torch.float32:
            return cpu_tanh.tanh_ops(x)
        return torch.tanh(x)


class SigmoidTanh(nn.Module):
    """CpuTanh as a module saved by torch.save before 2026-11-29 holds it: 2 sigmoid(2x) - 1 on the CPU,
    the values training computed there then (kept so that such a module acts as it did)."""

    def forward(self, x):
        if x.device.type == "cpu":
            return torch.sigmoid(x * 2.0) * 2.0 - 1.0
        return torch.tanh(x)


class ObservationNorm(nn.Module):
    """The run's frozen observation statistics: obs [B, O] -> (obs - mean) / std, clipped to [-10, 10]
    (normaliser.RunningNorm's formula)."""

    def __init__(self, mean, var):
        super().__init__()
        self.register_buffer("mean", mean.detach().clone().float())
        self.register_buffer("var", var.detach().clone().float())

    def forward(self, obs):
        return normalised(obs, self.mean, self.var)


class FirstOutput(nn.Module):
    """A custom PPO/A2C model's head output: model(obs)[0] (its value, [N], is computed and dropped)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, obs):
        return self.model(obs)[0]


class HeadColumns(nn.Module):
    """A SharedActorCritic's head output: its body's columns but the last (the value's)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, obs):
        return self.net(obs)[..., :-1]


def plain_copy(module: nn.Module, member: int | None = None) -> nn.Module:
    """A detached copy of `module` in eval mode: policies.MLP as nn.Sequential, policies.Tanh as
    CpuTanh (the same values), and with `member`, a stacked population's member k alone (each
    MemberLinear an nn.Linear, every other parameter its row k)."""
    module = copy.deepcopy(module)
    if member is not None:
        for part in module.modules():
            if not isinstance(part, MemberLinear):
                for name, param in list(part.named_parameters(recurse=False)):
                    setattr(part, name, nn.Parameter(param.detach()[member].clone()))

    def convert(part):
        if isinstance(part, MemberLinear):
            weights = part.member(member)
            linear = nn.Linear(part.in_features, part.out_features, device=weights["weight"].device)
            linear.load_state_dict(weights)
            return linear
        if isinstance(part, Tanh):
            return CpuTanh()
        for name, child in list(part.named_children()):
            if (new := convert(child)) is not child:
                setattr(part, name, new)
        return nn.Sequential(*part) if type(part) is MLP else part

    return convert(module).requires_grad_(False).eval()


class PolicyFunction(nn.Module):
    """One trained policy: obs [B, O] (float; other dtypes converted) -> the env's actions [B, ...].

    Built by `wb.policy` (a run folder or checkpoint) or `PolicyFunction.from_trainer` (a live
    trainer). Attributes: env (its name), policy (the policy's name), obs_dim, obs_shape,
    action_space (the env's), deterministic, member (a population member's label, else None),
    source (the checkpoint, where known). Always in eval mode (as the trainer acts)."""

    def __init__(self, actor: nn.Module, head: ActionHead, *, ddpg: bool = False, obs_shape: tuple, log_std=None,
                 norm=None, deterministic: bool = True, seed: int | None = None, env: str = "?", policy: str = "?",
                 member=None, source=None):
        super().__init__()
        self.actor, self.norm, self.head = actor, norm, head  # (the head's maths: its tensors stay unused here)
        self.kind, self.act_shape = "ddpg" if ddpg else head.kind, tuple(head.act_shape)
        action_space = head.space
        low, high = (head.low, head.high) if head.kind == "gaussian" else (None, None)
        self.obs_shape = tuple(obs_shape)
        self.obs_dim = int(math.prod(self.obs_shape)) if self.obs_shape else 1
        self.action_space, self.deterministic, self.seed = action_space, bool(deterministic), seed
        self.env, self.policy, self.member, self.source = env, policy, member, source
        for name, value in (("low", low), ("high", high), ("log_std", log_std)):
            self.register_buffer(name, None if value is None else value.detach().clone().float())
        self._generator = None
        self.eval()

    def train(self, mode: bool = True):
        """Stays in eval mode (Dropout off, BatchNorm's running statistics), as the trainer acts."""
        return super().train(False)

    def extra_repr(self) -> str:
        member = f", {self.member}" if self.member else ""
        return (f"env={self.env!r}, policy={self.policy!r}{member}, obs_dim={self.obs_dim}, "
                f"action={self.action_space!r}, deterministic={self.deterministic}")

    @property
    def device(self) -> torch.device:
        """Where the weights are (the CPU for a policy without any)."""
        tensor = next(iter(self.buffers()), None)
        tensor = tensor if tensor is not None else next(self.parameters(), None)
        return tensor.device if tensor is not None else torch.device("cpu")

    def _batch(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, O] or [B, *obs_shape] -> float32 [B, O] on the module's device, else an error naming O."""
        if not torch.jit.is_tracing():  # (a trace records sizes as tensors: its example was checked by the call)
            fits = obs.dim() == 2 and obs.shape[-1] == self.obs_dim or tuple(obs.shape[1:]) == self.obs_shape
            if not fits or obs.dim() < 2:
                raise PolicyFunctionError(
                    f"policy '{self.policy}' of env '{self.env}' takes observations [B, {self.obs_dim}] (one "
                    f"agent's observation of shape {self.obs_shape} flattened, B rows), or one observation "
                    f"[{self.obs_dim}]; got shape {tuple(obs.shape)}")
        return obs.reshape(obs.shape[0], self.obs_dim).to(device=self.device, dtype=torch.float32)

    def forward(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """obs [B, O] -> actions [B, *act_shape] in the env's units; a sample (not deterministic) draws
        from `generator`, else from the module's own (seeded with `seed`), else from torch's global one."""
        obs = self._batch(obs)
        if self.norm is not None:
            obs = self.norm(obs)
        out = self.actor(obs)
        if self.kind == "ddpg":  # (the actor's output already: a deterministic policy)
            actions = out
        elif self.deterministic:
            actions = self.head.mode(out)
        else:
            actions = self.head.sample(out, self.log_std, self._noise(out, generator))
        if self.kind in ("gaussian", "ddpg"):  # (ActionHead.to_env's clip, with this module's copy of the bounds)
            actions = actions.reshape((-1,) + self.act_shape)
            return torch.maximum(torch.minimum(actions, self.high), self.low)
        return actions

    def _noise(self, out, generator):
        """Collector.act's noise for a sample from head output `out` [B, D] (the same draws from the same
        generator): normal for a Gaussian head, uniform in (0, 1] for the Gumbel trick."""
        if generator is None and self.seed is not None:
            if self._generator is None or self._generator.device != out.device:
                self._generator = torch.Generator(device=out.device)
                self._generator.manual_seed(int(self.seed))
            generator = self._generator
        if self.kind == "gaussian":
            return torch.randn(out.shape, device=out.device, generator=generator)
        return torch.rand(out.shape, device=out.device, generator=generator).clamp_(1e-10, 1)

    def __call__(self, obs, generator: torch.Generator | None = None):
        """forward for any observations: a numpy array (or list) gives numpy actions back, a tensor a tensor
        on its own device; one observation [O] (or [*obs_shape]) gives one action. Observations that are
        not finite are refused, naming their rows."""
        as_numpy = not isinstance(obs, torch.Tensor)
        if as_numpy and isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict):
            raise PolicyFunctionError(f"policy '{self.policy}' takes observations, and this is a pair (obs, info), "
                                      f"as Gymnasium's reset() returns: pass its first element")
        tensor = torch.as_tensor(np.asarray(obs)) if as_numpy else obs
        single = tensor.dim() <= 1 or (len(self.obs_shape) > 1 and tuple(tensor.shape) == self.obs_shape)
        if single and tensor.numel() != self.obs_dim:
            raise PolicyFunctionError(f"policy '{self.policy}' of env '{self.env}' takes one observation of "
                                      f"{self.obs_dim} values (shape {self.obs_shape}), or a batch [B, "
                                      f"{self.obs_dim}]; got shape {tuple(tensor.shape)}")
        if single:
            tensor = tensor.reshape(1, -1)
        tracing = torch.jit.is_tracing() or torch.compiler.is_compiling()  # (export: no data-dependent branch)
        if not tracing and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            rows = (~torch.isfinite(tensor.reshape(len(tensor), -1))).any(1).nonzero().flatten().tolist()
            raise PolicyFunctionError(f"policy '{self.policy}' of env '{self.env}' got observations that are not "
                                      f"finite (NaN or inf) in row{'s' if len(rows) > 1 else ''} {rows[:8]}"
                                      f"{' ...' if len(rows) > 8 else ''}: its actions would be meaningless; check "
                                      f"what produced them")
        with torch.no_grad():
            actions = super().__call__(tensor, generator)
        if single:
            actions = actions[0]
        if as_numpy:
            return actions.cpu().numpy()
        return actions if actions.device == obs.device else actions.to(obs.device)

    @classmethod
    def from_trainer(cls, trainer, policy: str | None = None, *, member: int | None = None,
                     deterministic: bool = True, device="cpu", seed: int | None = None) -> PolicyFunction:
        """Policy `policy` (default: the only one) of a live Trainer as a PolicyFunction on `device`;
        member: which member of a population's trainer (required there)."""
        name = _policy_name(trainer, policy, getattr(trainer, "checkpoint_path", None))
        if trainer.M > 1 and not (isinstance(member, int) and not isinstance(member, bool) and 0 <= member < trainer.M):
            raise PolicyFunctionError(f"this trainer trains a population of {trainer.M} members: name one, "
                                      f"member=K with K in 0..{trainer.M - 1} (got {member!r})")
        if trainer.M == 1 and member not in (None, 0):
            raise PolicyFunctionError(f"this trainer holds one policy per name, not a population: no member "
                                      f"{member!r} (leave member out)")
        k = member if trainer.M > 1 else None
        model, head = trainer.models[name], trainer.head
        if trainer.algorithm == "ddpg":
            kind, actor, log_std = "ddpg", plain_copy(model.actor, k), None
            if not deterministic:
                warnings.warn(f"policy '{name}' was trained by DDPG, whose actor is deterministic: "
                              f"deterministic=False samples nothing (its exploration noise was training's); "
                              f"add noise to the actions yourself to explore", WorkbenchWarning, stacklevel=3)
        else:
            kind, log_std = head.kind, getattr(model, "log_std", None)
            if k is not None and log_std is not None:
                log_std = log_std[k]
            if name in trainer.central or type(model) in (ActorCritic, CentralisedActorCritic):
                actor = plain_copy(model.actor, k)  # (the critic is left behind)
            elif type(model) is SharedActorCritic:
                actor = HeadColumns(plain_copy(model.net, k))
            else:
                actor = FirstOutput(plain_copy(model, k))
        norm = trainer.norms.get(name)
        if norm is not None:
            mean, var = (norm.mean, norm.var) if k is None else (norm.mean[k], norm.var[k])
            norm = ObservationNorm(mean, var)
        function = cls(actor, ActionHead(head.space), ddpg=kind == "ddpg", obs_shape=tuple(trainer.env.obs_shape),
                       log_std=log_std, norm=norm, deterministic=deterministic, seed=seed, env=trainer.env.name,
                       policy=name, member=getattr(trainer, "member_label", None) if k is None else f"member {k}",
                       source=str(trainer.checkpoint_path) if getattr(trainer, "checkpoint_path", None) else None)
        return function.to(device)


def _policy_name(trainer, policy, source) -> str:
    """The name `policy` picks among the trainer's policies (None: the only one), else an error naming them."""
    names = [g.name for g in trainer.groups]
    where = f"{str(source)!r} (env '{trainer.env.name}')" if source else f"this trainer (env '{trainer.env.name}')"
    if policy is None:
        if len(names) == 1:
            return names[0]
        raise PolicyFunctionError(f"{where} has {len(names)} policies, {names}: name one, policy={names[0]!r}")
    if policy not in names:
        raise PolicyFunctionError(f"{where} has no policy {policy!r}; its policies: {names}"
                                  + did_you_mean(str(policy), names, repr))
    return policy


def policy(run_or_checkpoint, policy: str | None = None, member=None, deterministic: bool = True, device="cpu", *,
           seed: int | None = None, models=None) -> PolicyFunction:
    """A run's trained policy as a PolicyFunction (a torch.nn.Module): obs [B, O] (or one observation [O];
    numpy or torch) -> the env's actions, with the run's observation normalisation inside.

    policy: which policy of a multi-policy run (default: a single-policy run's only one); member: a
    population's member (an index, or "best", the default; "all" is refused: one function is one
    policy); deterministic: the distribution's mode, else a sample (from forward's `generator`, else a
    generator seeded with `seed`, else torch's global one; DDPG's actor is deterministic either way);
    device: where its weights live and it computes; models: {policy: nn.Module} of a run trained with
    models of its own (the same classes, untrained), as load_policy takes them.
    The weights are read through a trainer on a one-replica env (the CPU target, but for an env written in
    CUDA C alone) and copied: nothing of that trainer or its env stays alive, and torch's thread count
    is left as it was."""
    if member == "all":
        raise ConfigError(f"wb.policy makes one policy's function, and member='all' names every member of "
                          f"{str(run_or_checkpoint)!r}: pick one, member=K or member='best' (to act with every "
                          f"member at once, wb.load_policy(run, member='all') gives a trainer of them all)")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise PolicyFunctionError(f"device={device!r}, but this torch sees no CUDA GPU: leave device out (the CPU)")
    threads = torch.get_num_threads(), numba.get_num_threads()  # (building a trainer measures and sets both)
    try:
        try:
            trainer = load_policy(run_or_checkpoint, num_envs=1, target="cpu", member=member, models=models)
        except TargetUnavailableError:  # an env written in CUDA C alone: on the run's own target
            trainer = load_policy(run_or_checkpoint, num_envs=1, member=member, models=models)
        return PolicyFunction.from_trainer(trainer, policy, deterministic=deterministic, device=device, seed=seed)
    finally:
        torch.set_num_threads(threads[0])
        numba.set_num_threads(threads[1])
