"""A run config against the env it trains: checks that need the env and the policy map (made before
anything compiles or allocates), and the config a trainer of a given env keeps and saves."""
from __future__ import annotations

import warnings

from ..errors import WorkbenchWarning, did_you_mean
from ..runtime.env_metrics import env_metrics
from .config import ConfigError, PPOConfig, replace, yaml_problem
from .episode_stats import RENAMED, agent_groups_apart


def check_against_env(config, env, groups=None, members: int = 1) -> None:
    """Checks of `config` that need the env and the policy map, run before the trainer allocates
    anything: the statistic rank_by names (warning where a sweep of several policies ranks by their
    mean return), the env's replica count (num_envs per member of a
    population, each member's replicas seeded apart) and PPO's minibatch split of every policy's batch.

    groups: the policies' agents, as {name: agent ids} or objects with `name` and `ids`
    (None: one policy for every agent)."""
    name = type(config).__name__
    if groups is None:
        ids = {"shared": list(range(env.num_agents))}
    elif isinstance(groups, dict):
        ids = {str(k): list(v) for k, v in groups.items()}
    else:
        ids = {g.name: list(g.ids) for g in groups}
    sizes = {k: len(v) for k, v in ids.items()}
    definition = getattr(env, "definition", None)
    check_rank_by(config, definition, ids)
    learning = [k for k in sizes if k not in config.frozen]  # (mean_return averages these)
    if members > 1 and config.rank_by.lstrip("-").removeprefix("return/") in config.frozen:
        warnings.warn(f"{name}.rank_by is {config.rank_by!r}, the return of a frozen policy, which learns nothing: "
                      f"it ranks the members by how their learning policies play against it; rank by "
                      f"{[f'return/{k}' for k in learning]} to rank them by what they learn", WorkbenchWarning,
                      stacklevel=3)
    if members > 1 and config.sweep and len(learning) > 1 and config.rank_by == "mean_return":
        others = [k for k in ranked_statistics(definition, ids) if k != "mean_return"]
        warnings.warn(f"{name}.rank_by is mean_return, the average of the returns of policies {learning}: where "
                      f"they play against each other it ranks the sweep's settings by little; set rank_by to one "
                      f"policy's return or an env metric (one of {others})", WorkbenchWarning, stacklevel=3)
    if members > 1:
        if env.num_envs != members * config.num_envs or getattr(env, "replicas_per_seed", None) != config.num_envs:
            raise ConfigError(
                f"{name} trains a population of {members} members with num_envs={config.num_envs} each: the env "
                f"must hold {members * config.num_envs} replicas in blocks of {config.num_envs} seeded apart; make "
                f"it with make(..., num_envs={members * config.num_envs}, replicas_per_seed={config.num_envs}) "
                f"or let make_trainer build it")
    elif env.num_envs != config.num_envs:
        raise ConfigError(f"{name}.num_envs is {config.num_envs} but the env was made with num_envs={env.num_envs}; "
                          f"make them agree: replace(config, num_envs={env.num_envs}) or make the env with "
                          f"num_envs={config.num_envs}")
    check_minibatches(config, sizes)


def policy_sizes(definition, policies) -> dict:
    """{policy: its agent count} of a run of env `definition` with `policies` as make_trainer takes
    them: {name: agent ids}, or None for the env's AGENT_GROUPS (one shared policy without them)."""
    if isinstance(policies, dict):
        return {str(k): len(list(v)) for k, v in policies.items()}
    groups = definition.agent_groups()
    return {"shared": definition.num_agents} if groups is None else {k: len(v) for k, v in groups.items()}


def check_before_compile(config, policies=None) -> None:
    """The checks of `config` against its env that need no compiled env: the env parameters against
    the env's ranges, PPO's minibatch split of every policy's batch, and the policies frozen and
    init_from name (EnvParameterError, ConfigError)."""
    from ..runtime import registry
    definition = registry.definition(config.env, **(config.env_params or {}))
    if policies is None and config.policies is not None:
        from .groups import resolve_policy_map
        policies = resolve_policy_map(config.policies, definition)
    sizes = policy_sizes(definition, policies)
    check_minibatches(config, sizes)
    from .pretrained import check_policies
    check_policies(config, list(sizes))


