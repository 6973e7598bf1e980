"""The learner's pieces against closed forms and against each other: masks, chunks, GAE at an agent's
exit, the learning-rate floor, DDPG's defaults, interrupts, checkpoints between log points,
divergence warnings, the progress bar and the thread choice."""
import contextlib
import copy
import dataclasses
import math
import os
import signal
import time
import warnings

import pytest
import torch

import workbench as wb
from workbench.learn import learners, threads
from workbench.learn.metrics import append_csv
from workbench.learn.algorithms import a2c, ppo
from workbench.compiler.envdef import Discrete
from workbench.learn.policies import ActorCritic
from workbench.learn.rollout import Batch, RolloutBuffer
from workbench.learn.algorithms.gae import advantages


def small_batch(B=24, O=3, seed=0, mask=None):
    g = torch.Generator().manual_seed(seed)
    fields = {"obs": torch.randn(B, O, generator=g), "actions": torch.randint(0, 3, (B,), generator=g),
              "logp_old": torch.full((B,), -1.1), "values": torch.randn(B, generator=g),
              "advantages": torch.randn(B, generator=g), "returns": torch.randn(B, generator=g),
              "mask": torch.ones(B) if mask is None else mask}
    return Batch(fields)


def model(seed=0):
    torch.manual_seed(seed)
    return ActorCritic(3, Discrete(3), (8,))


CONFIG_A2C = wb.A2CConfig(normalize_advantages=True)
CONFIG_PPO = wb.PPOConfig(num_minibatches=2, update_epochs=2)


@pytest.mark.parametrize("algorithm,config", [(a2c, CONFIG_A2C), (ppo, CONFIG_PPO)])
def test_out_of_game_samples_do_not_change_the_loss(algorithm, config):
    mask = torch.ones(24)
    mask[::3] = 0
    batch = small_batch(mask=mask)
    garbage = copy.deepcopy(batch)
    garbage.fields["advantages"] = torch.where(mask > 0, batch["advantages"], torch.full((24,), 1e6))
    garbage.fields["returns"] = torch.where(mask > 0, batch["returns"], torch.full((24,), -1e6))
    live = mask > 0
    only_live = Batch({k: v[live] for k, v in batch.fields.items()})
    m = model()
    count = mask.sum()
    loss_masked, _ = algorithm.loss(m, {**garbage.take(slice(None)), "advantages": garbage["advantages"]}, config, count)
    loss_live, _ = algorithm.loss(m, {**only_live.take(slice(None))}, config, only_live["mask"].sum())
    assert torch.isfinite(loss_masked)
    assert loss_masked.item() == pytest.approx(loss_live.item(), rel=1e-5)


@pytest.mark.parametrize("algorithm,config", [(a2c, CONFIG_A2C), (ppo, CONFIG_PPO)])
def test_chunked_update_equals_the_whole_batch(algorithm, config):
    results = []
    for chunk in (5, 10_000):
        m = model()
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        stats = {k: torch.zeros(()) for k in algorithm.STATS}
        algorithm.update(m, opt, small_batch(), config, chunk_size=chunk, generator=torch.Generator().manual_seed(1),
                         autocast=contextlib.nullcontext, stats=stats)
        results.append((torch.cat([p.detach().reshape(-1) for p in m.parameters()]), stats))
    (p1, s1), (p2, s2) = results
    assert torch.allclose(p1, p2, atol=1e-6)
    assert s1["policy_loss"].item() == pytest.approx(s2["policy_loss"].item(), rel=1e-5, abs=1e-7)
    assert s1["value_loss"].item() == pytest.approx(s2["value_loss"].item(), rel=1e-5)


def test_gae_ends_an_agents_episode_when_it_leaves_the_game():
    # one replica, two agents, T = 2; agent 1 is tagged at step 0 (mask 1 -> 0), agent 0 plays on
    rewards = torch.tensor([[[1.0, -10.0]], [[1.0, 0.0]]])
    values = torch.tensor([[[0.5, 0.5]], [[0.5, 7.0]]])
    mask = torch.tensor([[[1.0, 1.0]], [[1.0, 0.0]], [[1.0, 0.0]]])
    zeros = torch.zeros(2, 1)
    next_value = torch.tensor([[0.25, 3.0]])
    adv = advantages(rewards, values, torch.zeros_like(rewards), mask, zeros, zeros, next_value, 0.9, 1.0)
    # agent 1: its episode ends at step 0: A = r0 - V0, nothing bootstrapped from V(s1) = 7
    assert adv[0, 0, 1].item() == pytest.approx(-10.0 - 0.5)
    # agent 0: plain discounted sum bootstrapped from the next value
    a1 = 1.0 + 0.9 * 0.25 - 0.5
    assert adv[1, 0, 0].item() == pytest.approx(a1)
    assert adv[0, 0, 0].item() == pytest.approx(1.0 + 0.9 * 0.5 - 0.5 + 0.9 * a1)


