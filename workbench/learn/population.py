"""A population: the members a config asks for (`seeds` times the settings of `sweep`) and the
hyperparameters each member learns with.

Members are numbered setting-major: with settings s = 0..G-1 of the sweep's grid (the first swept
name varying slowest) and seeds i = 0..seeds-1, member k = s * seeds + i trains with seed + k and the
values of setting s. Member k of a population learns exactly what a standalone run of
`member_config(config, k)` learns (tests/test_population.py checks it).
"""
from __future__ import annotations

import itertools
import math
import numbers
import warnings
from dataclasses import dataclass

import torch

from . import checkpoint as ckpt, config as cfg
from .ranking import HYPERPARAMETERS, lower_first, rank_key, ranking_text, setting_label, sweep_settings
from ..errors import WorkbenchWarning


@dataclass(frozen=True)
class Member:
    index: int
    seed: int
    setting: int  # index of its sweep setting
    values: dict  # the swept hyperparameters' values (empty without a sweep)


def members_of(config) -> list:
    """The members of `config`'s population (one member without seeds or sweep)."""
    sweep = dict(config.sweep or {})
    names = list(sweep)
    grid = list(itertools.product(*(sweep[n] for n in names))) if names else [()]
    out = []
    for s, values in enumerate(grid):
        for i in range(config.seeds):
            k = s * config.seeds + i
            out.append(Member(k, config.seed + k, s, {n: float(v) for n, v in zip(names, values)}))
    return out


def rank_members(config, split, distributed) -> tuple:
    """(the members this process trains, distributed.MemberRanks or None): all of them, or under
    torchrun (split: the distributed.Context) this rank's block of a population."""
    from . import distributed as dist_mod
    from .members import PopulationError
    members = members_of(config)
    if split is None:
        if len(members) > 1 and (distributed or (distributed is None and dist_mod.launched_by_torchrun())):
            raise PopulationError("under torchrun a population's members are split over the ranks: build its "
                                  "trainer with wb.make_trainer (or wb.train, or the CLI)")
        return members, None
    start, stop = dist_mod.member_slice(len(members), split)
    return members[start:stop], dist_mod.MemberRanks(split)


def size(config) -> int:
    """How many members `config` trains."""
    return config.seeds * max(1, len(list(itertools.product(*(config.sweep or {}).values()))))


def member_config(config, k: int):
    """The standalone config member k of `config`'s population learns as."""
    member = members_of(config)[k]
    return cfg.replace(config, seed=member.seed, seeds=1, sweep=None, **member.values)


class Hyper:
    """The hyperparameters the learner reads per member: each a float when every member shares it,
    else a float32 device tensor [M] (lr is always [M] for a population: each member's optimiser
    step scales by its own)."""

    NAMES = ("lr", "ent_coef", "clip_coef", "gamma", "gae_lambda", "vf_coef", "max_grad_norm",
             "actor_lr", "critic_lr", "tau", "exploration_noise")

    def __init__(self, config, members: list, device):
        self.members = len(members)
        self._rows: dict = {}
        swept = set(config.sweep or {})
        for name in self.NAMES:
            if not hasattr(config, name):
                setattr(self, name, None)
                continue
            if name in swept:
                value = torch.tensor([m.values[name] for m in members], dtype=torch.float32, device=device)
            else:
                value = float(getattr(config, name))
            setattr(self, name, value)

    def per_member(self, name: str, device=None):
        """[M] float32 tensor of a hyperparameter, whether swept or shared."""
        value = getattr(self, name)
        if isinstance(value, torch.Tensor):
            return value
        return torch.full((self.members,), float(value), dtype=torch.float32, device=device)

    def per_replica(self, name: str, replicas_per_member: int):
        """A float, or for a swept hyperparameter [M * replicas_per_member, 1] (one value per replica,
        broadcasting against per-agent tensors [E, n])."""
        value = getattr(self, name)
        if not isinstance(value, torch.Tensor):
            return value
        key = (name, replicas_per_member)
        if key not in self._rows:  # built once (before a CUDA graph captures the iteration that reads it)
            self._rows[key] = value.repeat_interleave(replicas_per_member).reshape(-1, 1)
        return self._rows[key]


