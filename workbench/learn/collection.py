"""Collecting experience on the device: the on-policy rollout and what GAE reads, and acting with
trained policies (DDPG's exploration into its replay buffer is algorithms/ddpg.explore).

What one rollout of T steps leaves in each group's buffer ([T, E, n], n agents of the group):
- obs[t], actions[t], logp_old[t] = log pi_old(a|s) and values[t] = V(s_t), from the policy step before
  env step t (observations normalised when configured);
- rewards[t] after env step t, and the replica's terminated[t] / truncated[t] (one pair shared by
  every group);
- mask[t] = 1 while the agent is in the game before step t (mask[T]: after the last step). An agent
  whose mask drops while its replica runs on has ended its own episode, a termination for GAE; out
  of the game it is left out of every loss, statistic and the observation normaliser;
- final_values[t] = V(final observation) of replicas truncated at step t (a time limit bootstraps
  from the state it cut off; a termination bootstraps nothing), else 0; 0 too for an agent that the
  env's ACTIVE flag shows out of the game in that final state (it left the game in the episode's
  last step: its own episode ended there, before the time limit).
GAE (`gae.advantages`) then bootstraps the replicas still running from V(s_T).
"""
from __future__ import annotations

import functools
import weakref

import torch

from . import fused, fused_wide
from ..compiler.envdef import FINAL_ACTIVE
from .compiled import MaybeCompiled, act_and_record, forward, value_step
from .fused_record import FusedStepRecord
from .algorithms.gae import advantages, gae
from .rollout import chunks
from .streams import rollout_site

# The rollout keeps its final observations for one batched critic pass when they take at most
# this much memory (else V(final observation) is computed after every step)
FINAL_OBS_BUFFER_BYTES = 256 * 2**20
# The policy noise of several steps is drawn at once when a block of steps takes at most this much
NOISE_BLOCK_BYTES = 32 * 2**20


def refuse_observations(deterministic) -> None:
    """TypeError for trainer.act(obs): it acts on the env's own observations."""
    if getattr(deterministic, "ndim", 0) > 0:
        raise TypeError(f"Trainer.act(deterministic=...) takes True or False, got {type(deterministic).__name__}: it "
                        f"acts on the env's current observations (trainer.env); for actions of observations of your "
                        f"own, wb.policy(run)(obs)")


def _zero_final_values_where_none_truncated(tr, truncated_only) -> bool:
    """On the CPU, where a host read costs nothing: where no replica was truncated in the rollout (its
    episodes ended by termination, or not at all), every final value set to 0 without a critic pass;
    returns whether it was so."""
    if tr.device.type != "cpu" or bool(truncated_only.any()):
        return False
    for g in tr.groups:
        tr.buffers[g.name].final_values.zero_()
    return True