def check_minibatches(config, sizes: dict) -> None:
    """ConfigError unless PPO's num_minibatches divides the batch of every policy that learns (sizes
    {name: agents}; a frozen one is never split)."""
    name = type(config).__name__
    if not isinstance(config, PPOConfig):
        return
    for policy, agents in sizes.items():
        if policy in config.frozen:
            continue
        batch = config.num_envs * config.rollout_length * agents
        if batch % config.num_minibatches:
            divisors = [d for d in range(1, min(batch, 64) + 1) if batch % d == 0]
            raise ConfigError(
                f"{name}.num_minibatches={config.num_minibatches} does not divide the batch of policy '{policy}': "
                f"num_envs {config.num_envs} x rollout_length {config.rollout_length} x {agents} agent(s) = {batch}; "
                f"pick one of {divisors}{' ...' if batch > 64 else ''} or change num_envs or rollout_length")


def ranked_statistics(definition, policies) -> list:
    """What a config's rank_by may name for runs of the env `definition` (None: unknown) with these
    policies ({name: agent ids}, or names as agent_groups_apart takes them): the statistics of each report
    that say how well a member does (higher is better)."""
    metrics = [RENAMED.get(k, k) for k in env_metrics(definition)] if definition is not None else []
    apart = [f"group_return/{g}" for g in agent_groups_apart(definition, policies)] if definition is not None else []
    return ["mean_return"] + [f"return/{p}" for p in policies] + apart + ["episode_length"] + metrics


# names users reach for that reports call otherwise: the tables' "return", evaluate's runner_survival
_RANK_ALIASES = {"return": "mean_return", **RENAMED}


def check_rank_by(config, definition, policies) -> None:
    """ConfigError unless config.rank_by names a statistic the run's reports hold (ranked_statistics);
    the trainer calls it before the env compiles, and again once the policy map is built."""
    check_rank_name(type(config).__name__, config.rank_by, ranked_statistics(definition, policies))


def check_rank_name(owner: str, rank_by: str, ranked: list) -> None:
    """ConfigError (naming `owner`.rank_by) unless `rank_by`, a minus allowed, is one of `ranked`."""
    sign = "-" if rank_by.startswith("-") else ""
    statistic = rank_by[len(sign):]
    if statistic in ranked:
        return
    alias = _RANK_ALIASES.get(statistic)
    hint = (f"; did you mean {sign + alias!r}?" if alias in ranked
            else did_you_mean(statistic, ranked, lambda s: repr(sign + s)))
    raise ConfigError(f"{owner}.rank_by is {rank_by!r}, which this run does not report: name one of {ranked} "
                      f"(higher ranks first; prefix it with '-' to rank the lowest first, as '-episode_length'){hint}")


