"""The fused learner kernels against the torch path they replace: the same gradients and statistics
for PPO (with and without value clipping and advantage normalisation) and A2C, one policy and a
population's stacked members; GAE against gae.advantages; a trainer with the kernels on matches
one with them off. On a GPU the kernels compile; elsewhere they run in Triton's interpreter (CPU)."""
import copy

import pytest
import torch

triton = pytest.importorskip("triton", reason="the fused kernels need Triton (pip install triton)")

from workbench.compiler.envdef import Discrete  # noqa: E402
from workbench.learn import fused  # noqa: E402
from workbench.learn.algorithms import a2c, ppo  # noqa: E402
from workbench.learn.members import MemberAdam, stack_members  # noqa: E402
from workbench.learn.policies import ActionHead, ActorCritic  # noqa: E402
from workbench.learn.rollout import RolloutBuffer  # noqa: E402
from workbench.learn.algorithms.gae import advantages  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if GPU else "cpu")


@pytest.fixture(autouse=True)
def _kernels(triton_kernels):
    """Every test here runs the kernels (conftest.triton_kernels)."""


class Cfg:
    def __init__(self, algorithm="ppo", **kw):
        self.algorithm = algorithm
        self.normalize_advantages = kw.pop("normalize_advantages", True)
        self.clip_value = kw.pop("clip_value", False)
        self.clip_coef, self.ent_coef, self.vf_coef = 0.2, 0.01, 0.5
        self.__dict__.update(kw)


def rollout_fields(B, O, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, generator=g) > 0.2).float()
    fields = {"obs": torch.randn(B, O, generator=g), "actions": torch.randint(0, K, (B,), generator=g),
              "logp_old": -torch.rand(B, generator=g) * 2, "values": torch.randn(B, generator=g),
              "advantages": torch.randn(B, generator=g), "returns": torch.randn(B, generator=g), "mask": mask}
    return {k: v.to(DEVICE) for k, v in fields.items()}


def models(M, O, K, hidden=(64, 64)):
    head = ActionHead(Discrete(K)).to(DEVICE)
    nets = []
    for k in range(M):
        torch.manual_seed(10 + k)
        nets.append(ActorCritic(O, Discrete(K), hidden))
    model = (stack_members(nets) if M > 1 else nets[0]).to(DEVICE)
    model.head = head
    return model


def minibatch(fields, M, per_member, rows, seed):
    """Each member's `rows` sample ids out of its own `per_member` (rows grouped by member, as
    MemberSamples gives them), and the minibatch's live counts and advantage moments [M]."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(per_member, generator=g)[:rows] + per_member * k for k in range(M)]).to(DEVICE)
    live = fields["mask"][idx]
    count = live.sum(1).clamp_min(1)
    adv = fields["advantages"][idx]
    mean = (adv * live).sum(1) / count
    std = ((((adv - mean[:, None]) * live) ** 2).sum(1) / (count - 1)).sqrt()
    return idx, count, mean, std


def torch_reference(model, fields, idx, cfg, M, count, mean, std):
    """Gradients [per parameter] and statistics of the torch path on the same minibatch, in full fp32
    (a trainer run earlier in the process may have left TF32 matmuls on)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return _torch_reference(model, fields, idx, cfg, M, count, mean, std)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _torch_reference(model, fields, idx, cfg, M, count, mean, std):
    model.zero_grad(set_to_none=True)
    loss_fn = ppo.chunk_loss if cfg.algorithm == "ppo" else None
    if cfg.algorithm == "ppo":
        total, stats = loss_fn(model, fields, None, 1, idx.reshape(-1), cfg, count, mean, std, None, M)
    else:
        chunk = {k: v[idx.reshape(-1)] for k, v in fields.items()}
        total, stats = a2c.chunk_loss(model, chunk, cfg, count, mean, std, None, M)
    total.backward()
    return [p.grad.clone() for p in model.parameters()], stats


