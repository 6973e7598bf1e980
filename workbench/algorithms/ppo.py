"""PPO update (Schulman et al. 2017): clipped surrogate objective on minibatches over several epochs.

The old log-probabilities pi_old(a|s) are the ones stored at rollout time, not recomputed here,
so the ratio r = pi_theta / pi_old measures how far the update moved the policy.
"""
from __future__ import annotations

import torch
from torch import nn


def update(model, optimizer, batch: dict, config, sync=None) -> dict:
    """batch: obs [B, O], actions [B, ...], logp [B], values [B], advantages [B], returns [B].
    Returns device scalars: policy_loss, value_loss, entropy, approx_kl, clip_fraction, nonfinite."""
    B = batch["obs"].shape[0]
    if B % config.num_minibatches:
        raise ValueError(f"PPOConfig.num_minibatches={config.num_minibatches} must divide the batch of {B} "
                         f"(num_envs x rollout_length x agents of the policy)")
    mb = B // config.num_minibatches
    head = model.head
    log_std = getattr(model, "log_std", None)
    stats = {k: torch.zeros((), device=batch["obs"].device) for k in
             ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "nonfinite")}
    updates = 0
    for _epoch in range(config.update_epochs):
        order = torch.randperm(B, device=batch["obs"].device)
        for start in range(0, B, mb):
            idx = order[start:start + mb]
            obs, actions = batch["obs"][idx], batch["actions"][idx]
            old_logp, old_values = batch["logp"][idx], batch["values"][idx]
            adv, returns = batch["advantages"][idx], batch["returns"][idx]

            out, value = model(obs)
            logp, entropy = head.log_prob_entropy(out, log_std, actions)
            log_ratio = logp - old_logp
            ratio = log_ratio.exp()
            if config.normalize_advantages:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)

            # L^CLIP: the pessimistic bound of the unclipped and clipped surrogate
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)).mean()

            if config.clip_value:
                v_clipped = old_values + (value - old_values).clamp(-config.clip_coef, config.clip_coef)
                v_loss = 0.5 * torch.max((value - returns) ** 2, (v_clipped - returns) ** 2).mean()
            else:
                v_loss = 0.5 * ((value - returns) ** 2).mean()

            ent = entropy.mean()
            loss = pg_loss - config.ent_coef * ent + config.vf_coef * v_loss

            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            if sync is not None:  # data-parallel: average gradients over ranks before clipping
                sync.gradients(model.parameters())
            if config.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()

            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                stats["policy_loss"] += pg_loss.detach()
                stats["value_loss"] += v_loss.detach()
                stats["entropy"] += ent.detach()
                stats["approx_kl"] += approx_kl
                stats["clip_fraction"] += ((ratio - 1).abs() > config.clip_coef).float().mean()
                stats["nonfinite"] += (~torch.isfinite(loss)).float()
            updates += 1
        if config.target_kl is not None:
            kl = sync.mean(approx_kl) if sync is not None else approx_kl
            if float(kl) > config.target_kl:
                break
    for k in stats:
        if k != "nonfinite":
            stats[k] /= updates
    return stats
