"""Generalised advantage estimation (Schulman et al. 2016), shared by A2C and PPO:
A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}, delta_t = r_t + gamma V(s_{t+1}) - V(s_t).
"""
from __future__ import annotations

import torch


def gae(buffer, next_value, gamma: float, lam: float, advantage_fn=None):
    """Generalised advantage estimation over [T, E, n], written into a rollout.RolloutBuffer's advantages
    and returns.

    An episode that ends at step t stops the recursion there: the replica's termination
    bootstraps nothing, a time-limit truncation bootstraps from V(final observation)
    (buffer.final_values), and an agent leaving the game at step t (mask t -> t+1 drops to 0
    while its replica runs on; where the replica is truncated at t, its final value is 0) ends its
    own episode as a termination.
    """
    fn = advantage_fn or advantages
    adv = fn(buffer.rewards, buffer.values, buffer.final_values, buffer.mask, buffer.terminated, buffer.truncated,
             next_value, gamma, lam)
    buffer.advantages.copy_(adv)
    torch.add(adv, buffer.values, out=buffer.returns)
    return buffer.advantages, buffer.returns


def episode_ends(mask, terminated, truncated):
    """Where each agent's episode ends: done [T, E, n] (1 at the step of its replica's termination or
    truncation, or of its leaving the game) and left_game [T, E, n] (the last), from mask [T + 1, E, n] and
    terminated / truncated [T, E]."""
    T = terminated.shape[0]
    replica_done = ((terminated + truncated) > 0).float().unsqueeze(-1)
    left_game = mask[:T] * (1 - mask[1:]) * (1 - replica_done)
    return (replica_done + left_game).clamp_max(1), left_game


def advantages(rewards, values, final_values, mask, terminated, truncated, next_value, gamma: float, lam: float):
    """GAE's recursion as a pure function of the rollout tensors ([T, E, n]; mask [T + 1, E, n];
    terminated/truncated [T, E]; next_value [E, n]) -> advantages [T, E, n]."""
    T = rewards.shape[0]
    done, left_game = episode_ends(mask, terminated, truncated)
    term = (terminated.unsqueeze(-1) + left_game).clamp_max(1)
    advantage = torch.zeros_like(next_value)  # A_{t+1}, then A_t
    out = []
    for t in reversed(range(T)):
        v_next = next_value if t == T - 1 else values[t + 1]
        bootstrap = (1 - done[t]) * v_next + done[t] * (1 - term[t]) * final_values[t]
        delta = rewards[t] + gamma * bootstrap - values[t]
        advantage = delta + gamma * lam * (1 - done[t]) * advantage
        out.append(advantage)
    return torch.stack(out[::-1])