# -- one member out of a population's checkpoint -------------------------------------------------
def latest_report(history: list, window: float = 0.0) -> dict:
    """A population's last report with each member's entry the member's latest one that has a value
    of the statistic the run ranks by (ranking.rank_key): where no episode ended in the last log
    window (long episodes, a short log_every) it is NaN there, and its earlier reports are what the
    run knows of the member. `window` (config.rank_window) > 0: every statistic of a member is the mean
    of its values in its reports of the last `window` share of the env-steps that have a value of the
    ranking statistic ("window_reports" of them), where it has any."""
    last = dict(history[-1])
    if not last.get("members"):
        return last
    key = rank_key(last)
    latest, seen = {}, {}
    start = last.get("env_steps", 0) * (1 - window)
    for report in history:
        for m in report.get("members") or ():
            if m.get(key, math.nan) == m.get(key) or m["member"] not in latest:
                latest[m["member"]] = m
            if window > 0 and report.get("env_steps", 0) >= start and m.get(key, math.nan) == m.get(key):
                seen.setdefault(m["member"], []).append(m)
    last["members"] = [_window_mean(seen[m["member"]]) if m["member"] in seen else latest.get(m["member"], m)
                       for m in last["members"]]
    return last


WINDOW_KEPT = ("episodes", "time_s", "learning_rate", "env_steps_per_s")  # (a window's latest or sum, not a mean)


def _window_mean(entries: list) -> dict:
    """A member's latest entry of `entries` (its reports in a ranking window, each with a value of the
    ranking statistic) with every statistic the mean of its finite values there (not the counters, the
    member's index, seed, swept values, time or learning rate; "episodes" their sum)."""
    out = {**entries[-1], "window_reports": len(entries),
           "episodes": sum(int(m.get("episodes") or 0) for m in entries)}
    for key, value in entries[-1].items():
        if isinstance(value, float) and key not in HYPERPARAMETERS and key not in WINDOW_KEPT:
            finite = [m[key] for m in entries if isinstance(m.get(key), float) and math.isfinite(m[key])]
            out[key] = sum(finite) / len(finite) if finite else value
    return out


def final_ranking(history: list, run_dir=None, window: float = 0.0) -> tuple:
    """(sweep_settings rows, their table with a line on what the values are) of a sweep's history
    at its end, each member at its latest value (latest_report; with `window`, config.rank_window,
    its mean over the last share of training)."""
    latest = latest_report(history, window)
    rows = sweep_settings(latest)
    evaluate = f"python -m workbench evaluate {run_dir or 'RUN'} --member all"
    value = (f"the mean of its values in its reports of the last {window:.0%} of training (from "
             f"{latest.get('env_steps', 0) * (1 - window):,.0f} env-steps on)" if window > 0
             else "its mean over the episodes that ended in its last report's window")
    return rows, (ranking_text(rows, latest.get("iteration"))
                  + f"\n(a member's value: {value}; for a results table, evaluate every member: {evaluate})")


def best_member(report: dict, window: float = 0.0) -> int:
    """The member whose latest report has the highest value of the statistic the run ranks by
    (ranking.rank_key: config.rank_by, mean_return by default; the lowest for a rank_by "-NAME"), of
    a population's last report or of its history (latest_report, with `window`: config.rank_window)."""
    if isinstance(report, list):
        report = latest_report(report, window)
    members = report.get("members")
    if not members:
        return 0
    key, sign = rank_key(report), (-1.0 if lower_first(report) else 1.0)
    finite = [(sign * m[key], -m["member"]) for m in members if m.get(key, float("nan")) == m.get(key)]
    return -max(finite)[1] if finite else 0  # (a tie: the lowest index, as the ranking's table says)


def stacked_layout(models: dict) -> dict:
    """Per policy: the paths of its MemberLinear layers and the names of its parameters in order (what
    unstacking a checkpoint's state needs)."""
    from .members import MemberLinear
    return {name: {"linear": [p for p, m in model.named_modules() if isinstance(m, MemberLinear)],
                   "params": [n for n, p in model.named_parameters()],
                   "trainable": [n for n, p in model.named_parameters() if p.requires_grad]}
            for name, model in models.items()}