def test_truncation_bootstraps_from_the_final_value_and_termination_does_not():
    rewards = torch.ones(1, 2, 1)
    values = torch.zeros(1, 2, 1)
    final_values = torch.tensor([[[0.0], [5.0]]])
    mask = torch.ones(2, 2, 1)
    terminated = torch.tensor([[1.0, 0.0]])
    truncated = torch.tensor([[0.0, 1.0]])
    adv = advantages(rewards, values, final_values, mask, terminated, truncated, torch.full((2, 1), 9.0), 0.5, 0.95)
    assert adv[0, 0, 0].item() == pytest.approx(1.0)        # terminated: no bootstrap, not the next value 9
    assert adv[0, 1, 0].item() == pytest.approx(1.0 + 2.5)  # truncated: V(final obs) = 5, not 9


def test_per_minibatch_moments_equal_each_minibatch_alone():
    from workbench.learn.rollout import masked_moments
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(4, 16, generator=g), (torch.rand(4, 16, generator=g) > 0.3).float()
    count, mean, std = masked_moments(x, mask, dim=1)
    assert count.tolist() == mask.sum(1).tolist()
    whole = masked_moments(x, mask)
    live = x[mask > 0]
    assert whole[0].item() == mask.sum().item()
    assert whole[1].item() == pytest.approx(live.mean().item(), abs=1e-6)
    assert whole[2].item() == pytest.approx(live.std().item(), abs=1e-6)
    for m in range(4):
        live = x[m][mask[m] > 0]
        assert mean[m].item() == pytest.approx(live.mean().item(), abs=1e-6)
        assert std[m].item() == pytest.approx(live.std().item(), abs=1e-6)


@pytest.mark.parametrize("algorithm,config", [(a2c, CONFIG_A2C), (ppo, CONFIG_PPO)])
def test_chunk_loss_traces_as_one_graph(algorithm, config):
    """What the trainer compiles on a GPU traces without a graph break (a break would split the
    fused kernels and run Python between them) and computes what the eager function does."""
    torch._dynamo.reset()
    batch, m = small_batch(B=16), model()
    idx = torch.randperm(16)[:8]
    if algorithm is ppo:
        args = (m, batch.fields, None, 1, idx[:4], config, torch.tensor(8.0), torch.tensor(0.1), torch.tensor(0.9))
    else:
        args = (m, batch.take(slice(0, 8)), config, torch.tensor(16.0), torch.tensor(0.1), torch.tensor(0.9))
    compiled = torch.compile(algorithm.chunk_loss, backend="aot_eager", fullgraph=True)
    (loss_c, stats_c), (loss_e, stats_e) = compiled(*args), algorithm.chunk_loss(*args)
    torch.testing.assert_close(loss_c, loss_e)
    torch.testing.assert_close(stats_c, stats_e)
    assert stats_e.shape == (len(algorithm.STATS), 1)  # [STATS, members]


def test_policy_step_writes_the_rollout_step_in_one_graph():
    from workbench.learn.compiled import act_and_record
    torch._dynamo.reset()
    m, T, E = model(), 4, 6
    outs = [(torch.zeros(T, E, 1, dtype=torch.long), torch.zeros(T, E, 1), torch.zeros(T, E, 1)) for _ in range(2)]
    traced = torch.compile(act_and_record, backend="aot_eager", fullgraph=True)
    g = torch.Generator().manual_seed(0)
    for t in range(T):
        obs, noise = torch.randn(E, 3, generator=g), torch.rand(E, 3, generator=g)
        for fn, (actions, logp, values) in zip((act_and_record, traced), outs):
            returned = fn(m, m.head, obs, None, noise, False, actions[t], logp[t], values[t])
            assert torch.equal(returned.reshape(E, 1), actions[t])
    for eager, compiled in zip(*outs):
        torch.testing.assert_close(compiled, eager)
    assert outs[0][1].lt(0).all() and outs[0][0].unique().numel() > 1  # real log-probabilities, varied actions


def test_step_bookkeeping_traces_as_one_graph():
    """The trainer's per-step bookkeeping (terminations, truncations, final observations, rewards,
    episode statistics), compiled on a GPU, traces whole and writes what the eager call writes."""
    torch._dynamo.reset()
    trainer = wb.make_trainer(wb.A2CConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=4, rollout_length=4,
                                           target="cpu"))
    E, A = trainer.E, trainer.env.num_agents
    traced = torch.compile(trainer.collector.step_outcome, backend="aot_eager", fullgraph=True)
    outs = []
    for fn in (trainer.collector.step_outcome, traced):
        outs.append((torch.zeros(E), torch.zeros(E), torch.zeros(E, A, trainer.obs_dim),
                     [torch.zeros(E, g.n) for g in trainer.groups]))
    sums = []
    for _ in range(30):  # episodes of 12 steps: some end, and some are truncated
        trainer.env.step()
        for fn, (term, trunc, final, rewards) in zip((trainer.collector.step_outcome, traced), outs):
            before = trainer.episode_stats.sums.clone()
            fn(term, trunc, final, rewards)
            sums.append(trainer.episode_stats.sums - before)
        for a, b in zip(outs[0][:3] + tuple(outs[0][3]), outs[1][:3] + tuple(outs[1][3])):
            torch.testing.assert_close(a, b)
    torch.testing.assert_close(torch.stack(sums[0::2]), torch.stack(sums[1::2]))
    assert torch.stack(sums)[:, -1].sum() > 0  # episodes were counted


