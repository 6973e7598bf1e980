"""PPO (Schulman et al. 2017): the clipped surrogate objective on minibatches over several epochs.

The old log-probabilities log pi_old(a|s) are the ones stored at rollout time, not recomputed here,
so the ratio r = pi_theta / pi_old measures how far the update moved the policy. Agents out of the
game (mask 0) are left out of every mean. A minibatch larger than the learner's memory bound is
processed in chunks whose gradients add up to the minibatch's, before one optimiser step.

The same code runs eagerly on the CPU and is replayed from a CUDA graph on a GPU: it allocates
nothing that outlives an iteration, draws its permutations on the device and never reads a value
back to the host (except for `target_kl`, which therefore keeps the update out of the graph).
`target_kl` ends the update after an epoch whose last minibatch's approximate KL exceeds it, as
CleanRL's ppo.py does; each member of a population stops on its own KL, as its standalone run
would: a stopped member's remaining minibatches change neither its weights, its Adam state nor its
statistics (a mask [M] on its optimiser's step), and the epochs end once every member has stopped.

Where the rollout came from: collection.py (log pi_old, V(s_t), V of truncated final observations) and
gae.advantages (GAE, A_t = delta_t + gamma lambda A_{t+1}). On GPUs `fused_kernels.minibatch_grad`
computes `loss`'s gradient for the default actor-critic in one launch; `loss` here is its reference
(tests/test_fused.py holds them equal).
"""
from __future__ import annotations

import contextlib

import torch

from ..members import clip_and_step, member_rows, member_sums
from ..streams import minibatch_site
from ..rollout import Batch, chunks, explained_variance, masked_moments, take

STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "nonfinite")
REPORTED = STATS + ("explained_variance",)  # (the update's statistics, and the rollout's)
KL = STATS.index("approx_kl")


def loss(model, mb: dict, config, count, hp=None, members: int = 1):
    """The minibatch loss restricted to one chunk of it.

    mb: obs [b, O], actions [b, ...], logp [b], values [b], advantages [b] (normalised already),
    returns [b], mask [b] (and state [b, S], agent [b] for a centralised critic); count: live
    samples of the whole minibatch. Returns (loss, stats): sums over the chunk divided by `count`,
    so the chunks of a minibatch add up to its means. A population's chunk holds b / M rows of
    each member, grouped by member (members.py): count is then [M], hp's coefficients floats or [M],
    and every statistic [M]; the loss is the sum of the members' losses (their weights are apart,
    so each member's gradient is its own loss's).
    """
    hp = hp or config
    rows = mb["mask"].shape[0]
    out, value = model(mb["obs"], mb["state"], mb["agent"]) if "state" in mb else model(mb["obs"])
    logp, entropy = model.head.log_prob_entropy(out, getattr(model, "log_std", None), mb["actions"])
    value = value.float()
    live = mb["mask"] > 0
    weight = mb["mask"] / member_rows(count, members, rows)
    log_ratio = torch.where(live, logp - mb["logp_old"], torch.zeros_like(logp))
    ratio = log_ratio.exp()
    adv = mb["advantages"]
    clip = member_rows(hp.clip_coef, members, rows)

    # L^CLIP: the pessimistic bound of the unclipped and clipped surrogate
    pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip))

    if config.clip_value:
        v_clipped = mb["values"] + torch.clamp(value - mb["values"], -clip, clip)
        v = 0.5 * torch.max((value - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2)
    else:
        v = 0.5 * (value - mb["returns"]) ** 2

    def mean(x):
        return member_sums(torch.where(live, x, torch.zeros_like(x)).mul(weight), members)

    pg_loss, v_loss, ent = mean(pg), mean(v), mean(entropy)
    total = (pg_loss - hp.ent_coef * ent + hp.vf_coef * v_loss).sum()
    with torch.no_grad():
        stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
                 "approx_kl": mean((ratio - 1) - log_ratio),
                 "clip_fraction": mean(((ratio - 1).abs() > clip).float())}
    return total, stats


def chunk_loss(model, fields: dict, state, n: int, chunk_idx, config, count, adv_mean, adv_std, hp=None,
               members: int = 1):
    """One chunk's part of a minibatch loss, read straight from the rollout: fields {name: [B, ...]}
    (state [T * E, S] and n for a centralised critic), chunk_idx the chunk's sample ids; count,
    adv_mean and adv_std are the whole minibatch's live samples and advantage moments (per member
    for a population). Returns (loss, stats [len(STATS), M]). One function from the gathers to the
    statistics, so that torch.compile fuses it into a few kernels (the trainer compiles it on GPU
    targets)."""
    mb = take(fields, state, n, chunk_idx)
    if config.normalize_advantages:
        rows = mb["advantages"].shape[0]
        mb["advantages"] = ((mb["advantages"] - member_rows(adv_mean, members, rows))
                            / (member_rows(adv_std, members, rows) + 1e-8))
    total, stats = loss(model, mb, config, count, hp, members)
    nonfinite = (~torch.isfinite(total.detach())).float().expand(members)
    return total, torch.stack([*(stats[k] for k in STATS[:-1]), nonfinite])


