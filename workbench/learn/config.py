"""Training configuration: frozen dataclasses, one docstring per field, YAML in and out.

The CLI, the YAML loader and the notebook's form are all generated from these classes:
`describe(cls)` lists (name, type, default, doc) for every field.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ConfigError, WorkbenchWarning  # noqa: F401 - (ConfigError: cfg.ConfigError everywhere)
from .config_names import SYNONYMS, unknown_keys_error  # noqa: F401 - (cfg.SYNONYMS)


def yaml_problem(exc) -> str:
    """A YAML parse error as 'line L, column C: problem' (1-based, as editors count)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    opened = f" ({context} that starts at line {start.line + 1}, column {start.column + 1})" \
        if context and start is not None and (mark is None or start.line != mark.line) else ""
    return f"{where}{problem}{opened}"


def _f(default, doc: str, **kw):
    return field(default=default, metadata={"doc": doc, **kw})


@dataclass(frozen=True)
class RunConfig:
    """Settings every algorithm shares: the env, the run's length, logging and checkpoints."""
    env: str = _f("cartpole", "Registered env name (python -m workbench envs lists them).")
    num_envs: int = _f(1024, "Env replicas simulated at once.")
    target: str = _f("auto", "Kernel target: auto (with a GPU: cuda-c for an env with CUDA C phases, else cuda; "
                                     "without: cpu), cpu, cuda or cuda-c.")
    seed: int = _f(0, "Seed of the policy's initial weights, the sampler and the env's random streams (an env "
                      "given to Trainer keeps its own).")
    seeds: int = _f(1, "Members of a population trained at once in one program, each with its own weights, optimiser, "
                       "env replicas (num_envs each) and seed (seed, seed + 1, ...); times the sweep's settings.")
    sweep: dict = _f(None, "Hyperparameter grid over the population, e.g. {lr: [1e-3, 3e-4], ent_coef: [0, 0.01]}: "
                           "every setting trained by `seeds` members (member k has seed + k).")
    rank_by: str = _f("mean_return", "The statistic that ranks a population's sweep settings and picks its best member "
                                     "(higher is better): mean_return (the learning policies' returns averaged), "
                                     "return/NAME (policy NAME's), group_return/NAME (agent group NAME's, where "
                                     "one policy plays several), episode_length or a metric of the env's (Tag: "
                                     "tag_rate, survival); '-' before it ranks the lowest first (-episode_length).")
    rank_window: float = _f(0.0, "The share of training, by env-steps, whose reports rank a population's members: "
                                 "0.1 ranks each by the mean of its values in the last 10% (a final return less "
                                 "noisy than one report's); 0: its latest report's value.")
    env_params: dict = _f(None, "Overrides of the env's PARAMS, e.g. {max_steps: 200}.")
    total_env_steps: int = _f(1_000_000, "Stop after this many replica steps (summed over replicas; a population's "
                                         "budget is each member's).")
    target_return: float = _f(None, "Stop early once the mean episode return of every policy that learns (all but "
                                    "frozen ones) reaches this.")
    log_every: int = _f(1, "Pull metrics to the host every this many iterations.")
    hidden_sizes: tuple = _f((64, 64), "Hidden layer widths of the default MLP policies.")
    activation: str = _f(None, "Hidden layers' activation of the default policies: tanh or relu (WarpDrive's); "
                               "None: relu for DDPG and a shared_body, else tanh (the run records which).")
    shared_body: bool = _f(False, "PPO and A2C: one MLP body for the policy and the value, both read from its last "
                                  "hidden layer (WarpDrive's fully connected model), instead of an MLP each: about "
                                  "half the learner's work.")
    lr: float = _f(3e-4, "Adam learning rate (PPO, A2C; DDPG learns at actor_lr and critic_lr, and refuses "
                         "another lr).")
    gamma: float = _f(0.99, "Discount factor.")
    bootstrap_time_limit: bool = _f(True, "An episode cut at MAX_STEPS bootstraps from its final state's value (a "
                                          "time limit of the run, not of the task); false: it ends the episode as a "
                                          "termination does (a task that ends there: observe t / MAX_STEPS).")
    max_grad_norm: float = _f(0.5, "Gradient clipping by global norm (0 disables).")
    normalize_obs: bool = _f(False, "Normalise observations with running mean and variance.")
    cuda_graph: bool = _f(True, "Replay each training iteration (rollout, advantages, every update) from CUDA "
                                 "graphs on GPU targets.")
    compile: bool = _f(False, "torch.compile the policy step, the step's bookkeeping, the minibatch loss and GAE on "
                               "GPU targets: 1.3 to 1.5x CartPole's env-steps/s, after a first iteration compiling for "
                               "about 35 s (CartPole) to over 4 min (two Tag policies); pays off past ~1e9 env-steps.")
    fused_kernels: bool = _f(True, "On GPUs, run the default MLP policy's learner (PPO, A2C; discrete actions) "
                                   "with fused Triton kernels: a minibatch's gradient in one launch per network, a "
                                   "rollout step's sampling in one, GAE in one, a population's Adam step (any "
                                   "model) in two; false: the torch path.")
    precision: str = _f("auto", "Learner arithmetic: fp32, tf32 (tensor-core matmuls) or bf16 (autocast, and "
                                "rollout observations stored in bf16); auto: bf16 on a GPU, fp32 on the CPU.")
    learner_memory_gb: float = _f(0.0, "Bound on the learner's activations: a batch or minibatch needing more is "
                                       "processed in chunks with gradient accumulation (the same update). 0: a "
                                       "tenth of the GPU's memory, at least 2 (8 on an 80 GB GPU); 2 on the CPU.")
    centralised_critic: tuple = _f((), "Policies whose value function sees the replica's joint observation "
                                       "(MAPPO with PPO, or A2C), e.g. [runners]; [all] for every policy.")
    policies: dict = _f(None, "Policy map {policy: [AGENT_GROUPS groups or agent ids]}, e.g. {shared: [taggers, "
                              "runners]}: one policy, two teams (None: one a group; Python's policies= overrides).")
    frozen: tuple = _f((), "Policies that act but do not learn, e.g. [runners]: a fixed opponent (no update, no "
                           "optimiser or normaliser step), playing init_from's weights (else its seed's).")
    init_from: dict = _f(None, "Policies that start from another run's, {policy: RUN} (that run folder's or "
                               "checkpoint's policy of the same name; a population's best member) or {policy: {run: "
                               "RUN, policy: NAME, member: K}}; read when a run starts, not by --resume.")
    cpu_threads: int = _f(0, "Threads for the CPU target's kernels and torch (0: one on two cores or fewer, "
                             "else chosen by measuring 1 thread against all cores at the start). Fix it for "
                             "bit-identical reruns: matmuls split over another thread count round differently.")
    progress: bool = _f(None, "Show a progress bar with env-steps/s and an ETA in wb.train and the CLI (None: "
                              "yes). Trainer.train only calls its callback: ProgressBar.for_trainer(t) is one.")
    checkpoint_every: int = _f(0, "Save a checkpoint into run_dir every this many iterations (0: every 10 "
                                  "minutes of training) and at the end.")
    run_dir: str = _f(None, "Folder for metrics.csv, the learning curve, checkpoints (None: no files).")
    logger: str = _f("csv", "Logger besides metrics.csv: csv (none), tensorboard or wandb (offline without a key).")

    def __post_init__(self):
        """Every config, however built, has a known algorithm, typed fields and sane ranges."""
        fixed = (type(self).__dataclass_fields__["algorithm"].default if "algorithm" in self.__dataclass_fields__
                 else None)
        algorithm = getattr(self, "algorithm", None)
        if fixed is not None and algorithm != fixed:
            classes = ", ".join(f"{k} ({c.__name__})" for k, c in ALGORITHMS.items())
            if algorithm in ALGORITHMS:
                fix = f"use {ALGORITHMS[algorithm].__name__} for {algorithm!r}"
            else:
                fix = f"{algorithm!r} is not an algorithm of this workbench"
            raise ConfigError(f"{type(self).__name__}.algorithm is fixed to {fixed!r}, got {algorithm!r}: {fix}; "
                              f"the algorithms are {classes}")
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            coerced = _coerce(type(self), f.name, hints[f.name], value)
            if coerced is not value:
                object.__setattr__(self, f.name, coerced)
        validate(self)
        if self.sweep and any(len(values) == 1 for values in self.sweep.values()):
            # a name swept over one value is that value for every member: the config says it, not a column
            for name, values in self.sweep.items():
                if len(values) == 1:
                    object.__setattr__(self, name, type(getattr(self, name))(values[0]))
            object.__setattr__(self, "sweep", {k: v for k, v in self.sweep.items() if len(v) > 1} or None)


