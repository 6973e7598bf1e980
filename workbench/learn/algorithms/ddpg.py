"""DDPG (Lillicrap et al. 2016): a deterministic actor mu(s), a critic Q(s, a), their target copies
mu', Q' updated by Polyak averaging, and transitions sampled from a replay buffer on the device.
"""
from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn


class ReplayBuffer:
    """Ring buffer of transitions (s, a, r, s', terminated) on the device, allocated once.

    Observations are stored raw (normalised when sampled, with the statistics of that moment).
    The write position and fill level live on the device, so adding and sampling replay from a
    CUDA graph; `size` mirrors the fill level on the host (it only grows by known amounts).
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device, batch: int):
        if batch > capacity:
            raise ValueError(f"buffer_size={capacity} must hold at least one step of every replica ({batch})")
        self.capacity, self.batch = capacity, batch
        self.obs = torch.zeros((capacity, obs_dim), device=device)
        self.actions = torch.zeros((capacity, act_dim), device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.next_obs = torch.zeros((capacity, obs_dim), device=device)
        self.terminated = torch.zeros(capacity, device=device)
        self.staged_obs = torch.zeros((batch, obs_dim), device=device)
        self.staged_actions = torch.zeros((batch, act_dim), device=device)
        self.noise = torch.zeros((batch, act_dim), device=device)
        self.offsets = torch.arange(batch, device=device)
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.fill = torch.zeros((), dtype=torch.long, device=device)
        self.size = 0

    def stage_obs(self, obs):
        self.staged_obs.copy_(obs)

    def stage_actions(self, actions):
        self.staged_actions.copy_(actions)

    def add(self, rewards, next_obs, terminated):
        """Append one step of every replica ([batch, ...]) with the staged obs and actions."""
        idx = (self.offsets + self.pos) % self.capacity
        self.obs.index_copy_(0, idx, self.staged_obs)
        self.actions.index_copy_(0, idx, self.staged_actions)
        self.rewards.index_copy_(0, idx, rewards)
        self.next_obs.index_copy_(0, idx, next_obs)
        self.terminated.index_copy_(0, idx, terminated)
        self.pos.add_(self.batch).remainder_(self.capacity)
        self.fill.add_(self.batch).clamp_(max=self.capacity)

    def advance_host_size(self, steps: int):
        self.size = min(self.size + steps * self.batch, self.capacity)

    def sample(self, batch_size: int, generator=None, norm=None):
        """batch_size transitions drawn uniformly from the filled part; obs normalised by `norm`."""
        u = torch.rand(batch_size, device=self.obs.device, generator=generator)
        idx = (u * self.fill).long().clamp_(max=self.capacity - 1)
        obs, next_obs = self.obs[idx], self.next_obs[idx]
        if norm is not None:
            obs, next_obs = norm(obs), norm(next_obs)
        return obs, self.actions[idx], self.rewards[idx], next_obs, self.terminated[idx]

    def state_dict(self):
        return {"obs": self.obs, "actions": self.actions, "rewards": self.rewards, "next_obs": self.next_obs,
                "terminated": self.terminated, "pos": self.pos, "fill": self.fill, "size": self.size}

    def load_state_dict(self, state):
        for k, v in state.items():
            if k == "size":
                self.size = int(v)
            else:
                getattr(self, k).copy_(v)


class DDPGAgent(nn.Module):
    """Actor, critic and their targets for one policy group."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)


STATS = ("critic_loss", "actor_loss", "q_mean", "nonfinite")


def update(agent: DDPGAgent, actor_opt, critic_opt, batch, config, *, sync=None, autocast=None, stats: dict) -> dict:
    """One gradient step of the critic, then of the actor, then the soft target updates.
    `stats` (device scalars, STATS) receives this step's values divided by updates_per_rollout."""
    obs, actions, rewards, next_obs, terminated = batch
    autocast = autocast or contextlib.nullcontext

    # critic: y = r + gamma * (1 - terminated) * Q'(s', mu'(s'))
    with torch.no_grad(), autocast():
        y = rewards + config.gamma * (1 - terminated) * agent.critic_target(next_obs, agent.actor_target(next_obs)).float()
    with autocast():
        q = agent.critic(obs, actions).float()
    critic_loss = ((q - y) ** 2).mean()
    critic_opt.zero_grad(set_to_none=False)
    critic_loss.backward()
    if sync is not None:
        sync.gradients(agent.critic.parameters())
    if config.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(agent.critic.parameters(), config.max_grad_norm)
    critic_opt.step()

    # actor: maximise Q(s, mu(s)) with the critic frozen, so no actor gradient reaches it
    agent.critic.requires_grad_(False)
    with autocast():
        actor_loss = -agent.critic(obs, agent.actor(obs)).float().mean()
    actor_opt.zero_grad(set_to_none=False)
    actor_loss.backward()
    if sync is not None:
        sync.gradients(agent.actor.parameters())
    if config.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(agent.actor.parameters(), config.max_grad_norm)
    actor_opt.step()
    agent.critic.requires_grad_(True)

    # theta' <- tau * theta + (1 - tau) * theta'
    with torch.no_grad():
        for net, target in ((agent.actor, agent.actor_target), (agent.critic, agent.critic_target)):
            torch._foreach_lerp_(list(target.parameters()), list(net.parameters()), config.tau)
    k = config.updates_per_rollout
    stats["critic_loss"] += critic_loss.detach() / k
    stats["actor_loss"] += actor_loss.detach() / k
    stats["q_mean"] += q.detach().mean() / k
    stats["nonfinite"] += (~torch.isfinite(critic_loss + actor_loss)).float()
    return stats