SMALL_TAG = dict(num_taggers=2, num_runners=6, grid_length=10.0, episode_length=12, num_other_agents_observed=3)


@pytest.mark.parametrize("config", [
    wb.PPOConfig(env="pendulum", num_envs=8, rollout_length=70, num_minibatches=2, update_epochs=1,
                 normalize_obs=True, target="cpu", log_every=1),
    wb.A2CConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=4, rollout_length=10, target="cpu",
                 log_every=1, centralised_critic=("runners",)),
], ids=["pendulum", "tag-mappo"])
def test_batched_final_values_equal_the_per_step_ones(config, monkeypatch):
    """V(final observation) of truncated replicas from one pass after the rollout (small rollouts)
    equals the pass after every step (rollouts whose final observations would take too much memory)."""
    from workbench.learn import collection as trainer_module
    finals = []
    for limit in (trainer_module.FINAL_OBS_BUFFER_BYTES, 0):
        monkeypatch.setattr(trainer_module, "FINAL_OBS_BUFFER_BYTES", limit)
        trainer = wb.make_trainer(config)
        assert (trainer.collector.final_obs is None) == (limit == 0)
        seen = []
        for _ in range(4):  # (pendulum: truncated in the third iteration only, then none again)
            trainer.train(num_iterations=1)
            seen.append(torch.cat([b.final_values.flatten() for b in trainer.buffers.values()]))
        finals.append(torch.stack(seen))
    assert (finals[0] != 0).any(), "no replica was truncated: the test would prove nothing"
    torch.testing.assert_close(finals[0], finals[1], rtol=1e-5, atol=1e-6)


BF16_CONFIGS = [
    wb.PPOConfig(env="cartpole", num_envs=16, rollout_length=8, num_minibatches=2, update_epochs=2, target="cpu",
                 precision="bf16", log_every=1, cpu_threads=1),
    wb.A2CConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=4, rollout_length=8, target="cpu",
                 precision="bf16", log_every=1, centralised_critic=("runners",), cpu_threads=1),
    wb.PPOConfig(env="pendulum", num_envs=16, rollout_length=8, num_minibatches=2, update_epochs=2, target="cpu",
                 precision="bf16", log_every=1, cpu_threads=1),
]
BF16_IDS = ["cartpole", "tag-mappo", "pendulum-gaussian"]


class NormedPolicy(torch.nn.Module):
    """A user model with a LayerNorm, a buffer and a Gaussian log_std: parts that are not nn.Linear weights."""

    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(obs_dim, 16), torch.nn.LayerNorm(16), torch.nn.Tanh())
        self.pi, self.v = torch.nn.Linear(16, act_dim), torch.nn.Linear(16, 1)
        self.register_buffer("obs_scale", torch.ones(obs_dim))
        self.log_std = torch.nn.Parameter(torch.zeros(act_dim))

    def forward(self, obs):
        h = self.body(obs * self.obs_scale)
        return self.pi(h), self.v(h).squeeze(-1)


