"""What a trainer builds for each policy: its model, optimiser and buffer (a rollout buffer for PPO and
A2C, a replay buffer for DDPG), the bf16 copies the rollout acts with, the learner's chunk size, and
the CPU thread counts measured on its own work.
"""
from __future__ import annotations

import contextlib
import copy
import math
import warnings

import torch

from . import cpu_memory, fused, threads
from .algorithms import ddpg
from .config_env import default_activation
from ..compiler.envdef import Box
from .members import (MemberAdam, MemberLinear, MemberNorm, PopulationError, member_count, nn_linear_layout,
                      stack_members)
from .policies import ActorCritic, CentralisedActorCritic, DeterministicActor, QCritic, SharedActorCritic
from .groups import PolicyMapError
from .rollout import RolloutBuffer
from .normaliser import RunningNorm
from .reward_scale import RewardScale
from .streams import MemberStreams
from ..errors import BudgetWarning, WorkbenchWarning


def member_adam(tr, model, lr_name: str, members: int | None = None):
    """A population's MemberAdam with its members' learning rates (hyperparameter lr_name), or a
    single run's (members=1, an unstacked model); its steps in the fused kernels on GPUs unless
    fused_kernels is off."""
    optimizer = MemberAdam(model, tr.hp.per_member(lr_name, tr.device), eps=1e-5, members=members)
    if tr.config.fused_kernels and optimizer.params and fused.kernels_unsupported(tr.device) is None:
        optimizer.fused = fused.FusedMemberAdam(optimizer)
    return optimizer


