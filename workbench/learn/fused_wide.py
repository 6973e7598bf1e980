"""The rollout's policy step in one launch for default actor-critics wider than fused.py's kernels
hold (hidden layers of up to 256 units, WarpDrive's Tag config among them) and for MultiDiscrete
heads: the actor's and the critic's forward passes (a SharedActorCritic's one body, whose output
layer makes the value too), the heads' Gumbel-max sampling and summed
log-probabilities, and the value, where the torch path takes about fifty kernels per policy and
writes every [rows, hidden] activation to memory and reads it back.

Its kernel (fused_rollout_kernels.wide_policy_step) keeps a tile's first hidden layer in registers
and makes the second NC units at a time, each chunk going straight into the output layer, so no
activation leaves the program; the weights' tiles are read from L2. The gradients stay torch's
(the learner's chunks); `unsupported` names what rules a policy out.
"""
from __future__ import annotations

import torch

from . import fused
from .members import MemberLinear
from .policies import ActorCritic, SharedActorCritic, activation_kind

MAX_HIDDEN = 256
MAX_OBS = 256
MAX_OUT = 128
# Rows per program and its warps, from bench/bench_wide_step.py on an H100 (mma.sync, below) for Tag's
# 256-wide MLPs and 21 x 21 heads, microseconds a step (docs/benchmarks.md):
#   rows               32 rows, 4 warps   64, 4   128, 8   torch path
#   1 k                24.9               33.2    46.9     48.2
#   10 k               56.8               46.3    48.8     86.1
#   100 k              395.2              268.2   302.3    493.7
#   8 members x 10 k   432.9              453.4   379.9    654.0
# Stacked members of many rows run one persistent program of 128 rows a multiprocessor, each taking
# a run of one member's tiles, their weights laid out as nn.Linear's (members.nn_linear_layout): 8 members x
# 10 k, 294 us against 385 a program a tile ([M, in, out] weights) and 304 for the torch path.
# At most TINY_ROWS rows in all: 32 rows a program (64 would leave an H100's 132 SMs fewer programs than
# SMs): 8 members x 1 k rows (Tag's taggers) 48.7 us against 61.1 at 64 rows
TINY_ROWS = 8192
TINY_STEP = (32, 4, 0)  # (rows a program, warps, persistent programs a multiprocessor or 0)
SMALL_STEP = (64, 4, 0)
LARGE_STEP = (128, 8, 1)  # stacked members of more than SMALL_ROWS rows in all
SMALL_ROWS = 32768
NC = 64
KC = 32  # observation features taken at a time by the first layer
# mma.sync rather than Hopper's warpgroup MMA: under Triton 3.6 a test of this kernel (fp32 weights,
# 48 x 200 layers) read out of bounds on an H100 with the warpgroup code, as fused.py's kernels did
# (compute-sanitizer: an out-of-range shared address at 64 rows a program; bench/sanitize_wide_step.py);
# the warpgroup code was faster where it ran (Tag, 100 k rows: 257 us against 308)
MMA_SYNC = True


def _tiles(rows: int, members: int) -> tuple:
    """(rows, warps, persistent programs a multiprocessor) of a launch over `rows` rows of each of
    `members` members."""
    if rows * members <= TINY_ROWS:
        return TINY_STEP
    return SMALL_STEP if members == 1 or rows * members <= SMALL_ROWS else LARGE_STEP