def perturb(model, seed=1):
    """Move every parameter and floating buffer away from its initial value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]:
            tensor.add_(0.3 * torch.randn(tensor.shape, generator=g))


@pytest.mark.parametrize("config", BF16_CONFIGS + [BF16_CONFIGS[2]], ids=BF16_IDS + ["user-model-layernorm"])
def test_bf16_rollout_copy_forward_equals_autocast_after_a_refresh(config, request):
    """The rollout's bf16 copy of a model, refreshed, computes what autocast computes with the learner's
    model on the same input: every parameter and buffer reaches it (log_std, LayerNorm, buffers)."""
    models = None
    if request.node.callspec.id == "user-model-layernorm":
        models = {"shared": NormedPolicy(3, 1)}
    trainer = wb.make_trainer(config, models=models)
    for name, model in trainer.models.items():
        perturb(model)
    trainer.refresh_rollout_copies()
    for g in trainer.groups:
        model, copy_ = trainer.models[g.name], trainer.rollout_models[g.name]
        assert copy_ is not model
        obs = torch.randn(6, trainer.obs_dim, generator=torch.Generator().manual_seed(2))
        with torch.no_grad(), trainer.autocast():
            if g.name in trainer.central:
                state = torch.randn(2, trainer.state_dim)
                agent = torch.arange(6) % g.n
                expected, got = model(obs, state[torch.arange(6) // 3], agent), copy_(obs, state[torch.arange(6) // 3], agent)
            else:
                expected, got = model(obs), copy_(obs)
        for e, o in zip(expected, got):
            torch.testing.assert_close(o.float(), e.float(), rtol=0, atol=1e-6)
        if getattr(model, "log_std", None) is not None:
            assert torch.equal(copy_.log_std, model.log_std)
        for (key, mine), (_, theirs) in zip(copy_.named_buffers(), model.named_buffers()):
            assert torch.equal(mine.to(theirs.dtype), theirs), key


def test_bf16_gaussian_rollout_stores_the_learners_log_probabilities():
    """A Gaussian policy whose log_std has moved: the log-probabilities stored at rollout time are the
    learner's own (autocast) log pi_old(a|s), so PPO's first ratio is 1."""
    trainer = wb.make_trainer(BF16_CONFIGS[2])
    model = trainer.models["shared"]
    with torch.no_grad():
        model.log_std.fill_(-0.7)
    with torch.no_grad():
        trainer.collector.rollout()
    buf = trainer.buffers["shared"]
    with torch.no_grad(), trainer.autocast():
        out, _ = model(buf.obs.reshape(-1, trainer.obs_dim).float())
        logp, _ = model.head.log_prob_entropy(out.float(), model.log_std, buf.actions.reshape(out.shape))
    torch.testing.assert_close(buf.logp_old.reshape(-1), logp, rtol=0, atol=1e-3)


@pytest.mark.parametrize("config", BF16_CONFIGS, ids=BF16_IDS)
def test_bf16_rollout_copies_train_as_autocast_does(config, monkeypatch):
    """Three iterations acting with the bf16 copies and three acting through autocast with the
    learner's models agree: on the CPU to float rounding (a copy one update stale moves the
    log-probabilities by about 5e-4), on GPUs within bf16 rounding (one-ulp GEMM differences)."""
    runs = []
    for shadow in (True, False):
        if not shadow:
            monkeypatch.setattr(learners, "rollout_copies", lambda models, bf16, nn_layout=(): (dict(models), ([], [])))
        trainer = wb.make_trainer(config)
        assert (trainer.rollout_models[trainer.groups[0].name] is trainer.models[trainer.groups[0].name]) != shadow
        trainer.train(num_iterations=3)
        runs.append((trainer.history, [b.logp_old.clone() for b in trainer.buffers.values()]))
    on_cpu = trainer.device.type == "cpu"
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5 if on_cpu else 2e-2)
    name = trainer.groups[0].name
    for a, b in zip(runs[0][0], runs[1][0]):
        assert a[f"value_loss/{name}"] == pytest.approx(b[f"value_loss/{name}"], rel=1e-5 if on_cpu else 5e-2,
                                                        abs=1e-7 if on_cpu else 1e-3)


def cartpole(**kw):
    base = dict(num_envs=16, rollout_length=8, num_minibatches=2, update_epochs=1, target="cpu", log_every=1,
                total_env_steps=16 * 8 * 2)
    return wb.PPOConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def env():
    return wb.make("cartpole", num_envs=16, target="cpu", seed=0)


def test_annealed_learning_rate_stops_at_zero_past_the_budget(env):
    trainer = wb.Trainer(env, cartpole(anneal_lr=True))
    with pytest.warns(UserWarning, match="learning rate has reached 0"):
        trainer.train(num_iterations=4)
    lrs = [float(group["lr"]) for group in trainer.optimizers["shared"].param_groups]
    assert lrs == [0.0]


def test_ddpg_does_not_clip_by_default_and_normalises_what_it_replays(monkeypatch):
    assert wb.DDPGConfig().max_grad_norm == 0
    clipped = []
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: clipped.append(1))
    config = wb.DDPGConfig(env="pendulum", num_envs=8, rollout_length=2, learning_starts=32, batch_size=16,
                           updates_per_rollout=2, normalize_obs=True, target="cpu", log_every=1,
                           total_env_steps=8 * 2 * 6)
    trainer = wb.make_trainer(config)
    trainer.train()
    assert clipped == []
    norm, rb = trainer.norms["shared"], trainer.buffers["shared"]
    assert norm.count.item() > 8 * 2 * 5
    stored = rb.obs[:rb.size]
    # raw observations in the buffer (cos, sin in [-1, 1], angular velocity up to 8), normalised when sampled
    assert stored[:, :2].abs().max() <= 1.0 + 1e-6
    obs, *_ = rb.sample(64, torch.Generator().manual_seed(0), norm)
    assert torch.allclose(obs, norm(rb.obs[(torch.rand(64, generator=torch.Generator().manual_seed(0))
                                            * rb.fill).long()]))


def test_ctrl_c_stops_at_the_end_of_the_iteration_with_a_checkpoint(tmp_path, env, capsys):
    trainer = wb.Trainer(env, cartpole(run_dir=str(tmp_path), total_env_steps=10**6))
    before = signal.getsignal(signal.SIGINT)  # (a shell's background job starts with SIGINT ignored)

    def press_ctrl_c(iteration, metrics):
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return True

    result = trainer.train(callback=press_ctrl_c)
    assert result.stopped_by == "interrupted" and result.iterations == 2 and result.signal == "SIGINT"
    assert result.checkpoint == str(tmp_path / "checkpoint.pt")
    assert "SIGINT: stopping after this iteration and saving a checkpoint (Ctrl-C again stops at once" in \
        capsys.readouterr().err  # heard at once: an iteration can be long
    resumed = wb.Trainer(env, cartpole(run_dir=str(tmp_path))).load(result.checkpoint)
    assert resumed.iteration == 2
    assert signal.getsignal(signal.SIGINT) is before  # the handler train() found is back


def test_a_checkpoint_from_another_kind_of_device_seeds_new_streams_for_trainer_and_env(tmp_path, env):
    """A generator's state from a GPU (seed and offset, 16 bytes) cannot be loaded into a CPU one: the
    resumed run warns and both its streams start anew from seed and iteration, the env's too (not its
    first stream again, which would replay the run's first resets)."""
    trainer = wb.Trainer(env, cartpole(run_dir=str(tmp_path), total_env_steps=16 * 8 * 2))
    trainer.train()
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    for key in ("generator", "env_generator"):
        payload["rng"][key] = torch.zeros(16, dtype=torch.uint8)
    torch.save(payload, tmp_path / "from_gpu.pt")
    resumed = wb.Trainer(env, cartpole(run_dir=str(tmp_path / "resumed")))
    with pytest.warns(UserWarning, match="another kind of device.*run and its env draw from new ones"):
        resumed.load(tmp_path / "from_gpu.pt")
    assert resumed.iteration == 2
    expected = torch.Generator().manual_seed(env.seed * 2**20 + 2).get_state()
    assert torch.equal(env._generator.get_state(), expected)
    assert not torch.equal(expected, torch.Generator().manual_seed(env.seed).get_state())


