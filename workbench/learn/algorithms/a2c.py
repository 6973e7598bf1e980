"""A2C (Mnih et al. 2016, synchronous): one gradient step on the whole rollout batch.

loss = -E[log pi(a|s) * A] + c_v * E[(V(s) - R)^2] / 2 - c_e * E[H(pi(.|s))]

Agents out of the game (mask 0) are left out of every mean. The batch is processed in chunks
whose gradients add up to the whole batch's (gradient accumulation), so the learner's memory is
bounded by the chunk, not by the rollout: one optimiser step per iteration, as the algorithm says.
The advantages A are GAE's (gae.py); on GPUs `fused_kernels.minibatch_grad` computes
`loss`'s gradient for the default actor-critic in one launch, with `loss` as its reference.
"""
from __future__ import annotations

import contextlib

import torch

from ..members import clip_and_step, member_rows, member_sums
from ..rollout import Batch, chunks, explained_variance, masked_moments

STATS = ("policy_loss", "value_loss", "entropy", "nonfinite")
REPORTED = STATS + ("explained_variance",)  # (the update's statistics, and the rollout's)


def loss(model, batch: dict, config, count, hp=None, members: int = 1):
    """The batch loss restricted to one chunk of it.

    batch: obs [b, O], actions [b, ...], advantages [b] (normalised already), returns [b], mask [b]
    (and state [b, S], agent [b] for a centralised critic); count: live samples of the whole batch.
    Returns (loss, stats): sums over the chunk divided by `count`. For a population (M members, rows
    grouped by member, see ppo.loss) count, the coefficients of hp and every statistic are [M].
    """
    hp = hp or config
    rows = batch["mask"].shape[0]
    out, value = model(batch["obs"], batch["state"], batch["agent"]) if "state" in batch else model(batch["obs"])
    logp, entropy = model.head.log_prob_entropy(out, getattr(model, "log_std", None), batch["actions"])
    live = batch["mask"] > 0
    weight = batch["mask"] / member_rows(count, members, rows)

    def mean(x):
        return member_sums(torch.where(live, x, torch.zeros_like(x)).mul(weight), members)

    pg_loss = mean(-logp * batch["advantages"])
    v_loss = mean(0.5 * (value.float() - batch["returns"]) ** 2)
    ent = mean(entropy)
    total = (pg_loss + hp.vf_coef * v_loss - hp.ent_coef * ent).sum()
    return total, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach()}


def chunk_loss(model, chunk: dict, config, count, adv_mean, adv_std, hp=None, members: int = 1):
    """`loss` of one chunk with its advantages normalised by the whole batch's mean and std
    (when configured), and its statistics stacked [len(STATS), M]: one function, so that
    torch.compile fuses it (the trainer compiles it on GPU targets)."""
    if config.normalize_advantages:
        rows = chunk["advantages"].shape[0]
        chunk = {**chunk, "advantages": ((chunk["advantages"] - member_rows(adv_mean, members, rows))
                                         / (member_rows(adv_std, members, rows) + 1e-8))}
    total, stats = loss(model, chunk, config, count, hp, members)
    nonfinite = (~torch.isfinite(total.detach())).float().expand(members)
    return total, torch.stack([*(stats[k] for k in STATS[:-1]), nonfinite])


def update(model, optimizer, batch: Batch, config, *, sync=None, chunk_size: int, generator=None,
           autocast=None, stats: dict, loss_fn=None, samples=None, hp=None, policy: int = 0, fused=None) -> dict:
    """One optimiser step on the whole batch (B samples), accumulated over chunks. It draws no
    minibatches, so `generator` and `policy` (what PPO's permutations come from) go unused.
    loss_fn: `chunk_loss` or a compiled version of it. `stats` (device tensors [M], STATS) is added
    to and returned. samples: a population's members.MemberSamples (each member's samples gathered
    grouped by member); hp: the coefficients (config's or per-member tensors); fused: a
    fused.FusedGradients computing the gradient in one launch per network (else `loss_fn` in chunks)."""
    if not model.training:  # (the rollout acted in eval mode: Dropout and BatchNorm learn in training mode)
        model.train()
    loss_fn = loss_fn or chunk_loss
    hp = hp or config
    members = samples.members if samples is not None and samples.members > 1 else 1
    mask = batch["mask"]
    # over all ranks' samples; each rank divides by count / world, so the averaged gradients are the global mean's
    if members == 1:
        count, adv_mean, adv_std = masked_moments(batch["advantages"], mask, sync=sync,
                                                  moments=config.normalize_advantages)
        count, adv_mean, adv_std = (None if v is None else v.reshape(1) for v in (count, adv_mean, adv_std))
    else:
        count, adv_mean, adv_std = masked_moments(samples.rows(batch["advantages"]).reshape(members, -1),
                                                  samples.rows(mask).reshape(members, -1), dim=1, sync=sync,
                                                  moments=config.normalize_advantages)
    count = count / (sync.context.world_size if sync is not None else 1)

    local = torch.zeros((len(STATS), members), device=mask.device)
    if fused is not None:  # forward, loss and backward of the whole batch, one launch per network
        fused.gradients(samples.all(), count, adv_mean, adv_std, local)
        local[-1] += (~torch.isfinite(local[:-1].sum(0))).float()
    else:
        optimizer.zero_grad(set_to_none=True)  # the first backward writes the gradients: no zeroing kernels
        parts = chunks(batch.size, chunk_size) if members == 1 else samples.chunks(chunk_size // members)
        for part in parts:
            with (autocast or contextlib.nullcontext)():
                take = batch.take(part) if members == 1 else samples.take(batch, part)
                part_loss, part_stats = loss_fn(model, take, config, count, adv_mean, adv_std, hp, members)
            part_loss.backward()
            local += part_stats
    if sync is not None:
        sync.gradients(model.parameters())
    clip_and_step(model, optimizer, hp.max_grad_norm)
    for i, k in enumerate(STATS):
        stats[k] += local[i].reshape(stats[k].shape)
    if "explained_variance" in stats:  # (of the rollout's values, before this update)
        stats["explained_variance"] += explained_variance(batch, samples).reshape(stats["explained_variance"].shape)
    return stats
