"""The panel's checks of what a user types: each field's value against its type, range or choices,
and a run's values against its env (rank_by, env parameters, PPO's minibatch split), all before
anything compiles or is written; ConfigError names the field, the value and what is allowed."""
from __future__ import annotations

import dataclasses
import os
import types

import numpy as np

from workbench.errors import did_you_mean
from workbench.learn import config as cfg
from workbench.learn import population
from workbench.learn.config import ConfigError

from .device import gpu_count
from .form import ConfigForm, EnvParamsForm, parse_field
from .runner import check_replicas

# fields that the panel's own controls set (env, replicas, target, env parameters) or that the
# algorithm choice fixes; every other field of the config class is in the generated form
CONTROLLED = ("env", "num_envs", "target", "env_params", "algorithm")


def checked_config(cls, fields: dict, base: dict):
    """The config of `base` (field values) with `fields` set, the fields' types checked on a scratch
    form and every range by the config class: ConfigError names a refused value, and no form changes.
    Where `base` alone is refused already (a bad value typed into the form: Start names it), the
    fields are checked on the class's defaults."""
    scratch = ConfigForm(cls, exclude=CONTROLLED)
    if fields:
        scratch.set(**fields)
    typed = {k: v for k, v in scratch.values().items() if k in fields}
    names = {f.name for f in dataclasses.fields(cls)} - set(CONTROLLED)
    try:
        return cls(**{k: v for k, v in {**base, **typed}.items() if k in names})
    except ConfigError:
        try:
            cls(**{k: v for k, v in base.items() if k in names})
        except ConfigError:
            return cls(**typed)
        raise


def checked_fields(cls, fields: dict, form, same_algorithm: bool, replicas: str | None, num_envs: int,
                   mode: str) -> None:
    """ConfigError unless `fields` are valid values of `cls` beside the values `form` holds now (all
    of them with the same algorithm, else its population's) and the replica indices `replicas`
    (None: unchanged) lie in the run's replicas."""
    shown = {}
    for name, (kind, default, _doc) in (form.fields.items() if form is not None else ()):
        try:  # (field by field: a bad one typed in is Start's to name)
            shown[name] = parse_field(form.cls.__name__, name, kind, default, form.inputs[name])
        except ConfigError:
            pass
    base = shown if same_algorithm else {k: v for k, v in shown.items() if k in ("seeds", "sweep")}
    config = checked_config(cls, fields, base)
    if replicas is not None:
        grid = {**base, **{k: getattr(config, k) for k in ("seeds", "sweep") if k in fields}}
        members = population.size(types.SimpleNamespace(seeds=grid.get("seeds", 1), sweep=grid.get("sweep")))
        check_replicas([int(r) for r in replicas.replace(",", " ").split()], num_envs,
                       members if mode == "train" else 1)


def checkpoint_text(checkpoint) -> str:
    """The checkpoint field's text of `checkpoint` (a path, or None: random actions)."""
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ConfigError(f"checkpoint={checkpoint!r}: give a checkpoint file's path (or None: random actions)")
    return str(checkpoint or "")


def rank_choices(definition, policies: dict | None) -> list:
    """rank_by's choices: what a run of the env reports with these policies (None: the env's
    AGENT_GROUPS, else one shared policy); the field takes any other text too, a minus included."""
    from workbench.learn.config_env import ranked_statistics
    names = policies if isinstance(policies, dict) else ["shared"]
    if policies is None and definition.namespace.get("AGENT_GROUPS") is not None:
        try:
            names = definition.agent_groups()
        except Exception:  # noqa: BLE001 - the env's own code: Start reports what it raises
            names = ["shared"]
    try:
        return ranked_statistics(definition, names)
    except Exception:  # noqa: BLE001 - (the env's AGENT_GROUPS, or a map's ids: Start reports what they raise)
        return ranked_statistics(definition, ["shared"])


def checked_env_form(env: str, env_params: dict | None) -> EnvParamsForm:
    """The env form `set(env_params=...)` would show, its values checked against the env's ranges."""
    form = EnvParamsForm(env, env_params)
    check_env_params(env, form.values())
    return form


def check_training_run(config, env_form, policies: dict | None) -> None:
    """ConfigError for what a training run of `config` would be refused for only once its env is
    known: a rank_by it does not report, env parameters out of range, PPO's minibatch split."""
    from workbench.learn.config_env import check_before_compile
    check_rank_choice(type(config), config.rank_by, env_form, policies)
    check_env_params(config.env, config.env_params or {})
    check_before_compile(config, policies)


def check_env_params(env: str, env_params: dict) -> None:
    """ConfigError unless `env_params` lie in the env's declared ranges (PARAM_RANGES, validate_params)."""
    from workbench.errors import EnvParameterError
    from workbench.runtime import registry
    try:
        registry.definition(env, **env_params)
    except EnvParameterError as exc:
        raise ConfigError(f"env_params: {exc}") from None


