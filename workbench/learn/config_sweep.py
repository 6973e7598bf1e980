"""A population's sweep: the hyperparameters each algorithm's members can differ in, and the checks
a sweep's names and values pass (config.validate calls them).
"""
from __future__ import annotations

import dataclasses
import numbers

from ..errors import ConfigError, did_you_mean


SWEEPABLE = {"ppo": ("lr", "ent_coef", "clip_coef", "gamma", "gae_lambda", "vf_coef", "max_grad_norm"),
             "a2c": ("lr", "ent_coef", "gamma", "gae_lambda", "vf_coef", "max_grad_norm"),
             "ddpg": ("actor_lr", "critic_lr", "gamma", "tau", "exploration_noise", "max_grad_norm")}


def validate_sweep(config, validate, synonyms: dict) -> None:
    """A sweep names hyperparameters the algorithm's members can differ in, each with a non-empty
    list of numbers, every one of them a valid value of its field (by `validate`, config.validate);
    synonyms: other libraries' names for the fields (config.SYNONYMS), for the hints."""
    name = type(config).__name__
    allowed = SWEEPABLE[config.algorithm]
    for key, values in config.sweep.items():
        if key not in allowed:
            raise ConfigError(f"{name}.sweep names {key!r}; the hyperparameters {config.algorithm} members can "
                              f"differ in are {list(allowed)}{sweep_name_hint(key, config.algorithm, synonyms)}")
        if not isinstance(values, (list, tuple)) or not values or not all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
            raise ConfigError(f"{name}.sweep[{key!r}] must be a non-empty list of numbers, e.g. "
                              f"{{{key}: [{getattr(config, key)!r}, ...]}}, got {values!r}")
        twice = sorted({float(v) for v in values if sum(float(w) == float(v) for w in values) > 1})
        if twice:
            raise ConfigError(f"{name}.sweep[{key!r}] lists {', '.join(f'{v:g}' for v in twice)} more than once "
                              f"({list(values)}): give each value once (more seeds train a setting more times: "
                              f"seeds)")
        for value in values:
            try:
                validate(dataclasses.replace(config, sweep=None, **{key: float(value)}))
            except ConfigError as exc:
                raise ConfigError(f"{name}.sweep[{key!r}] holds {value!r}, not a valid {key}: {exc}") from None


def sweep_name_hint(key: str, algorithm: str, synonyms: dict) -> str:
    """Why a name is not among `algorithm`'s sweepable ones, or what was meant: another library's
    name, another case or spelling, another algorithm's hyperparameter."""
    allowed = SWEEPABLE[algorithm]
    if key == "lr" and "actor_lr" in allowed:
        return "; DDPG learns at actor_lr and critic_lr: sweep those"
    ours = synonyms.get(key, key.lower())
    if ours in allowed:
        return f"; did you mean {ours!r}?"
    owners = [other for other, names in SWEEPABLE.items() if other != algorithm and ours in names]
    if owners:
        return f"; {ours!r} is a hyperparameter of {' and '.join(owners)} (set algorithm: {owners[0]} to sweep it)"
    return did_you_mean(key, allowed, repr)