@dataclass(frozen=True)
class A2CConfig(RunConfig):
    """Advantage actor-critic: one gradient step per rollout on the whole batch."""
    algorithm: str = _f("a2c", "Algorithm name (fixed by the class).")
    rollout_length: int = _f(16, "Steps per replica in one rollout (T).")
    gae_lambda: float = _f(1.0, "GAE lambda (1: Monte-Carlo returns bootstrapped at the rollout end).")
    ent_coef: float = _f(0.01, "Entropy bonus coefficient.")
    vf_coef: float = _f(0.5, "Value loss coefficient.")
    anneal_lr: bool = _f(False, "Decay the learning rate linearly to zero over the run.")
    normalize_advantages: bool = _f(True, "Normalise advantages over the batch.")
    normalize_reward: bool = _f(False, "Divide rewards by the running std of the discounted return, clipped to "
                                       "+-10 (SB3's VecNormalize): rewards of any scale (Pendulum's -16 a step).")
    log_std_init: float = _f(0.0, "A Box action's Gaussian policy: its log-std at the start, every dimension "
                                  "(0: std 1 whatever the Box's range; SB3's log_std_init).")


@dataclass(frozen=True)
class PPOConfig(RunConfig):
    """Proximal policy optimisation (clipped objective) with GAE."""
    algorithm: str = _f("ppo", "Algorithm name (fixed by the class).")
    rollout_length: int = _f(32, "Steps per replica in one rollout (T).")
    gae_lambda: float = _f(0.95, "GAE lambda.")
    update_epochs: int = _f(4, "Passes over the rollout batch per iteration.")
    num_minibatches: int = _f(4, "Minibatches per epoch; must divide num_envs * rollout_length * agents.")
    clip_coef: float = _f(0.2, "PPO ratio clipping epsilon.")
    clip_value: bool = _f(False, "Clip the value update around the old values, as the policy ratio.")
    ent_coef: float = _f(0.0, "Entropy bonus coefficient.")
    vf_coef: float = _f(0.5, "Value loss coefficient.")
    target_kl: float = _f(None, "Stop an update's epochs early after an epoch whose last minibatch's approximate "
                                "KL exceeds this, as CleanRL (each member of a population on its own KL).")
    anneal_lr: bool = _f(True, "Decay the learning rate linearly to zero over the run.")
    normalize_advantages: bool = _f(True, "Normalise advantages per minibatch.")
    normalize_reward: bool = _f(False, "Divide rewards by the running std of the discounted return, clipped to "
                                       "+-10 (SB3's VecNormalize): rewards of any scale (Pendulum's -16 a step).")
    log_std_init: float = _f(0.0, "A Box action's Gaussian policy: its log-std at the start, every dimension "
                                  "(0: std 1 whatever the Box's range; SB3's log_std_init).")


