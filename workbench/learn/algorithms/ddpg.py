"""DDPG (Lillicrap et al. 2016): a deterministic actor mu(s), a critic Q(s, a), their target copies
mu', Q' updated by Polyak averaging, and transitions sampled from a replay buffer on the device.
"""
from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

from ...compiler.envdef import FINAL_ACTIVE
from ..streams import exploration_site, replay_site
from ..members import clip_and_step, member_rows, member_sums


class ReplayBuffer:
    """Ring buffer of transitions (s, a, r, s', terminated) on the device, allocated once; with
    `masked` (an env with ACTIVE) each also keeps `live`, 1 where the agent was in the game at s
    (transitions of agents out of the game are left out of the losses).

    Observations are stored raw (normalised when sampled, with the statistics of that moment).
    The write position and fill level live on the device, so adding and sampling replay from a
    CUDA graph; `size` mirrors the fill level on the host (it only grows by known amounts). A
    population's M members each own a ring of `capacity` rows (member k: rows [k * capacity,
    (k + 1) * capacity)), fed by its rows of every step's batch and sampled on its own stream.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device, batch: int, members: int = 1,
                 masked: bool = False):
        per_member = batch // members
        if per_member > capacity:
            raise ValueError(f"buffer_size={capacity} must hold at least one step of every replica ({per_member})")
        self.capacity, self.batch, self.members, self.per_member = capacity, batch, members, per_member
        rows = members * capacity
        self.obs = torch.zeros((rows, obs_dim), device=device)
        self.actions = torch.zeros((rows, act_dim), device=device)
        self.rewards = torch.zeros(rows, device=device)
        self.next_obs = torch.zeros((rows, obs_dim), device=device)
        self.terminated = torch.zeros(rows, device=device)
        self.live = torch.ones(rows, device=device) if masked else None
        self.staged_live = torch.ones(batch, device=device) if masked else None
        self.staged_obs = torch.zeros((batch, obs_dim), device=device)
        self.staged_actions = torch.zeros((batch, act_dim), device=device)
        self.noise = torch.zeros((batch, act_dim), device=device)
        lane = torch.arange(batch, device=device)
        self.offsets = lane % per_member  # a row's place in its member's part of the step
        self.base = torch.div(lane, per_member, rounding_mode="floor") * capacity  # its member's ring
        self.member_base = (torch.arange(members, device=device) * capacity).reshape(members, 1)
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.fill = torch.zeros((), dtype=torch.long, device=device)
        self.size = 0  # per member

    def stage_obs(self, obs):
        """obs [M * N, O]: this step's observations, stored with its outcome by the next `add`."""
        self.staged_obs.copy_(obs)

    def stage_actions(self, actions):
        """actions [M * N, d]: this step's actions (as stage_obs)."""
        self.staged_actions.copy_(actions)

    def stage_live(self, live):
        """live [batch]: whether each row's agent is in the game before the step (masked buffers)."""
        self.staged_live.copy_(live)

    def add(self, rewards, next_obs, terminated):
        """Append one step of every replica ([batch, ...]) with the staged obs and actions."""
        idx = self.base + (self.offsets + self.pos) % self.capacity
        self.obs.index_copy_(0, idx, self.staged_obs)
        self.actions.index_copy_(0, idx, self.staged_actions)
        self.rewards.index_copy_(0, idx, rewards)
        self.next_obs.index_copy_(0, idx, next_obs)
        self.terminated.index_copy_(0, idx, terminated)
        if self.live is not None:
            self.live.index_copy_(0, idx, self.staged_live)
        self.pos.add_(self.per_member).remainder_(self.capacity)
        self.fill.add_(self.per_member).clamp_(max=self.capacity)

    def advance_host_size(self, steps: int):
        self.size = min(self.size + steps * self.per_member, self.capacity)

    def sample(self, batch_size: int, generator=None, norm=None, streams=None, site: int = 0):
        """batch_size transitions (of each member) drawn uniformly from the filled part, rows grouped
        by member; uniforms from `streams` (one per member) or else `generator`; obs normalised by `norm`.
        Returns (obs, actions, rewards, next_obs, terminated, live), live None unless masked."""
        if streams is not None:
            u = streams.uniform((batch_size,), site)
        else:
            u = torch.rand(batch_size, device=self.obs.device, generator=generator).unsqueeze(0)
        idx = ((u * self.fill).long().clamp_(max=self.capacity - 1) + self.member_base).reshape(-1)
        obs, next_obs = self.obs[idx], self.next_obs[idx]
        if norm is not None:
            obs, next_obs = norm(obs), norm(next_obs)
        live = self.live[idx] if self.live is not None else None
        return obs, self.actions[idx], self.rewards[idx], next_obs, self.terminated[idx], live

    def state_dict(self):
        state = {"obs": self.obs, "actions": self.actions, "rewards": self.rewards, "next_obs": self.next_obs,
                 "terminated": self.terminated, "pos": self.pos, "fill": self.fill, "size": self.size}
        return state | ({"live": self.live} if self.live is not None else {})

    def load_state_dict(self, state):
        if self.live is not None:  # (a buffer saved before it kept live flags: every transition counts)
            self.live.fill_(1)
        for k, v in state.items():
            if k == "size":
                self.size = int(v)
            elif getattr(self, k, None) is not None:
                getattr(self, k).copy_(v)


