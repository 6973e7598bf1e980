"""An env's own metrics of a finished episode: EVAL_METRICS = {name: fn}, fn(store, params) -> [E], or Tag's.

A function reads the episode each replica has just finished (where store["done"]) from store["final_obs"],
store["last_return"] [E, A], store["last_length"] [E] or the env's state arrays; params holds the env's
parameters (p["num_runners"] or p.num_runners). Training and evaluation average them over finished episodes.
"""
from __future__ import annotations

import types

import torch

from ..errors import EnvDefinitionError, did_you_mean

CONTRACT = ("an EVAL_METRICS function takes (store, params) and returns a tensor [E] on the env's device: the value "
            "of the episode each replica just finished, read from store['final_obs'] [E, A, O], "
            "store['last_return'] [E, A], store['last_length'] [E] or the env's arrays; params holds the env's "
            "parameters, as p['name'] or p.name")


class MetricParams(types.SimpleNamespace):
    """An env's parameters as its metric functions get them: p["num_runners"] or p.num_runners (the same
    object AGENT_GROUPS' functions get, with items too)."""

    def __getitem__(self, name):
        try:
            return vars(self)[name]
        except KeyError:
            raise KeyError(self._unknown(name)) from None

    def __getattr__(self, name):
        raise AttributeError(self._unknown(name))

    def __contains__(self, name):
        return name in vars(self)

    def __iter__(self):
        return iter(vars(self))

    def __len__(self):
        return len(vars(self))

    def _unknown(self, name) -> str:
        return f"the env has no parameter {name!r}{did_you_mean(str(name), vars(self), repr)}; its parameters: " \
               f"{sorted(vars(self))}"


def _runner_ids(params):
    return slice(params["num_taggers"], params["num_taggers"] + params["num_runners"])


def _runners_tagged(store, params):
    """Runners out of the game at the end of the episode just finished, per replica [E].

    An agent out of a Tag game observes all zeros (both Tag envs' rule), and an agent in the game
    never does (tag_grid's runners see is_runner = 1, tag_continuous's agents see in_game = 1), so
    the final observation holds the in_game flags of the episode's last state.
    """
    final = store["final_obs"][:, _runner_ids(params)]
    in_game = final.reshape(final.shape[0], final.shape[1], -1).ne(0).any(-1)
    return params["num_runners"] - in_game.sum(1).float()


TAG_METRICS = {
    "runners_tagged": _runners_tagged,
    "tag_rate": lambda store, p: _runners_tagged(store, p) / p["num_runners"],
    "runner_survival": lambda store, p: 1.0 - _runners_tagged(store, p) / p["num_runners"],
}
# metrics that are an affine function of another's per-episode value: their mean over episodes is that
# function of the other's mean, so a training run's statistics compute only the other at every step
DERIVED_METRICS = {
    "tag_rate": ("runners_tagged", lambda mean, p: mean / p["num_runners"]),
    "runner_survival": ("runners_tagged", lambda mean, p: 1.0 - mean / p["num_runners"]),
}


def env_metrics(env) -> dict:
    """The env's EVAL_METRICS, or TAG_METRICS for a Tag game, or {} (env: an Env or its definition)."""
    definition = getattr(env, "definition", env)
    namespace = definition.namespace
    declared = namespace.get("EVAL_METRICS")
    if declared is not None:
        return dict(declared)
    groups = namespace.get("AGENT_GROUPS")
    params = definition.params
    if groups is not None and "in_game" in definition.arrays and {"num_taggers", "num_runners"} <= set(params):
        return dict(TAG_METRICS)
    return {}


def checked_metrics(env) -> tuple:
    """(env_metrics(env), the MetricParams they take), each function called once on the env's arrays as they
    are, so that a mistake in one is an EnvDefinitionError naming the metric before training or evaluation
    starts, not an error at the first finished episode. Checks the code and the result's shape [E], dtype
    and device, not the values."""
    metrics, params = env_metrics(env), MetricParams(**env.definition.params)
    E = env.num_envs
    for name, fn in metrics.items():
        where = f"{env.definition.name}: EVAL_METRICS[{name!r}]"
        try:
            value = fn(env.store, params)
        except Exception as exc:  # noqa: BLE001 - any error of the env's own code, named by its metric
            raise EnvDefinitionError(f"{where} failed on the env's arrays (called once before training, where no "
                                     f"episode may have ended yet: last_length 0): {type(exc).__name__}: {exc}\n"
                                     f"  ({CONTRACT})") from exc
        if not isinstance(value, torch.Tensor):
            problem = f"returned {type(value).__name__}, not a tensor"
        elif tuple(value.shape) not in ((E,), ()):
            problem = f"returned shape {tuple(value.shape)} where {E} replicas need [{E}] (one value a replica)"
        elif value.dtype.is_complex:
            problem = f"returned dtype {value.dtype}"
        elif value.device != env.store["done"].device and value.dim() > 0:
            problem = f"returned a tensor on {value.device}, not on the env's device {env.store['done'].device}"
        else:
            continue
        raise EnvDefinitionError(f"{where} {problem}\n  ({CONTRACT})")
    return metrics, params