@pytest.mark.parametrize("algorithm,clip_value,normalize,M,K,hidden,single_adam,rows", [
    ("ppo", False, True, 1, 2, (64, 64), False, 150),
    ("ppo", False, True, 1, 3, (64, 64), True, 150),
    ("ppo", False, True, 1, 3, (64, 64), True, 20),  # one program: gradients written in place
    ("ppo", True, True, 3, 5, (64, 64), False, 150),
    ("ppo", False, False, 2, 3, (32, 48), False, 150),
    ("a2c", False, True, 2, 4, (64, 64), False, 150),
    ("a2c", False, True, 1, 4, (64, 64), True, 150),
])
def test_minibatch_gradients_match_torch(algorithm, clip_value, normalize, M, K, hidden, single_adam, rows):
    """Gradients and statistics against the torch path's, a member's rows split over several
    programs (150 rows: a partial last tile) or one (20 rows); the same bits when computed again."""
    O = 7
    cfg = Cfg(algorithm, clip_value=clip_value, normalize_advantages=normalize)
    fields = rollout_fields(M * 200, O, K)
    model = models(M, O, K, hidden)
    idx, count, mean, std = minibatch(fields, M, 200, rows, seed=3)
    if not normalize:
        mean = std = None
    ref_grads, ref_stats = torch_reference(copy.deepcopy(model), fields, idx, cfg, M, count, mean, std)

    params = [p for p in model.parameters()]
    optimizer = (MemberAdam(model, torch.full((M,), 1e-3, device=DEVICE)) if M > 1 else
                 MemberAdam(model, 1e-3, members=1) if single_adam else torch.optim.Adam(params, lr=1e-3))
    grads = fused.FusedGradients(model, optimizer, fields, cfg, cfg, M, "fp32")
    stats = torch.full((len(ref_stats), M), 0.5, device=DEVICE)
    grads.gradients(idx, count, mean, std, stats)
    got = [g.clone() for g in grads.grads]
    again = torch.zeros_like(stats)
    grads.gradients(idx, count, mean, std, again)
    assert all(torch.equal(a, b) for a, b in zip(got, grads.grads))  # no atomics: the same bits again
    torch.testing.assert_close(stats - 0.5, again)  # statistics are added to what stats held
    for (name, _), ref, mine in zip(model.named_parameters(), ref_grads, got):
        torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    n_stats = 5 if algorithm == "ppo" else 3
    torch.testing.assert_close(again[:n_stats], ref_stats[:n_stats].reshape(n_stats, M), rtol=1e-4, atol=1e-6)
    assert not again[n_stats:].any()  # (the row after them, nonfinite, is the caller's)
    if isinstance(optimizer, MemberAdam):
        assert optimizer._gathered  # the optimiser steps from the gradients written
        width = got[0].numel() // M
        torch.testing.assert_close(optimizer.grad[:, :width], got[0].reshape(M, -1))
    if M == 1:
        assert all(p.grad is g for p, g in zip(params, grads.grads))


@pytest.mark.parametrize("moments", [True, False])
def test_minibatch_moments_match_the_torch_path(moments):
    """An epoch's minibatch counts and advantage moments in one launch, against rollout.masked_moments."""
    from workbench.learn.rollout import masked_moments
    M, J, mb, per_member = 3, 4, 1500, 6100  # (more rows than a block: several passes)
    fields = rollout_fields(M * per_member, 5, 2, seed=4)
    fields["mask"][:per_member] = 0.0  # a member with no live sample: count 1, as the torch path
    grads = fused.FusedGradients(models(M, 5, 2), MemberAdam(models(M, 5, 2), torch.full((M,), 1e-3, device=DEVICE)),
                                 fields, Cfg(), Cfg(), M, "fp32")
    g = torch.Generator().manual_seed(5)
    order = torch.stack([torch.randperm(per_member, generator=g) + k * per_member for k in range(M)]).to(DEVICE)
    minibatches = order[:, :J * mb].view(M, J, mb)
    got = grads.minibatch_moments(minibatches, moments)
    ref = masked_moments(fields["advantages"][minibatches], fields["mask"][minibatches], dim=2, moments=moments)
    for mine, theirs in zip(got, ref):
        if theirs is None:
            assert mine is None
        else:
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    assert grads.minibatch_moments(order.view(M, 1, per_member).expand(M, 1, per_member), moments) is not None
    assert grads.minibatch_moments(order.view(M, 1, -1).repeat(1, 1, 11), moments) is None  # (too many rows)