def test_checkpoints_between_log_points(tmp_path, env, monkeypatch):
    trainer = wb.Trainer(env, cartpole(run_dir=str(tmp_path), log_every=4, checkpoint_every=1,
                                       total_env_steps=16 * 8 * 4))
    saved = []
    real = trainer.save
    monkeypatch.setattr(trainer, "save", lambda path: saved.append(trainer.iteration) or real(path))
    trainer.train()
    assert saved[:4] == [1, 2, 3, 4]


def test_a_run_checkpoints_every_ten_minutes_by_default(tmp_path, env, monkeypatch):
    """checkpoint_every 0 (the default): a run killed hard loses at most AUTO_CHECKPOINT_S of training."""
    from workbench.learn import trainer as trainer_module
    trainer = wb.Trainer(env, cartpole(run_dir=str(tmp_path), log_every=4, total_env_steps=16 * 8 * 8))
    saved, now = [], [0.0]
    real_save, real_iteration = trainer.save, trainer.run_iteration
    monkeypatch.setattr(trainer, "save", lambda path: saved.append(trainer.iteration) or real_save(path))
    monkeypatch.setattr(trainer, "run_iteration", lambda *a: now.__setitem__(0, now[0] + 400.0) or real_iteration(*a))
    monkeypatch.setattr(trainer_module.time, "perf_counter", lambda: now[0])  # an iteration takes 400 s
    assert trainer_module.AUTO_CHECKPOINT_S == 600.0
    trainer.train(num_iterations=5)
    assert saved == [2, 4, 5]  # 800 s after the start, 800 s after that save, then the end
    monkeypatch.setattr(trainer_module, "AUTO_CHECKPOINT_S", 10.0**9)
    saved.clear()
    trainer.train(num_iterations=3)
    assert saved == [8]  # the end only


def test_checkpoint_every_never_saves_nonfinite_weights(tmp_path, env, monkeypatch):
    """Between reports no loss is read: the periodic checkpoint checks the weights themselves, and
    the error names the last checkpoint that is finite."""
    trainer = wb.Trainer(env, cartpole(run_dir=str(tmp_path), log_every=4, checkpoint_every=1,
                                       total_env_steps=16 * 8 * 4))
    real = trainer.run_iteration

    def poisoned(*args):
        real(*args)
        if trainer.iteration == 2:
            with torch.no_grad():
                next(trainer.models["shared"].parameters()).fill_(float("nan"))

    monkeypatch.setattr(trainer, "run_iteration", poisoned)
    with pytest.raises(wb.NonFiniteError, match=r"weights became NaN or inf by iteration 2.*last good one"):
        trainer.train()
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert saved["iteration"] == 1
    assert all(torch.isfinite(p).all() for p in saved["models"]["shared"].values())


