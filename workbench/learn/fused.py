"""Fused learner kernels (Triton, on GPUs): a minibatch's forward pass, loss and backward pass of the
default actor-critic in one launch per network, and GAE in one launch.

Eager torch runs one PPO minibatch as a few hundred kernels, most of them reading and writing
[rows, hidden] activations in device memory: a population of small MLPs is then bound by launches
and activation traffic, not by its arithmetic. Here a program takes one member's rows tile by tile,
keeps a tile's activations in registers from the forward pass through the loss to the backward
pass, and adds its weight gradients to the member's gradient rows once at the end; nothing of size
[rows, hidden] goes to memory, so the learner needs no chunks either.

Scope: the default ActorCritic (one policy, or a population's stacked copies) with two tanh hidden
layers of at most 128 units, a discrete head, PPO's or A2C's loss. `unsupported` names what rules a
run out; such runs, and every CPU run, take the torch path (the algorithms' `chunk_loss`), which is
the reference the tests hold these kernels to. With TRITON_INTERPRET=1 the kernels run on the CPU
(slowly, for tests).
"""
from __future__ import annotations

import contextlib
import functools
import os
import weakref

import torch
from torch import nn

from .members import MemberAdam, MemberLinear
from .policies import ActorCritic

MAX_HIDDEN = 128
# Rows per tile. A minibatch's tile of 32 rows leaves room for more programs per SM than one of 64:
# 1024 members' minibatch gradient 1.46 against 2.11 ms on an H100 (bench/tune_fused.py); the
# policy step, with no gradients to hold, is fastest at 64.
GRAD_BLOCK = 32
STEP_BLOCK = 64
# Two warps: Triton then uses mma.sync, not Hopper's warpgroup MMA, whose code for this kernel's
# several dots faulted (illegal memory access) with 4 or 8 warps on an H100 under Triton 3.6.
NUM_WARPS = 2
NUM_STAGES = None  # (Triton's default)
PROGRAMS_PER_SM = 2  # a minibatch's rows split over programs until there are this many per SM
MIN_TILES = 1  # ... each program taking at least this many tiles of GRAD_BLOCK rows
# Under bf16 the hidden layers' tanh is the hardware's tanh.approx.f32 (one instruction; relative
# error about 2^-11, below the bf16 dots' own): fp32 and tf32 keep 2 sigmoid(2x) - 1
TANH_APPROX = True
# Compile the kernels for mma.sync instead of Hopper's warpgroup MMA (Triton's DISABLE_MMA_V3, a
# compile-time switch set only while these kernels launch, and part of Triton's cache key)
MMA_SYNC = False


def _launch_options() -> dict:
    return dict(num_warps=NUM_WARPS) if NUM_STAGES is None else dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES)


def _tanh_mode(dot: int) -> int:
    return int(TANH_APPROX and dot == 0 and not interpreted())


@contextlib.contextmanager
def _compile_switches(mma_sync: bool | None = None):
    """The compile-time switches of this module's settings (or mma_sync for a kernel of its own),
    around a launch (which may compile)."""
    if not (MMA_SYNC if mma_sync is None else mma_sync):
        yield
        return
    before = os.environ.get("DISABLE_MMA_V3")
    os.environ["DISABLE_MMA_V3"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["DISABLE_MMA_V3"]
        else:
            os.environ["DISABLE_MMA_V3"] = before


# Tests and debugging: run the kernels for CPU tensors in Triton's interpreter (which needs
# TRITON_INTERPRET=1 before Triton is imported); trainers on CPU targets use them only then.
INTERPRET_ON_CPU = False


def interpreted() -> bool:
    return INTERPRET_ON_CPU and os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=1)
