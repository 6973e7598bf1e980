"""Reward scaling (PPO and A2C's `normalize_reward`): each rollout's rewards divided by the running standard
deviation of the discounted return, then clipped to [-REWARD_CLIP, REWARD_CLIP], as Stable-Baselines3's
VecNormalize does. The value function then learns returns of a scale near 1 whatever the env's reward
units (its loss is reported in those scaled units); the episode returns the trainer reports stay in the env's.

Each agent's discounted return R_t = r_t + gamma R_{t-1} (gamma: its member's) runs on across rollouts and
restarts after the step where its episode ends (a replica's termination or truncation, or the agent
leaving the game), as VecNormalize's; its variance is taken over the agents in the game, pooled over
the replicas, per member of a population, and updated once per rollout, before that rollout's rewards
are scaled (VecNormalize: every step). Gymnasium's NormalizeReward wrapper, which CleanRL's continuous
PPO uses, differs: statistics per env, and a return that restarts on termination only. Frozen policies
learn nothing and scale nothing.
"""
from __future__ import annotations

import torch

from .algorithms.gae import episode_ends
from .members import MemberNorm
from .normaliser import RunningNorm

REWARD_CLIP = 10.0


class RewardScale:
    """The running return and its variance of one policy's agents: returns [E, n], statistics per member."""

    def __init__(self, replicas: int, agents: int, members: int, gamma, device):
        self.returns = torch.zeros((replicas, agents), device=device)
        self.gamma = gamma  # a float, or a population's [E, 1]
        self.stats = RunningNorm((1,), device) if members == 1 else MemberNorm(members, 1, device)
        self.members = members

    def __call__(self, buffer, sync=None):
        """Scale buffer.rewards [T, E, n] in place (buffer: a rollout.RolloutBuffer; its mask [T + 1, E, n]
        and terminated / truncated [T, E] say where episodes end); sync: a data-parallel run's, so that
        every rank scales by the same statistics."""
        rewards, mask = buffer.rewards, buffer.mask
        T = rewards.shape[0]
        kept = 1 - episode_ends(mask, buffer.terminated, buffer.truncated)[0]
        returns = torch.empty_like(rewards)
        for t in range(T):
            self.returns.mul_(self.gamma).add_(rewards[t])
            returns[t].copy_(self.returns)
            self.returns.mul_(kept[t])
        by_member = returns.view(T, self.members, -1).transpose(0, 1)  # [M, T, E / M * n]: rows grouped by member
        live = mask[:T].view(T, self.members, -1).transpose(0, 1)
        self.stats.accumulate(by_member.unsqueeze(-1), live)
        self.stats.commit(sync)
        std = torch.sqrt(self.stats.var + 1e-8)  # [1] or [M, 1]
        scale = std.reshape(1, self.members, 1) if self.members > 1 else std
        rewards.view(T, self.members, -1).div_(scale).clamp_(-REWARD_CLIP, REWARD_CLIP)

    def state_dict(self) -> dict:
        """The statistics (shared by a data-parallel run's ranks); the running returns are a rank's own, saved
        with its env state (trainer_state.rank_state's "reward_returns")."""
        return self.stats.state_dict()

    def load_state_dict(self, state: dict):
        self.stats.load_state_dict(state)
