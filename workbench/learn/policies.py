"""Policies: an MLP body with a value head and an action head matching the env's action space.

Any torch.nn.Module can stand in for the default (PPO, A2C): `forward(obs [N, O]) -> (head_out, value
[N])` (O: the observation flattened, C order, float32) where head_out is logits [N, K] (Discrete),
[N, sum(nvec)] (MultiDiscrete) or means [N, d] (Box); for a Box, a learned `log_std` [d] (read as None
when absent: a fixed std of 1); where present, `value(obs) -> [N]` (the rollout's last values). The
trainer sets `head`, the ActionHead the algorithms sample and score with, and checks the rest when it
is built (learners.check_model).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..compiler.envdef import Box, Discrete, MultiDiscrete
from ..errors import WorkbenchError
from . import categorical, cpu_tanh, padded_linear
from .members import MemberLinear, member_log_std


class Tanh(nn.Tanh):
    """nn.Tanh, computed on the CPU (float32) by cpu_tanh's rational function, within 4e-7 of tanh: about
    0.5 ns an element at one thread against torch's 3.2 (bench/bench_cpu_tanh.py), and the hidden
    layers' tanh was the largest elementwise cost of a CPU population's update."""

    def forward(self, x):
        if x.device.type == "cpu" and x.dtype == torch.float32:
            return cpu_tanh.tanh(x)
        return torch.tanh(x)


# the padded layers' functions of a layer type: ({activation: with it}, as the output layer)
_PADDED = {nn.Linear: ({nn.Tanh: padded_linear.LinearTanh, nn.ReLU: padded_linear.LinearReLU}, padded_linear.Linear),
           MemberLinear: ({nn.Tanh: padded_linear.MemberLinearTanh, nn.ReLU: padded_linear.MemberLinearReLU},
                          padded_linear.MemberLinearOut)}


def activation_kind(layer):
    """nn.Tanh or nn.ReLU for a layer of either kind (policies.Tanh included), else None."""
    return next((kind for kind in (nn.Tanh, nn.ReLU) if isinstance(layer, kind)), None)


class MLP(nn.Sequential):
    """nn.Sequential of linear layers and activations whose (nn.Linear, Tanh or ReLU) pairs run as one
    padded_linear.LinearTanh or LinearReLU and whose output layer as padded_linear.Linear (stacked
    members' MemberLinear layers: MemberLinearTanh, MemberLinearReLU, MemberLinearOut) on GPUs
    while gradients are recorded (the same values; a backward pass with one kernel where torch
    takes three passes, and features padded for cuBLAS's aligned kernels); elsewhere, layer by layer."""

    def forward(self, x):
        """x [N, in] -> [N, out] (a population's MemberLinear layers: rows grouped by member)."""
        if not padded_linear.serves(x):
            return super().forward(x)
        return self.run(x, list(self))

    def hidden(self, x):
        """The last hidden layer's activations (every layer but the output layer) on the padded layers."""
        return self.run(x, list(self)[:-1])

    @staticmethod
    def run(x, layers):
        """x through `layers` on the padded layers (the GPU path while gradients are recorded): as one
        padded_linear.Chain when they are linear layers of one kind, each but the last followed by an
        activation, else pair by pair."""
        chain = _chain(layers)
        if chain is not None:
            linears, acts = chain
            params = [p for layer in linears for p in (layer.weight, layer.bias)]
            return padded_linear.Chain.apply(x, acts, isinstance(linears[0], MemberLinear), *params)
        i = 0
        while i < len(layers):
            layer = layers[i]
            kind = type(layer)
            act = activation_kind(layers[i + 1]) if i + 1 < len(layers) else None
            if kind in _PADDED and layer.bias is not None and act is not None:
                x = _PADDED[kind][0][act].apply(x, layer.weight, layer.bias)
                i += 2
            elif kind in _PADDED and layer.bias is not None and i + 1 == len(layers):
                x = _PADDED[kind][1].apply(x, layer.weight, layer.bias)
                i += 1
            else:
                x = layer(x)
                i += 1
        return x


def _chain(layers):
    """(linear layers, their activations: 'tanh', 'relu' or None for an output layer) when `layers` is
    linear layers of one kind with biases, each followed by Tanh or ReLU but perhaps the last; else None."""
    linears, acts = [], []
    kind = type(layers[0]) if layers else None
    i = 0
    while i < len(layers):
        layer = layers[i]
        if type(layer) is not kind or kind not in _PADDED or layer.bias is None:
            return None
        act = activation_kind(layers[i + 1]) if i + 1 < len(layers) else None
        if act is None and i + 1 < len(layers):
            return None
        linears.append(layer)
        acts.append(None if act is None else ("tanh" if act is nn.Tanh else "relu"))
        i += 2 if act is not None else 1
    return (linears, tuple(acts)) if linears else None


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU}


def orthogonal_(tensor: torch.Tensor, gain: float) -> torch.Tensor:
    """nn.init.orthogonal_ on one CPU thread: its QR rounds by the thread count, which a trainer sets only
    after its models exist (threads.configure), so one seed would start a process's first trainer from
    other weights than its later ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return nn.init.orthogonal_(tensor, gain)
    finally:
        torch.set_num_threads(threads)


def mlp(sizes, activation=Tanh, out_gain=1.0) -> nn.Sequential:
    layers = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        orthogonal_(linear.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
    return MLP(*layers)


class ActionHead:
    """Distribution maths for one action space: sampling, log-probabilities, entropy."""

    def __init__(self, space):
        self.space = space
        self._starts = {}
        if isinstance(space, Discrete):
            self.kind, self.out_dim, self.act_shape = "discrete", space.n, ()
        elif isinstance(space, MultiDiscrete):
            self.kind, self.out_dim, self.act_shape = "multi", int(sum(space.nvec)), (len(space.nvec),)
            self.splits = [int(n) for n in space.nvec]
        elif isinstance(space, Box):
            self.kind, self.out_dim, self.act_shape = "gaussian", int(math.prod(space.shape)), tuple(space.shape)
            self.low = torch.as_tensor(space.low, dtype=torch.float32).expand(space.shape).clone()
            self.high = torch.as_tensor(space.high, dtype=torch.float32).expand(space.shape).clone()
        else:
            raise WorkbenchError(f"no action head for {space!r}")

    def splits_or_n(self) -> list:
        """A discrete head's columns per head."""
        return self.splits if self.kind == "multi" else [self.out_dim]

    def starts(self, device) -> torch.Tensor:
        """A discrete head's first column of each of its heads and, last, out_dim: int32 [heads + 1]."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._starts:
            splits = self.splits_or_n()
            self._starts[device] = torch.tensor([sum(splits[:h]) for h in range(len(splits) + 1)],
                                                dtype=torch.int32, device=device)
        return self._starts[device]

    def to(self, device):
        """The head's constant tensors on `device`; returns the head."""
        if self.kind == "gaussian":
            self.low, self.high = self.low.to(device), self.high.to(device)
        else:  # made here, not first in a CUDA graph's capture
            self.starts(device)
        return self

    def sample(self, out, log_std, noise):
        """Draw actions from head output `out` [N, D] given uniform/normal `noise` [N, D]; log_std [D]
        (or a population's [M, D], its rows grouped by member)."""
        if self.kind == "discrete":
            return torch.argmax(out - torch.log(-torch.log(noise)), dim=-1)
        if self.kind == "multi":
            gumbel = out - torch.log(-torch.log(noise))
            return torch.stack([g.argmax(-1) for g in gumbel.split(self.splits, dim=-1)], dim=-1)
        if log_std is None:  # (a model without log_std: a fixed std of 1)
            return out + noise
        return out + member_log_std(log_std, out.shape[0]).exp() * noise

    def mode(self, out):
        """The most likely action of head output `out` [N, D] (the mean for a Gaussian)."""
        if self.kind == "discrete":
            return out.argmax(-1)
        if self.kind == "multi":
            return torch.stack([p.argmax(-1) for p in out.split(self.splits, dim=-1)], -1)
        return out

    def log_prob(self, out, log_std, actions):
        """log pi(a|s) [N] of `actions` under head output `out` (the rollout's: no entropy)."""
        if self.kind == "discrete":
            return torch.log_softmax(out, dim=-1).gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
        if self.kind == "multi":
            return sum(torch.log_softmax(part, dim=-1).gather(-1, actions[:, i].long().reshape(-1, 1)).squeeze(-1)
                       for i, part in enumerate(out.split(self.splits, dim=-1)))
        return self.log_prob_entropy(out, log_std, actions)[0]

    def log_prob_entropy(self, out, log_std, actions):
        """log pi(a|s) [N] and entropy [N] (float32) of `actions` under head output `out` (any float
        type), in categorical.LogProbEntropy's two kernels for discrete heads on GPUs."""
        if self.kind != "gaussian" and categorical.serves(out):
            return categorical.LogProbEntropy.apply(out, actions, self.starts(out.device), max(self.splits_or_n()))
        out = out.float()
        if self.kind == "discrete":
            logp = torch.log_softmax(out, dim=-1)
            chosen = logp.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
            return chosen, -(logp.exp() * logp).sum(-1)
        if self.kind == "multi":
            total_lp, total_ent = 0.0, 0.0
            for i, part in enumerate(out.split(self.splits, dim=-1)):
                logp = torch.log_softmax(part, dim=-1)
                total_lp = total_lp + logp.gather(-1, actions[:, i].long().reshape(-1, 1)).squeeze(-1)
                total_ent = total_ent - (logp.exp() * logp).sum(-1)
            return total_lp, total_ent
        log_std = out.new_zeros(out.shape[-1]) if log_std is None else member_log_std(log_std, out.shape[0])
        var = torch.exp(2 * log_std)
        actions = actions.reshape(out.shape)  # (a Box of shape (k, d): actions [N, k, d], the head's out [N, k * d])
        logp = -((actions - out) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).expand_as(out)
        return logp.sum(-1), entropy.sum(-1)

    def to_env(self, actions):
        """Actions [N, *act_shape] as the env stores them (continuous ones clipped to the Box)."""
        if self.kind == "gaussian":
            return torch.maximum(torch.minimum(actions, self.high), self.low)
        return actions


class ActorCritic(nn.Module):
    """Default policy: separate MLPs for the action head and the value; a learned log-std for Box.
    activation: the hidden layers' ('tanh' or 'relu')."""

    def __init__(self, obs_dim: int, space, hidden=(64, 64), activation: str = "tanh"):
        super().__init__()
        self.head = ActionHead(space)
        self.actor = mlp([obs_dim, *hidden, self.head.out_dim], ACTIVATIONS[activation], out_gain=0.01)
        self.critic = mlp([obs_dim, *hidden, 1], ACTIVATIONS[activation], out_gain=1.0)
        self.log_std = nn.Parameter(torch.zeros(self.head.out_dim)) if self.head.kind == "gaussian" else None

    def forward(self, obs):
        """obs [N, O] -> (head output [N, D], value [N])."""
        if padded_linear.serves(obs) and type(self.actor[0]) in _PADDED and type(self.critic[0]) in _PADDED:
            # the padded observations made once for both networks
            obs = padded_linear.aligned_input(obs)
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def value(self, obs):
        """obs [N, O] -> V(s) [N]."""
        return self.critic(obs).squeeze(-1)


class SharedActorCritic(nn.Module):
    """One MLP body for the action head and the value (WarpDrive's fully connected model): its output
    layer makes the head's D units and, in column D, the value, so a wide body's matmuls are done
    once where ActorCritic does them twice; a learned log-std for Box."""

    def __init__(self, obs_dim: int, space, hidden=(64, 64), activation: str = "tanh"):
        super().__init__()
        self.head = ActionHead(space)
        self.net = mlp([obs_dim, *hidden, self.head.out_dim + 1], ACTIVATIONS[activation])
        out = self.net[-1].weight
        with torch.no_grad():  # the gains of ActorCritic's two output layers
            out[:-1].copy_(orthogonal_(torch.empty_like(out[:-1]), 0.01))
            out[-1:].copy_(orthogonal_(torch.empty_like(out[-1:]), 1.0))
        self.log_std = nn.Parameter(torch.zeros(self.head.out_dim)) if self.head.kind == "gaussian" else None

    def forward(self, obs):
        """obs [N, O] -> (head output [N, D], value [N]), from one body."""
        last = self.net[-1]
        if padded_linear.serves(obs) and type(last) is nn.Linear:
            return padded_linear.LinearSplit.apply(self.net.hidden(obs), last.weight, last.bias)
        out = self.net(obs)
        return out[..., :-1], out[..., -1]

    def value(self, obs):
        """obs [N, O] -> V(s) [N]."""
        return self.net(obs)[..., -1]


class DeterministicActor(nn.Module):
    """DDPG actor: tanh-squashed into the Box."""

    def __init__(self, obs_dim: int, space: Box, hidden=(256, 256), activation: str = "relu"):
        super().__init__()
        self.net = mlp([obs_dim, *hidden, int(math.prod(space.shape))], ACTIVATIONS[activation])
        low = torch.as_tensor(space.low, dtype=torch.float32).expand(space.shape).reshape(-1)
        high = torch.as_tensor(space.high, dtype=torch.float32).expand(space.shape).reshape(-1)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("center", (high + low) / 2)

    def forward(self, obs):
        """obs [N, O] -> mu(s) [N, d], inside the Box."""
        return torch.tanh(self.net(obs)) * self.scale + self.center


class QCritic(nn.Module):
    """DDPG critic Q(s, a) -> [N]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), activation: str = "relu"):
        super().__init__()
        self.net = mlp([obs_dim + act_dim, *hidden, 1], ACTIVATIONS[activation])

    def forward(self, obs, actions):
        """obs [N, O], actions [N, d] -> Q(s, a) [N]."""
        return self.net(torch.cat([obs, actions], dim=-1)).squeeze(-1)


class CentralisedActorCritic(nn.Module):
    """MAPPO's policy (Yu et al. 2022): a decentralised actor over each agent's own observation and a
    centralised critic over the replica's joint observation `state` [N, S], with one value output
    per agent of the group ([N, n]); `agent` [N] picks each sample's own value."""

    def __init__(self, obs_dim: int, state_dim: int, num_agents: int, space, hidden=(64, 64),
                 activation: str = "tanh"):
        super().__init__()
        self.head = ActionHead(space)
        self.actor = mlp([obs_dim, *hidden, self.head.out_dim], ACTIVATIONS[activation], out_gain=0.01)
        self.critic = mlp([state_dim, *hidden, num_agents], ACTIVATIONS[activation], out_gain=1.0)
        self.log_std = nn.Parameter(torch.zeros(self.head.out_dim)) if self.head.kind == "gaussian" else None

    def forward(self, obs, state, agent):
        """obs [N, O], state [N, S], agent [N] -> (head output [N, D], each sample's own value [N])."""
        return self.actor(obs), self.critic(state).gather(1, agent.long().unsqueeze(1)).squeeze(1)

    def values(self, state):
        """state [E, S] -> the group's values [E, n]."""
        return self.critic(state)