@contextlib.contextmanager
def probing(module):
    """A contract probe's forward: eval mode (BatchNorm's statistics left as they were) and no_grad,
    the module's mode put back after."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        module.train(training)


def check_model(tr, name, model, out_dim):
    """A clear error where a model breaks the contract (policies.py's docstring): nothing to train,
    a forward that fails on observations [N, O] float32, an output other than (head_out [N, out_dim],
    value [N]) (a DDPG actor's: actions [N, out_dim]; a centralised critic's actor: head_out), a
    `value` attribute that is not the value function. The probe runs in eval mode: it leaves the
    model's buffers (BatchNorm's statistics) as they were."""
    if name not in tr.frozen and not any(p.requires_grad for p in model.parameters()):
        which = "trainable parameters (requires_grad is False for every one)" if any(
            True for _ in model.parameters()) else "parameters (a scripted policy)"
        raise PolicyMapError(f"policy '{name}': the model has no {which}, and the policy is trained: list it in "
                             f"frozen to play it without learning, or give it trainable parameters")
    rows = 3 * member_count(model)
    obs = torch.zeros(rows, tr.obs_dim, device=tr.device)
    central = isinstance(model, CentralisedActorCritic)
    pair = not (central or isinstance(model, DeterministicActor) or tr.algorithm == "ddpg")
    contract = ("forward(obs [N, O]) -> (head_out [N, K], value [N])" if pair else
                "actor(obs [N, O]) -> head_out [N, K]" if central else "forward(obs [N, O]) -> actions [N, d]")
    # (compiled.value_step calls model.value(obs) where the model has one: the rollout's last values)
    value_method = pair and hasattr(model, "value")
    try:
        with probing(model):
            out = model.actor(obs) if central else model(obs)
            value = model.value(obs) if value_method else None
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code, named with what it was given
        called = f"{contract}, and value(obs) -> [N] where the model has a `value` attribute" if value_method \
            else contract
        raise PolicyMapError(f"policy '{name}': the model failed on observations [{rows}, {tr.obs_dim}] float32 on "
                             f"{tr.device} ({type(exc).__name__}: {str(exc)[:300]}); the trainer calls {called}, "
                             f"with O the observation's {tuple(tr.env.obs_shape)} flattened (C order) and float32 "
                             f"parameters") from None
    if pair:
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
            raise PolicyMapError(f"policy '{name}': the model returned {got}; the trainer calls {contract}")
        out, pair_value = out
        value = pair_value if value is None else value
        where = "model.value(obs)" if value is not pair_value else "the value"
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (rows,):
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            fix = " (value.squeeze(-1))" if isinstance(value, torch.Tensor) and tuple(value.shape) == (rows, 1) else ""
            raise PolicyMapError(f"policy '{name}': {where} is {shape} for {rows} observations, not [{rows}]{fix}: a "
                                 f"[N, 1] value would broadcast against the returns in the loss"
                                 + (" (a model's `value` attribute is called as the value function: rename it "
                                    "if it is a layer)" if where != "the value" else ""))
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != rows:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise PolicyMapError(f"policy '{name}': the model's action output is {shape} for {rows} observations, not "
                             f"[{rows}, {out_dim}]; the trainer calls {contract}")
    if out.shape[-1] != out_dim:
        raise PolicyMapError(f"policy '{name}': the model's action output has {out.shape[-1]} units, "
                             f"the env's action space {tr.env.action_space} needs {out_dim}")


def check_critic(tr, name, critic, act_dim):
    """A clear error where a DDPG critic's Q(obs [N, O], actions [N, d]) is not [N] (a [N, 1] Q would
    broadcast against the targets in the loss)."""
    rows = 3 * member_count(critic)
    obs, actions = torch.zeros(rows, tr.obs_dim, device=tr.device), torch.zeros(rows, act_dim, device=tr.device)
    try:
        with probing(critic):
            q = critic(obs, actions)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code, named with what it was given
        raise PolicyMapError(f"policy '{name}': the critic failed on observations [{rows}, {tr.obs_dim}] and "
                             f"actions [{rows}, {act_dim}] float32 ({type(exc).__name__}: {str(exc)[:300]}); DDPG "
                             f"calls critic(obs [N, O], actions [N, d]) -> Q [N]") from None
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (rows,):
        shape = list(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise PolicyMapError(f"policy '{name}': the critic's Q is {shape} for {rows} transitions, not [{rows}]"
                             + (" (q.squeeze(-1))" if shape == [rows, 1] else "") + ": DDPG calls critic(obs [N, O], "
                             "actions [N, d]) -> Q [N]; a [N, 1] Q would broadcast against the targets in the loss")


def hidden_activation(config) -> str:
    """The default policies' activation: config.activation, else config_env.default_activation's."""
    return config.activation or default_activation(config)


def default_model(tr, g):
    """The default MLP policy of group g (a centralised critic's for a group named in centralised_critic),
    a Box's log-std starting at config.log_std_init."""
    if g.name in tr.central:
        model = CentralisedActorCritic(tr.obs_dim, tr.state_dim, g.n, tr.env.action_space, tr.config.hidden_sizes,
                                       hidden_activation(tr.config))
    else:
        body = SharedActorCritic if tr.config.shared_body else ActorCritic
        model = body(tr.obs_dim, tr.env.action_space, tr.config.hidden_sizes, hidden_activation(tr.config))
    if model.log_std is not None:
        with torch.no_grad():
            model.log_std.fill_(tr.config.log_std_init)
    return model


def refuse_models(models) -> None:
    """PopulationError where a population is given models of the user's (it stacks default MLPs)."""
    if models:
        raise PopulationError(f"a population (seeds/sweep) trains the default MLP policies; models were given for "
                              f"{sorted(models)}: train them without seeds/sweep")


def population_models(tr, models, build) -> dict:
    """Each group's default policy for every member, initialised as member k's standalone run
    initialises it (torch seeded with the member's seed, the groups in order), stacked (members.py)."""
    refuse_models(models)
    if tr.sync is not None:
        raise PopulationError("a population (seeds/sweep) runs in one process; launch it without torchrun")
    per_group = {g.name: [] for g in tr.groups}
    for member in tr.members:
        torch.manual_seed(member.seed)
        for g in tr.groups:
            per_group[g.name].append(default_ddpg_agent(tr) if tr.algorithm == "ddpg" else default_model(tr, g))
    return {name: stack_members(models, name) for name, models in per_group.items()}


def build_learners(tr, models: dict):
    """Each group's model (the user's in `models`, else the default MLP: a population's stacked),
    optimiser, buffer and normalisers, into tr.models, tr.optimizers, tr.buffers, tr.norms and tr.reward_scales. The
    default models' weights come from config.seed (a population's members' from their seeds), drawn
    from torch's global stream, which is put back as it was."""
    build = build_ddpg if tr.algorithm == "ddpg" else build_on_policy
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(tr.config.seed)
        if tr.M > 1:
            models = population_models(tr, models, build)
        for g in tr.groups:
            tr.models[g.name], tr.optimizers[g.name], tr.buffers[g.name] = build(tr, g, models.get(g.name))
            if tr.config.normalize_obs:
                tr.norms[g.name] = running_norm(tr)
            if getattr(tr.config, "normalize_reward", False) and g.name not in tr.frozen:
                tr.reward_scales[g.name] = RewardScale(tr.E, g.n, tr.M, tr.hp.per_replica("gamma", tr.E_member),
                                                       tr.device)


def running_norm(tr):
    """The observation normaliser of one group (per member in a population)."""
    return RunningNorm(tr.obs_dim, tr.device) if tr.M == 1 else MemberNorm(tr.M, tr.obs_dim, tr.device)


def build_on_policy(tr, g, model):
    """(model, optimiser, rollout buffer [T, E, n, ...]) of group g for PPO or A2C; model: the user's
    module, a population's stacked module, or None for the default MLP."""
    central = g.name in tr.central
    head = tr.head
    if model is None:
        model = default_model(tr, g)
    elif central and not isinstance(model, CentralisedActorCritic):
        raise PolicyMapError(f"policy '{g.name}' has a centralised critic: its model must be a "
                             f"CentralisedActorCritic (actor(obs), values(state) -> [E, n])")
    model = model.to(tr.device)
    if isinstance(getattr(model, "head", None), torch.nn.Module):
        raise PolicyMapError(f"policy '{g.name}': the model has a submodule named `head`, the name the trainer gives "
                             f"the env's ActionHead (model.head, which samples and scores actions): rename it")
    model.head = head
    check_model(tr, g.name, model, head.out_dim)
    # A single run steps with a MemberAdam of one member too: torch Adam's first step imports
    # torch._dynamo (about 3 s of a start-up), and on GPUs its fused step takes two launches
    optimizer = member_adam(tr, model, "lr", members=None if member_count(model) > 1 else 1)
    tr.lr_tensors.append((optimizer.lr, optimizer.lr.clone()))
    act_dtype = torch.float32 if head.kind == "gaussian" else torch.long
    buffer = RolloutBuffer(tr.T, tr.E, g.n, (tr.obs_dim,), head.act_shape, act_dtype, tr.device,
                           obs_dtype=tr.obs_dtype, state_dim=tr.state_dim if central else 0)
    return model, optimizer, buffer


def default_ddpg_agent(tr):
    """DDPG's default actor and critic (and their targets) for one policy."""
    space = tr.env.action_space
    if not isinstance(space, Box):
        raise PolicyMapError(f"DDPG needs a continuous (Box) action space; '{tr.env.name}' has {space}: train it "
                             f"with algorithm ppo or a2c, or give DDPG an env with Box actions (pendulum, "
                             f"mountain_car_continuous)")
    act = hidden_activation(tr.config)
    return ddpg.DDPGAgent(DeterministicActor(tr.obs_dim, space, tr.config.hidden_sizes, act),
                          QCritic(tr.obs_dim, tr.head.out_dim, tr.config.hidden_sizes, act))


FEW_DDPG_GRADIENT_STEPS = 5000  # a DDPG run planning fewer gets a warning


def ddpg_gradient_steps(config, agents: int, ranks: int = 1) -> int:
    """The gradient steps a DDPG run of `config` takes for a policy of `agents` agents a replica: one
    rollout of num_envs x rollout_length replica steps an iteration, then updates_per_rollout steps
    once its buffer (each rank's) holds learning_starts transitions."""
    per_iteration = config.num_envs * config.rollout_length
    iterations = math.ceil(config.total_env_steps / (per_iteration * ranks))
    filling = math.ceil(config.learning_starts / (per_iteration * agents))
    return max(0, iterations - filling) * config.updates_per_rollout


def build_ddpg(tr, g, agent):
    """(actor-critic agent, (actor optimiser, critic optimiser), replay buffer) of group g for DDPG
    (a population's: stacked agents, per-member optimisers and one replay ring per member; a frozen
    policy's: its exploration noise alone)."""
    act_dim = tr.head.out_dim
    if agent is not None and not isinstance(agent, ddpg.DDPGAgent):
        raise PolicyMapError(f"policy '{g.name}': DDPG's model is a workbench.learn.algorithms.ddpg.DDPGAgent(actor, "
                             f"critic), actor(obs [N, O]) -> actions [N, d] in the action space's bounds and "
                             f"critic(obs, actions) -> Q [N]; got a {type(agent).__name__}")
    agent = (agent or default_ddpg_agent(tr)).to(tr.device)
    check_model(tr, g.name, agent.actor, act_dim)
    check_critic(tr, g.name, agent.critic, act_dim)
    nets = ((agent.actor, "actor_lr"), (agent.critic, "critic_lr"))
    # (a single run's too: torch Adam's first step imports torch._dynamo, about 3.6 s of a 2-core start,
    # and on the CPU it reads each parameter's step count back at every step)
    optimizers = tuple(member_adam(tr, net, lr, members=None if tr.M > 1 else 1) for net, lr in nets)
    tr.lr_tensors.extend((opt.lr, opt.lr.clone()) for opt in optimizers)
    n = tr.E * g.n
    if g.name in tr.frozen:
        return agent, optimizers, ddpg.ExplorationNoise(n, act_dim, tr.device)
    if tr.config.buffer_size < n // tr.M:
        from .config import ConfigError
        raise ConfigError(f"DDPGConfig.buffer_size={tr.config.buffer_size} holds less than one step of every replica "
                          f"of policy '{g.name}' ({n // (tr.M * g.n)} replicas x {g.n} agent(s) = {n // tr.M} "
                          f"transitions a step): raise buffer_size to at least {n // tr.M} (it should hold many "
                          f"steps) or lower num_envs")
    collected = tr.config.total_env_steps * g.n  # (total_env_steps counts replica steps, a member's)
    if collected < tr.config.learning_starts:
        warnings.warn(f"DDPGConfig.total_env_steps={tr.config.total_env_steps} collects {collected} transitions of "
                      f"policy '{g.name}', fewer than learning_starts={tr.config.learning_starts}: the run would end "
                      f"before it learns anything; raise total_env_steps or lower learning_starts",
                      BudgetWarning, stacklevel=4)
    elif (steps := ddpg_gradient_steps(tr.config, g.n, tr.world_size)) < FEW_DDPG_GRADIENT_STEPS:
        c = tr.config
        warnings.warn(f"DDPGConfig: total_env_steps={c.total_env_steps} at num_envs={c.num_envs} x rollout_length="
                      f"{c.rollout_length} env-steps an iteration, updates_per_rollout={c.updates_per_rollout} "
                      f"gradient steps after each once learning_starts={c.learning_starts} transitions are in, gives "
                      f"policy '{g.name}' {steps} gradient steps in all: too few to learn most tasks "
                      f"(configs/pendulum.yaml's 16 replicas, 1 step and 16 updates reach its target after about "
                      f"7600); raise total_env_steps or updates_per_rollout, or lower num_envs",
                      BudgetWarning, stacklevel=4)
    buffer = ddpg.ReplayBuffer(tr.config.buffer_size, tr.obs_dim, act_dim, tr.device, batch=n,
                               members=tr.M, masked=tr.env.definition.active is not None)
    return agent, optimizers, buffer


def rollout_copies(models: dict, bf16: bool, nn_layout=()):
    """The models the rollout acts with, and (copy tensors, source tensors) to refresh them from.

    Under bf16 autocast every forward pass would cast each weight to bf16 again (a kernel per weight
    per step); instead the rollout acts with a copy whose linear layers hold bf16 weights. Every
    parameter and buffer of the copy (log_std, norms, embeddings, a user model's buffers) is paired
    with its source, so one copy kernel per iteration refreshes all of it. The copies of the models
    named in nn_layout hold stacked weights laid out as nn.Linear's (members.nn_linear_layout)."""
    if not bf16:
        return dict(models), ([], [])
    copies, shadows, sources = {}, [], []
    for name, model in models.items():
        shadow = copy.deepcopy(model).requires_grad_(False)
        for module in shadow.modules():
            if isinstance(module, (torch.nn.Linear, MemberLinear)):
                for attr in ("weight", "bias"):
                    if getattr(module, attr) is not None:
                        setattr(module, attr, torch.nn.Parameter(getattr(module, attr).detach().to(torch.bfloat16),
                                                                 requires_grad=False))
        if name in nn_layout:
            nn_linear_layout(shadow)
        for mine, theirs in ((shadow.named_parameters(), model.named_parameters()),
                             (shadow.named_buffers(), model.named_buffers())):
            theirs = dict(theirs)
            for key, tensor in mine:
                shadows.append(tensor.data)
                sources.append(theirs[key].detach())
        copies[name] = shadow
    return copies, (shadows, sources)


def member_streams(tr, seeds) -> MemberStreams:
    """The learner's random streams for `seeds` (one per member); on GPUs their uniforms are drawn
    in one fused launch each unless fused_kernels is off."""
    streams = MemberStreams(seeds, tr.device)
    if getattr(tr.config, "fused_kernels", False) and fused.kernels_unsupported(tr.device) is None:
        streams.fused = fused.FusedUniform()
    return streams


def fused_gradients(tr):
    """({policy: fused.FusedGradients} for the policies the fused kernels serve, why the others
    are not served: {policy: reason}), when `fused_kernels` is on."""
    served, reasons = {}, {}
    if not getattr(tr.config, "fused_kernels", False):
        return served, {g.name: "fused_kernels is off" for g in tr.groups}
    for g in tr.groups:
        model = tr.models[g.name]
        why = "a centralised critic" if g.name in tr.central else fused.unsupported(model, tr.head, tr.algorithm,
                                                                                   tr.device)
        if why:
            reasons[g.name] = why
            continue
        served[g.name] = fused.FusedGradients(model, tr.optimizers[g.name], tr.buffers[g.name].batch().fields,
                                              tr.config, tr.hp, tr.M, tr.precision)
    return served, reasons


LEARNER_MEMORY_GB = 2.0  # learner_memory_gb 0 on the CPU, and the least on a GPU
LEARNER_MEMORY_SHARE = 0.1  # ... else this share of the GPU's memory


def learner_memory_gb(config, device: torch.device) -> float:
    """config.learner_memory_gb, or for 0 a tenth of the GPU's memory (at least LEARNER_MEMORY_GB; that on
    the CPU). Fewer, larger chunks: Tag's population of 8 (A2C, 2.75 M samples a member) iterated in
    0.441 s with 8 GB against 0.471 s with 2 on an H100, one member in 0.077 against 0.081 s."""
    if config.learner_memory_gb > 0:
        return float(config.learner_memory_gb)
    if device.type != "cuda":
        return LEARNER_MEMORY_GB
    total_gb = torch.cuda.get_device_properties(device).total_memory / 2**30
    return max(LEARNER_MEMORY_GB, LEARNER_MEMORY_SHARE * total_gb)


def chunk_size(tr, g) -> int:
    """Samples per learner chunk: activations of a forward and backward pass of the actor and the
    critic, estimated per sample, kept within `learner_memory_gb`."""
    if tr.algorithm == "ddpg":
        return tr.config.batch_size
    bodies = 1 if tr.config.shared_body else 2
    hidden = sum(tr.config.hidden_sizes)
    floats = 2 * tr.obs_dim + bodies * 4 * hidden + 4 * tr.head.out_dim + 16
    if g.name in tr.central:
        floats += tr.state_dim + g.n
    bytes_per_float = 2 if tr.precision == "bf16" else 4  # (autocast keeps the activations in bf16)
    return max(1024, int(learner_memory_gb(tr.config, tr.device) * 2**30 / (bytes_per_float * floats)))


def anneal(tr, total_iters: int):
    """anneal_lr: every learning rate at (1 - iteration / total_iters) of its base, in place (the
    device tensors a CUDA graph reads)."""
    if not getattr(tr.config, "anneal_lr", False):
        return
    frac = max(0.0, 1.0 - tr.iteration / total_iters)  # past the budget the rate stays at 0
    if frac == 0.0 and not tr._warned_lr_floor:
        tr._warned_lr_floor = True
        warnings.warn(f"training past total_env_steps={tr.config.total_env_steps} with anneal_lr: the "
                      f"learning rate has reached 0, so the policy no longer changes; raise total_env_steps "
                      f"or set anneal_lr false", WorkbenchWarning, stacklevel=4)
    tr.lr_fraction = frac
    if tr.lr_tensors:
        for tensor, base in tr.lr_tensors:
            tensor.copy_(base * frac) if isinstance(base, torch.Tensor) else tensor.fill_(frac * base)
    else:
        for opt in tr.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = frac * tr.config.lr


def learning_rates(tr) -> list | None:
    """Each member's learning rate in the last iteration (its base, annealed); None for DDPG, whose
    two rates stay as configured."""
    if tr.algorithm == "ddpg":
        return None
    fraction = getattr(tr, "lr_fraction", 1.0)
    return [fraction * m.values.get("lr", tr.config.lr) for m in tr.members]


def measure_threads(tr) -> dict:
    """CPU thread counts for the env's and the learner's pools, timed on one env step and one learner
    pass of the first policy (threads.configure); the env is left as it was. Also flushes subnormal
    floats to zero: the gradients of saturated tanh units, late in training, take the CPU's slow
    path (4 to 30x slower per op) and change no update that matters. And keeps freed tensor memory in
    the process (cpu_memory)."""
    torch.set_flush_denormal(True)
    cpu_memory.keep_freed_memory()
    g = tr.groups[0]
    model = tr.models[g.name]
    net = model.actor if tr.algorithm == "ddpg" else model
    # as many rows as one of the learner's passes (a minibatch of every member), up to 16k
    rows = min(tr.E * g.n * tr.T // getattr(tr.config, "num_minibatches", 1), 16384) if tr.M > 1 else \
        min(tr.E * g.n * tr.T, 4096)
    sample = torch.zeros(max(tr.M, rows - rows % tr.M), tr.obs_dim)

    def learner_pass():
        out = net.actor(sample) if isinstance(net, CentralisedActorCritic) else net(sample)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
        net.zero_grad(set_to_none=False)

    work = (tr.env.name, tr.env.definition.digest, tr.E, tr.algorithm, tuple(sample.shape),
            sum(p.numel() for p in net.parameters()))
    before = tr.env.store.snapshot()  # the trial steps the env: put it back
    chosen = threads.configure(tr.config.cpu_threads, tr.env.step, learner_pass, key=work)
    tr.env.store.load_snapshot(before)
    return chosen
