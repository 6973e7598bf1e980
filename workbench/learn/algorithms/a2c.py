"""A2C (Mnih et al. 2016, synchronous): one gradient step on the whole rollout batch.

loss = -E[log pi(a|s) * A] + c_v * E[(V(s) - R)^2] / 2 - c_e * E[H(pi(.|s))]

Agents out of the game (mask 0) are left out of every mean. The batch is processed in chunks
whose gradients add up to the whole batch's (gradient accumulation), so the learner's memory is
bounded by the chunk, not by the rollout: one optimiser step per iteration, as the algorithm says.
"""
from __future__ import annotations

import torch
from torch import nn

from ..rollout import Batch, chunks, masked_moments, wide_sum

STATS = ("policy_loss", "value_loss", "entropy", "nonfinite")


def loss(model, batch: dict, config, count):
    """The batch loss restricted to one chunk of it.

    batch: obs [b, O], actions [b, ...], advantages [b] (normalised already), returns [b], mask [b]
    (and state [b, S], agent [b] for a centralised critic); count: live samples of the whole batch.
    Returns (loss, stats): sums over the chunk divided by `count`.
    """
    out, value = model(batch["obs"], batch["state"], batch["agent"]) if "state" in batch else model(batch["obs"])
    logp, entropy = model.head.log_prob_entropy(out.float(), getattr(model, "log_std", None), batch["actions"])
    live = batch["mask"] > 0
    weight = batch["mask"] / count

    def mean(x):
        return wide_sum(torch.where(live, x, torch.zeros_like(x)).mul(weight))

    pg_loss = mean(-logp * batch["advantages"])
    v_loss = mean(0.5 * (value.float() - batch["returns"]) ** 2)
    ent = mean(entropy)
    total = pg_loss + config.vf_coef * v_loss - config.ent_coef * ent
    return total, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach()}


def chunk_loss(model, chunk: dict, config, count, adv_mean, adv_std):
    """`loss` of one chunk with its advantages normalised by the whole batch's mean and std
    (when configured), and its statistics stacked [len(STATS)]: one function, so that torch.compile
    fuses it (the trainer compiles it on GPU targets)."""
    if config.normalize_advantages:
        chunk = {**chunk, "advantages": (chunk["advantages"] - adv_mean) / (adv_std + 1e-8)}
    total, stats = loss(model, chunk, config, count)
    nonfinite = (~torch.isfinite(total.detach())).float()
    return total, torch.stack([*(stats[k] for k in STATS[:-1]), nonfinite])


def update(model, optimizer, batch: Batch, config, *, sync=None, chunk_size: int, generator=None,
           autocast=None, stats: dict, loss_fn=None) -> dict:
    """One optimiser step on the whole batch (B samples), accumulated over chunks.
    loss_fn: `chunk_loss` or a compiled version of it. `stats` (device scalars, STATS) is added to
    and returned."""
    loss_fn = loss_fn or chunk_loss
    mask = batch["mask"]
    # over all ranks' samples; each rank divides by count / world, so the averaged gradients are the global mean's
    count, adv_mean, adv_std = masked_moments(batch["advantages"], mask, sync=sync,
                                              moments=config.normalize_advantages)
    count = count / (sync.context.world_size if sync is not None else 1)

    optimizer.zero_grad(set_to_none=True)  # the first backward writes the gradients: no zeroing kernels
    local = torch.zeros(len(STATS), device=mask.device)
    for part in chunks(batch.size, chunk_size):
        with autocast():
            part_loss, part_stats = loss_fn(model, batch.take(part), config, count, adv_mean, adv_std)
        part_loss.backward()
        local += part_stats
    if sync is not None:
        sync.gradients(model.parameters())
    if config.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    for i, k in enumerate(STATS):
        stats[k] += local[i]
    return stats
