"""Evaluate trained policies: mean episode return per policy, optionally with some policies
replaced by uniformly random actions (the baseline a trained policy must beat)."""
from __future__ import annotations

import torch


def evaluate(trainer, steps: int = 1000, random_policies=(), deterministic: bool = False) -> dict:
    """Run `steps` steps of every replica; returns {"return/NAME": mean finished-episode return,
    "episodes": count} plus the env's own EVAL_METRICS (e.g. Tag's tag rate) when it defines them."""
    env = trainer.env
    store = env.store
    env.reset()
    unknown = sorted(set(random_policies) - {g.name for g in trainer.groups})
    if unknown:
        raise ValueError(f"--random names {unknown}; the policies are {[g.name for g in trainer.groups]}")
    random_groups = [g for g in trainer.groups if g.name in random_policies]
    sums = {g.name: torch.zeros((), device=env.device) for g in trainer.groups}
    counts = torch.zeros((), device=env.device)
    metric_fn = env.definition.namespace.get("EVAL_METRICS")
    totals: dict = {}
    for _ in range(steps):
        trainer.act(deterministic=deterministic)
        if random_groups:
            saved = store["action"].clone()
            env.sample_actions()
            for g in trainer.groups:
                if g not in random_groups:
                    g.scatter(store["action"], g.gather(saved))
        env.step()
        done = store["done"].float()
        for g in trainer.groups:
            sums[g.name] += (g.gather(store["last_return"]).mean(1) * done).sum()
        counts += done.sum()
        if metric_fn is not None:
            for key, value in metric_fn(store).items():
                totals[key] = totals.get(key, 0.0) + value
    n = max(float(counts), 1.0)
    report = {f"return/{name}": float(total) / n for name, total in sums.items()}
    report["episodes"] = float(counts)
    for key, value in totals.items():
        report[key] = float(value) / steps
    return report