def plain_value(value):
    """An env parameter's value as YAML writes and reads it (numpy scalars as numbers, tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value  # (numpy scalars and arrays)


def default_activation(config) -> str:
    """The default policies' activation where config.activation is None: relu for DDPG and for a
    shared body (tanh there learns far worse: the value's gradient saturates the body the policy
    reads; CartPole at the demo's settings short of 250 in 123 iterations against solved in 82 to
    94 with relu), tanh otherwise (PPO and A2C's separate MLPs)."""
    return "relu" if config.algorithm == "ddpg" or getattr(config, "shared_body", False) else "tanh"


def config_for_env(config, env):
    """The config a trainer of `env` (an Env given to it) keeps and saves, so that resume, evaluate,
    replay and load_policy rebuild that env: `config` with env_params holding every parameter the
    env was made with that differs from the env's defaults.

    A config left at the default `env` takes the env's name. Refused (ConfigError, naming both sides
    and the fix): a config whose `env` names another env than the default and the env's, an
    explicit `target` other than the env's ("auto" accepts it, and stays "auto" in the config), and
    `env_params` the env disagrees with. The seed is not compared: config.seed seeds the policies
    and the learner's sampling, the env keeps the seed it was made (or last reset) with, which
    checkpoints record (env_seed) and resume restores."""
    if config.activation is None:  # resolved, so that the run's files say which (a default may change)
        config = replace(config, activation=default_activation(config))
    name = type(config).__name__
    env_name = getattr(env, "name", None)
    if env_name is not None and config.env != env_name and config.env == type(config).env:
        config = replace(config, env=env_name)  # the field's default, not a choice: the env given names it
    if env_name is not None and config.env != env_name:
        raise ConfigError(f"{name}.env is {config.env!r} but the env passed in is {env_name!r}: make them agree "
                          f"(replace(config, env={env_name!r}), or {name}(env={env_name!r}, ...))")
    target = getattr(getattr(env, "target", None), "name", None)
    if target is not None and config.target not in ("auto", target):
        raise ConfigError(f"{name}.target is {config.target!r} but the env passed in runs on target {target!r}: "
                          f"make them agree (replace(config, target={target!r}) or \"auto\", or make the env with "
                          f"target={config.target!r})")
    if getattr(env, "definition", None) is None:
        return config
    params, defaults = env.definition.params, env.definition.namespace.get("PARAMS", {})
    asked = dict(config.env_params or {})
    for key, value in asked.items():
        if key not in params:
            raise ConfigError(f"{name}.env_params names {key!r}, which env {env_name!r} does not take; its "
                              f"parameters are {sorted(params)}{did_you_mean(key, params, repr)}")
        if plain_value(params[key]) != plain_value(value):
            raise ConfigError(f"{name}.env_params[{key!r}] is {value!r} but the env passed in was made with "
                              f"{key}={params[key]!r}: make them agree (make the env with {key}={value!r}, or drop "
                              f"{key!r} from env_params: the trainer records the env's own)")
    made = {k: plain_value(v) for k, v in params.items()
            if k not in asked and (k not in defaults or plain_value(defaults[k]) != plain_value(v))}
    return replace(config, env_params={**asked, **made}) if made else config


def compile_notice(config) -> str | None:
    """What a run says before its env compiles, when the kernels are not in the on-disk cache (a first
    run's compile takes seconds with nothing else on screen); None when they are, or it cannot tell."""
    from ..compiler import kernel_cache
    from ..compiler.targets import best_target, target_named
    from ..runtime import registry
    try:
        definition = registry.definition(config.env, **(config.env_params or {}))
        name = best_target(definition) if config.target == "auto" else config.target
        cached = getattr(target_named(name), "is_cached", None)
        if cached is None or cached(definition):
            return None
    except Exception:  # noqa: BLE001 - the compile that follows names what is wrong
        return None
    why = ("once: later runs load the kernels from the cache" if kernel_cache.enabled() else
           "every run: WORKBENCH_CACHE_DIR turns the on-disk cache off")
    return f"compiling {config.env} for target '{name}' ({why})..."


def env_param_items(items) -> dict | None:
    """evaluate's --env-param NAME=VALUE items as {name: value} (values read as YAML); None for none."""
    import yaml
    if not items:
        return None
    changed = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--env-param takes NAME=VALUE, e.g. --env-param max_steps=1000; got {item!r}")
        try:
            changed[name] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--env-param {item}: the value {value!r} is not valid YAML ({yaml_problem(exc)}); "
                              f"e.g. --env-param max_steps=1000") from None
    return changed


def played_env_params(config, changed: dict | None, trained: dict, given: str, who: str) -> dict | None:
    """The run's env parameters with `changed` applied, for its trained policies to play on (evaluate,
    load_policy, wb.replay); a change that gives the env other agents, observations or actions than the
    policies learned on (`trained`: the checkpoint's signature) is refused, naming `given` and `who`."""
    from ..runtime import registry
    if not changed:
        return config.env_params
    if not isinstance(changed, dict):
        raise ConfigError(f"{given}: env parameters are a dict {{name: value}}, e.g. {{max_steps: 1000}}")
    params = {**(config.env_params or {}), **changed}
    definition = registry.definition(config.env, **params)  # (an unknown name or a value out of range: named)
    played = {"num_agents": definition.num_agents, "obs_shape": list(definition.obs_shape),
              "action_space": repr(definition.action)}
    for key, value in played.items():
        if key in trained and trained[key] != value:
            raise ConfigError(f"{given} gives {config.env} {key}={value!r}; the policies learned with "
                              f"{trained[key]!r}: {who} changes only what keeps the agents, their observations "
                              f"and actions")
    return params
