"""Members: M independent learners of one policy trained as one batched program.

A population stacks the M members' copies of each policy into one module whose linear layers are
batched matmuls: rows [M * N, ...] grouped by member (member k owns rows [k * N, (k + 1) * N)) go in,
rows in the same order come out, and no member's output depends on another's weights. Every
parameter has the member as its leading dimension; MemberAdam keeps them (and their gradients) in
flat [M, P] buffers, so that per-member gradient clipping and Adam with a per-member learning rate
are a handful of kernels whatever the model's size. A single on-policy run on the CPU steps with a
MemberAdam of one member (`members=1`, an unstacked model).

    model = stack_members([ActorCritic(...) for each member's seed])   # same structure, any weights
    optimizer = MemberAdam(model, lr=torch.tensor([3e-4, 1e-3]))
    loss.backward(); optimizer.step(max_grad_norm)                   # each member its own step

`member_state(model, k)` gives member k's weights as an ordinary (unstacked) state dict.
"""
from __future__ import annotations

import collections
import copy

import torch
from torch import nn

from ..errors import WorkbenchError
from .normaliser import RunningNorm, normalised
from .rollout import wide_sum


class PopulationError(WorkbenchError, ValueError):
    """A population setting that cannot work; the message names it and the fix."""


NARROW = 8  # outputs: fewer take _NarrowMemberLinear on the CPU


class _NarrowMemberLinear(torch.autograd.Function):
    """baddbmm(bias [M, 1, out], rows [M, n, in], weight [M, in, out]) for few outputs (a policy's head,
    a value) on the CPU. MKL's batched matmul is slow where its right operand is a few row-major
    columns: at 8 members x 1024 rows x 64 inputs, one thread, a 2-output head's forward took 0.66 ms
    and its weight gradient (rows^T dy) 0.75 ms, 0.17 and 0.11 ms with the weight as [M, out, in] and
    the gradient made as dy^T rows (bench/bench_cpu_member_heads.py). float32 or float64, outside
    autocast."""

    @staticmethod
    def forward(ctx, rows, weight, bias):
        members, inputs, outputs = weight.shape
        weight_out_in = torch.empty((members, outputs, inputs), dtype=weight.dtype)  # (row-major even at out = 1)
        weight_out_in.copy_(weight.transpose(1, 2))
        ctx.save_for_backward(rows, weight_out_in)
        return torch.baddbmm(bias, rows, weight_out_in.transpose(1, 2))

    @staticmethod
    @torch.autograd.function.once_differentiable  # (weight_out_in is a copy: no gradient of the gradient)
    def backward(ctx, dy):
        rows, weight_out_in = ctx.saved_tensors
        d_rows = d_weight = d_bias = None
        if ctx.needs_input_grad[0]:  # one output: an outer product, which bmm runs as slowly as the forward
            d_rows = dy * weight_out_in if dy.shape[2] == 1 else torch.bmm(dy, weight_out_in)
        if ctx.needs_input_grad[1]:
            d_weight = torch.bmm(dy.transpose(1, 2), rows).transpose(1, 2)
        if ctx.needs_input_grad[2]:
            d_bias = dy.sum(1, keepdim=True)
        return d_rows, d_weight, d_bias


class MemberLinear(nn.Module):
    """M linear layers: x [M * N, in] -> [M * N, out], member k's rows through member k's layer.
    weight [M, in, out] (transposed against nn.Linear's, for baddbmm), bias [M, 1, out]."""

    def __init__(self, layers):
        super().__init__()
        trainable = layers[0].weight.requires_grad  # (a target network's layers are not)
        self.weight = nn.Parameter(torch.stack([layer.weight.detach().t() for layer in layers]).contiguous(),
                                   requires_grad=trainable)
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]).unsqueeze(1).contiguous(),
                                 requires_grad=trainable)
        self.in_features, self.out_features = layers[0].in_features, layers[0].out_features

    def forward(self, x):
        """x [M * n, in] (rows grouped by member) -> [M * n, out]: member k's rows through its own weights."""
        members = self.weight.shape[0]
        rows = x.reshape(members, -1, x.shape[-1])
        if x.device.type == "cpu" and self.out_features < NARROW and not torch.is_autocast_enabled("cpu"):
            out = _NarrowMemberLinear.apply(rows, self.weight, self.bias)
        else:
            out = torch.baddbmm(self.bias, rows, self.weight)
        return out.reshape(*x.shape[:-1], self.out_features)

    def member(self, k: int) -> dict:
        return {"weight": self.weight[k].t().contiguous(), "bias": self.bias[k, 0].contiguous()}


