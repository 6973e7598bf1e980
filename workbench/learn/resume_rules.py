"""What a resume may not change: the fields a run keeps as trained (its algorithm, replicas, seeds,
sweep, networks, env), each refusal naming the field and the fix."""
from __future__ import annotations

import warnings
from pathlib import Path

from . import config as cfg
from .config_sweep import SWEEPABLE
from ..errors import WorkbenchError


class ResumeError(WorkbenchError, ValueError):
    """A run folder that cannot be resumed; the message names what is missing or different."""


FIXED_ON_RESUME = ("env", "algorithm", "num_envs", "env_params", "seed", "seeds", "sweep", "hidden_sizes",
                   "activation", "shared_body", "centralised_critic", "buffer_size", "init_from", "normalize_reward")


def refuse_edited_fixed_fields(config, trained, saved_file: Path) -> None:
    """ResumeError where the run folder's config.yaml (edited by hand) differs from the checkpoint's
    config in a field a resume keeps (FIXED_ON_RESUME): the weights and env state were made with those."""
    if type(config) is not type(trained):  # (another algorithm: refused against the signature)
        return
    for key in [k for k in FIXED_ON_RESUME if k not in ("env", "algorithm")]:  # (those: against the signature)
        mine, theirs = getattr(config, key, None), getattr(trained, key, None)
        if key == "env_params":
            mine, theirs = mine or {}, theirs or {}
        if mine != theirs:
            raise ResumeError(f"{saved_file} says {key}={mine!r} but the checkpoint was trained with {key}={theirs!r};"
                              f" a resume continues the run as trained: put {key}: {theirs!r} back in config.yaml "
                              f"(a new run, not a resume, trains another {key})")


def refuse_other_algorithms_fields(changes: dict, config) -> None:
    """A resume keeps its algorithm: a field only other algorithms have is an error that says so."""
    for key in changes:
        owners = [a for a, c in cfg.ALGORITHMS.items() if key in c.__dataclass_fields__]
        if owners and key not in type(config).__dataclass_fields__ and key != "algorithm":
            raise ResumeError(f"resuming {config.run_dir!r}, a {config.algorithm} run: {key} is a field of "
                              f"{' and '.join(owners)} only, and a resume keeps the run's algorithm; drop {key}, "
                              f"or start a new run")


def refuse_fixed_changes(changes: dict, config) -> None:
    """ResumeError for a change of a field a resume keeps (FIXED_ON_RESUME) that changes its value."""
    for key in [k for k in FIXED_ON_RESUME if k in changes]:
        with warnings.catch_warnings():  # (replace's note on switching algorithm: refused just below)
            warnings.simplefilter("ignore")
            changed = getattr(cfg.replace(config, **{key: changes[key]}), key) != getattr(config, key)
        if changed:
            reordered = key == "sweep" and same_values_reordered(config.sweep, changes[key])
            raise ResumeError(f"resuming {config.run_dir!r} continues the run as trained; {key} cannot change "
                              f"({getattr(config, key)!r} -> {changes[key]!r}"
                              + ("; the same values in another order, which numbers the members otherwise"
                                 if reordered else "") + "): drop it to continue the run, or start a new run")


def same_values_reordered(sweep, other) -> bool:
    try:
        return dict(sweep or {}) != dict(other or {}) and {k: sorted(v) for k, v in (sweep or {}).items()} == \
            {k: sorted(v) for k, v in (other or {}).items()}
    except (TypeError, AttributeError):
        return False


def refuse_fixed_and_swept(changes: dict, sweep, resuming=None, algorithm: str | None = None) -> None:
    """A value given for a swept hyperparameter would train no member (each trains at its sweep's
    value): refused, naming the field, rather than ignored."""
    # (a name no member of the algorithm can differ in gets validate's error, which names the ones they can)
    sweepable = SWEEPABLE.get(algorithm) or {k for names in SWEEPABLE.values() for k in names}
    for key, values in (sweep or {}).items():
        if key in changes and key in sweepable:
            if resuming:
                raise ResumeError(f"{key} is swept in {resuming!r} ({key}: {list(values)}): a resume keeps each "
                                  f"member's value, so {key}={changes[key]!r} would change nothing; drop it to "
                                  f"continue the run, or start a new run")
            raise cfg.ConfigError(f"{key} is given ({changes[key]!r}) and swept ({key}: {list(values)}): every "
                                  f"member trains at a value of the sweep, none at {changes[key]!r}; drop {key} "
                                  f"(--{key.replace('_', '-')}), or add {changes[key]!r} to the sweep")