@dataclass(frozen=True)
class DDPGConfig(RunConfig):
    """Deep deterministic policy gradient with a device replay buffer and target networks. Its field
    defaults suit many replicas on a GPU; a small env such as Pendulum learns with configs/pendulum.yaml's
    (16 replicas, one step each, 16 updates, learning_starts 2000), which wb.train(env, algorithm="ddpg")
    takes for an env without a config of its own."""
    algorithm: str = _f("ddpg", "Algorithm name (fixed by the class).")
    rollout_length: int = _f(4, "Env steps per replica between rounds of gradient updates.")
    buffer_size: int = _f(1_000_000, "Replay buffer capacity in transitions (one per agent and step) of each policy, "
                                     "and of each member of a population; at least one step of every replica.")
    batch_size: int = _f(256, "Transitions per gradient step.")
    updates_per_rollout: int = _f(8, "Gradient steps after each rollout.")
    learning_starts: int = _f(10_000, "Transitions (counted as buffer_size counts them: per policy and member) "
                                      "collected with random actions before learning; at most buffer_size.")
    tau: float = _f(0.005, "Polyak factor of the target networks' soft updates.")
    exploration_noise: float = _f(0.1, "Std of the Gaussian exploration noise, as a fraction of half the action "
                                       "range (the action scale, as CleanRL).")
    actor_lr: float = _f(1e-3, "Actor learning rate.")
    critic_lr: float = _f(1e-3, "Critic learning rate.")
    max_grad_norm: float = _f(0.0, "Gradient clipping by global norm (0, the default, disables it: the DDPG paper "
                                   "and its reference implementations do not clip).")