@pytest.mark.parametrize("nvec,dtype", [((5,), torch.float32), ((21, 21), torch.bfloat16), ((3, 7, 2), torch.float32)])
def test_head_sample_matches_the_torch_path(nvec, dtype):
    """Discrete and MultiDiscrete sampling in one launch: the torch path's actions (the Gumbel-max
    trick on the same noise) and log-probabilities."""
    from workbench.compiler.envdef import MultiDiscrete
    from workbench.learn.compiled import policy_step
    head = ActionHead(Discrete(nvec[0]) if len(nvec) == 1 else MultiDiscrete(list(nvec))).to(DEVICE)
    N, D = 300, sum(nvec)  # (a partial last block)
    g = torch.Generator().manual_seed(6)
    out = (3 * torch.randn(N, D, generator=g)).to(DEVICE, dtype)
    noise = torch.rand(N, D, generator=g).to(DEVICE)
    noise[0, 0] = 0.0  # (kept off 0, as the torch path does)

    class Fixed(torch.nn.Module):
        def forward(self, obs):
            return out, torch.zeros(N, device=DEVICE)
    ref_actions, ref_logp, _ = policy_step(Fixed(), head, None, None, noise, False)
    actions = torch.full((N,) + head.act_shape, -1, dtype=torch.long, device=DEVICE)
    logp = torch.zeros(N, device=DEVICE)
    fused.FusedHeadSample(head, DEVICE)(out, noise, actions, logp)
    assert torch.equal(actions, ref_actions.reshape(actions.shape))
    torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not GPU, reason="bf16 dots and tanh.approx.f32 are the GPU's (the interpreter has neither)")
@pytest.mark.parametrize("tanh_approx", [True, False])
def test_bf16_kernels_close_to_fp32(monkeypatch, tanh_approx):
    """The GPUs' default precision: bf16 dots (and tanh.approx.f32) against the fp32 torch path."""
    monkeypatch.setattr(fused, "TANH_APPROX", tanh_approx)
    assert fused._tanh_mode(0) == int(tanh_approx) and fused._tanh_mode(2) == 0
    M, O, K, rows = 4, 7, 3, 512
    cfg = Cfg("ppo")
    fields = rollout_fields(M * 600, O, K)
    model = models(M, O, K)
    idx, count, mean, std = minibatch(fields, M, 600, rows, seed=5)
    ref_grads, ref_stats = torch_reference(copy.deepcopy(model), fields, idx, cfg, M, count, mean, std)
    grads = fused.FusedGradients(model, MemberAdam(model, torch.full((M,), 1e-3, device=DEVICE)), fields, cfg, cfg,
                                 M, "bf16")
    stats = torch.zeros((len(ref_stats), M), device=DEVICE)
    grads.gradients(idx, count, mean, std, stats)
    for (name, _), ref, mine in zip(model.named_parameters(), ref_grads, grads.grads):
        err = float((mine - ref).abs().max() / ref.abs().max())
        assert err < 0.04, f"{name}: bf16 gradient off by {err:.3f} of its largest element"
    torch.testing.assert_close(stats[:5], ref_stats[:5].reshape(5, M), rtol=0.02, atol=2e-3)

    g = torch.Generator().manual_seed(6)
    obs = torch.randn(M * 256, O, generator=g).to(DEVICE)
    noise = torch.rand(M * 256, K, generator=g).to(DEVICE)
    from workbench.learn.compiled import act_and_record
    want = [torch.zeros(M * 256, dtype=torch.long, device=DEVICE), torch.zeros(M * 256, device=DEVICE),
            torch.zeros(M * 256, device=DEVICE)]
    with torch.no_grad():
        act_and_record(model, model.head, obs, None, noise, False, *want)
    got = [torch.zeros_like(w) for w in want]
    fused.FusedPolicyStep(model, M, "bf16")(obs, noise, *got)
    assert (got[0] == want[0]).float().mean() > 0.98  # (near-ties may break the other way)
    same = got[0] == want[0]
    torch.testing.assert_close(got[1][same], want[1][same], rtol=0.02, atol=0.02)
    torch.testing.assert_close(got[2], want[2], rtol=0.03, atol=0.02)


