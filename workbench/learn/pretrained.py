"""Policies that start from another run's trained ones (config.init_from) and policies that act without
learning (config.frozen): a fixed opponent, or one team trained before the other.

A source is a run folder or checkpoint file, the policy of that run to take, and for a population's
run the member (an index, or "best" by its rank_by). Its weights and observation normaliser are
copied into the trainer's policy (into every member of a population) before the first iteration; the
optimiser starts afresh; the trainer's config then records the source resolved (absolute path and
member), as config.yaml keeps it. A frozen policy acts as it would in training (sampling its actions) but is
never updated: no advantages, loss, optimiser step or normaliser update, and no update statistics in
the reports. Its returns are reported; mean_return, target_return and the best member count only
the policies that learn.
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .checkpoint import CheckpointError, shape_mismatch
from ..errors import ConfigError, WorkbenchError, WorkbenchWarning, did_you_mean

SOURCE_KEYS = ("run", "policy", "member")


@dataclass(frozen=True)
class Source:
    run: str  # a run folder or its checkpoint file
    policy: str  # the policy of that run whose weights are taken
    member: int | str = "best"  # a population's member: an index or "best"


def sources(config) -> dict:
    """{policy: Source} of config.init_from; ConfigError naming the entry that is not a source."""
    owner = f"{type(config).__name__}.init_from"
    out = {}
    for policy, spec in (config.init_from or {}).items():
        if not isinstance(policy, str) or not policy:
            raise ConfigError(f"{owner} is keyed by policy names (text), got {policy!r}")
        if isinstance(spec, (str, Path)) and str(spec):
            out[policy] = Source(str(spec), policy)
            continue
        if not isinstance(spec, dict):
            raise ConfigError(f"{owner}[{policy!r}] must be a run folder or checkpoint (text), or {{run: RUN, "
                              f"policy: NAME, member: K}}, got {spec!r}")
        unknown = sorted(set(spec) - set(SOURCE_KEYS), key=str)
        if unknown:
            raise ConfigError(f"{owner}[{policy!r}] has key(s) {unknown}; a source's keys are {list(SOURCE_KEYS)}"
                              + did_you_mean(str(unknown[0]), SOURCE_KEYS))
        run, name, member = spec.get("run"), spec.get("policy", policy), spec.get("member", "best")
        if not isinstance(run, (str, Path)) or not str(run):
            raise ConfigError(f"{owner}[{policy!r}] needs run: a run folder or checkpoint file, got {run!r}")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{owner}[{policy!r}].policy must name a policy of that run, got {name!r}")
        if member != "best" and not (isinstance(member, numbers.Integral) and not isinstance(member, bool)
                                     and member >= 0):
            raise ConfigError(f"{owner}[{policy!r}].member must be a member's index (0, 1, ...) or 'best', "
                              f"got {member!r}")
        out[policy] = Source(str(run), name, member if member == "best" else int(member))
    return out


def validate_fields(config) -> None:
    """frozen and init_from are well formed (their names are checked against the policy map by
    check_policies, once it is known)."""
    owner = type(config).__name__
    twice = sorted({name for name in config.frozen if config.frozen.count(name) > 1})
    if twice:
        raise ConfigError(f"{owner}.frozen lists {twice} more than once, got {list(config.frozen)}")
    if any(not name for name in config.frozen):
        raise ConfigError(f"{owner}.frozen holds an empty name, got {list(config.frozen)}")
    sources(config)


def check_policies(config, policies: list) -> None:
    """ConfigError unless frozen and init_from name policies of the run (`policies`, its policy map's
    names) and at least one policy learns."""
    owner = type(config).__name__
    for field, names in (("frozen", list(config.frozen)), ("init_from", list(config.init_from or {}))):
        for name in names:
            if name not in policies:
                alone = ("; 'shared' is the one policy of every agent that a Trainer without policies= gets: pass "
                         "policies={name: agent ids} (wb.make_trainer maps the env's AGENT_GROUPS)"
                         if policies == ["shared"] else "")
                raise ConfigError(f"{owner}.{field} names {name!r}, which is not a policy of this run; its "
                                  f"policies are {policies}" + did_you_mean(name, policies, repr) + alone)
    if policies and all(name in config.frozen for name in policies):
        raise ConfigError(f"{owner}.frozen holds every policy ({policies}), so nothing would learn: leave the "
                          f"ones to train out (to watch trained policies play: python -m workbench evaluate RUN, "
                          f"or wb.replay(RUN))")


def load(tr) -> list:
    """Copy every init_from source into trainer `tr`'s policy (each member of a population) and its
    normaliser, and record the sources resolved (absolute run, policy, member) in tr.config; returns
    one line per policy that starts from a source or is frozen at its initial weights."""
    from .runs import load_checkpoint
    from . import population
    lines, resolved = [], {}
    for policy, source in sources(tr.config).items():
        where = f"init_from[{policy!r}]"
        member, k = "", None
        try:
            path, payload = load_checkpoint(source.run)
            if payload.get("population"):
                payload = population.member_payload(payload, source.member)
                member, k = f", {population.member_label(payload['member_of'])}", payload["member_of"]["member"]
        except WorkbenchError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        if k is None and source.member not in ("best", 0):
            raise CheckpointError(f"{where}: {str(path)!r} is not a population's run, so it has no member "
                                  f"{source.member!r}: leave member out")
        _check_fits(tr, policy, payload["signature"], source, where, path)
        saved = payload["models"]
        if source.policy not in saved:
            raise CheckpointError(f"{where}: {str(path)!r} has no policy {source.policy!r}; its policies are "
                                  f"{sorted(saved)}" + did_you_mean(source.policy, saved, repr)
                                  + f" (name one: {{{policy}: {{run: ..., policy: NAME}}}})")
        _load_weights(tr, policy, saved[source.policy], where, path)
        norm = payload["norms"].get(source.policy)
        if norm is not None:
            _load_norm(tr.norms[policy], norm, tr.M)
        _start_reward_scale(tr, policy, payload.get("reward_scales", {}).get(source.policy), where, path)
        resolved[policy] = {"run": str(Path(path).resolve()), "policy": source.policy,
                            **({"member": k} if k is not None else {})}
        lines.append(f"policy {policy!r} starts from {source.policy!r} of {path}{member}"
                     + (" (frozen)" if policy in tr.config.frozen else ""))
    lines += [(f"policy {name!r} is frozen at its initial weights (seed {tr.config.seed}); init_from={{{name}: RUN}} "
               f"would start it from a trained run" if _default_network(tr.models[name]) else
               f"policy {name!r} is frozen as given (a model of your own)")
              for name in tr.config.frozen if name not in resolved]
    if resolved:  # (what config.yaml and the checkpoint keep: the exact source, wherever the run is read)
        tr.config = replace(tr.config, init_from=resolved)
        tr.refresh_rollout_copies()
    return lines


def _default_network(model) -> bool:
    """Whether `model` (a DDPG agent's actor) is one of the default networks (policies.py's), not a user's."""
    from . import policies
    from .algorithms.ddpg import DDPGAgent
    return type(model.actor if isinstance(model, DDPGAgent) else model).__module__ == policies.__name__