def test_one_report_judges_divergence_on_its_own_values():
    """lr=1e6 with a single report (nothing to compare against): the report's own values say divergent."""
    config = cartpole(lr=1e6, log_every=8, total_env_steps=16 * 8 * 8, anneal_lr=False, cpu_threads=1)
    trainer = wb.make_trainer(dataclasses.replace(config, env="cartpole"))
    with pytest.warns(UserWarning, match="looks divergent"):
        result = trainer.train()
    assert len(result.history) == 1


def test_a_healthy_run_is_not_called_divergent(env):
    trainer = wb.Trainer(env, cartpole(total_env_steps=16 * 8 * 6, log_every=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer.train()


def test_observation_normaliser_counts_only_agents_in_the_game():
    """Tagged runners observe zeros: they are left out of the normaliser's moments."""
    config = wb.PPOConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=4, rollout_length=6, target="cpu",
                          normalize_obs=True, num_minibatches=2)
    trainer = wb.make_trainer(config)
    trainer.env.store["in_game"][:, -3:] = 0  # three runners out from the start (they stay out)
    with torch.no_grad():
        trainer.collector.rollout()
    for g in trainer.groups:
        buf, norm = trainer.buffers[g.name], trainer.norms[g.name]
        live = buf.mask[:trainer.T]
        assert norm.n.item() == live.sum().item()
        if g.name == "runners":
            assert live.sum().item() < live.numel()


def warn(trainer, metrics):
    trainer.metrics.warn_divergence({"iteration": 1, **metrics}, ("lr", trainer.config.lr), "value_loss",
                                    discrete=True)


def test_divergence_is_named_with_its_likely_cause(env):
    trainer = wb.Trainer(env, cartpole(lr=5.0))
    warn(trainer, {"value_loss/shared": 2.0, "entropy/shared": 0.69})
    with pytest.warns(UserWarning, match=r"looks divergent: the value loss grew from 2 to 6e\+04.*lr=5"):
        warn(trainer, {"value_loss/shared": 6e4, "entropy/shared": 0.6})
    ddpg = wb.make_trainer(wb.DDPGConfig(env="pendulum", num_envs=4, target="cpu", critic_lr=0.5))
    ddpg._report({"iteration": 1, "critic_loss/shared": 1.0}, [], None)
    with pytest.warns(UserWarning, match=r"critic loss grew from 1 to 1e\+05.*\(critic_lr=0.5\)"):
        ddpg._report({"iteration": 2, "critic_loss/shared": 1e5}, [], None)  # (DDPG has no lr to name)
    other = wb.Trainer(env, cartpole(lr=5.0))
    warn(other, {"value_loss/shared": 2.0, "entropy/shared": 0.69})
    with pytest.warns(UserWarning, match="entropy collapsed"):
        warn(other, {"value_loss/shared": 2.0, "entropy/shared": 1e-6})


def test_progress_bar_shows_rate_return_and_the_compile(env, capsys):
    from workbench.learn.loggers import compose
    from workbench.learn.progress import ProgressBar
    trainer = wb.Trainer(env, cartpole(target_return=400.0))
    loss = trainer.loss_fn  # (marked as compiling, as torch.compile's first call on a GPU is)
    trainer.loss_fn = type("Compiled", (), {"compiled": True, "__call__": lambda self, *a: loss(*a)})()
    bar, told = ProgressBar.for_trainer(trainer), []
    trainer.train(num_iterations=2, callback=compose(bar, lambda i, m: True, type("Heard", (), {
        "__call__": lambda self, i, m: True, "phase": lambda self, text: told.append(text)})()))
    bar.close()
    err = capsys.readouterr().err
    assert "steps/s" in err and "2/" in err and "training" in err
    assert told[0].startswith("first iteration: compiling") and told[-1] == "training"
    quiet = wb.Trainer(env, cartpole(progress=True))
    quiet.train(num_iterations=1)  # (the trainer draws nothing itself: the bar is a callback)
    assert "steps/s" not in capsys.readouterr().err


def test_thread_counts_are_chosen_by_measurement(monkeypatch):
    for name in threads.USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    chosen = {}
    monkeypatch.setattr(threads, "_set_numba", lambda n: chosen.__setitem__("env", n))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: chosen.__setitem__("learner", n))

    def env_step():  # faster on one thread (oversubscribed)
        time.sleep(0.004 if chosen.get("env") == 4 else 0.001)

    def learner_pass():  # faster on all cores
        time.sleep(0.001 if chosen.get("learner") == 4 else 0.004)

    report = threads.configure(0, env_step, learner_pass)
    assert (report["env"], report["learner"]) == (1, 4) == (chosen["env"], chosen["learner"])
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two torchrun ranks share the 4 cores: two each, one thread
    assert threads.configure(0, env_step, learner_pass)["how"] == "two cores: one thread"
    assert chosen == {"env": 1, "learner": 1}
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert threads.configure(0, env_step, learner_pass)["how"] == "one core" and chosen == {"env": 1, "learner": 1}
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    chosen.clear()
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # (as torchrun sets it): numba, which does not read it, follows
    assert threads.configure(0, env_step, learner_pass)["how"] == "environment variables"
    assert chosen == {"env": 1, "learner": 1}  # (torch's again: numba's OpenMP pool may have set it to its own)
    chosen.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")  # nested OpenMP: the outer count
    threads.configure(0, env_step, learner_pass)
    assert chosen == {"env": 2, "learner": 2}
    chosen.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "many")  # not a count: both pools left as they are
    assert threads.configure(0, env_step, learner_pass)["how"] == "environment variables" and chosen == {}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")  # the user's own numba count stays
    chosen.clear()
    assert threads.configure(0, env_step, learner_pass)["how"] == "environment variables" and chosen == {"learner": 1}


