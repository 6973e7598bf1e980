"""PPO (Schulman et al. 2017): the clipped surrogate objective on minibatches over several epochs.

The old log-probabilities log pi_old(a|s) are the ones stored at rollout time, not recomputed here,
so the ratio r = pi_theta / pi_old measures how far the update moved the policy. Agents out of the
game (mask 0) are left out of every mean. A minibatch larger than the learner's memory bound is
processed in chunks whose gradients add up to the minibatch's, before one optimiser step.

The same code runs eagerly on the CPU and is replayed from a CUDA graph on a GPU: it allocates
nothing that outlives an iteration, draws its permutations on the device and never reads a value
back to the host (except for `target_kl`, which therefore keeps the update out of the graph).
"""
from __future__ import annotations

import torch
from torch import nn

from ..rollout import Batch, chunks, masked_moments, wide_sum, take

STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "nonfinite")


def loss(model, mb: dict, config, count):
    """The minibatch loss restricted to one chunk of it.

    mb: obs [b, O], actions [b, ...], logp [b], values [b], advantages [b] (normalised already),
    returns [b], mask [b] (and state [b, S], agent [b] for a centralised critic); count: live
    samples of the whole minibatch. Returns (loss, stats): sums over the chunk divided by `count`,
    so the chunks of a minibatch add up to its means.
    """
    out, value = model(mb["obs"], mb["state"], mb["agent"]) if "state" in mb else model(mb["obs"])
    logp, entropy = model.head.log_prob_entropy(out.float(), getattr(model, "log_std", None), mb["actions"])
    value = value.float()
    live = mb["mask"] > 0
    weight = mb["mask"] / count
    log_ratio = torch.where(live, logp - mb["logp"], torch.zeros_like(logp))
    ratio = log_ratio.exp()
    adv = mb["advantages"]

    # L^CLIP: the pessimistic bound of the unclipped and clipped surrogate
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef))

    if config.clip_value:
        v_clipped = mb["values"] + (value - mb["values"]).clamp(-config.clip_coef, config.clip_coef)
        v = 0.5 * torch.max((value - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2)
    else:
        v = 0.5 * (value - mb["returns"]) ** 2

    def mean(x):
        return wide_sum(torch.where(live, x, torch.zeros_like(x)).mul(weight))

    pg_loss, v_loss, ent = mean(pg), mean(v), mean(entropy)
    total = pg_loss - config.ent_coef * ent + config.vf_coef * v_loss
    with torch.no_grad():
        stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
                 "approx_kl": mean((ratio - 1) - log_ratio),
                 "clip_fraction": mean(((ratio - 1).abs() > config.clip_coef).float())}
    return total, stats


def chunk_loss(model, fields: dict, state, n: int, chunk_idx, config, count, adv_mean, adv_std):
    """One chunk's part of a minibatch loss, read straight from the rollout: fields {name: [B, ...]}
    (state [T * E, S] and n for a centralised critic), chunk_idx the chunk's sample ids; count,
    adv_mean and adv_std are the whole minibatch's live samples and advantage moments. Returns
    (loss, stats [len(STATS)]). One function from the gathers to the statistics, so that
    torch.compile fuses it into a few kernels (the trainer compiles it on GPU targets)."""
    mb = take(fields, state, n, chunk_idx)
    if config.normalize_advantages:
        mb["advantages"] = (mb["advantages"] - adv_mean) / (adv_std + 1e-8)
    total, stats = loss(model, mb, config, count)
    nonfinite = (~torch.isfinite(total.detach())).float()
    return total, torch.stack([*(stats[k] for k in STATS[:-1]), nonfinite])


def update(model, optimizer, batch: Batch, config, *, sync=None, chunk_size: int, generator=None,
           autocast=None, stats: dict, loss_fn=None) -> dict:
    """update_epochs passes of num_minibatches optimiser steps over `batch` (B samples).

    `stats` (device scalars, STATS) receives the means over the minibatches (added to, so the
    caller can sum several iterations). loss_fn: `chunk_loss` or a compiled version of it.
    Returns `stats`.
    """
    B = batch.size
    loss_fn = loss_fn or chunk_loss
    mb_size = B // config.num_minibatches
    world = sync.context.world_size if sync is not None else 1
    local = torch.zeros(len(STATS), device=batch["values"].device)
    updates = 0
    for _epoch in range(config.update_epochs):
        order = torch.rand(B, device=local.device, generator=generator).argsort()
        minibatches = order[:mb_size * config.num_minibatches].view(config.num_minibatches, mb_size)
        # every minibatch's live count and advantage moments at once (not one reduction chain per
        # minibatch), over all ranks' samples; each rank's loss divides by count / world so that the
        # averaged gradients are those of the global minibatch's mean
        count, adv_mean, adv_std = masked_moments(batch["advantages"][minibatches], batch["mask"][minibatches], dim=1,
                                                  sync=sync, moments=config.normalize_advantages)
        count = count / world
        if adv_mean is None:
            adv_mean = adv_std = [None] * config.num_minibatches
        for m in range(config.num_minibatches):
            idx = minibatches[m]
            optimizer.zero_grad(set_to_none=True)  # the first backward writes the gradients: no zeroing kernels
            for part in chunks(mb_size, chunk_size):
                with autocast():
                    part_loss, part_stats = loss_fn(model, batch.fields, batch.state, batch.n, idx[part], config,
                                                    count[m], adv_mean[m], adv_std[m])
                part_loss.backward()
                local += part_stats
            if sync is not None:  # data-parallel: average gradients over ranks before clipping
                sync.gradients(model.parameters())
            if config.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            updates += 1
        if config.target_kl is not None:
            kl = local[STATS.index("approx_kl")] / updates
            kl = sync.mean(kl) if sync is not None else kl
            if float(kl) > config.target_kl:
                break
    for i, k in enumerate(STATS):
        stats[k] += local[i] / (updates if k != "nonfinite" else 1)
    return stats