def nn_linear_layout(model) -> None:
    """Lays out the weights of a stacked model's MemberLinear layers as nn.Linear's, [M, out, in] in
    memory (still [M, in, out] as tensors, so torch's path is unchanged): fused_wide's tiles of a
    member then load as one nn.Linear's do. In place; the model's other references to
    the old tensors (a refresh list, an optimiser) must be taken after."""
    for module in model.modules():
        if isinstance(module, MemberLinear) and module.weight.is_contiguous():
            module.weight.data = module.weight.data.transpose(1, 2).contiguous().transpose(1, 2)


def _check_stackable(model, name: str):
    for path, module in model.named_modules():
        if isinstance(module, nn.Linear) or not list(module.parameters(recurse=False)):
            continue
        if type(module).__module__.startswith("torch.nn") and not isinstance(module, nn.Linear):
            raise PopulationError(
                f"policy '{name}': a population stacks linear layers and per-policy vectors (such as log_std); "
                f"its model has a {type(module).__name__} at '{path or 'the top'}'. Train this model without "
                f"seeds/sweep, or build it from nn.Linear layers")
        if module.bias is None if isinstance(module, nn.Linear) else False:
            raise PopulationError(f"policy '{name}': linear layers without bias cannot be stacked yet ('{path}')")


def stack_members(models: list, name: str = "policy") -> nn.Module:
    """One module computing all of `models` (M modules of identical structure) on member-grouped rows:
    each nn.Linear becomes a MemberLinear, each other parameter p becomes [M, *p.shape], buffers are
    taken from the first model (they must be constants of the structure, such as an action scale)."""
    if not models:
        raise PopulationError("a population needs at least one member")
    for model in models:
        _check_stackable(model, name)
    stacked = copy.deepcopy(models[0])
    linear_paths = [path for path, m in stacked.named_modules() if isinstance(m, nn.Linear)]
    for path in linear_paths:
        layers = [model.get_submodule(path) for model in models]
        if any(layer.bias is None for layer in layers):
            raise PopulationError(f"policy '{name}': linear layers without bias cannot be stacked ('{path}')")
        parent, _, leaf = path.rpartition(".")
        setattr(stacked.get_submodule(parent) if parent else stacked, leaf, MemberLinear(layers))
    for path, module in list(stacked.named_modules()):
        if isinstance(module, MemberLinear):
            continue
        for leaf, param in list(module.named_parameters(recurse=False)):
            full = f"{path}.{leaf}" if path else leaf
            values = [model.get_parameter(full).detach() for model in models]
            setattr(module, leaf, nn.Parameter(torch.stack(values).contiguous(), requires_grad=param.requires_grad))
    stacked.members = len(models)
    return stacked


def member_count(model: nn.Module) -> int:
    """How many members a (stacked) module computes: 1 for an ordinary module."""
    for module in model.modules():
        if isinstance(module, MemberLinear):
            return module.weight.shape[0]
    return 1


def member_state(model: nn.Module, k: int) -> dict:
    """Member k's weights as the state dict of the unstacked model (its buffers included)."""
    state = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        if isinstance(module, MemberLinear):
            state.update({prefix + key: value for key, value in module.member(k).items()})
            continue
        for leaf, param in module.named_parameters(recurse=False):
            state[prefix + leaf] = param.detach()[k].clone()
        for leaf, buf in module.named_buffers(recurse=False):
            state[prefix + leaf] = buf.detach().clone()
    return state


def load_member_state(model: nn.Module, k: int, state: dict) -> None:
    """Put an unstacked model's state dict (member_state's form) into member k of a stacked model, in
    place (a captured graph and the optimiser keep reading the same tensors)."""
    with torch.no_grad():
        for path, module in model.named_modules():
            prefix = f"{path}." if path else ""
            if isinstance(module, MemberLinear):
                module.weight[k].copy_(state[prefix + "weight"].t())
                module.bias[k, 0].copy_(state[prefix + "bias"])
                continue
            for leaf, param in module.named_parameters(recurse=False):
                param[k].copy_(state[prefix + leaf])
            for leaf, buf in module.named_buffers(recurse=False):
                buf.copy_(state[prefix + leaf])