def test_torch_keeps_its_count_from_the_environment_beside_numba_s_own():
    """Before: NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=2 left torch on one thread (numba's OpenMP pool, started
    after torch's count was set, set the shared runtime to its own) beside MKL's two: 5x slower, and
    the checkpoint recorded learner 1."""
    import subprocess
    import sys
    code = ("import torch, workbench as wb; t = wb.make_trainer(wb.PPOConfig(env='cartpole', num_envs=8, "
            "rollout_length=8, target='cpu')); t.train(num_iterations=1); "
            "print(t.threads['env'], t.threads['learner'], torch.get_num_threads())")
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.stdout.split() == ["1", "2", "2"], out.stderr[-2000:]


def test_initial_weights_do_not_depend_on_the_thread_count():
    """A trainer sets torch's thread count after building its models: one seed must start from the same
    weights whatever the count was (orthogonal init's QR rounds by it), or a process's first trainer
    would start elsewhere than its later ones."""
    before, weights = torch.get_num_threads(), []
    try:
        for n in (2, 1):
            torch.set_num_threads(n)
            torch.manual_seed(0)
            weights.append(ActorCritic(6, Discrete(3), (64, 64)).state_dict())
    finally:
        torch.set_num_threads(before)
    for name, value in weights[0].items():
        assert torch.equal(value, weights[1][name]), name


def test_metrics_csv_keeps_its_columns_when_a_report_adds_some(tmp_path):
    """DDPG reports no losses before learning starts: later rows' columns still match the header."""
    path = tmp_path / "metrics.csv"
    append_csv(path, {"iteration": 1, "return/shared": -3.0})
    append_csv(path, {"iteration": 2, "return/shared": -2.0, "critic_loss/shared": 0.5})
    append_csv(path, {"return/shared": -1.0, "iteration": 3, "critic_loss/shared": 0.25})
    import csv
    rows = list(csv.DictReader(path.open()))
    assert [r["iteration"] for r in rows] == ["1", "2", "3"]
    assert [r["critic_loss/shared"] for r in rows] == ["", "0.5", "0.25"]
    assert [r["return/shared"] for r in rows] == ["-3.0", "-2.0", "-1.0"]


def test_load_restores_the_thread_counts_the_run_measured(tmp_path, monkeypatch):
    """A resumed run computes with the thread counts it measured, not with what a new measurement picks."""
    for name in threads.USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    picks = iter([(2, {}), (2, {}), (1, {}), (1, {})])  # the first run measures 2 and 2, the resumed one 1 and 1
    monkeypatch.setattr(threads, "pick", lambda candidates, setter, work: next(picks))
    applied = []
    monkeypatch.setattr(threads, "apply", lambda chosen: applied.append(dict(chosen)))
    env = wb.make("cartpole", num_envs=16, target="cpu", seed=0)
    threads.forget()
    first = wb.Trainer(env, cartpole())
    assert (first.threads["env"], first.threads["learner"]) == (2, 2)
    first.save(tmp_path / "checkpoint.pt")
    threads.forget()  # the resumed run in a fresh process measures afresh
    resumed = wb.Trainer(env, cartpole())
    assert (resumed.threads["env"], resumed.threads["learner"]) == (1, 1)
    resumed.load(tmp_path / "checkpoint.pt")
    assert applied[-1]["env"] == 2 and applied[-1]["learner"] == 2
    assert (resumed.threads["env"], resumed.threads["learner"]) == (2, 2)
    assert resumed.threads["how"] == "restored from the checkpoint"


def test_cpu_tanh_matches_torch_tanh_in_values_and_gradients():
    from workbench.learn.policies import Tanh
    x = torch.cat([torch.linspace(-30, 30, 20001), torch.tensor([0.0, 1e-6, -1e-6, 1e-30])]).requires_grad_()
    ref = x.detach().clone().requires_grad_()
    y, y_ref = Tanh()(x), torch.tanh(ref)
    assert isinstance(Tanh(), torch.nn.Tanh)  # (the fused kernels and checkpoints see the same module type)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=4e-7)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=2e-6)
    assert float(Tanh()(torch.tensor([40.0]))) == 1.0 and float(Tanh()(torch.tensor([-40.0]))) == -1.0
    special = Tanh()(torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0]))
    assert special[0].isnan() and special[1:3].tolist() == [1.0, -1.0] and special[3].item() == 0.0