def _unstack_state(state: dict, layout: dict, k: int) -> dict:
    out = {}
    params = set(layout["params"]) | {f"{p}.{leaf}" for p in layout["linear"] for leaf in ("weight", "bias")}
    for key, value in state.items():
        path, _, leaf = key.rpartition(".")
        if path in layout["linear"]:
            out[key] = (value[k].t() if leaf == "weight" else value[k, 0]).contiguous().clone()
        elif key in params:
            out[key] = value[k].clone()
        else:
            out[key] = value.clone()
    return out


def _unstack_adam(state: dict, layout: dict, shapes: dict, k: int, prefix: str = "") -> dict:
    """A MemberAdam's state -> member k's Adam moments, one per parameter in order (loaded into the
    standalone trainer's own optimiser by trainer_state.restore); prefix: the optimised submodule's
    (DDPG's "actor." or "critic.")."""
    moments = {"exp_avg": [], "exp_avg_sq": []}
    offset = 0
    for name in [n for n in layout.get("trainable", layout["params"]) if n.startswith(prefix)]:
        shape = shapes[name]
        size = 1
        for d in shape:
            size *= d
        for key in moments:
            part = state[key][k, offset:offset + size]
            path = name.rpartition(".")[0]
            if path in layout["linear"] and name.endswith(".weight"):
                part = part.reshape(shape[1], shape[0]).t()  # stored [in, out]
            moments[key].append(part.reshape(shape).contiguous().clone())
        offset += size
    steps = state["steps"]  # [M, 1] (one count for every member in checkpoints before target_kl stopped them apart)
    return {"member_adam": True, "step": float(steps.reshape(-1)[k] if steps.dim() else steps),
            "lr": float(state["lr"][k, 0]), **moments}


def _member_norm(state: dict, k: int) -> dict:
    """Member k's part of a MemberNorm's state, as a RunningNorm's."""
    return {key: (v[k].squeeze(-1) if key == "count" else v[k]).clone() for key, v in state.items()}


def member_env_state(env_state: dict, members: int, k: int) -> dict:
    """Member k's replicas of a population's env state (every array's leading replica axis)."""
    out = {}
    for name, value in env_state.items():
        per = value.shape[0] // members if value.dim() else 0
        out[name] = value[k * per:(k + 1) * per].clone() if per and per * members == value.shape[0] else value
    return out


def _unstack_replay(state: dict, members: int, k: int) -> dict:
    """Member k's part of a population's replay buffer (member k owns rows [k * C, (k + 1) * C))."""
    out = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            per = value.shape[0] // members
            out[key] = value[k * per:(k + 1) * per].clone()
        else:
            out[key] = value
    return out


def _member_row(report: dict, population_columns: set, members: int) -> dict:
    """A member's report as a single run's: no population columns, and its share of the population's
    env-steps/s (a population's report gives every member the whole population's rate)."""
    row = {key: v for key, v in report.items() if key not in population_columns}
    if isinstance(row.get("env_steps_per_s"), (int, float)):
        row["env_steps_per_s"] = row["env_steps_per_s"] / members
    return row


def member_label(member_of: dict) -> str:
    """Which member a member's payload is ("member_of"): "member 6 of 8 (the best by mean_return, in its
    last training report), seed 6, lr=0.003"."""
    text = f"member {member_of['member']} of {member_of['members']}"
    window = member_of.get("rank_window")
    when = f"over the last {window:.0%} of training" if window else "in its last training report"
    text += f" (the best by {member_of['best_by']}, {when})" if member_of.get("best_by") else ""
    text += f", seed {member_of['seed']}" if "seed" in member_of else ""
    return text + (f", {setting_label(member_of['values'])}" if member_of.get("values") else "")