def check_rank_choice(cls, rank_by: str, env_form, policies: dict | None) -> None:
    """ConfigError unless `rank_by` (a minus allowed) is one of rank_choices: what the run will report."""
    from workbench.learn.config_env import check_rank_name
    check_rank_name(cls.__name__, rank_by, rank_choices(env_form.definition, policies))


def checked_gpus(gpus, target: str, mode: str) -> int:
    """`gpus` when the target and mode allow that many data-parallel ranks; ConfigError otherwise."""
    gpus = check_integer("gpus", gpus, 1, "data-parallel ranks, one per GPU")
    if gpus != 1 and not (mode == "train" and 1 <= gpus <= gpu_limit(target)):
        raise ConfigError(f"gpus={gpus}: data-parallel ranks are one per GPU, for training on a GPU target; "
                          f"here {gpu_count()} GPU(s) and target {target!r} (use gpus=1)")
    return gpus


def checkpoint_env_params(checkpoint: str, chosen: str, defaults: dict, env: str, trained: dict, asked: dict) -> dict:
    """The env parameters of rollouts of `checkpoint`, whose policies were trained on `env` with
    `trained`; the form names env `chosen` (its PARAMS `defaults`) and changed `asked`."""
    if env != chosen:
        raise ConfigError(f"checkpoint {checkpoint!r} holds policies trained on env {env!r}, but the panel's env "
                          f"is {chosen!r}: choose env {env!r} (panel.set(env={env!r})), or a checkpoint "
                          f"trained on {chosen!r}")
    clash = {k: v for k, v in asked.items() if trained.get(k, defaults.get(k)) != v}
    if clash:
        theirs = {k: trained.get(k, defaults.get(k)) for k in clash}
        raise ConfigError(f"env_params {clash} differ from those the checkpoint's policies were trained with "
                          f"({theirs}): rollouts of a checkpoint run its env parameters "
                          f"({trained or 'the defaults'}); set them in the form "
                          f"(panel.set(env_params={trained!r})), or roll out random actions")
    return trained


def check_config_fields(cls, values: dict) -> None:
    """ConfigError naming the `values` that are no field of the config class `cls`'s form."""
    names = {name for name, *_ in cfg.describe(cls)}
    clash = sorted(set(values) & set(CONTROLLED))
    if clash:
        raise ConfigError(f"{clash} are set by the panel's own arguments (env=..., num_envs=..., "
                          f"target=..., env_params=..., algorithm=...), not as config fields")
    unknown = sorted(set(values) - names)
    if unknown:
        known = sorted(names - set(CONTROLLED))
        meant = cfg.SYNONYMS.get(unknown[0])
        hint = f"; did you mean {meant!r}?" if meant in known else did_you_mean(unknown[0], known, repr)
        raise ConfigError(f"unknown {cls.__name__} field(s) {unknown}{hint}; "
                          f"fields: {known}")


def redefined_notice(env: str, agents: str, kept: dict, dropped: dict) -> str:
    """What the panel says when it rebuilt the form of `env`, registered again since."""
    return (f"env {env!r} was registered again since its form was built (a %%warpenv cell re-ran): the env "
            f"parameters now show its new definition ({agents})" + (f", with the values you changed: {kept}"
                                                                      if kept else "")
            + (f"; dropped, the new definition has no such parameter: {dropped}" if dropped else ""))


def gpu_limit(target: str) -> int:
    """The data-parallel ranks a run on `target` may have: one per GPU on a GPU target, else 1."""
    count = gpu_count()
    return count if target in ("cuda", "cuda-c", "auto") and count > 1 else 1


def check_choice(field: str, value, allowed: list, where: str = "") -> None:
    """ConfigError naming `field`, `value` and the `allowed` values when value is not one of them."""
    if not any(value == a and type(value) is type(a) for a in allowed):
        raise ConfigError(f"{field} must be one of {list(allowed)}{where}, got {value!r}"
                          f"{did_you_mean(str(value), [str(a) for a in allowed], repr)}")


def check_integer(field: str, value, minimum: int, meaning: str) -> int:
    """`value` as an int >= minimum; ConfigError naming `field` (and what it means) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{field} must be an integer >= {minimum} ({meaning}), got {value!r}")
    return int(value)


def replicas_text(replicas) -> str:
    """Replica indices (a list of ints, or text like "0, 1") as the record_replicas field writes them."""
    parts = replicas.replace(",", " ").split() if isinstance(replicas, str) else replicas
    try:
        numbers = [int(r) for r in parts if not isinstance(r, (bool, float)) and str(int(r)) == str(r).strip()]
    except (TypeError, ValueError):
        numbers = []
    if isinstance(replicas, (int, np.integer)) or len(numbers) != len(list(parts)):
        raise ConfigError(f"record_replicas (replicas to animate) must be integers like [0, 1] or '0, 1', "
                          f"got {replicas!r}")
    return ", ".join(str(r) for r in numbers)