def _refuse_unknown_keywords(cls):
    """cls(**kwargs) with a key cls lacks: unknown_keys_error (as from_dict), not a bare TypeError."""
    init, names = cls.__init__, frozenset(f.name for f in dataclasses.fields(cls))

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise unknown_keys_error(cls, unknown, kwargs.get("env"), ALGORITHMS.values())
        init(self, *args, **kwargs)

    cls.__init__ = __init__


for _cls in (RunConfig, A2CConfig, PPOConfig, DDPGConfig):
    _refuse_unknown_keywords(_cls)

PRECISIONS = ("auto", "fp32", "tf32", "bf16")
DEFAULT_LR = RunConfig.__dataclass_fields__["lr"].default  # (DDPG refuses any other: it reads actor_lr, critic_lr)
MAX_SEED = 2**62  # seeds key 64-bit random streams, with room for a population's seed + k
ALGORITHMS = {"a2c": A2CConfig, "ppo": PPOConfig, "ddpg": DDPGConfig}


def describe(cls) -> list:
    """[(name, type, default, doc)] for every field of a config class (for forms and --help)."""
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(cls)]


def _coerce(cls, name, kind, value):
    origin = typing.get_origin(kind) or kind
    if value is None:
        default = cls.__dataclass_fields__[name].default
        if default is None:
            return None
        raise ConfigError(f"{cls.__name__}.{name} needs a value ({origin.__name__}; its default is {default!r}), "
                          f"got none (null or an empty value)")
    if isinstance(value, str) and origin in (int, float):
        value = _number_text(value, value)  # YAML 1.1 reads 1e-3 and 1e6 as strings
    if origin is bool:
        if isinstance(value, bool):
            return value
    elif origin is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif origin is float:
        if isinstance(value, float):
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    elif origin is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        names = name in ("centralised_critic", "frozen")  # (policy names; hidden_sizes: layer widths)
        sequence = isinstance(value, (list, tuple))
        odd = [v for v in value if isinstance(v, bool) or not (isinstance(v, numbers.Integral) or isinstance(
            v, numbers.Real) and float(v).is_integer())] if sequence else None
        if sequence and not odd:
            return tuple(int(v) for v in value)
        if names and (isinstance(value, str) or sequence and all(isinstance(v, str) for v in value)):
            return (value,) if isinstance(value, str) else tuple(value)
        if sequence and not names:
            raise ConfigError(f"{cls.__name__}.{name} must be a list of whole numbers (layer widths, e.g. [64, 64]), "
                              f"got {list(value)!r}: {odd[0]!r} is no whole number")
    elif origin is dict:
        if isinstance(value, dict) and name == "sweep":  # (its values read as numbers as a field's are)
            return {k: [_number_text(v, v) if isinstance(v, str) else v for v in vs]
                    if isinstance(vs, (list, tuple)) else vs for k, vs in value.items()}
        if isinstance(value, dict):
            return dict(value)
    example = f"; e.g. {name}: {DICT_EXAMPLES[name]}" if name in DICT_EXAMPLES else ""
    raise ConfigError(f"{cls.__name__}.{name} must be {getattr(kind, '__name__', kind)}, got {value!r} "
                      f"({type(value).__name__}){example}")


DICT_EXAMPLES = {"init_from": "{runners: runs/<run>}", "policies": "{shared: [taggers, runners]}",
                 "env_params": "{max_steps: 200}", "sweep": "{lr: [1e-3, 3e-4]}"}


def _number_text(text: str, otherwise):
    """A number written as text (1e-3, 1e6, 0.5), or `otherwise`."""
    try:
        number = float(text)
    except ValueError:
        return otherwise
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


# other libraries' names for the config's keys (Stable-Baselines3, CleanRL), for "did you mean"
LOGGERS = ("csv", "tensorboard", "wandb")  # (csv: metrics.csv alone)


def _algorithm_name(name):
    """An algorithm's name as the configs hold it: lower case ("DDPG" and "PPO" read as "ddpg" and "ppo")."""
    return name.lower() if isinstance(name, str) else name


def from_dict(data: dict, cls=None):
    """Build a config from a plain dict, rejecting unknown keys and ill-typed values by name."""
    data = dict(data)
    if "algorithm" in data:
        data["algorithm"] = _algorithm_name(data["algorithm"])
    if cls is None:
        algorithm = data.get("algorithm", "ppo")
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        cls = ALGORITHMS[algorithm]
    hints = typing.get_type_hints(cls)
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise unknown_keys_error(cls, unknown, data.get("env"), ALGORITHMS.values())
    values = {k: _coerce(cls, k, hints[k], v) for k, v in data.items()}
    return cls(**values)  # __post_init__ validates