def member_log_std(log_std, rows: int):
    """A policy's log_std as rows: [D] stays [D]; a population's [M, D] becomes [rows, D] (member k's
    vector on its rows rows // M)."""
    if log_std is None or log_std.dim() == 1:
        return log_std
    members = log_std.shape[0]
    return log_std.unsqueeze(1).expand(members, rows // members, log_std.shape[-1]).reshape(rows, -1)


class MemberAdam:
    """Adam (Kingma and Ba 2015, torch's defaults but eps=1e-5) for a stacked model, each member with its
    own learning rate lr [M] (a device tensor that annealing rewrites in place) and its own gradient
    clipping by global norm. The parameters become views of one flat [M, P] buffer (member k's row:
    all its parameters; a parameter's member stride is then P), so a step updates them in place;
    it gathers their gradients into a buffer of the same shape (the fused kernels write them there
    directly), clips and updates (in two fused kernels with `fused` set, in torch's otherwise):
    capturable in a CUDA graph. members=1: an unstacked model (a single run's), one member.

    (Single on-policy runs use it instead of torch.optim.Adam, whose first step imports
    torch._dynamo: 2.9 s of a CPU run's start-up. It has torch optimisers' param_groups, defaults
    and state, which Lightning's loop reads; its moments are in its own buffers, not in `state`.)"""

    def __init__(self, model: nn.Module, lr, betas=(0.9, 0.999), eps: float = 1e-5, members: int | None = None):
        # (a frozen policy's model may have no trainable parameters: it keeps them all, and never steps)
        # (a scripted one may have none at all: an empty flat buffer on lr's device)
        params = [p for p in model.parameters() if p.requires_grad] or list(model.parameters())
        stacked = members is None
        members = params[0].shape[0] if stacked else members
        self.single = not stacked
        device = params[0].device if params else torch.as_tensor(lr).device
        self.params = params
        self.members = members
        self.flat = torch.cat([p.detach().reshape(members, -1) for p in params] or
                              [torch.zeros((members, 0), device=device)], dim=1)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        with torch.no_grad():
            for p in params:
                size = p.numel() // members
                p.data = self.flat[:, offset:offset + size].view(p.shape)
                offset += size
        self._no_grad = [torch.zeros_like(p) for p in params]  # (a parameter a backward pass did not reach)
        self._gathered = False
        self.lr = torch.as_tensor(lr, dtype=torch.float32, device=device).reshape(members, 1).clone()
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.steps = torch.zeros((members, 1), device=device)  # each member's (target_kl stops members apart)
        self.param_groups = [{"params": params, "lr": self.lr}]
        self.defaults = {"lr": self.lr, "betas": betas, "eps": eps}
        self.state = collections.defaultdict(dict)
        self.fused = None  # a fused.FusedMemberAdam, when the caller gives one, takes the steps

    def zero_grad(self, set_to_none: bool = True):
        """Forget the gradients (the next backward pass writes them anew, whatever set_to_none says)."""
        for p in self.params:
            p.grad = None
        self._gathered = False

    def gradients_written(self):
        """The caller wrote every member's gradient into `grad` [M, P] (the fused kernels do): step from it."""
        self._gathered = True

    def _gather(self):
        grads = [(p.grad if p.grad is not None else z).reshape(self.members, -1)
                 for p, z in zip(self.params, self._no_grad)]
        torch.cat(grads, dim=1, out=self.grad)
        self._gathered = True

    def clip(self, max_norm):
        """Scale each member's gradient to global norm at most max_norm (a float or [M] tensor), as
        torch.nn.utils.clip_grad_norm_ does for one model."""
        if not self._gathered:
            self._gather()
        norm = self.grad.square().sum(1, keepdim=True).sqrt()
        if isinstance(max_norm, torch.Tensor):  # (a float stays a scalar: no host-to-device copy in a graph)
            max_norm = max_norm.reshape(-1, 1)
            # a member swept to max_grad_norm 0 is not clipped, as a run of its own is not
            self.grad.mul_(torch.where(max_norm > 0, (max_norm / (norm + 1e-6)).clamp_(max=1.0), 1.0))
            return
        self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))

    def step(self, max_norm=None, active=None):
        """One Adam step of every member (from the parameters as they are now: a loaded checkpoint's),
        its gradient first clipped to global norm max_norm (a float or [M]) unless that is None.
        active: None (every member), or [M, 1] float, 1 for the members that step: the others' weights,
        moments and step counts stay as they are (PPO's target_kl stops members apart)."""
        if not self._gathered:
            self._gather()
        self._check_views()
        if active is not None:
            self._masked_step(max_norm, active)
            return
        if self.fused is not None:  # on GPUs: counting the step, clipping and the update in two launches
            self.fused.step(max_norm)
            self._gathered = False
            return
        self.steps.add_(1)
        if max_norm is not None:
            self.clip(max_norm)
        self.exp_avg.lerp_(self.grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(self.grad, self.grad, value=1 - self.beta2)
        bias1 = 1 - torch.pow(self.beta1, self.steps)
        bias2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, self.steps))
        denom = (self.exp_avg_sq.sqrt() / bias2_sqrt).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg * (self.lr / bias1), denom, value=-1.0)
        self._gathered = False

    def _masked_step(self, max_norm, active):
        """`step` of the members where active [M, 1] is 1; the same arithmetic for them, bit for bit."""
        on = active > 0
        self.steps.add_(active)
        if max_norm is not None:
            self.clip(max_norm)
        self.exp_avg.copy_(torch.where(on, self.exp_avg.lerp(self.grad, 1 - self.beta1), self.exp_avg))
        self.exp_avg_sq.copy_(torch.where(on, self.exp_avg_sq.mul(self.beta2).addcmul_(self.grad, self.grad,
                                                                                     value=1 - self.beta2),
                                          self.exp_avg_sq))
        bias1 = 1 - torch.pow(self.beta1, self.steps)
        bias2_sqrt = torch.sqrt(1 - torch.pow(self.beta2, self.steps))
        denom = (self.exp_avg_sq.sqrt() / bias2_sqrt).add_(self.eps)
        self.flat.copy_(torch.where(on, self.flat.addcdiv(self.exp_avg * (self.lr / bias1), denom, value=-1.0),
                                    self.flat))
        self._gathered = False

    def _check_views(self):
        if self.params[0].data_ptr() != self.flat.data_ptr():
            raise RuntimeError("MemberAdam: the model's parameters were replaced (model.to(), or a load with "
                               "assign=True) after the optimiser was made; make the optimiser after moving "
                               "or loading the model")

    def state_dict(self):
        """A population's flat buffers; a single run's (members=1) moments per parameter in the exported
        member's format (population.member_payload), which torch Adam loads too
        (trainer_state.load_member_adam): a run's checkpoint resumes on either target."""
        if self.single:
            moments = {key: [part.reshape(p.shape).clone() for part, p in
                             zip(getattr(self, key)[0].split([p.numel() for p in self.params]), self.params)]
                       for key in ("exp_avg", "exp_avg_sq")}
            return {"member_adam": True, "step": float(self.steps[0, 0]), "lr": float(self.lr), **moments}
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "steps": self.steps, "lr": self.lr}

    def load_moments(self, step: float, lr: float, exp_avg: list, exp_avg_sq: list):
        """One member's Adam state given per parameter, in order (an exported member's, or a torch
        Adam's): members=1 only."""
        if self.members != 1:
            raise ValueError("MemberAdam.load_moments loads one member's moments (members=1)")
        with torch.no_grad():
            for flat, parts in ((self.exp_avg, exp_avg), (self.exp_avg_sq, exp_avg_sq)):
                if parts:  # (none for a model without parameters)
                    torch.cat([part.to(flat.device).reshape(1, -1) for part in parts], dim=1, out=flat)
            self.steps.fill_(float(step))
            self.lr.fill_(float(lr))

    def load_state_dict(self, state):
        if state.get("member_adam"):  # one member's moments per parameter (a single run's, or an exported member's)
            self.load_moments(state["step"], state["lr"], state["exp_avg"], state["exp_avg_sq"])
            return
        if "param_groups" in state:  # torch.optim.Adam's (single runs' checkpoints before MemberAdam served them)
            entries = [state["state"].get(i, {}) for i in range(len(self.params))]
            zeros = [torch.zeros_like(p) for p in self.params]
            step = next((float(e["step"]) for e in entries if "step" in e), 0.0)
            self.load_moments(step, float(state["param_groups"][0]["lr"]),
                              [e.get("exp_avg", z) for e, z in zip(entries, zeros)],
                              [e.get("exp_avg_sq", z) for e, z in zip(entries, zeros)])
            return
        for key in ("exp_avg", "exp_avg_sq", "lr"):
            getattr(self, key).copy_(state[key])
        steps = state["steps"]  # [M, 1] (checkpoints from before target_kl stopped members apart: one count)
        self.steps.copy_(steps.reshape(-1, 1) if steps.dim() else steps)


