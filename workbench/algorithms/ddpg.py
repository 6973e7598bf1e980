"""DDPG (Lillicrap et al. 2016): a deterministic actor mu(s), a critic Q(s, a), their target copies
mu', Q' updated by Polyak averaging, and transitions sampled from a replay buffer on the device.
"""
from __future__ import annotations

import copy

import torch
from torch import nn


class ReplayBuffer:
    """Ring buffer of transitions (s, a, r, s', terminated) on the device, allocated once."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device):
        self.capacity = capacity
        self.obs = torch.zeros((capacity, obs_dim), device=device)
        self.actions = torch.zeros((capacity, act_dim), device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.next_obs = torch.zeros((capacity, obs_dim), device=device)
        self.terminated = torch.zeros(capacity, device=device)
        self.pos = 0
        self.size = 0

    def add(self, obs, actions, rewards, next_obs, terminated):
        """Append a batch [N, ...] (wrapping around; N must not exceed the capacity)."""
        n = obs.shape[0]
        idx = (torch.arange(n, device=obs.device) + self.pos) % self.capacity
        self.obs.index_copy_(0, idx, obs)
        self.actions.index_copy_(0, idx, actions)
        self.rewards.index_copy_(0, idx, rewards)
        self.next_obs.index_copy_(0, idx, next_obs)
        self.terminated.index_copy_(0, idx, terminated)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator=None):
        idx = torch.randint(0, self.size, (batch_size,), device=self.obs.device, generator=generator)
        return self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.terminated[idx]


class DDPGAgent(nn.Module):
    """Actor, critic and their targets for one policy group."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)


def update(agent: DDPGAgent, actor_opt, critic_opt, batch, config, sync=None) -> dict:
    """One gradient step of the critic, then of the actor, then the soft target updates."""
    obs, actions, rewards, next_obs, terminated = batch

    # critic: y = r + gamma * (1 - terminated) * Q'(s', mu'(s'))
    with torch.no_grad():
        y = rewards + config.gamma * (1 - terminated) * agent.critic_target(next_obs, agent.actor_target(next_obs))
    q = agent.critic(obs, actions)
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
    actor_loss = -agent.critic(obs, agent.actor(obs)).mean()
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
    return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
            "q_mean": q.detach().mean(), "nonfinite": (~torch.isfinite(critic_loss + actor_loss)).float()}