def validate(config) -> None:
    """Range checks that name the field and the fix."""
    checks = [("num_envs", config.num_envs >= 1, "must be >= 1"),
              ("total_env_steps", config.total_env_steps >= 1, "must be >= 1"),
              ("gamma", 0.0 <= config.gamma <= 1.0, "must be in [0, 1]"),
              ("rank_window", 0.0 <= config.rank_window <= 1.0, "must be in [0, 1] (a share of training)"),
              ("rollout_length", config.rollout_length >= 1, "must be >= 1"),
              ("log_every", config.log_every >= 1, "must be >= 1"),
              ("precision", config.precision in PRECISIONS, f"must be one of {PRECISIONS}"),
              ("learner_memory_gb", config.learner_memory_gb >= 0, "must be >= 0 (0 picks from the device's memory)"),
              ("cpu_threads", config.cpu_threads >= 0, "must be >= 0 (0 picks by measurement)"),
              ("max_grad_norm", config.max_grad_norm >= 0, "must be >= 0 (0 disables clipping)"),
              ("checkpoint_every", config.checkpoint_every >= 0, "must be >= 0 (0: every 10 minutes and at the end)"),
              ("seed", 0 <= config.seed <= MAX_SEED, f"must be in [0, {MAX_SEED}]"),
              ("hidden_sizes", len(config.hidden_sizes) >= 1 and all(w >= 1 for w in config.hidden_sizes),
               "must be one or more layer widths, each >= 1, e.g. [64, 64]")]
    checks.append(("seeds", config.seeds >= 1, "must be >= 1 (members with seeds seed, seed + 1, ...)"))
    if not isinstance(config, DDPGConfig):  # (DDPG reads no lr: it refuses one below)
        checks += [("lr", config.lr > 0, "must be > 0"),
                   ("gae_lambda", 0.0 <= config.gae_lambda <= 1.0, "must be in [0, 1]"),
                   ("ent_coef", config.ent_coef >= 0, "must be >= 0"),
                   ("vf_coef", config.vf_coef > 0, "must be > 0 (the critic learns from it)"),
                   ("log_std_init", -20.0 <= config.log_std_init <= 5.0, "must be in [-20, 5] (a std of e^x)")]
    if isinstance(config, PPOConfig):
        checks += [("num_minibatches", config.num_minibatches >= 1, "must be >= 1"),
                   ("update_epochs", 1 <= config.update_epochs < 1000, "must be from 1 to 999"),
                   ("clip_coef", config.clip_coef > 0, "must be > 0"),
                   ("target_kl", config.target_kl is None or config.target_kl > 0,
                    "must be > 0 (or null: no early stop)")]
    if isinstance(config, DDPGConfig):
        checks += [("tau", 0.0 < config.tau <= 1.0, "must be in (0, 1]"),
                   ("buffer_size", config.buffer_size >= 1, "must be >= 1"),
                   ("batch_size", 1 <= config.batch_size <= config.buffer_size,
                    f"must be in [1, buffer_size={config.buffer_size}] (lower it or raise buffer_size)"),
                   ("actor_lr", config.actor_lr > 0, "must be > 0"),
                   ("critic_lr", config.critic_lr > 0, "must be > 0"),
                   ("updates_per_rollout", 1 <= config.updates_per_rollout < 2000, "must be from 1 to 1999"),
                   ("learning_starts", config.learning_starts >= 0, "must be >= 0"),
                   # (both count one policy's transitions, one per agent and step, of one member: a buffer
                   # whose fill stops at buffer_size would never reach a larger learning_starts)
                   ("learning_starts", config.learning_starts <= config.buffer_size,
                    f"must be <= buffer_size={config.buffer_size} (the replay buffer never holds more transitions, "
                    f"so learning would never start): lower learning_starts or raise buffer_size"),
                   ("lr", config.lr == DEFAULT_LR,
                    "is not read by DDPG, which learns at actor_lr and critic_lr: set those instead (--actor-lr, "
                    "--critic-lr) and leave lr unset"),
                   ("exploration_noise", config.exploration_noise >= 0, "must be >= 0")]
    checks += [(f.name, math.isfinite(getattr(config, f.name)), "must be a finite number")
               for f in dataclasses.fields(config) if isinstance(getattr(config, f.name), float)]
    checks.append(("activation", config.activation in (None, "tanh", "relu"), "must be tanh or relu (or null)"))
    checks.append(("logger", config.logger in (None,) + LOGGERS, f"must be one of {list(LOGGERS)}"))
    if config.shared_body:
        checks += [("shared_body", not isinstance(config, DDPGConfig),
                    "must be false for DDPG (its actor and Q-critic take different inputs)"),
                   ("shared_body", not config.centralised_critic,
                    "must be false with centralised_critic (that critic reads the joint observation, the actor "
                    "its agent's)")]
    for name, ok, message in checks:
        if not ok:
            raise ConfigError(f"{type(config).__name__}.{name} {message}, got {getattr(config, name)!r}")
    if config.sweep:
        from .config_sweep import validate_sweep
        validate_sweep(config, validate, SYNONYMS)
    if config.init_from is not None or config.frozen:
        from .pretrained import validate_fields
        validate_fields(config)