@pytest.mark.parametrize("M,K,rows", [(1, 2, 70), (3, 5, 64)])  # (even rows: pairs of agents)
def test_policy_step_matches_torch(M, K, rows):
    from workbench.learn.compiled import act_and_record
    O = 6
    model = models(M, O, K)
    g = torch.Generator().manual_seed(4)
    obs = torch.randn(M * rows, O, generator=g).to(DEVICE)
    noise = torch.rand(M * rows, K, generator=g).to(DEVICE)
    want = [torch.zeros(M * rows, dtype=torch.long, device=DEVICE), torch.zeros(M * rows, device=DEVICE),
            torch.zeros(M * rows, device=DEVICE)]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        act_and_record(model, model.head, obs, None, noise, False, *want)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    got = [torch.zeros_like(w) for w in want]
    actions = fused.FusedPolicyStep(model, M, "fp32")(obs, noise, *got)
    assert actions.data_ptr() == got[0].data_ptr()
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-5)
    # recording: the observations into the rollout buffer (bf16 here) and the actions into agents 1..2 of an
    # env's [replicas, 4] action array, rows being (replica, agent) pairs of the group's 2 agents
    obs_out = torch.zeros(M * rows, O, dtype=torch.bfloat16, device=DEVICE)
    env_action = torch.full((M * rows // 2, 4), -1, dtype=torch.int32, device=DEVICE)
    fused.FusedPolicyStep(model, M, "fp32")(obs, noise, *[torch.zeros_like(w) for w in want], obs_out=obs_out,
                                            env_action=env_action, agents=slice(1, 3))
    if GPU:  # (the interpreter casts to bf16 by truncation, the GPU to nearest even, as torch does)
        assert torch.equal(obs_out, obs.to(torch.bfloat16))
    torch.testing.assert_close(obs_out.float(), obs, rtol=2 ** -7, atol=0)
    assert torch.equal(env_action[:, 1:3].reshape(-1), want[0].int())
    assert (env_action[:, [0, 3]] == -1).all()
    # a column-major observation (an env's state, envdef.observed_state) is read in place, not copied
    column_major = obs.t().contiguous().t()
    assert column_major.stride() == (1, M * rows)
    again = [torch.zeros_like(w) for w in want]
    fused.FusedPolicyStep(model, M, "fp32")(column_major, noise, *again)
    for a, b in zip(again, got):
        assert torch.equal(a, b)


@pytest.mark.parametrize("M,A", [(1, 1), (3, 2)])
def test_truncated_values_match_torch(M, A):
    T, E_member, O = 5, 40, 4  # 40 * A rows per member and step: a partial tile
    model = models(M, O, 3)
    g = torch.Generator().manual_seed(1)
    final_obs = torch.randn(T, M * E_member, A, O, generator=g).to(DEVICE)
    truncated = (torch.rand(T, M * E_member, generator=g) < 0.1).float().to(DEVICE)
    terminated = (torch.rand(T, M * E_member, generator=g) < 0.5).float().to(DEVICE)
    truncated[1] = 0.0  # a step without truncations: its tiles skip the critic
    out = torch.full((T, M * E_member, A), float("nan"), device=DEVICE)  # (stale values are overwritten)
    fused.FusedPolicyStep(model, M, "fp32").truncated_values(final_obs, truncated, terminated, out)
    tf32 = torch.backends.cuda.matmul.allow_tf32  # (a trainer made earlier in the process may have set it)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            rows = final_obs.view(T, M, -1, O).transpose(0, 1).reshape(-1, O)  # grouped by member
            _, value = model(rows)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    value = value.view(M, T, E_member, A).transpose(0, 1).reshape(T, -1, A)
    expected = value * (truncated * (1 - terminated)).unsqueeze(2)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert (out != 0).sum() > 0 and (out[1] == 0).all()


def test_fused_gae_matches_reference():
    T, E, n = 9, 6, 2
    g = torch.Generator().manual_seed(1)
    buf = RolloutBuffer(T, E, n, (3,), (), torch.long, DEVICE)
    buf.rewards.copy_(torch.randn(T, E, n, generator=g))
    buf.values.copy_(torch.randn(T, E, n, generator=g))
    buf.final_values.copy_(torch.randn(T, E, n, generator=g))
    buf.mask.copy_((torch.rand(T + 1, E, n, generator=g) > 0.2).float())
    buf.terminated = (torch.rand(T, E, generator=g) > 0.8).float().to(DEVICE)
    buf.truncated = (torch.rand(T, E, generator=g) > 0.8).float().to(DEVICE)
    next_value = torch.randn(E, n, generator=g).to(DEVICE)
    for gamma, lam in ((0.99, 0.95), (torch.tensor([[0.9], [0.9], [0.99], [0.99], [0.5], [0.5]]).to(DEVICE), 0.8)):
        want = advantages(buf.rewards, buf.values, buf.final_values, buf.mask, buf.terminated, buf.truncated,
                          next_value, gamma, lam)
        fused.FusedGAE(gamma, lam, DEVICE)(buf, next_value)
        torch.testing.assert_close(buf.advantages, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(buf.returns, want + buf.values, rtol=1e-5, atol=1e-6)


def test_unsupported_says_why():
    head = ActionHead(Discrete(2))
    model = ActorCritic(4, Discrete(2), (64, 64))
    assert fused.unsupported(model, head, "ddpg", DEVICE).startswith("the fused kernels compute PPO")
    assert "hidden layers of at most" in fused.unsupported(ActorCritic(4, Discrete(2), (256, 256)), head, "ppo", DEVICE)
    assert "two tanh hidden layers" in fused.unsupported(ActorCritic(4, Discrete(2), (64,)), head, "ppo", DEVICE)
    assert fused.unsupported(model, head, "ppo", DEVICE) is None


@pytest.mark.parametrize("algorithm,seeds", [("ppo", 2), ("a2c", 1)])
def test_trainer_with_fused_kernels_matches_torch_path(algorithm, seeds):
    import workbench as wb
    target = "cuda" if GPU else "cpu"
    extra = dict(update_epochs=2, num_minibatches=2) if algorithm == "ppo" else {}
    results = []
    for on in (True, False):
        config = (wb.PPOConfig if algorithm == "ppo" else wb.A2CConfig)(env="cartpole", num_envs=8, rollout_length=16, total_env_steps=8 * 16 * 3,
                               seeds=seeds, target=target, precision="fp32", fused_kernels=on, seed=5,
                               env_params={"max_steps": 12}, **extra)  # (truncations: final values)
        trainer = wb.make_trainer(config)
        c = trainer.collector
        assert bool(trainer.fused) == on and (c._fused_final is not None) == on
        assert (c._fused_record is not None) == on and bool(c._fused_sends) == on  # the step's bookkeeping too
        if seeds > 1:
            assert all((opt.fused is not None) == on for opt in trainer.optimizers.values())
        results.append(trainer.train().history)
    for fused_row, torch_row in zip(*results):
        for fr, tr_ in zip(fused_row.get("members", [fused_row]), torch_row.get("members", [torch_row])):
            for key in ("policy_loss/shared", "value_loss/shared", "entropy/shared", "return/shared",
                        "episode_length", "episodes"):
                assert fr[key] == pytest.approx(tr_[key], rel=1e-3, abs=1e-5, nan_ok=True), key


def test_tag_trainer_with_the_wide_step_matches_torch_path():
    """Two policies with MultiDiscrete heads (outside the narrow kernels): their policy step in one
    launch each (fused_wide) learns what the torch path learns, actions going straight to the env."""
    import workbench as wb
    results = []
    for on in (True, False):
        config = wb.A2CConfig(env="tag_continuous", target="cuda" if GPU else "cpu", num_envs=4, rollout_length=8,
                              total_env_steps=4 * 8 * 3, hidden_sizes=(16, 16), precision="fp32", fused_kernels=on,
                              seed=3, env_params=dict(num_taggers=2, num_runners=3, num_other_agents_observed=2,
                                                      episode_length=10))
        trainer = wb.make_trainer(config)
        assert (trainer.collector._head_sample is not None) == on and not trainer.fused
        # (on a GPU the wide step computes in bf16 only: test_fused_wide.py trains Tag with it there)
        assert trainer.collector._fused_sends == ({"taggers", "runners"} if on and not GPU else set())
        assert (trainer.collector._fused_record is not None) == (on and not GPU)  # (both groups' bookkeeping)
        results.append(trainer.train().history)
    compared = set()
    for fused_row, torch_row in zip(*results):
        for key, value in fused_row.items():
            if key.split("/")[0] in ("policy_loss", "value_loss", "entropy", "return", "episode_length", "episodes",
                                     "runners_tagged", "tag_rate", "survival"):
                assert value == pytest.approx(torch_row[key], rel=1e-4, abs=1e-6, nan_ok=True), key
                compared.add(key)
    assert {"policy_loss/taggers", "policy_loss/runners", "runners_tagged", "episodes"} <= compared


@pytest.mark.parametrize("max_norm", [None, 0.5, "per_member", "per_member_one_unclipped"])
def test_member_adam_step_matches_torch(max_norm):
    M = 3
    model = models(M, 5, 3, (16, 24))
    twin = copy.deepcopy(model)
    lr = torch.tensor([1e-3, 3e-3, 1e-2], device=DEVICE)
    if max_norm == "per_member":
        max_norm = torch.tensor([0.1, 100.0, 0.5], device=DEVICE)
    elif max_norm == "per_member_one_unclipped":  # (0: that member's gradient as it is, not scaled to 0)
        max_norm = torch.tensor([0.1, 0.0, 0.5], device=DEVICE)
    kernels, reference = MemberAdam(model, lr), MemberAdam(twin, lr)
    kernels.fused = fused.FusedMemberAdam(kernels)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):  # several steps: the bias corrections and moments carry over
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn(p.shape, generator=g).to(DEVICE)
            q.grad = p.grad.clone()
        kernels.step(max_norm)
        reference.step(max_norm)
    assert kernels.steps.tolist() == reference.steps.tolist() == [[4.0]] * M  # (the kernels count each member's)
    # (fp32 rounding: the kernel's fused multiply-adds against torch's separate passes, over 4 steps)
    torch.testing.assert_close(kernels.exp_avg, reference.exp_avg, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(kernels.exp_avg_sq, reference.exp_avg_sq, rtol=1e-4, atol=1e-9)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    start = models(M, 5, 3, (16, 24))
    moved = torch.stack([(p - q).abs().reshape(M, -1).amax(1) for p, q in zip(model.parameters(), start.parameters())])
    assert bool((moved.amax(0) > 1e-3).all())  # (the steps did move every member's weights)


def test_fused_uniform_draws_the_streams_numbers_bit_for_bit():
    from workbench.learn.streams import MemberStreams
    seeds = [0, 1, 2**40 + 7, 123456789]
    torch_draws, fused_draws = MemberStreams(seeds, DEVICE), MemberStreams(seeds, DEVICE)
    fused_draws.fused = fused.FusedUniform()
    for step in range(3):
        for shape, site, offset in (((5000,), 1, 0), ((3, 700), 1000, 2100), ((1,), 2**31 + 5, 0)):
            want = torch_draws.uniform(shape, site, offset)
            got = fused_draws.uniform(shape, site, offset)
            assert got.shape == want.shape and torch.equal(got, want), (step, shape, site, offset)
        assert torch.equal(fused_draws.normal((999,), 7), torch_draws.normal((999,), 7))
        # into a rollout's [step, member, rows] noise block: each member's rows strided, no copy
        b, r = 3, 50
        want = torch_draws.uniform((b, r), 4, offset=7 * r)
        for draws in (fused_draws, torch_draws):
            block = torch.zeros(b, len(seeds), r, device=DEVICE)
            got = draws.uniform((b, r), 4, offset=7 * r, out=block.transpose(0, 1))
            assert got.data_ptr() == block.data_ptr() and torch.equal(block, want.transpose(0, 1))
        torch_draws.advance()
        fused_draws.advance()
    with pytest.raises(ValueError, match="whose rows of r are contiguous"):
        fused_draws.uniform((6, 4), 1, out=torch.zeros(len(seeds), 4, 6, device=DEVICE).transpose(1, 2))


@pytest.mark.skipif(not GPU, reason="a launch of more than 65535 programs on one axis is the GPU's limit")
def test_rollout_kernels_launch_past_the_grids_second_axis():
    """Steps of more rows than 65535 programs of a grid's second (or third) axis take: the tiles go
    on the first axis (2^31 - 1). One member, 4.2 M rows: the policy step writes its last rows, and a
    draw of 80 M uniforms (Tag at 2000 x 1000 agents) is the streams' numbers."""
    from workbench.compiler.envdef import MultiDiscrete
    from workbench.learn import fused_wide
    from workbench.learn.streams import MemberStreams
    rows = 65536 * fused.STEP_BLOCK + 5
    g = torch.Generator(device=DEVICE).manual_seed(0)
    obs = torch.randn(rows, 4, device=DEVICE, generator=g)
    noise = torch.rand(rows, 3, device=DEVICE, generator=g)
    out = [torch.full((rows,), -1, dtype=torch.long, device=DEVICE), torch.full((rows,), float("nan"), device=DEVICE),
           torch.full((rows,), float("nan"), device=DEVICE)]
    model = models(1, 4, 3)
    fused.FusedPolicyStep(model, 1, "bf16")(obs, noise, *out)
    assert bool((out[0] >= 0).all()) and bool(out[1].isfinite().all()) and bool(out[2].isfinite().all())
    wide = ActorCritic(4, MultiDiscrete([3, 2]), (256, 256)).to(DEVICE)
    head = ActionHead(MultiDiscrete([3, 2])).to(DEVICE)
    actions = torch.full((rows, 2), -1, dtype=torch.long, device=DEVICE)
    fused_wide.FusedWidePolicyStep(wide, head, 1, "bf16")(obs, torch.rand(rows, 5, device=DEVICE), actions, *out[1:])
    assert bool((actions >= 0).all()) and bool(out[2].isfinite().all())
    torch_draws, fused_draws = MemberStreams([3], DEVICE), MemberStreams([3], DEVICE)
    fused_draws.fused = fused.FusedUniform()
    n = 80_000_000
    assert torch.equal(fused_draws.uniform((n,), 1)[-1000:], torch_draws.uniform((n,), 1)[-1000:])