def update(model, optimizer, batch: Batch, config, *, sync=None, chunk_size: int, generator=None,
           autocast=None, stats: dict, loss_fn=None, samples=None, hp=None, policy: int = 0, fused=None) -> dict:
    """update_epochs passes of num_minibatches optimiser steps over `batch` (B samples).

    `stats` (device tensors [M], STATS) receives the means over the minibatches (added to, so the
    caller can sum several iterations). loss_fn: `chunk_loss` or a compiled version of it.
    samples: a members.MemberSamples drawing each member's permutations from its own stream (a
    population's M members, or M = 1); without it the permutations come from `generator`. hp: the
    coefficients (config's, or a population's per-member tensors). fused: a fused.FusedGradients
    computing each minibatch's gradient in one launch per network (else `loss_fn` in chunks).
    Returns `stats`.
    """
    if not model.training:  # (the rollout acted in eval mode: Dropout and BatchNorm learn in training mode)
        model.train()
    members = samples.members if samples is not None else 1
    B = batch.size // members  # per member
    loss_fn = loss_fn or chunk_loss
    mb_size = B // config.num_minibatches
    world = sync.context.world_size if sync is not None else 1
    local = torch.zeros((len(STATS), members), device=batch["values"].device)
    hp = hp or config
    updates = 0
    # target_kl in a population: which members still learn [M, 1], and each one's update count
    learning = torch.ones((members, 1), device=local.device) if config.target_kl is not None and members > 1 else None
    member_updates = torch.zeros(members, device=local.device) if learning is not None else None
    for epoch in range(config.update_epochs):
        if samples is not None:  # [M, B] sample ids of each member's own permutation
            order = samples.permutation(minibatch_site(policy, epoch))
        else:
            order = torch.rand(B, device=local.device, generator=generator).argsort().unsqueeze(0)
        minibatches = order[:, :mb_size * config.num_minibatches].view(members, config.num_minibatches, mb_size)
        count, adv_mean, adv_std = _minibatch_moments(batch, minibatches, config, sync, fused, world)
        for m in range(config.num_minibatches):
            idx = minibatches[:, m]
            moments = (adv_mean[:, m], adv_std[:, m]) if adv_mean is not None else (None, None)
            before = local.clone() if learning is not None else None
            if config.target_kl is not None and m == config.num_minibatches - 1:
                kl_before = local[KL].clone()
            # grad of L^CLIP+VF+S on minibatch m, its statistics added to `local`
            if fused is not None:  # forward, loss and backward of the whole minibatch, one launch per network
                fused.gradients(idx, count[:, m], *moments, local)
            else:
                _chunked_gradient(model, optimizer, batch, idx, count[:, m], moments, local, config,
                                  chunk_size // members, autocast, loss_fn, hp, members)
            if sync is not None:  # data-parallel: average gradients over ranks before clipping
                sync.gradients(model.parameters())
            if learning is not None:  # (stopped members' statistics stay as they were)
                local.copy_(torch.where(learning.reshape(1, -1) > 0, local, before))
                member_updates += learning.reshape(-1)
            clip_and_step(model, optimizer, hp.max_grad_norm, learning)
            updates += 1
        # target_kl: the epoch's last minibatch's approximate KL ends the update (CleanRL's rule)
        if learning is not None:  # each member on its own KL, as its standalone run
            kl = local[KL] - kl_before
            learning.mul_((~(kl.double() > config.target_kl)).float().reshape(-1, 1))
            if not bool(learning.any()):
                break
        elif config.target_kl is not None:
            kl = (local[KL] - kl_before).max()
            kl = sync.mean(kl) if sync is not None else kl
            if float(kl) > config.target_kl:
                break
    if fused is not None:  # (its kernels leave the flag out: a non-finite loss makes its sums non-finite)
        local[-1] += (~torch.isfinite(local[:-1].sum(0))).float()
    divisor = member_updates if member_updates is not None else updates
    for i, k in enumerate(STATS):
        stats[k] += (local[i] / (divisor if k != "nonfinite" else 1)).reshape(stats[k].shape)
    if "explained_variance" in stats:  # (of the rollout's values, before this update)
        stats["explained_variance"] += explained_variance(batch, samples).reshape(stats["explained_variance"].shape)
    return stats


def _minibatch_moments(batch: Batch, minibatches, config, sync, fused, world: int):
    """Every minibatch's live count and advantage moments at once (not one reduction chain per
    minibatch), over all ranks' samples: count, mean, std [M, num_minibatches] (mean and std None
    without normalize_advantages). Each rank's loss divides by count / world, so that the averaged
    gradients are those of the global minibatch's mean."""
    found = (fused.minibatch_moments(minibatches, config.normalize_advantages)
             if fused is not None and sync is None else None)
    if found is not None:  # (one launch)
        return found
    count, adv_mean, adv_std = masked_moments(batch["advantages"][minibatches], batch["mask"][minibatches],
                                              dim=2, sync=sync, moments=config.normalize_advantages)
    return count / world, adv_mean, adv_std


def _chunked_gradient(model, optimizer, batch: Batch, idx, count, moments, local, config, chunk_rows: int,
                      autocast, loss_fn, hp, members: int) -> None:
    """The minibatch `idx` [M, b]'s gradient, summed over chunks of at most chunk_rows rows a member
    into the parameters' .grad; each chunk's statistics added to `local`."""
    optimizer.zero_grad(set_to_none=True)  # the first backward writes the gradients: no zeroing kernels
    for part in chunks(idx.shape[1], max(1, chunk_rows)):
        with (autocast or contextlib.nullcontext)():
            part_loss, part_stats = loss_fn(model, batch.fields, batch.state, batch.n, idx[:, part].reshape(-1),
                                            config, count, *moments, hp, members)
        part_loss.backward()
        local += part_stats