def _multiprocessors(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def unsupported(model, head, device, precision: str = "bf16") -> str | None:
    """Why the wide policy step cannot act for this policy (None: it can)."""
    why = fused.kernels_unsupported(device)
    if why:
        return why
    if precision != "bf16" and not fused.interpreted():
        return f"the wide policy step computes in bf16, not {precision} (its tf32 tiles exceed shared memory)"
    if type(model) not in (ActorCritic, SharedActorCritic):
        return "the wide policy step runs the default ActorCritic, not a custom model"
    if head.kind not in ("discrete", "multi") or head.out_dim + (type(model) is SharedActorCritic) > MAX_OUT:
        return f"the wide policy step samples discrete and MultiDiscrete heads of at most {MAX_OUT} logits"
    kinds = {activation_kind(m) for net in _nets(model) for m in net if activation_kind(m)}
    if len(kinds) != 1:
        return "the wide policy step runs MLPs of one activation (tanh or ReLU)"
    for net in _nets(model):
        layers = fused._linear_layers(net)
        hidden = [m for m in net if activation_kind(m)]
        if len(layers) != 3 or len(hidden) != 2 or len(net) != 5:
            return "the wide policy step runs MLPs of two tanh or ReLU hidden layers"
        if max(layers[0].out_features, layers[1].out_features) > MAX_HIDDEN:
            return f"the wide policy step runs hidden layers of at most {MAX_HIDDEN} units"
        if layers[0].in_features > MAX_OBS:
            return f"the wide policy step takes at most {MAX_OBS} observation features"
    return None


def _nets(model) -> tuple:
    """The MLPs of a default policy: (actor, critic), or a SharedActorCritic's one."""
    return (model.net,) if type(model) is SharedActorCritic else (model.actor, model.critic)


def policy_steps(tr, served) -> dict:
    """{group: FusedWidePolicyStep} for a trainer's groups the wide step can act for (not in
    `served`, the narrow kernels' steps; no joint-state critic; contiguous action buffers; not DDPG)."""
    steps = {}
    for g in tr.groups if tr.algorithm != "ddpg" else ():
        model = tr.rollout_models[g.name]
        if (g.name not in served and g.name not in tr.central and tr.buffers[g.name].actions.is_contiguous()
                and unsupported(model, tr.head, tr.device, tr.precision) is None):
            steps[g.name] = FusedWidePolicyStep(model, tr.head, tr.M, tr.precision, g.slice)
    return steps


def final_value_steps(tr, steps: dict) -> dict:
    """The wide steps among `steps` that can also value their group's truncated replicas step by
    step (FusedWidePolicyStep.truncated_values): contiguous agents, unnormalised observations."""
    return {name: step for name, step in steps.items()
            if isinstance(step, FusedWidePolicyStep) and step.agents is not None and name not in tr.norms
            and tr.env.store["final_obs"].is_contiguous()}


def _layout(layers) -> int:
    """The kernels' STACKED code of an MLP's linear layers: 0 nn.Linear, 1 MemberLinear as stacked
    ([M, in, out] in memory), 2 MemberLinear laid out as nn.Linear's (members.nn_linear_layout)."""
    if not isinstance(layers[0], MemberLinear):
        return 0
    if all(layer.weight.is_contiguous() for layer in layers):
        return 1
    if all(layer.weight.transpose(1, 2).is_contiguous() for layer in layers):
        return 2
    raise ValueError("the wide policy step takes a stacked model's weights all [M, in, out] or all laid out as "
                     "nn.Linear's (members.nn_linear_layout), not a mix")


class FusedWidePolicyStep:
    """One launch per rollout step of a policy: for obs [N, O] (rows grouped by member) the actions
    (a Gumbel-max sample of each head from the uniform noise [N, D]), their summed log-probability and
    the value into the rollout buffer's step (compiled.act_and_record is the reference). model: the
    rollout's copy of the (stacked) ActorCritic (bf16 weights under bf16); agents: the group's agent
    ids (a slice, or None when not contiguous), which truncated_values reads."""

    def __init__(self, model, head, members: int, precision: str, agents: slice | None = None):
        self.members, self.agents = members, agents
        nets = _nets(model)
        self.shared = len(nets) == 1
        self.stacked = _layout([m for net in nets for m in fused._linear_layers(net)])
        self.dot = {"bf16": 0, "tf32": 1}.get(precision, 2)
        # the hidden layers' activation for the kernels (fused_kernels.activation)
        self.act = 2 if isinstance(nets[0][1], torch.nn.ReLU) else fused._tanh_mode(self.dot)
        actor, critic = (fused._linear_layers(net) for net in (nets[0], nets[-1]))
        sizes, c = fused._sizes(actor), fused._sizes(critic)
        # a shared MLP's outputs: the head's K columns, then the value (its "critic" is the same MLP)
        self.value_out = (c["K"], c["KP"]) if self.shared else (1, 16)
        if self.shared:
            sizes["K"] -= 1
        self.sizes = dict(sizes, C1=c["H1"], C1P=c["H1P"], C2=c["H2"], C2P=c["H2P"],
                          KC=min(KC, sizes["OP"]), NC=min(NC, sizes["H2P"], c["H2P"]))
        self.params = [t for layer in actor + critic for t in (layer.weight, layer.bias)]
        device = self.params[0].device
        self.strides = fused._member_strides(self.params, device)
        self.heads = len(head.splits_or_n())
        self.starts = head.starts(device)
        self.sms = _multiprocessors(device)

    def __call__(self, obs, noise, actions_out, logp_out, values_out, obs_out=None, env_action=None, agents=None):
        """obs [N, O], noise [N, D] -> actions_out [N, heads] (int64; returned as [N] for one head),
        logp_out and values_out [N]. With obs_out [N, O] (the rollout buffer's step) the observations
        are stored there too, and the actions into env_action [E, A(, heads)] (the env's action array)
        at the agents `agents` (a slice: the group's ids) of each replica."""
        kernel = fused._rollout_kernels().wide_policy_step
        obs, rows, recording = fused.step_arguments(obs, self.members, actions_out, obs_out, env_action, agents)
        block, warps, persist = _tiles(rows, self.members)
        grid = (self.sms * persist,) if persist else (-(-rows // block), self.members)
        with fused._compile_switches(MMA_SYNC):
            kernel[grid](
                obs, noise, *self.params, self.strides, self.starts, actions_out, logp_out, values_out, rows,
                *recording, self.members, self.sms, **self.sizes, HEADS=self.heads, BLOCK=block,
                STACKED=int(self.stacked), DOT=self.dot, TANH=self.act, RECORD=obs_out is not None,
                SHARED=int(self.shared), PERSIST=persist, num_warps=warps)
        return actions_out.reshape(-1) if self.heads == 1 else actions_out.reshape(-1, self.heads)

    def truncated_values(self, final_obs, truncated, terminated, out, agents: slice | None = None):
        """V(final observation) of one rollout step for this policy's agents (`agents`, a slice, or
        the group's) of final_obs [E, A, O] where the replica was truncated and not terminated
        (truncated, terminated [E] floats), else 0, into out [E, n]
        (collection.Collector._final_values_of_step is the reference)."""
        kernel = fused._rollout_kernels().wide_truncated_values
        agents = agents or self.agents
        E, A, O = final_obs.shape
        n = agents.stop - agents.start
        rows = E // self.members * n
        s = self.sizes
        block, warps, _ = _tiles(rows, self.members)
        with fused._compile_switches(MMA_SYNC):
            kernel[(-(-rows // block), self.members)](
                final_obs, truncated, terminated, *self.params[6:], self.strides[6:], out, rows, n, A, agents.start,
                O=O, OP=s["OP"], C1=s["C1"], C1P=s["C1P"], C2=s["C2"], C2P=s["C2P"], KC=s["KC"], NC=s["NC"],
                BLOCK=block, STACKED=int(self.stacked), DOT=self.dot, TANH=self.act,
                V=self.value_out[0], VP=self.value_out[1], num_warps=warps)