def to_dict(config) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def from_saved(data: dict):
    """A config stored by a run (a checkpoint's): from_dict, except that the lr a DDPG config stored
    before DDPGConfig refused one (never read: DDPG learns at actor_lr and critic_lr) is dropped."""
    return from_dict({k: v for k, v in data.items() if not (k == "lr" and data.get("algorithm") == "ddpg")})


def load_yaml(path) -> object:
    """Read a config file; the `algorithm` key picks the class (default ppo)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML at {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file holds a mapping of keys to values")
    try:
        return from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def save_yaml(config, path, comment: str = "") -> None:
    """The config as YAML at `path`, then `comment` (lines starting with #, which a load ignores); a
    swept field's own value, which no member trains with, says so."""
    swept = set(config.sweep or ())
    lines = [line + ("  # unused: swept, each member's value is in sweep" if line.split(":", 1)[0] in swept else "")
             for line in yaml.safe_dump(to_dict(config), sort_keys=False).splitlines()]
    Path(path).write_text("\n".join(lines) + "\n" + comment)


def replace(config, **changes):
    """A copy of `config` with `changes`, type-checked like from_dict. A changed `algorithm` switches
    the config class: the values set away from the old class's defaults go on where both classes
    share the field and its default; the rest take the new class's defaults (a warning names the set
    values left behind: another algorithm's fields, and tunings such as rollout_length whose
    defaults differ between the two)."""
    algorithm = _algorithm_name(changes.pop("algorithm", config.algorithm))
    if algorithm != config.algorithm:
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        new, old = ALGORITHMS[algorithm], type(config)
        defaults = {cls: to_dict(cls()) for cls in (new, old)}
        if algorithm == "ddpg":  # (DDPG reads actor_lr and critic_lr: another algorithm's lr is not carried over)
            defaults[new].pop("lr", None)
        chosen = {k: v for k, v in to_dict(config).items() if v != defaults[old].get(k) and k not in changes}
        kept = {k: v for k, v in chosen.items() if k in defaults[new] and defaults[new][k] == defaults[old][k]}
        left = {k: v for k, v in chosen.items() if k not in kept and k != "algorithm"}
        if kept.get("sweep"):  # (a swept name the new algorithm's members cannot differ in stays behind)
            from .config_sweep import SWEEPABLE
            unswept = {k: v for k, v in kept["sweep"].items() if k not in SWEEPABLE[algorithm]}
            kept["sweep"] = {k: v for k, v in kept["sweep"].items() if k not in unswept} or None
            left.update({f"sweep[{k!r}]": v for k, v in unswept.items()})
        if left:
            def why(key):
                if key == "lr" and algorithm == "ddpg":
                    return "it learns at actor_lr and critic_lr"
                if key.startswith("sweep["):
                    return "its members cannot differ in it"
                return f"its default is {defaults[new][key]!r}" if key in defaults[new] else "no such field"
            carried = {k: v for k, v in kept.items() if k not in ("env", "run_dir", "env_params")}
            warnings.warn(f"{old.__name__} -> {new.__name__}: values set for {config.algorithm} left behind: "
                          f"{', '.join(f'{k}={v!r} ({why(k)})' for k, v in left.items())}; set them again to "
                          f"keep them" + (f"; carried over as set for {config.algorithm}: "
                                          f"{', '.join(f'{k}={v!r}' for k, v in carried.items())} (tuned for it: "
                                          f"check them)" if carried else ""), WorkbenchWarning, stacklevel=2)
        return from_dict({**kept, **changes}, new)
    return from_dict({**to_dict(config), **changes}, type(config))
