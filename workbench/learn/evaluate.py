"""Evaluate trained policies against the uniformly random policy.

`evaluate(trainer)` plays the first `episodes` episodes of every replica from a fresh reset and
reports, per finished episode: the mean return of every policy (per agent), the episode length
and the env's own evaluation metrics. Any policy can be replaced by uniformly random actions
(`random_policies`), the baseline a trained policy must beat; `compare(trainer)` runs the trained
policies, then each policy replaced by random in turn.

Everything accumulates on the device: a step adds the episodes that just finished to running sums
(masked by `done` and by "this is one of the replica's first `episodes` episodes"); the host reads
the sums once at the end. There is no synchronisation inside the loop.

Env metrics. An env may define `EVAL_METRICS = {name: fn}` where `fn(store, params)` returns a
tensor [E] with the value of the episode that each replica has just finished (read from
`store["final_obs"]`, `store["last_return"]`, `store["last_length"]` or its own state arrays:
the same-step auto-reset has already reset the state, so arrays describing the finished episode
must be read from the final observation). The value is averaged over the counted episodes.
Tag envs (agent groups `taggers` and `runners` and an `in_game` state array) get TAG_METRICS
when they define none.
"""
from __future__ import annotations

import math
import secrets
import warnings

import torch

from ..errors import WorkbenchError, WorkbenchWarning, did_you_mean
from ..runtime.env_metrics import checked_metrics
from .episode_stats import agent_groups_apart
from .streams import MemberStreams, random_policy_site

DEFAULT_STEPS_CAP = 100_000


class EvaluationError(WorkbenchError, ValueError):
    """An evaluation asked for something the run cannot do (an unknown policy, no episodes)."""


NOT_STATISTICS = ("stderr", "members", "settings", "per_episode")  # a report's keys that hold no one mean
HELD_OUT_SEED = 2**20  # evaluation's default seed: the run's plus this, starts no training episode began from


def held_out_seed(config) -> int:
    """The seed evaluate's CLI and `compare` default to: not the run's own (whose first training
    episodes would start from the same states), nor a member's of any population (seed + k)."""
    return config.seed + HELD_OUT_SEED


def evaluate(trainer, episodes: int = 1, random_policies=(), deterministic: bool = False, steps: int | None = None,
             seed: int | None = None, per_episode: bool = False) -> dict:
    """Play the first `episodes` episodes of every replica; returns host floats:
    return/NAME (mean per-agent episode return of each policy, undiscounted; group_return/NAME of each of
    the env's AGENT_GROUPS whose agents are no one policy's: a team's where one policy plays several),
    episode_length, episodes (how many were counted), steps, and the env's metrics; and `stderr`, each mean's
    standard error over the counted episodes. `steps` defaults to episodes x MAX_STEPS, which every
    replica needs at most; a smaller `steps` counts only the episodes that ended within it, which
    leans the means toward short episodes (a warning says so). per_episode: the report's
    `per_episode` holds every counted episode's values too, {key: [value, ...]} (replica 0's episodes in
    order, then replica 1's, ...), for distributions and bootstrap intervals. `seed` resets the env's random
    streams first (the same starts for every call with that seed; None: from the env's state as it
    is, the same starts at every call as the env is left as found, the samples drawn anew);
    sampled actions and random play come from one stream per member, keyed by seed + k.
    A population's trainer: `members` holds each member's report (its replicas' episodes; with its
    member, seed, evaluation_seed and swept values), and the top level the mean over members of
    their means, `stderr` its standard error over members. Member k's report equals that of member
    k alone (exported) evaluated with seed + k. The env, its streams and torch's global stream are
    left as they were found."""
    env = trainer.env
    names = [g.name for g in trainer.groups]
    unknown = sorted(set(random_policies) - set(names))
    if unknown:
        raise EvaluationError(f"random_policies (--random) names {unknown}, which are not in the policy map; "
                              f"choose from {names}{did_you_mean(unknown[0], names, repr)}")
    if episodes < 1:
        raise EvaluationError(f"episodes (--episodes) must be >= 1, got {episodes}")
    enough = episodes * env.definition.max_steps
    if steps is None:
        steps = enough
        if steps > DEFAULT_STEPS_CAP:
            raise EvaluationError(f"{env.name} has no practical episode bound (MAX_STEPS={env.definition.max_steps}):"
                                  f" pass steps (--steps)")
    random_groups = [g for g in trainer.groups if g.name in random_policies]
    # leave the env as it was found (state, seed, sampler), so evaluating mid-training changes nothing
    saved = env.store.snapshot(), env.seed, env._generator.get_state()
    # (seed None: other samples at each call, drawn without touching torch's global stream)
    first = secrets.randbits(62) if seed is None else seed
    try:
        with torch.random.fork_rng(devices=[env.device] if env.device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)  # (a model of one's own that draws from torch's stream); restored on exit
            streams = MemberStreams([first + k for k in range(getattr(trainer, "M", 1))], env.device)
            report = _play(trainer, episodes, steps, random_groups, deterministic, seed, streams, per_episode)
    finally:
        env.store.load_snapshot(saved[0])
        env.seed = saved[1]
        env._generator.set_state(saved[2])
    asked = env.num_envs * episodes
    if report["episodes"] < asked:
        warnings.warn(f"evaluate: {report['episodes']} of the {asked} episodes asked for ended within steps={steps}; "
                      f"the means count only those, which leans them toward short episodes: raise steps "
                      f"(--steps) or leave it out ({episodes} x MAX_STEPS = {enough})", WorkbenchWarning, stacklevel=2)
    return report