def member_payload(payload: dict, k) -> dict:
    """A population checkpoint's payload -> member k's as a standalone run's checkpoint payload (the
    member's weights, optimiser moments, normaliser, env replicas, random streams, history); k may be
    "best". Training it on continues as the member would have in its population (to float rounding:
    members' batched matmuls round apart from one member's)."""
    info = payload.get("population")
    if not info:
        raise cfg.ConfigError("this checkpoint is not a population's (it has no members); load it as it is")
    config = ckpt.stored_config(payload)
    history = payload.get("history") or []
    asked, best_by = k, None
    try:
        if k == "best":
            known = latest_report(history, config.rank_window) if history else {}
            k, best_by = best_member(known), rank_key(known)
            if not any(m.get(best_by) == m.get(best_by) for m in known.get("members") or ()):
                warnings.warn(f"no member of this population has a value of {best_by} yet (no episode ended): "
                              f"'best' falls back to member {k}; name a member to pick another",
                              WorkbenchWarning, stacklevel=2)
                best_by = None  # (not the best by anything)
        elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
            k = int(k)
        else:
            k = -1
    except (TypeError, ValueError):
        k = -1
    if not 0 <= k < info["members"]:
        raise cfg.ConfigError(f"member (--member) must be an index in 0..{info['members'] - 1} or 'best' ('all' "
                              f"where every member plays at once: evaluate, load_policy), got {asked!r}"
                              + (f" ({type(asked).__name__})" if not isinstance(asked, (int, str)) else ""))
    models, optimizers = {}, {}
    for name, state in payload["models"].items():
        layout = info["layout"][name]
        models[name] = _unstack_state(state, layout, k)
        shapes = {p: tuple(models[name][p].shape) for p in layout["params"]}
        saved = payload["optimizers"][name]
        optimizers[name] = ([_unstack_adam(o, layout, shapes, k, prefix)
                             for o, prefix in zip(saved, ("actor.", "critic."))]
                            if isinstance(saved, (list, tuple)) else _unstack_adam(saved, layout, shapes, k))
    replay = {name: _unstack_replay(state, info["members"], k) for name, state in payload.get("replay", {}).items()}
    norms = {name: _member_norm(state, k) for name, state in payload["norms"].items()}
    reward_scales = {name: _member_norm(state, k) for name, state in payload.get("reward_scales", {}).items()}
    member = members_of(config)[k]
    population_columns = {"member", "seed", *member.values}  # a single run's reports have none: its config says them
    signature = {**payload["signature"], "members": 1}
    rng = dict(payload["rng"])
    rng["streams"] = {"counter": payload["rng"]["streams"]["counter"], "seeds": [member.seed + 1]}
    out = {**payload, "config": cfg.to_dict(member_config(config, k)), "signature": signature, "models": models,
           "optimizers": optimizers, "norms": norms, "reward_scales": reward_scales, "rng": rng, "population": None,
           "replay": replay, "reward_returns": member_env_state(payload.get("reward_returns", {}), info["members"], k),
           "history": [_member_row(r["members"][k], population_columns, info["members"])
                       for r in history if r.get("members")],
           "env_state": member_env_state(payload["env_state"], info["members"], k),
           "env_seed": member.seed, "member_of": {"members": info["members"], "member": k, "seed": member.seed,
                                                  "values": dict(member.values),
                                                  **({"best_by": best_by} if best_by else {})}}
    if best_by and lower_first(known):
        out["member_of"]["best_by"] = f"{best_by}, the lowest"
    if best_by and config.rank_window > 0:
        out["member_of"]["rank_window"] = config.rank_window
    return out


# -- a population split over ranks: its parts' checkpoints -----------------------------------------
def _stacked_keys(layout: dict) -> set:
    return set(layout["params"]) | {f"{p}.{leaf}" for p in layout["linear"] for leaf in ("weight", "bias")}


def _adam_parts(saved, fn):
    """fn applied to each MemberAdam state of a policy (DDPG's are an (actor, critic) pair)."""
    if isinstance(saved, (list, tuple)):
        return [fn(i) for i in range(len(saved))]
    return fn(None)