class ExplorationNoise:
    """A frozen policy's stand-in for its replay buffer: it learns nothing, so it keeps no transitions,
    only each step's exploration noise [batch, d], allocated once."""

    def __init__(self, batch: int, act_dim: int, device):
        self.noise = torch.zeros((batch, act_dim), device=device)


class DDPGAgent(nn.Module):
    """Actor, critic and their targets for one policy group."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)


STATS = ("critic_loss", "actor_loss", "q_mean", "nonfinite")


def explore(collector, learning: bool):
    """T steps with the actors plus Gaussian noise (uniform random actions until `learning`, but for
    frozen policies), each transition of a learning policy into its replay buffer (raw observations:
    normalised when replayed). With ACTIVE, a transition keeps whether its agent was in the game before the step,
    and one where the agent left the game (its flag before any auto-reset drops) is a termination.
    collector: the trainer's Collector (its trainer, store and observation helpers)."""
    tr, store = collector.trainer, collector.store
    collector.acting()
    head = tr.head
    span = (head.high - head.low).reshape(-1)
    for t in range(tr.T):
        for policy, g in enumerate(tr.groups):
            rb = tr.buffers[g.name]
            live = collector.live(g)
            frozen = g.name in tr.frozen  # (it plays its actor from the first step: it has nothing to learn)
            obs = collector.observe(g, store["obs"], live, accumulate=not frozen).reshape(-1, tr.obs_dim)
            if not frozen:
                rb.stage_obs(g.gather(store["obs"]).reshape(-1, tr.obs_dim))
                if live is not None:
                    rb.stage_live(live.reshape(-1))
            per_member = rb.noise.numel() // tr.M  # member k's noise: its own stream's elements of step t
            draw = tr.streams.normal if learning or frozen else tr.streams.uniform
            rb.noise.copy_(draw((per_member,), exploration_site(policy), offset=t * per_member).reshape(rb.noise.shape))
            if not (learning or frozen):
                actions = head.low.reshape(-1) + rb.noise * span
            else:
                with tr.autocast():
                    mu = tr.models[g.name].actor(obs)
                scale = member_rows(tr.hp.exploration_noise, tr.M, rb.noise.shape[0])
                scale = scale.unsqueeze(1) if isinstance(scale, torch.Tensor) else scale
                actions = mu.float() + rb.noise * scale * span / 2
            actions = head.to_env(actions.reshape((-1,) + head.act_shape)).reshape(-1, head.out_dim)
            if not frozen:
                rb.stage_actions(actions)
            g.scatter(store["action"], actions.reshape((tr.E, g.n) + head.act_shape))
        tr.env.step()
        tr.episode_stats.after_step()
        ended = store["done"].bool().reshape((tr.E,) + (1,) * (store["obs"].dim() - 1))  # [E, 1, ...]
        term = store["terminated" if tr.config.bootstrap_time_limit else "done"].float().reshape(tr.E, 1)
        for g in (g for g in tr.groups if g.name not in tr.frozen):
            rb = tr.buffers[g.name]
            raw_next = torch.where(ended, g.gather(store["final_obs"]), g.gather(store["obs"]))
            agent_term = term.expand(tr.E, g.n)
            if collector.active is not None:
                still_in = torch.where(ended.reshape(tr.E, 1), g.gather(store[FINAL_ACTIVE]) != 0, collector.live(g))
                left = rb.staged_live.reshape(tr.E, g.n) * (~still_in).float()
                agent_term = torch.maximum(agent_term, left)
            rb.add(g.gather(store["reward"]).reshape(-1), raw_next.reshape(-1, tr.obs_dim), agent_term.reshape(-1))


