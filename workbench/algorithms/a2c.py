"""A2C update (Mnih et al. 2016, synchronous): one gradient step on the whole rollout batch.

loss = -E[log pi(a|s) * A] + c_v * E[(V(s) - R)^2] / 2 - c_e * E[H(pi(.|s))]
"""
from __future__ import annotations

import torch
from torch import nn


def update(model, optimizer, batch: dict, config, sync=None) -> dict:
    """batch: obs [B, O], actions [B, ...], advantages [B], returns [B]. Returns device scalars."""
    out, value = model(batch["obs"])
    logp, entropy = model.head.log_prob_entropy(out, getattr(model, "log_std", None), batch["actions"])
    adv = batch["advantages"]
    if config.normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)

    pg_loss = -(logp * adv).mean()
    v_loss = 0.5 * ((value - batch["returns"]) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss + config.vf_coef * v_loss - config.ent_coef * ent

    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    if sync is not None:
        sync.gradients(model.parameters())
    if config.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
            "nonfinite": (~torch.isfinite(loss)).float()}