def _check_fits(tr, policy: str, theirs: dict, source: Source, where: str, path) -> None:
    """CheckpointError where the source policy was trained for other observations or actions, another
    algorithm family or another network than the trainer's policy (in that order: the first fix
    named is one that helps); the message names both values and the fix."""
    from .learners import hidden_activation
    their_env = theirs.get("env", "?")
    for key, mine in (("obs_shape", list(tr.env.obs_shape)), ("action_space", repr(tr.env.action_space))):
        if theirs.get(key) is not None and theirs[key] != mine:
            raise CheckpointError(f"{where}: {str(path)!r} trained env {their_env!r}, whose {key} is {theirs[key]!r}; "
                                  f"this run's env {tr.env.name!r} has {mine!r}: start from a run of an env with the "
                                  f"same observations and actions")
    mine = {"DDPG's actor and Q-critic": tr.algorithm == "ddpg", "centralised critic": policy in tr.central,
            "shared_body": bool(tr.config.shared_body), "hidden_sizes": list(tr.config.hidden_sizes),
            "activation": hidden_activation(tr.config), "normalize_obs": bool(tr.norms)}
    saved = dict(theirs, **{"centralised critic": source.policy in (theirs.get("centralised_critic") or ()),
                            "DDPG's actor and Q-critic": theirs.get("algorithm") == "ddpg"})
    fixes = {"normalize_obs": f"set normalize_obs: {saved.get('normalize_obs')} as the source run did",
             "hidden_sizes": f"set hidden_sizes: {saved.get('hidden_sizes')}",
             "activation": f"set activation: {saved.get('activation')}",
             "shared_body": f"set shared_body: {saved.get('shared_body')}",
             "centralised critic": "list the policy in centralised_critic as the source run did, or not",
             "DDPG's actor and Q-critic": "start a policy from a run of the same algorithm family (PPO and A2C "
                                          "share their networks; DDPG's are its own)"}
    for key, value in mine.items():
        if key in saved and saved[key] is not None and saved[key] != value:
            raise CheckpointError(f"{where}: policy {source.policy!r} of {str(path)!r} was trained with {key}="
                                  f"{saved[key]!r}, this run's policy {policy!r} has {value!r}: {fixes[key]}")


def _load_weights(tr, policy: str, state: dict, where: str, path) -> None:
    """The source's state dict (one model's) into the policy: every member's copy of a stacked one."""
    from .members import member_state, load_member_state
    model = tr.models[policy]
    mismatch = shape_mismatch(state, model.state_dict() if tr.M == 1 else member_state(model, 0))
    if mismatch is not None:
        key, theirs, mine = mismatch
        raise CheckpointError(f"{where}: parameter {key!r} of policy {policy!r} is {theirs} in {str(path)!r} and "
                              f"{mine} here: another network (a custom model, or another env's sizes)")
    with torch.no_grad():
        if tr.M == 1:
            model.load_state_dict(state)
        else:
            for k in range(tr.M):
                load_member_state(model, k, state)


def _start_reward_scale(tr, policy: str, theirs, where: str, path) -> None:
    """A learning policy that scales its rewards as its source did starts from the source's statistics
    (its critic learned returns in their units); one that scales them otherwise is warned about."""
    mine = tr.reward_scales.get(policy)
    if mine is not None and theirs is not None:
        _load_norm(mine.stats, theirs, tr.M)
    elif tr.algorithm != "ddpg" and policy not in tr.config.frozen and (mine is None) != (theirs is None):
        warnings.warn(f"{where}: {str(path)!r} trained with normalize_reward={theirs is not None}, this run has "
                      f"{mine is not None}: the critic starts with values in the other units and learns them anew "
                      f"(set normalize_reward: {theirs is not None} to start as the source left it)",
                      WorkbenchWarning, stacklevel=4)


def _load_norm(norm, state: dict, members: int) -> None:
    """A single run's normaliser statistics into `norm` (each member's row of a population's)."""
    if members == 1:
        norm.load_state_dict(state)
        return
    norm.load_state_dict({"mean": state["mean"].expand_as(norm.mean), "var": state["var"].expand_as(norm.var),
                          "count": torch.full_like(norm.count, float(state["count"]))})