def update(agent: DDPGAgent, actor_opt, critic_opt, batch, config, *, sync=None, autocast=None, stats: dict,
           hp=None, members: int = 1) -> dict:
    """One gradient step of the critic, then of the actor, then the soft target updates.
    `stats` (device tensors [M], STATS) receives this step's values divided by updates_per_rollout.
    A population's batch holds each member's samples grouped by member; hp: its per-member gamma,
    tau and max_grad_norm (floats or [M]), the config's otherwise."""
    obs, actions, rewards, next_obs, terminated, live = batch
    for net in (agent.actor, agent.critic):  # (exploration acted in eval mode; the targets stay in it)
        if not net.training:
            net.train()
    autocast = autocast or contextlib.nullcontext
    hp = hp or config
    rows = rewards.shape[0]
    gamma = member_rows(hp.gamma, members, rows)
    count = member_sums(live, members).clamp_min(1) if live is not None else rows // members

    def mean(x):  # over each member's transitions of agents in the game
        return member_sums(x if live is None else torch.where(live > 0, x, 0.0), members) / count

    # critic: y = r + gamma * (1 - terminated) * Q'(s', mu'(s'))
    with torch.no_grad(), autocast():
        y = rewards + gamma * (1 - terminated) * agent.critic_target(next_obs, agent.actor_target(next_obs)).float()
    with autocast():
        q = agent.critic(obs, actions).float()
    critic_loss = mean((q - y) ** 2)
    critic_opt.zero_grad(set_to_none=False)
    critic_loss.sum().backward()
    if sync is not None:
        sync.gradients(agent.critic.parameters())
    clip_and_step(agent.critic, critic_opt, hp.max_grad_norm)

    # actor: maximise Q(s, mu(s)) with the critic frozen, so no actor gradient reaches it
    agent.critic.requires_grad_(False)
    with autocast():
        actor_loss = -mean(agent.critic(obs, agent.actor(obs)).float())
    actor_opt.zero_grad(set_to_none=False)
    actor_loss.sum().backward()
    if sync is not None:
        sync.gradients(agent.actor.parameters())
    clip_and_step(agent.actor, actor_opt, hp.max_grad_norm)
    agent.critic.requires_grad_(True)

    # theta' <- tau * theta + (1 - tau) * theta'
    with torch.no_grad():
        for net, target in ((agent.actor, agent.actor_target), (agent.critic, agent.critic_target)):
            targets, sources = list(target.parameters()), list(net.parameters())
            if isinstance(hp.tau, torch.Tensor):
                for t, p in zip(targets, sources):
                    t.lerp_(p, hp.tau.reshape((-1,) + (1,) * (t.dim() - 1)))
            else:
                torch._foreach_lerp_(targets, sources, hp.tau)
    k = config.updates_per_rollout
    for key, value in (("critic_loss", critic_loss), ("actor_loss", actor_loss), ("q_mean", mean(q))):
        stats[key] += (value.detach() / k).reshape(stats[key].shape)
    stats["nonfinite"] += (~torch.isfinite(critic_loss + actor_loss)).float().reshape(stats["nonfinite"].shape)
    return stats


def iteration(collector, learning: bool) -> None:
    """One DDPG iteration: T steps of exploration into the replay buffers (collector: the trainer's
    collection.Collector), then, once `learning`, updates_per_rollout x (a replay sample, `update`) for
    each policy."""
    tr = collector.trainer
    with torch.no_grad():
        explore(collector, learning)
    if not learning:
        return
    for policy, g in enumerate(tr.groups):
        if g.name in tr.frozen:  # (it acts, with its exploration noise, and learns nothing)
            continue
        actor_opt, critic_opt = tr.optimizers[g.name]
        for u in range(tr.config.updates_per_rollout):
            batch = tr.buffers[g.name].sample(tr.config.batch_size, norm=tr.norms.get(g.name), streams=tr.streams,
                                              site=replay_site(policy, u))
            update(tr.models[g.name], actor_opt, critic_opt, batch, tr.config, sync=tr.sync, autocast=tr.autocast,
                   stats=tr.metrics.sums[g.name], hp=tr.hp, members=tr.M)