def merge_payloads(parts: list) -> dict:
    """The checkpoint payloads of a population's ranks (each a population of its consecutive members,
    in rank order) -> the payload of the whole population, as one process training every member
    would have written it."""
    first = parts[0]
    info = first["population"]
    members = sum(p["population"]["members"] for p in parts)
    replicas = info["replicas_per_member"] * info["members"]

    def cat(get):
        return torch.cat([get(p) for p in parts])

    models = {}
    for name, state in first["models"].items():
        stacked = _stacked_keys(info["layout"][name])
        models[name] = {k: cat(lambda p: p["models"][name][k]) if k in stacked else v for k, v in state.items()}

    def adam(name, i):
        get = (lambda p: p["optimizers"][name][i]) if i is not None else (lambda p: p["optimizers"][name])
        return {"exp_avg": cat(lambda p: get(p)["exp_avg"]), "exp_avg_sq": cat(lambda p: get(p)["exp_avg_sq"]),
                "lr": cat(lambda p: get(p)["lr"]),
                "steps": cat(lambda p: get(p)["steps"]) if get(first)["steps"].dim() else get(first)["steps"]}

    optimizers = {name: _adam_parts(saved, lambda i, n=name: adam(n, i)) for name, saved in first["optimizers"].items()}
    norms = {name: {k: cat(lambda p: p["norms"][name][k]) for k in state} for name, state in first["norms"].items()}
    reward_scales = {name: {k: cat(lambda p: p["reward_scales"][name][k]) for k in state}
                     for name, state in first.get("reward_scales", {}).items()}
    reward_returns = {name: cat(lambda p: p["reward_returns"][name]) for name in first.get("reward_returns", {})}
    replay = {name: {k: cat(lambda p: p["replay"][name][k]) if isinstance(v, torch.Tensor) and v.dim() else v
                     for k, v in state.items()} for name, state in first.get("replay", {}).items()}
    env_state = {k: cat(lambda p: p["env_state"][k]) if v.dim() and v.shape[0] == replicas else v
                 for k, v in first["env_state"].items()}
    rng = dict(first["rng"])
    rng["streams"] = {**first["rng"]["streams"], "seeds": [s for p in parts for s in p["rng"]["streams"]["seeds"]]}
    return {**first, "models": models, "optimizers": optimizers, "norms": norms, "replay": replay,
            "reward_scales": reward_scales, "reward_returns": reward_returns, "env_state": env_state, "rng": rng,
            "signature": {**first["signature"], "members": members},
            "population": {**info, "members": members}}


def slice_payload(payload: dict, start: int, stop: int) -> dict:
    """A whole population's checkpoint payload -> members [start, stop) as their own population's
    (what the rank training them under torchrun resumes from); the inverse of merge_payloads."""
    info = payload["population"]
    members = info["members"]
    replicas = info["replicas_per_member"] * members

    def part(value, per=1):
        return value[start * per:stop * per].clone()

    models = {}
    for name, state in payload["models"].items():
        stacked = _stacked_keys(info["layout"][name])
        models[name] = {k: part(v) if k in stacked else v for k, v in state.items()}

    def adam(saved):
        return {**saved, "exp_avg": part(saved["exp_avg"]), "exp_avg_sq": part(saved["exp_avg_sq"]),
                "lr": part(saved["lr"]), "steps": part(saved["steps"]) if saved["steps"].dim() else saved["steps"]}

    optimizers = {name: [adam(s) for s in saved] if isinstance(saved, (list, tuple)) else adam(saved)
                  for name, saved in payload["optimizers"].items()}
    norms = {name: {k: part(v) for k, v in state.items()} for name, state in payload["norms"].items()}
    reward_scales = {name: {k: part(v) for k, v in state.items()}
                     for name, state in payload.get("reward_scales", {}).items()}
    reward_returns = {name: part(v, v.shape[0] // members) for name, v in payload.get("reward_returns", {}).items()}
    replay = {name: {k: part(v, v.shape[0] // members) if isinstance(v, torch.Tensor) and v.dim() else v
                     for k, v in state.items()} for name, state in payload.get("replay", {}).items()}
    env_state = {k: part(v, info["replicas_per_member"]) if v.dim() and v.shape[0] == replicas else v
                 for k, v in payload["env_state"].items()}
    rng = dict(payload["rng"])
    rng["streams"] = {**payload["rng"]["streams"], "seeds": payload["rng"]["streams"]["seeds"][start:stop]}
    return {**payload, "models": models, "optimizers": optimizers, "norms": norms, "replay": replay,
            "reward_scales": reward_scales, "reward_returns": reward_returns,
            "env_state": env_state, "rng": rng, "signature": {**payload["signature"], "members": stop - start},
            "env_seed": payload["env_seed"] + start,  # (block k of a population's replicas is seeded seed + k)
            "population": {**info, "members": stop - start}}