def _play(trainer, episodes, steps, random_groups, deterministic, seed, streams, per_episode=False) -> dict:
    env, store, device = trainer.env, trainer.env.store, trainer.env.device
    metrics, params = checked_metrics(env)
    members = getattr(trainer, "M", 1)
    env.reset(seed)
    finished = torch.zeros(env.num_envs, device=device)  # episodes each replica has finished
    counted = torch.zeros(members, device=device)  # (member k: replicas [k * E / M, (k + 1) * E / M))
    apart = agent_groups_apart(env.definition, {g.name: list(g.ids) for g in trainer.groups})
    apart_ids = {name: torch.as_tensor(ids, device=device) for name, ids in apart.items()}
    # float64 sums, as their squares': a float32 sum beside them gave identical episodes a standard error
    keys = [f"return/{g.name}" for g in trainer.groups] + [f"group_return/{name}" for name in apart] + \
        ["episode_length"] + list(metrics)
    sums = {key: torch.zeros(members, dtype=torch.float64, device=device) for key in keys}
    squares = {key: torch.zeros(members, dtype=torch.float64, device=device) for key in keys}  # (standard errors)
    saved = torch.empty_like(store["action"]) if random_groups else None
    # per_episode: each counted episode's values, [episodes, E] a key, where `ended` marks the ones played out
    if per_episode:
        slots = {key: torch.zeros((episodes, env.num_envs), device=device) for key in sums}
        ended = torch.zeros((episodes, env.num_envs), dtype=torch.bool, device=device)
        replicas = torch.arange(env.num_envs, device=device)
    for _ in range(steps):
        trainer.act(deterministic=deterministic, streams=streams)
        if random_groups:
            saved.copy_(store["action"])
            uniform = streams.uniform((saved.numel() // members,), random_policy_site())
            env.actions_from_uniform(uniform.reshape(saved.shape))
            for g in trainer.groups:
                if g not in random_groups:
                    g.scatter(store["action"], g.gather(saved))
        streams.advance()
        env.step()
        done = store["done"].float()
        finished.add_(done)
        weight = done * (finished <= episodes).float()  # this episode is one of the first `episodes`
        counted.add_(weight.reshape(members, -1).sum(1))
        values = {f"return/{g.name}": g.gather(store["last_return"]).mean(1) for g in trainer.groups}
        values.update({f"group_return/{name}": store["last_return"].index_select(1, ids).mean(1)
                       for name, ids in apart_ids.items()})
        values["episode_length"] = store["last_length"].float()
        values.update({key: fn(store, params).float() for key, fn in metrics.items()})
        for key, value in values.items():
            value = value.double()
            sums[key].add_((value * weight).reshape(members, -1).sum(1))
            squares[key].add_((value.square() * weight).reshape(members, -1).sum(1))
        if per_episode:
            slot, counts = (finished - 1).clamp(0, episodes - 1).long(), weight > 0
            ended[slot, replicas] |= counts
            for key, value in values.items():
                slots[key][slot, replicas] = torch.where(counts, value, slots[key][slot, replicas])
    host = torch.stack([counted.double()] + [sums[k] for k in keys] + [squares[k] for k in keys]).cpu()
    reports = [_report(keys, column[0], column[1:len(keys) + 1].tolist(), column[len(keys) + 1:].tolist(), steps)
               for column in host.T]
    if per_episode:  # (member k: replicas [k * E / M, (k + 1) * E / M), each replica's episodes in order)
        ended_by_member = ended.t().reshape(members, -1).cpu()
        for k, report in enumerate(reports):
            report["per_episode"] = {key: slots[key].t().reshape(members, -1)[k].cpu()[ended_by_member[k]].tolist()
                                     for key in keys}
    if members == 1:
        return reports[0]
    for report, member, stream_seed in zip(reports, trainer.members, streams.seeds):
        report.update(member=member.index, seed=member.seed, evaluation_seed=stream_seed, **member.values)
    means = {k: [r[k] for r in reports] for k in keys}
    report = {k: _mean_over(v) for k, v in means.items()}
    report.update(episodes=sum(r["episodes"] for r in reports), steps=steps, members=reports,
                  stderr={k: _standard_error(sum(v), sum(x * x for x in v), len(v)) if all(map(math.isfinite, v))
                          else math.nan for k, v in means.items()})
    return report


def _report(keys, n, totals, total_squares, steps) -> dict:
    """One report's means, episode count, steps and standard errors from its sums."""
    n = float(n)
    report = {k: (v / n if n > 0 else math.nan) for k, v in zip(keys, totals)}
    report["episodes"] = int(n)
    report["steps"] = int(steps)
    report["stderr"] = {k: _standard_error(v, q, n) for k, v, q in zip(keys, totals, total_squares)}
    return report


def _mean_over(values: list) -> float:
    return sum(values) / len(values) if values and all(map(math.isfinite, values)) else math.nan


def _standard_error(total: float, total_square: float, n: float) -> float:
    """The standard error of the mean of n values from their sum and sum of squares (NaN below 2)."""
    if n < 2:
        return math.nan
    mean = total / n
    return math.sqrt(max(total_square / n - mean * mean, 0.0) * n / (n - 1) / n)


def random_label(trainer, random_policies) -> str:
    """The label of a report with `random_policies` replaced by random actions: "random" where the
    run has one policy, else "random NAME ..." in the policy map's order."""
    names = [g.name for g in trainer.groups]
    if len(names) == 1:
        return "random"
    return "random " + " ".join(n for n in names if n in set(random_policies))


def compare(trainer, **kwargs) -> dict:
    """{label: report}: "trained", then "random NAME" for every policy replaced by random actions
    (one policy: "random"), all from the same starts (the seed defaults to held_out_seed's)."""
    kwargs.setdefault("seed", held_out_seed(trainer.config))
    out = {"trained": evaluate(trainer, **kwargs)}
    for g in trainer.groups:
        out[random_label(trainer, (g.name,))] = evaluate(trainer, random_policies=(g.name,), **kwargs)
    return out


def tag_side_labels(trainer) -> dict:
    """{"taggers": label, "runners": label}: the report in which exactly that side of a Tag game
    plays at random (the policies that control only its agents, together all of them), for the
    sides some policy map allows (a policy controlling agents of both sides allows neither)."""
    params = trainer.env.definition.params
    if not {"num_taggers", "num_runners"} <= set(params):
        return {}
    taggers = set(range(params["num_taggers"]))
    sides = {"taggers": taggers, "runners": set(range(trainer.env.num_agents)) - taggers}
    out = {}
    for side, ids in sides.items():
        policies = [g.name for g in trainer.groups if set(g.ids) <= ids]
        if policies and set().union(*(set(g.ids) for g in trainer.groups if g.name in policies)) == ids \
                and len(policies) < len(trainer.groups):
            out[side] = random_label(trainer, policies)
    return out


def format_comparison(results: dict, side_labels: dict | None = None) -> str:
    """A table, one column per configuration (means ± their standard errors), and for Tag the two
    comparisons in words (`side_labels`, from tag_side_labels: which report plays each side at random)."""
    labels = list(results)
    keys = list(dict.fromkeys(k for r in results.values() for k in r if k not in NOT_STATISTICS))

    def cell(label, key):
        value, error = results[label].get(key, math.nan), results[label].get("stderr", {}).get(key, math.nan)
        if isinstance(value, int):  # (episodes, steps)
            return str(value)
        return f"{value:.4f}" + (f" ± {error:.4f}" if math.isfinite(error) else "")

    cells = {(label, key): cell(label, key) for label in labels for key in keys}
    width = max(12, *(len(label) for label in labels), *(len(c) for c in cells.values()))
    lines = [f"{'':24s}" + "".join(f"{label:>{width + 2}s}" for label in labels)]
    for key in keys:
        lines.append(f"{key:24s}" + "".join(f"{cells[label, key]:>{width + 2}s}" for label in labels))
    trained = results.get("trained", {})
    side_labels = side_labels or {}
    if "tag_rate" in trained:
        taggers, runners = side_labels.get("taggers"), side_labels.get("runners")
        def mean(report, key):
            error = report.get("stderr", {}).get(key, math.nan)
            return f"{report[key]:.3f}" + (f" ± {error:.3f}" if math.isfinite(error) else "")

        if taggers in results:
            lines.append(f"taggers: tag rate {mean(trained, 'tag_rate')} trained vs "
                         f"{mean(results[taggers], 'tag_rate')} for random taggers (against the trained runners)")
        if runners in results:
            lines.append(f"runners: survival {mean(trained, 'runner_survival')} trained vs "
                         f"{mean(results[runners], 'runner_survival')} for random runners (against the trained "
                         f"taggers)")
    return "\n".join(lines)