def clip_and_step(model, optimizer, max_grad_norm, active=None):
    """Clip the gradients by global norm (per member for a population; max_grad_norm a float, or
    [M] per member, <= 0 for none) and take the optimiser's step (a MemberAdam's: only the members
    where active [M, 1] is 1, when given)."""
    if isinstance(optimizer, MemberAdam):
        clipping = not isinstance(max_grad_norm, (int, float)) or max_grad_norm > 0
        optimizer.step(max_grad_norm if clipping else None, active)
        return
    if max_grad_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()


def member_sums(x, members: int):
    """Per-member sums of x [M * c] (rows grouped by member) -> [M]; one member's in two stages
    (a compiled reduction of many rows to one number otherwise runs in one thread block)."""
    if members == 1:
        return wide_sum(x).reshape(1)
    return x.reshape(members, -1).sum(1)


def member_rows(value, members: int, rows: int):
    """A float, or a per-member tensor [M], as something that broadcasts against rows [M * c]."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    if members == 1:
        return value.reshape(())
    return value.reshape(members, 1).expand(members, rows // members).reshape(rows)


class MemberSamples:
    """Sample ids of one agent group's rollout [T, E, n] flattened (sample (t, e, a) is id
    (t * E + e) * n + a), seen member by member: member k owns replicas [k * E / M, (k + 1) * E / M),
    and its local sample l (its own rollout [T, E / M, n] flattened) is a global id."""

    def __init__(self, streams, T: int, E: int, n: int):
        self.streams, self.members = streams, streams.members
        self.T, self.E, self.n = T, E, n
        self.per_step = E // self.members * n  # one member's samples per step
        self.size = T * self.per_step  # one member's samples
        self._all = None

    def global_ids(self, local):
        """local [M, k] sample ids of each member's own rollout -> the population's ids."""
        if self.members == 1:
            return local
        member = torch.arange(self.members, device=local.device).reshape(-1, 1)
        step = torch.div(local, self.per_step, rounding_mode="floor")
        return step * (self.E * self.n) + member * self.per_step + (local - step * self.per_step)

    def permutation(self, site: int):
        """[M, size]: a random permutation of each member's samples (from its own stream), as global ids."""
        return self.global_ids(self.streams.permutations(self.size, site))

    def all(self):
        """[M, size]: every sample of each member, in its own rollout's order (built once)."""
        if self._all is None:
            local = torch.arange(self.size, device=self.streams.device).expand(self.members, self.size)
            self._all = self.global_ids(local).contiguous()
        return self._all

    def chunks(self, chunk: int) -> list:
        """Slices of each member's own samples, at most `chunk` long, each whole steps or a piece of
        one step: the rectangles `rows` copies without an index gather."""
        per_step, chunk = self.per_step, max(1, int(chunk))
        if chunk >= per_step:
            steps = chunk // per_step
            return [slice(t * per_step, min(t + steps, self.T) * per_step) for t in range(0, self.T, steps)]
        return [slice(t * per_step + j, t * per_step + min(j + chunk, per_step))
                for t in range(self.T) for j in range(0, per_step, chunk)]

    def rows(self, x, part: slice | None = None):
        """x [T * E * n, ...] (the population's samples) -> [M * len(part), ...]: every member's own
        samples `part` (a slice of `chunks`; all of them by default), grouped by member. A strided
        copy: the A2C update's index gathers of these rows took a tenth of its time (Tag, 8 members)."""
        part = part or slice(0, self.size)
        start, stop, per_step = part.start, part.stop, self.per_step
        by_step = x.reshape(self.T, self.members, per_step, *x.shape[1:])
        if start % per_step == 0 and stop % per_step == 0:
            block = by_step[start // per_step:stop // per_step].transpose(0, 1)
        elif start // per_step == (stop - 1) // per_step:
            t = start // per_step
            block = by_step[t, :, start - t * per_step:stop - t * per_step]
        else:
            raise ValueError(f"samples {start}:{stop} span part of two steps of {per_step}: take them from chunks()")
        return block.reshape(self.members * (stop - start), *x.shape[1:])

    def take(self, batch, part: slice) -> dict:
        """batch.take of every member's samples `part` (a slice of `chunks`), grouped by member."""
        out = {k: self.rows(v, part) for k, v in batch.fields.items()}
        if batch.state is not None:  # (a centralised critic's joint state: one row per replica-step)
            ids = self.all()[:, part].reshape(-1)
            out["state"], out["agent"] = batch.state[ids // batch.n], ids % batch.n
        return out


class MemberNorm(RunningNorm):
    """RunningNorm of M members: statistics [M, O], observations as rows grouped by member."""

    def __init__(self, members: int, dim: int, device, eps=1e-8):
        super().__init__((members, dim), device, eps)
        self.members = members
        self.count = torch.full((members, 1), eps, device=device)
        self.n = torch.zeros((members, 1), device=device)

    def accumulate(self, obs, live=None):
        rows = obs.reshape(self.members, -1, obs.shape[-1])
        self._add(rows, None if live is None else live.reshape(self.members, -1, 1).to(rows.dtype))

    def __call__(self, obs):
        rows = obs.reshape(self.members, -1, obs.shape[-1])
        return normalised(rows, self.mean.unsqueeze(1), self.var.unsqueeze(1)).reshape(obs.shape)