class Collector:
    """Steps the trainer's env with its policies. trainer: the Trainer whose env, groups, models,
    buffers, normalisers and generator it uses (it owns none of them)."""

    def __init__(self, trainer, compile_on: bool):
        # no cycle through the collector (a proxy; no bound method kept): a dropped trainer frees its buffers at once
        self.trainer, tr, env = weakref.proxy(trainer), trainer, trainer.env
        T, E, O = tr.T, tr.E, tr.obs_dim
        self.store = env.store
        self.active = env.definition.active  # per-agent array: nonzero while in the game
        # (an env without a time limit never truncates; bootstrap_time_limit false learns a truncation as an end)
        self.can_truncate = env.definition.max_steps < 2**31 - 1 and tr.config.bootstrap_time_limit
        self.final_obs = self.final_active = None
        self.noise = {}
        if tr.algorithm != "ddpg":
            if self.can_truncate and 4 * T * E * env.num_agents * O <= FINAL_OBS_BUFFER_BYTES:
                self.final_obs = torch.zeros((T, E, env.num_agents, O), device=tr.device)
                if self.active is not None:  # (the store's final_active of each step, for _final_values)
                    self.final_active = torch.zeros((T, E, env.num_agents), device=tr.device)
            self.terminated = torch.zeros((T, E), device=tr.device)
            self.truncated = torch.zeros((T, E), device=tr.device)
            for buf in tr.buffers.values():
                buf.terminated, buf.truncated = self.terminated, self.truncated
            step_bytes = 4 * E * sum(g.n for g in tr.groups) * tr.head.out_dim
            self.noise_block = max(b for b in range(1, T + 1)
                                   if b == 1 or (T % b == 0 and b * step_bytes <= NOISE_BLOCK_BYTES))
            self.noise = {g.name: torch.empty((self.noise_block, E * g.n, tr.head.out_dim), device=tr.device)
                          for g in tr.groups}
        self._act_and_record = MaybeCompiled(act_and_record, compile_on, "the policy step")
        self._record_outcome = MaybeCompiled(Collector.step_outcome, compile_on, "the step's bookkeeping")
        self._value_step = MaybeCompiled(value_step, compile_on, "the value function")
        self._advantages = MaybeCompiled(advantages, compile_on, "GAE")
        # the fused kernels serve the policies whose gradients they compute (learners.fused_gradients)
        self._fused_step = {name: fused.FusedPolicyStep(tr.rollout_models[name], tr.M, tr.precision)
                            for name in tr.fused}
        # the other default policies (wider layers, MultiDiscrete heads) act in one launch too
        kernels = getattr(tr.config, "fused_kernels", False) and not fused.kernels_unsupported(tr.device)
        self._fused_step.update(fused_wide.policy_steps(tr, served=self._fused_step) if kernels else {})
        # the fused steps that also store the observations and send the actions: groups of contiguous
        # agents, without a joint state, acting into an integer action array of one entry per agent (and head)
        action = self.store["action"]
        self._fused_sends = {name for name in self._fused_step
                             if tr.buffers[name].state is None and tr.head.kind in ("discrete", "multi")
                             and next(g for g in tr.groups if g.name == name).slice is not None
                             and action.dim() == 2 + len(tr.head.act_shape) and action.is_contiguous()
                             and not action.is_floating_point() and tr.buffers[name].obs.is_contiguous()
                             } if tr.algorithm != "ddpg" else set()
        self._wide_final = fused_wide.final_value_steps(tr, self._fused_step)
        # V(final observation) of the truncated replicas in one launch that skips the others: for one
        # policy over all agents, with unnormalised observations and its own critic
        only = tr.groups[0] if len(tr.groups) == 1 else None
        self._fused_final = (self._fused_step[only.name] if self.final_obs is not None and only is not None
                             and only.name in tr.fused and only.n == env.num_agents
                             and only.name not in tr.norms and not tr.central else None)
        # the step's bookkeeping in one launch, where the fused kernels serve the policy
        self._fused_record = (FusedStepRecord(self.store, tr.episode_stats, tr.groups, self.active, tr.M)
                              if tr.algorithm != "ddpg" and self._fused_step
                              and FusedStepRecord.applies(tr, tr.groups, tr.episode_stats, self.active) else None)
        # the other policies' sampling in one launch, when torch.compile does not fuse it already
        self._head_sample = (fused.FusedHeadSample(tr.head, tr.device) if kernels and not compile_on
                             and tr.algorithm != "ddpg" and fused.FusedHeadSample.serves(tr.head) else None)
        self._fused_gae = None
        if tr.algorithm != "ddpg" and kernels:
            self._fused_gae = fused.FusedGAE(tr.hp.per_replica("gamma", tr.E_member),
                                             tr.hp.per_replica("gae_lambda", tr.E_member), tr.device)

    # -- observations and actions of one group -----------------------------------------------
    def live(self, g):
        """[E, n] bool: the group's agents in the game (None: the env has no ACTIVE array)."""
        return g.gather(self.store[self.active]) != 0 if self.active is not None else None

    def observe(self, g, tensor, live=None, accumulate: bool = False):
        """[R, A, *O] (R replicas, or replica-steps) -> the group's observations [R, n, O], normalised
        when configured; `accumulate` adds the live agents' raw observations to the normaliser's batch."""
        tr = self.trainer
        obs = g.gather(tensor).reshape(tensor.shape[0], g.n, tr.obs_dim)
        norm = tr.norms.get(g.name)
        if norm is None:
            return obs
        if accumulate:
            norm.accumulate(obs, live)
        return norm(obs)

    def joint_obs(self, group_obs: dict):
        """The groups' observations {name: [R, n, O]} -> each replica's joint observation [R, A * O]."""
        tr = self.trainer
        rows = next(iter(group_obs.values())).shape[0]
        parts = torch.empty((rows, tr.env.num_agents, tr.obs_dim), dtype=tr.obs_dtype, device=tr.device)
        for g in tr.groups:
            g.scatter(parts, group_obs[g.name])
        return parts.reshape(rows, tr.state_dim)

    def send(self, g, actions):
        """The group's actions [E * n, ...] (policy units) into the env's action array."""
        tr = self.trainer
        g.scatter(self.store["action"], tr.head.to_env(actions.reshape((-1,) + tr.head.act_shape))
                  .reshape((tr.E, g.n) + tr.head.act_shape))

    def values(self, g, model, obs, state):
        """V of observations obs [R, n, O] (or of the joint states [R, S]) -> [R, n]."""
        tr = self.trainer
        with tr.autocast():
            value = self._value_step(model, obs.reshape(-1, tr.obs_dim), state, g.name in tr.central)
        return value.reshape(obs.shape[0], g.n)

    # -- the on-policy rollout -----------------------------------------------------------------
    def rollout(self):
        """T steps of every group's policy into its buffer (see the module's docstring)."""
        tr, store = self.trainer, self.store
        self.acting()
        per_step_final_values = self.can_truncate and self.final_obs is None
        recorded_masks = self._fused_record is not None and self._fused_record.masks  # (masks of steps 1 .. T)
        record_outcome = self._fused_record or functools.partial(self._record_outcome, self)
        tr.refresh_rollout_copies()
        for t in range(tr.T):
            group_obs = {}
            for g in tr.groups:
                buf = tr.buffers[g.name]
                live = self.live(g) if t == 0 or not recorded_masks or g.name in tr.norms else None
                if live is not None and (t == 0 or not recorded_masks):
                    buf.mask[t].copy_(live)
                group_obs[g.name] = self.observe(g, store["obs"], live, accumulate=g.name not in tr.frozen)
            state = self.joint_obs(group_obs) if tr.central else None
            for g in tr.groups:
                buf, obs = tr.buffers[g.name], group_obs[g.name]
                if g.name in self._fused_sends:  # the fused step stores the observations and sends the actions
                    self._policy_step(g, obs, state, t, record=True)
                    continue
                buf.obs[t].copy_(obs)
                if buf.state is not None:
                    buf.state[t].copy_(state)
                self.send(g, self._policy_step(g, obs, state, t))
            tr.env.step()
            record_outcome(self.terminated[t], self.truncated[t], self.final_obs[t] if self.final_obs is not None else None,
                           [tr.buffers[g.name].rewards[t] for g in tr.groups], [tr.buffers[g.name].mask[t + 1] for g in tr.groups])
            if self.final_active is not None:
                self.final_active[t].copy_(store[FINAL_ACTIVE])
            if per_step_final_values:
                self._final_values_of_step(t)
        for g in (tr.groups if self.active is not None and not recorded_masks else ()):
            tr.buffers[g.name].mask[tr.T].copy_(self.live(g))
        if self.final_obs is not None:
            self._final_values()
            if self.final_active is not None:
                for g in tr.groups:
                    final = tr.buffers[g.name].final_values
                    final.mul_(g.gather(self.final_active.view(-1, tr.env.num_agents)).view(final.shape))

    def _draw_noise(self, g, t):
        """The group's policy noise of steps t .. t + noise_block - 1 [b, E * n, D]: member k's part from
        its own stream (element (t, replica, agent, d) of its rollout), uniform for the Gumbel trick of
        discrete heads (the policy step keeps it off 0), normal for Gaussian ones."""
        tr = self.trainer
        buffer, M, b = self.noise[g.name], tr.M, self.noise_block
        per_member = buffer.shape[1] // M * buffer.shape[2]
        draw = tr.streams.normal if tr.head.kind == "gaussian" else tr.streams.uniform
        site = rollout_site([h.name for h in tr.groups].index(g.name))
        draw((b, per_member), site, offset=t * per_member, out=buffer.view(b, M, per_member).transpose(0, 1))

    def _policy_step(self, g, obs, state, t, record: bool = False):
        """Sample the group's actions for obs [E, n, O] into its buffer's step t (actions, logp,
        values) with the rollout's copy of the model; returns the actions [E * n, ...]. record (the
        fused step): also store obs in the buffer and the actions in the env's action array."""
        tr = self.trainer
        buf = tr.buffers[g.name]
        if t % self.noise_block == 0:
            self._draw_noise(g, t)
        noise = self.noise[g.name][t % self.noise_block]
        if g.name in self._fused_step:
            recorded = dict(obs_out=buf.obs[t], env_action=self.store["action"], agents=g.slice) if record else {}
            return self._fused_step[g.name](obs.reshape(-1, tr.obs_dim), noise, buf.actions[t], buf.logp_old[t],
                                            buf.values[t], **recorded)
        model, central = tr.rollout_models[g.name], g.name in tr.central
        if self._head_sample is not None:
            with tr.autocast():
                out, value = forward(model, obs.reshape(-1, tr.obs_dim), state, central)
            self._head_sample(out, noise, buf.actions[t], buf.logp_old[t])
            buf.values[t].copy_(value.reshape(buf.values[t].shape))
            return buf.actions[t].reshape((-1,) + tr.head.act_shape)
        with tr.autocast():
            return self._act_and_record(model, tr.head, obs.reshape(-1, tr.obs_dim), state, noise, central,
                                        buf.actions[t], buf.logp_old[t], buf.values[t])

    def step_outcome(self, terminated, truncated, final_obs, rewards: list, masks: list | None = None):
        """After an env step: terminations, truncations [E], final observations [E, A, O] (when kept), each
        group's rewards [E, n] into the rollout's step t (the views given; `masks`, FusedStepRecord's, are
        the rollout's own to copy here), finished episodes into the episode statistics. One function, so
        that torch.compile fuses the step's bookkeeping into a few kernels."""
        tr, store = self.trainer, self.store
        tr.episode_stats.after_step()
        terminated.copy_(store["terminated"])
        truncated.copy_(store["truncated"])
        if final_obs is not None:
            final_obs.copy_(store["final_obs"].reshape(final_obs.shape))
        for g, reward in zip(tr.groups, rewards):
            reward.copy_(g.gather(store["reward"]))

    def _final_values_of_step(self, t):
        """V(final observation) of the replicas truncated at step t, when the rollout's final
        observations are too large to keep for one batched pass."""
        tr = self.trainer
        for name, step in self._wide_final.items():  # (the wide steps' groups, in one launch each)
            step.truncated_values(self.store["final_obs"], self.truncated[t], self.terminated[t],
                                  tr.buffers[name].final_values[t])
        if self.active is not None:
            for g in tr.groups:
                if g.name in self._wide_final:
                    tr.buffers[g.name].final_values[t].mul_(g.gather(self.store[FINAL_ACTIVE]))
        if not (groups := [g for g in tr.groups if g.name not in self._wide_final]):
            return
        truncated_only = (self.truncated[t] * (1 - self.terminated[t])).unsqueeze(1)
        final_obs = {g.name: self.observe(g, self.store["final_obs"]) for g in tr.groups}
        state = self.joint_obs(final_obs) if tr.central else None
        for g in groups:
            final = self.values(g, tr.rollout_models[g.name], final_obs[g.name], state) * truncated_only
            if self.active is not None:
                final = final * g.gather(self.store[FINAL_ACTIVE])
            tr.buffers[g.name].final_values[t].copy_(final)

    def _final_values(self):
        """V(final observation) of every replica truncated during the rollout (else 0), into each
        group's final_values [T, E, n]: one batched pass over the kept final observations (a few
        large kernels, not T times as many small ones), in chunks of whole steps within the learner's
        memory bound, each chunk's rows grouped by member (a population's models need them so)."""
        tr = self.trainer
        if self._fused_final is not None:
            g = tr.groups[0]
            self._fused_final.truncated_values(self.final_obs, self.truncated, self.terminated,
                                               tr.buffers[g.name].final_values)
            return
        T, E, M, A, O = tr.T, tr.E, tr.M, tr.env.num_agents, tr.obs_dim
        truncated_only = (self.truncated * (1 - self.terminated)).view(T, M, E // M, 1).transpose(0, 1)
        if _zero_final_values_where_none_truncated(tr, truncated_only):
            return
        by_member = self.final_obs.view(T, M, E // M, A, O).transpose(0, 1)  # [M, T, E / M, A, O]
        steps = max(1, min(tr.chunk_size[g.name] // g.n for g in tr.groups) // E)
        for part in chunks(T, steps):
            rows = by_member[:, part].reshape(-1, A, O)
            group_obs = {g.name: self.observe(g, rows) for g in tr.groups}
            state = self.joint_obs(group_obs) if tr.central else None
            for g in tr.groups:
                value = self.values(g, tr.rollout_models[g.name], group_obs[g.name], state)
                value = value.view(M, -1, E // M, g.n) * truncated_only[:, part]
                final = tr.buffers[g.name].final_values[part].view(-1, M, E // M, g.n)
                final.transpose(0, 1).copy_(value)

    def compute_gae(self, g):
        """GAE of group g's rollout, bootstrapped from V(s_T), into its buffer's advantages and returns (the
        rewards first scaled in place, with normalize_reward)."""
        tr = self.trainer
        with torch.no_grad():
            if g.name in tr.reward_scales:
                tr.reward_scales[g.name](tr.buffers[g.name], tr.sync)
            obs = {h.name: self.observe(h, self.store["obs"]) for h in tr.groups}
            state = self.joint_obs(obs) if g.name in tr.central else None
            next_value = self.values(g, tr.rollout_models[g.name], obs[g.name], state)
            if self._fused_gae is not None:
                self._fused_gae(tr.buffers[g.name], next_value)
                return
            gae(tr.buffers[g.name], next_value, tr.hp.per_replica("gamma", tr.E_member),
                tr.hp.per_replica("gae_lambda", tr.E_member), self._advantages)

    # -- acting with trained policies ------------------------------------------------------------
    def acting(self):
        """Every model (and rollout copy) in eval mode: acting and the rollout's values see Dropout off
        and BatchNorm's running statistics; each update puts its learner back in training mode."""
        tr = self.trainer
        for model in (*tr.models.values(), *tr.rollout_models.values()):
            if model.training:  # (a walk of the module tree only where the mode changes)
                model.eval()

    def act(self, deterministic: bool = True, generator: torch.Generator | None = None, streams=None):
        """The learners' actions for the env's current observations into its action array: the
        distribution's mode when deterministic, else a sample drawn from `streams` (a MemberStreams of
        one stream per member: each member's draws its own), else with `generator` (None: torch's global one)."""
        refuse_observations(deterministic)
        tr = self.trainer
        self.acting()
        with torch.no_grad():
            for index, g in enumerate(tr.groups):
                model = tr.models[g.name]
                obs = self.observe(g, self.store["obs"]).reshape(-1, tr.obs_dim)
                if tr.algorithm == "ddpg":
                    actions = model.actor(obs)
                else:
                    out = model.actor(obs) if g.name in tr.central else model(obs)[0]
                    if deterministic:
                        actions = tr.head.mode(out)
                    else:
                        gaussian = tr.head.kind == "gaussian"
                        if streams is not None:
                            draw = streams.normal if gaussian else streams.uniform
                            noise = draw((out.numel() // streams.members,), rollout_site(index)).reshape(out.shape)
                        elif gaussian:
                            noise = torch.randn(out.shape, device=tr.device, generator=generator)
                        else:
                            noise = torch.rand(out.shape, device=tr.device, generator=generator).clamp_(1e-10, 1)
                        actions = tr.head.sample(out, getattr(model, "log_std", None), noise)
                self.send(g, actions)
        return self.store["action"]