def triton_missing() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (it comes with torch's CUDA builds)"
    return None


def _linear_layers(net):
    return [m for m in net if isinstance(m, (nn.Linear, MemberLinear))] if isinstance(net, nn.Sequential) else []


def unsupported(model, head, algorithm: str, device) -> str | None:
    """Why the fused kernels cannot compute this policy's gradients (None: they can)."""
    if device.type != "cuda" and not interpreted():
        return "the fused kernels run on GPUs"
    missing = triton_missing()
    if missing:
        return missing
    if algorithm not in ("ppo", "a2c"):
        return f"the fused kernels compute PPO's and A2C's losses, not {algorithm}'s"
    if type(model) is not ActorCritic:
        return ("the fused kernels compute the default ActorCritic's gradients, not "
                + ("a shared body's (shared_body)" if type(model).__name__ == "SharedActorCritic"
                   else "a custom model's"))
    if head.kind != "discrete":
        return f"the fused kernels handle discrete action heads, not {head.kind} ones"
    for net in (model.actor, model.critic):
        layers = _linear_layers(net)
        tanh = [m for m in net if isinstance(m, nn.Tanh)]
        if len(layers) != 3 or len(tanh) != 2 or len(net) != 5:
            return "the fused kernels handle MLPs of two tanh hidden layers"
        if max(layers[0].out_features, layers[1].out_features) > MAX_HIDDEN:
            return f"the fused kernels handle hidden layers of at most {MAX_HIDDEN} units"
    if model.actor[0].in_features > 256 or head.out_dim > 256:
        return "the fused kernels handle at most 256 observation features and actions"
    return None


def _member_strides(params, device) -> torch.Tensor:
    """The member strides of a stacked MLP's tensors (w1, b1, w2, b2, w3, b3, ...) for the kernels:
    a MemberAdam's parameters are views of its flat [M, P] buffer (stride P), a rollout copy's are
    tensors of their own."""
    return torch.tensor([t.stride(0) if t.dim() > 1 else 0 for t in params], dtype=torch.int64, device=device)


def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())


def _sizes(layers) -> dict:
    """The kernels' size arguments of an MLP's three linear layers (each padded to a power of two >= 16)."""
    O, H1, H2, K = (layers[0].in_features, layers[0].out_features, layers[1].out_features, layers[2].out_features)
    return dict(O=O, OP=_pow2(O), H1=H1, H1P=_pow2(H1), H2=H2, H2P=_pow2(H2), K=K, KP=_pow2(K))


@functools.lru_cache(maxsize=1)
def _kernels():
    """The kernels' module, imported on first use, so that importing this module needs no Triton and
    TRITON_INTERPRET set by then is honoured."""
    from . import fused_kernels
    return fused_kernels


@functools.lru_cache(maxsize=1)
def _rollout_kernels():
    from . import fused_rollout_kernels
    return fused_rollout_kernels


@functools.lru_cache(maxsize=1)
def _linear_kernels():
    from . import linear_kernels
    return linear_kernels


@functools.lru_cache(maxsize=1)
def _categorical_kernels():
    from . import categorical_kernels
    return categorical_kernels


def warm_up():
    """Import Triton and the kernels' module and compute Triton's cache key (it hashes its 400 MB
    library: about 0.4 s, the reads and the hashing free of the GIL), which the first launch would
    do; a GPU run's start-up does it on a thread (trainer.warm_up_in_background)."""
    if triton_missing() is None:
        _rollout_kernels()
        from triton.runtime.cache import triton_key
        triton_key()