def test_cpu_tanh_compiles_where_numba_finds_no_writable_cache_folder(monkeypatch):
    """A read-only install without a writable home: numba refuses cache=True at decoration ("no locator
    available"), which would break `import workbench.learn.policies`; the kernel compiles uncached instead."""
    import importlib
    import numba.core.caching as caching
    from workbench.learn import cpu_tanh
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    try:
        importlib.reload(cpu_tanh)
        assert type(cpu_tanh._tanh_into._cache).__name__ == "NullCache"
        assert cpu_tanh.tanh(torch.tensor([0.5])).item() == pytest.approx(math.tanh(0.5), abs=4e-7)
    finally:
        monkeypatch.undo()
        importlib.reload(cpu_tanh)


def test_cpu_tanh_traced_computes_the_same_bits():
    """A traced or exported policy computes the CPU's tanh from torch's ops (cpu_tanh.tanh_ops): the
    values the numba kernel gives in training, bit for bit, on every float32 (NaN, +-inf included)."""
    from workbench.learn import cpu_tanh
    from workbench.learn.policies import Tanh
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(100_000, generator=g) * 4, torch.linspace(-9, 9, 50_001),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-38, 7.9, -7.9])])
    assert torch.equal(cpu_tanh.tanh(x).nan_to_num(7.0), cpu_tanh.tanh_ops(x).nan_to_num(7.0))
    traced = torch.jit.trace(Tanh(), x[:8])
    assert torch.equal(traced(x).nan_to_num(7.0), cpu_tanh.tanh(x).nan_to_num(7.0))


def test_explained_variance_is_each_members_own_over_live_samples():
    """1 - Var[R - V] / Var[R] of each member's live samples (member k owns replicas [2k, 2k + 2) of
    a rollout [T, E, 1]), NaN where the returns do not vary."""
    from workbench.learn.rollout import explained_variance
    g = torch.Generator().manual_seed(3)
    T, E, M = 5, 4, 2
    values, returns = torch.randn(T, E, 1, generator=g), torch.randn(T, E, 1, generator=g)
    mask = (torch.rand(T, E, 1, generator=g) > 0.3).float()
    returns[:, 2:] = 7.0  # member 1's returns are constant on every sample
    batch = Batch({"values": values.reshape(-1), "returns": returns.reshape(-1), "mask": mask.reshape(-1)})
    import types
    from workbench.learn.members import MemberSamples
    found = explained_variance(batch, MemberSamples(types.SimpleNamespace(members=M, device="cpu"), T, E, 1))
    live = mask[:, :2].bool()
    r, v = returns[:, :2][live].double(), values[:, :2][live].double()
    assert found[0].item() == pytest.approx(1 - (r - v).var().item() / r.var().item(), rel=1e-5)
    assert math.isnan(found[1].item())
    whole = explained_variance(Batch({"values": returns.reshape(-1) * 0.5, "returns": returns.reshape(-1),
                                      "mask": torch.ones(T * E)}))
    assert whole.item() == pytest.approx(0.75, rel=1e-5)  # V = R / 2 explains 1 - 1/4 of Var[R]


def test_reports_carry_the_learning_rate_in_use_and_the_explained_variance(env):
    """Each report's learning_rate is the one the last iteration used: anneal_lr takes it to
    lr (1 - (i - 1) / N) in iteration i of N."""
    config = cartpole(anneal_lr=True, log_every=1, lr=1e-3, total_env_steps=16 * 8 * 4)
    trainer = wb.Trainer(env, config)
    trainer.train(num_iterations=4)
    assert [h["learning_rate"] for h in trainer.history] == pytest.approx([1e-3 * (1 - i / 4) for i in range(4)])
    assert all(h["explained_variance/shared"] <= 1 for h in trainer.history)


def test_a_reports_rate_leaves_out_the_iterations_that_captured_the_graph():
    """Before: a GPU run's first report divided its env-steps by a window holding the CUDA graph's
    warm-up and capture, so its env_steps_per_s read far below the run's."""
    from workbench.learn.metrics import RateWindow
    window = RateWindow(0.0)
    window.add(100, 0.0, 2.0, setup=True)  # eager warm-up
    window.add(100, 2.0, 5.0, setup=True)  # capture
    window.add(100, 5.0, 5.1, setup=False)
    window.add(100, 5.1, 5.2, setup=False)
    assert window.pull(5.2) == pytest.approx(1000.0)  # 200 steps in 0.2 s, not 400 in 5.2 s
    window.add(100, 5.2, 5.25, setup=False)
    assert window.pull(5.25) == pytest.approx(2000.0)
    only_setup = RateWindow(0.0)
    only_setup.add(100, 0.0, 4.0, setup=True)
    assert only_setup.pull(4.0) == pytest.approx(25.0)  # (log_every=1: the capturing iteration's own rate)