class FusedGradients:
    """Computes one policy's minibatch gradient with the fused kernels (see the module's docstring).

    model: the (stacked) ActorCritic; optimizer: its MemberAdam (the gradients go straight into its
    flat [M, P] buffer) or torch Adam (they go into a flat buffer whose views are the parameters'
    .grad); fields: the rollout's flat fields {name: [B, ...]}; hp: config or population.Hyper.
    """

    def __init__(self, model, optimizer, fields: dict, config, hp, members: int, precision: str):
        self.model, self.optimizer, self.fields, self.members = model, optimizer, fields, members
        self.algorithm = config.algorithm
        self.normalize_advantages = bool(config.normalize_advantages)
        self.clip_value = bool(getattr(config, "clip_value", False))
        self.dot = {"bf16": 0, "tf32": 1}.get(precision, 2)
        device = fields["values"].device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.stacked = isinstance(model.actor[0], MemberLinear)
        if isinstance(optimizer, MemberAdam):
            self.grad = optimizer.grad
        else:
            self.grad = torch.zeros((1, sum(p.numel() for p in self.params)), device=device)
        self.grads = self._views(self.grad)
        # per network (the policy's, then the value function's): its sizes, parameters, and their
        # places among the flat gradient's views
        self.nets = []
        where = {id(p): i for i, p in enumerate(self.params)}
        for net in (model.actor, model.critic):
            layers = _linear_layers(net)
            params = [t for layer in layers for t in (layer.weight, layer.bias)]
            self.nets.append((_sizes(layers), params, _member_strides(params, device), [where[id(t)] for t in params]))
        if sorted(i for net in self.nets for i in net[3]) != list(range(len(self.params))):
            raise ValueError("FusedGradients: the model has parameters outside its actor's and critic's linear "
                             "layers (fused.unsupported should have ruled it out)")
        self.parts = None  # [M * splits, P] partial gradients and [M * splits, 5] statistics, made on first use
        self.moments_out = None  # [3, M, minibatches]: minibatch_moments' count, mean and std
        coef = (lambda name: hp.per_member(name, device) if hasattr(hp, "per_member")
                else torch.full((members,), float(getattr(hp, name)), device=device))
        self.coefs = torch.stack([coef("clip_coef") if self.algorithm == "ppo" else torch.zeros(members, device=device),
                                  coef("ent_coef"), coef("vf_coef")]).contiguous()
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4

    def _views(self, flat):
        """The parameters' gradients as views of a flat gradient buffer [rows, P] (its first M rows;
        the kernels take only where each starts, and the rows' stride)."""
        views, offset = [], 0
        for p in self.params:
            size = p[0].numel() if self.stacked else p.numel()
            views.append(flat[:self.members, offset:offset + size].view(p.shape) if self.stacked
                         else flat[0, offset:offset + size].view(p.shape))
            offset += size
        return views

    # a program sums one member's minibatch: beyond this many rows the torch path's reductions,
    # spread over the GPU, are faster
    MOMENTS_MAX_ROWS = 1 << 16

    def minibatch_moments(self, minibatches, moments: bool):
        """(count, mean, std) [M, minibatches] of every minibatch of an epoch (minibatches [M, J, mb]:
        sample ids) in one launch, as rollout.masked_moments computes them (mean and std None
        without `moments`); None where the torch path should (large minibatches)."""
        M, J, mb = minibatches.shape
        if mb > self.MOMENTS_MAX_ROWS or minibatches.stride(2) != 1 or minibatches.stride(1) != mb:
            return None
        if self.moments_out is None or self.moments_out.shape[1:] != (M, J):
            self.moments_out = torch.empty((3, M, J), device=minibatches.device)
        count, mean, std = self.moments_out
        _kernels().minibatch_moments[(M, J)](minibatches, minibatches.stride(0), self.fields["advantages"],
                                             self.fields["mask"], count, mean, std, MB=mb, MINIBATCHES=J,
                                             MOMENTS=moments, BLOCK=1024)
        return (count, mean, std) if moments else (count, None, None)

    def gradients(self, idx, count, adv_mean, adv_std, stats):
        """Write the gradient of the minibatch's loss into the optimizer's gradients and add its
        statistics to stats [len(STATS), M] (policy_loss, value_loss, entropy[, approx_kl,
        clip_fraction]). idx [M, rows]: each member's sample ids; count, adv_mean, adv_std: [M] (views).

        A member's rows are split over several programs where the members alone leave the GPU's
        SMs idle; each writes its partial gradient, and one more launch sums them in a fixed order
        (atomic adds would make the sum, and so the run, differ from one run to the next)."""
        k = _kernels()
        M, rows = idx.shape
        for p, g in zip(self.params, self.grads):  # (what a data-parallel run all-reduces)
            p.grad = g
        tiles = -(-rows // GRAD_BLOCK)
        splits = max(1, min(tiles // MIN_TILES, -(-PROGRAMS_PER_SM * self.sms // M)))
        per_program = -(-tiles // splits)
        splits = -(-tiles // per_program)
        P = self.grad.shape[1]
        if splits > 1:
            if self.parts is None or self.parts[0].shape[0] != M * splits:
                self.parts = (torch.empty((M * splits, P), device=self.grad.device),
                              torch.empty((M * splits, 5), device=self.grad.device))
            out, stat_parts = self.parts
        else:
            out, stat_parts = self.grad, stats
        f = self.fields
        moments = (adv_mean, adv_std) if adv_mean is not None else (count, count)
        flat = self._views(out)
        for value_net, (sizes, params, strides, at) in enumerate(self.nets):
            with _compile_switches():
                k.minibatch_grad[(M, splits)](
                    f["obs"], idx, idx.stride(0), f["actions"], f["logp_old"], f["values"], f["advantages"], f["returns"],
                    f["mask"], count, count.stride(0), moments[0], moments[1], moments[0].stride(0), self.coefs, M,
                    *params, strides, *(flat[i] for i in at), P, stats, stat_parts, rows, **sizes,
                    BLOCK=GRAD_BLOCK, STACKED=int(self.stacked), VALUE=bool(value_net), PPO=self.algorithm == "ppo",
                    NORM_ADV=self.normalize_advantages and adv_mean is not None, CLIP_VALUE=self.clip_value,
                    DOT=self.dot, TILES=per_program, TANH=_tanh_mode(self.dot), SPLITS=splits, **_launch_options())
        if splits > 1:
            block = 512
            k.split_sum[(M, -(-P // block))](out, self.grad, stat_parts, stats, M, P, SPLITS=splits,
                                             SB=min(32, _pow2(splits, 1)), BLOCK=block,
                                             STATS=5 if self.algorithm == "ppo" else 3)
        if isinstance(self.optimizer, MemberAdam):
            self.optimizer.gradients_written()


def step_arguments(obs, members: int, actions_out, obs_out, env_action, agents, strided: bool = False) -> tuple:
    """A policy step kernel's (obs, rows per member, (obs_out, env_action, n, agents, first)): obs made
    contiguous (one agent of several per replica is a strided view) unless the kernel takes its strides
    (`strided`); without recording (obs_out None) placeholders the kernel never writes."""
    if not strided:
        obs = obs.contiguous()
    if obs_out is None:
        return obs, obs.shape[0] // members, (obs, actions_out, 1, 1, 0)
    return obs, obs.shape[0] // members, (obs_out, env_action, agents.stop - agents.start, env_action.shape[1],
                                          agents.start)


class FusedPolicyStep:
    """The rollout's policy step in one launch: for obs [N, O] (rows grouped by member), the policy's
    logits, a Gumbel-max sample from the uniform noise [N, K], its log-probability and the value,
    written into the rollout buffer's step (compiled.act_and_record is the reference). model: the
    rollout's copy of the (stacked) ActorCritic (bf16 weights under bf16)."""

    def __init__(self, model, members: int, precision: str):
        self.model, self.members = model, members
        self.stacked = isinstance(model.actor[0], MemberLinear)
        self.dot = {"bf16": 0, "tf32": 1}.get(precision, 2)
        actor, critic = (_linear_layers(net) for net in (model.actor, model.critic))
        self.sizes = _sizes(actor)
        self.critic_sizes = _sizes(critic)
        self.params = [t for layer in actor + critic for t in (layer.weight, layer.bias)]
        self.strides = _member_strides(self.params, self.params[0].device)

    def __call__(self, obs, noise, actions_out, logp_out, values_out, obs_out=None, env_action=None, agents=None):
        """obs [N, O], noise [N, K] -> actions [N] (the buffer's own slot, returned), logp and values.
        With obs_out [N, O] (the rollout buffer's step) the observations are stored there too, and the
        actions into env_action [E, A] (the env's action array) at the agents `agents` (a slice: the
        group's ids) of each replica."""
        policy_step = _rollout_kernels().policy_step
        obs, rows, recording = step_arguments(obs, self.members, actions_out, obs_out, env_action, agents, strided=True)
        with _compile_switches():
            policy_step[(-(-rows // STEP_BLOCK), self.members)](
                obs, obs.stride(0), obs.stride(1), noise, *self.params, self.strides, actions_out, logp_out, values_out,
                rows, *recording,
                **self.sizes, BLOCK=STEP_BLOCK, STACKED=int(self.stacked), DOT=self.dot, TANH=_tanh_mode(self.dot),
                RECORD=obs_out is not None, **_launch_options())
        return actions_out.reshape(-1)

    def truncated_values(self, final_obs, truncated, terminated, final_values):
        """final_obs [T, E, A, O] (E replicas grouped by member, all A agents this policy's), truncated,
        terminated [T, E] -> final_values [T, E, A]: V(final observation) where a replica was
        truncated and not terminated at step t, else 0 (collection.Collector._final_values is the
        reference)."""
        k = _rollout_kernels()
        T, E, A, O = final_obs.shape
        rows = E // self.members * A
        critic = self.params[6:]
        with _compile_switches():
            k.truncated_values[(-(-rows // STEP_BLOCK), T, self.members)](
                final_obs, truncated, terminated, *critic, self.strides[6:], final_values, E, rows, AGENTS=A, O=O,
                OP=self.sizes["OP"], H1=self.critic_sizes["H1"], H1P=self.critic_sizes["H1P"],
                H2=self.critic_sizes["H2"], H2P=self.critic_sizes["H2P"], KP=self.critic_sizes["KP"], BLOCK=STEP_BLOCK,
                STACKED=int(self.stacked), DOT=self.dot, TANH=_tanh_mode(self.dot), **_launch_options())


class FusedHeadSample:
    """The sampling of a discrete or MultiDiscrete head in one launch where the torch path takes
    about twenty (the Gumbel noise, each head's argmax and log-softmax, their sums, the copies into
    the rollout buffer): for policies outside FusedPolicyStep's scope (wider layers, a custom
    model, several heads), whose forward pass stays torch's."""
    BLOCK = 64

    def __init__(self, head, device):
        self.heads, self.D = len(head.splits_or_n()), head.out_dim
        self.starts = head.starts(device)

    @staticmethod
    def serves(head) -> bool:
        return head.kind in ("discrete", "multi") and head.out_dim <= 1024

    def __call__(self, out, noise, actions_out, logp_out):
        """out [N, D] head outputs, noise [N, D] uniform -> actions into actions_out (N x heads int64
        elements, contiguous) and log pi(a|s) into logp_out (N, contiguous)."""
        rows = out.shape[0]
        if out.stride(1) != 1:
            out = out.contiguous()
        _rollout_kernels().head_sample[(-(-rows // self.BLOCK),)](
            out, out.stride(0), noise, self.starts, actions_out, logp_out, rows, HEADS=self.heads, D=self.D,
            DP=_pow2(self.D, 1), BLOCK=self.BLOCK)


def kernels_unsupported(device) -> str | None:
    if device.type != "cuda" and not interpreted():
        return "the fused kernels run on GPUs"
    return triton_missing()


class FusedGAE:
    """gae.gae in one launch (columns of [T, E, n] in parallel, time backwards in each): gamma and
    lam floats, or per replica [E, 1] (a population's sweep); the rates' tensors made once."""

    def __init__(self, gamma, lam, device):
        self.per_replica = isinstance(gamma, torch.Tensor) or isinstance(lam, torch.Tensor)
        shape = gamma.shape if isinstance(gamma, torch.Tensor) else lam.shape if self.per_replica else (1,)

        def rate(value):
            return (value.reshape(-1).float().contiguous() if isinstance(value, torch.Tensor)
                    else torch.full((shape[0],), float(value), device=device))
        self.gamma, self.lam = rate(gamma), rate(lam)

    def __call__(self, buffer, next_value):
        """Advantages and returns of buffer ([T, E, n] tensors) into it; next_value [E, n] = V(s_T)."""
        gae = _kernels().gae
        T, E, n = buffer.values.shape
        columns = E * n
        block = 128
        gae[(-(-columns // block),)](buffer.rewards, buffer.values, buffer.final_values, buffer.mask,
                                     buffer.terminated, buffer.truncated, next_value, self.gamma, self.lam,
                                     buffer.advantages, buffer.returns, columns, n, T=T,
                                     PER_REPLICA=self.per_replica, BLOCK=block)
        return buffer.advantages, buffer.returns


class FusedMemberAdam:
    """MemberAdam's step (gradient clipping by each member's global norm, moments, parameters) over its
    flat [M, P] buffers in two launches where eager torch takes about fifteen passes over them."""
    BLOCK = 1024  # elements per chunk

    def __init__(self, optimizer):
        self.opt = weakref.proxy(optimizer)  # the optimizer holds this: no cycle to keep its buffers alive
        M, P = optimizer.flat.shape
        device = optimizer.flat.device
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
        chunks = -(-P // self.BLOCK)
        splits = max(1, min(chunks, -(-4 * sms // M)))
        self.chunks = -(-chunks // splits)  # per program
        self.grid = (M, -(-chunks // self.chunks))
        self.partials = torch.zeros(self.grid, device=device)  # parts of each member's squared gradient norm

    def step(self, max_norm):
        """One step (counted in opt.steps) from the gathered gradients; max_norm: None (no clipping), a
        float or [M]."""
        k = _kernels()
        opt = self.opt
        P = opt.flat.shape[1]
        clip = max_norm is not None
        per_member = isinstance(max_norm, torch.Tensor)
        if per_member:
            max_norm = max_norm.reshape(-1).float().contiguous()
        splits = self.grid[1]
        if clip:  # (it counts the step too)
            k.member_sq_norms[self.grid](opt.grad, self.partials, opt.steps, P, SPLITS=splits, BLOCK=self.BLOCK,
                                         CHUNKS=self.chunks)
        else:
            opt.steps.add_(1)
        k.member_adam[self.grid](opt.flat, opt.grad, opt.exp_avg, opt.exp_avg_sq, opt.lr, self.partials,
                                 max_norm if clip else 0.0, opt.steps, P, opt.beta1, opt.beta2, opt.eps,
                                 CLIP=clip, NORM_PER_MEMBER=per_member, SPLITS=splits, SPLITS_P=_pow2(splits, 1),
                                 BLOCK=self.BLOCK, CHUNKS=self.chunks)


class FusedUniform:
    """MemberStreams.uniform in one launch (the torch ops hash [M, n] int64 tensors in about 30
    elementwise passes): the same numbers, bit for bit."""
    BLOCK = 1024

    def __call__(self, streams, n: int, site_term: int, offset: int, out=None):
        """[M, n] float32 uniforms of `streams` (site_term: the call site's hashed term), or written
        into out [M, ..., r] of n elements a member with contiguous rows of r (a member's rows may
        interleave with the other members', as a rollout's [step, member, ...] noise does)."""
        M = streams.members
        if out is None:
            out = torch.empty((M, n), dtype=torch.float32, device=streams.device)
        try:
            rows = out.view(M, -1, out.shape[-1])
        except RuntimeError:
            rows = None
        if rows is None or rows.shape[1] * rows.shape[2] != n or rows.stride(2) != 1 or out.dtype != torch.float32:
            raise ValueError(f"out {tuple(out.shape)} {out.dtype} cannot take a [{M}, {n}] float32 draw: give a "
                             "float32 tensor [members, ..., r] whose rows of r are contiguous")
        _rollout_kernels().member_uniform[(-(-n // self.BLOCK), M)](
            streams.keys, streams.counter, out, n, offset, site_term, rows.shape[2], rows.stride(1), rows.stride(0),
            BLOCK=self.BLOCK)
        return out
