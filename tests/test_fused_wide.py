"""The wide policy step (fused_wide.py) against the torch path it replaces: the same actions,
log-probabilities and values for discrete and MultiDiscrete heads, hidden layers wider than the
narrow kernels hold, one policy and a population's stacked members; a Tag trainer with it learns
what the torch path learns. On a GPU the kernel compiles; elsewhere it runs in Triton's interpreter."""

import pytest
import torch

triton = pytest.importorskip("triton", reason="the fused kernels need Triton (pip install triton)")

from workbench.compiler.envdef import Box, Discrete, MultiDiscrete  # noqa: E402
from workbench.learn import fused, fused_wide  # noqa: E402
from workbench.learn.compiled import act_and_record  # noqa: E402
from workbench.learn.members import nn_linear_layout, stack_members  # noqa: E402
from workbench.learn.policies import ActionHead, ActorCritic, SharedActorCritic  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if GPU else "cpu")
PRECISION = "bf16" if GPU else "fp32"  # (the interpreter's dots are fp32 ones)


@pytest.fixture(autouse=True)
def _kernels(triton_kernels):
    """Every test here runs the kernels (conftest.triton_kernels)."""


def policy(M, O, space, hidden, shared=False, act="tanh", nn_layout=False):
    nets = []
    for k in range(M):
        torch.manual_seed(20 + k)
        nets.append((SharedActorCritic if shared else ActorCritic)(O, space, hidden, act))
    model = (stack_members(nets) if M > 1 else nets[0]).to(DEVICE)
    if nn_layout:  # stacked weights laid out in memory as nn.Linear's (the kernels' STACKED 2)
        nn_linear_layout(model)
        assert not model.net[0].weight.is_contiguous() if shared else not model.actor[0].weight.is_contiguous()
    model.head = ActionHead(space).to(DEVICE)
    for p in model.parameters():  # (the output layers start near 0: logits of some spread to sample from)
        p.data.add_(0.05 * torch.randn_like(p))
    return model


def reference(model, obs, noise):
    N = obs.shape[0]
    want = [torch.zeros((N,) + model.head.act_shape, dtype=torch.long, device=DEVICE),
            torch.zeros(N, device=DEVICE), torch.zeros(N, device=DEVICE)]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            act_and_record(model, model.head, obs, None, noise, False, *want)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return want


@pytest.mark.parametrize("M,space,hidden,rows,shared,act", [
    (1, MultiDiscrete([5, 3]), (160, 96), 70, False, "tanh"),  # (a partial tile; layers of no power of two)
    (2, Discrete(4), (48, 200), 64, False, "tanh"),
    (1, MultiDiscrete([21, 21]), (256, 256), 40, False, "tanh"),  # Tag's heads and WarpDrive's layers
    (2, MultiDiscrete([5, 3]), (48, 200), 64, True, "tanh+nn"),  # one body: the value is the output layer's
    (1, MultiDiscrete([21, 21]), (256, 256), 40, True, "relu"),  # last column; WarpDrive's network (43 outputs, ReLU)
    (2, Discrete(4), (48, 200), 64, False, "relu+nn"),  # (+nn: members' weights laid out as nn.Linear's)
])
@pytest.mark.parametrize("tiles", ["TINY_STEP", "SMALL_STEP", "LARGE_STEP"])  # (each program shape _tiles picks)
def test_wide_policy_step_matches_torch(M, space, hidden, rows, shared, act, tiles, monkeypatch):
    monkeypatch.setattr(fused_wide, "_tiles", lambda rows, members, shape=getattr(fused_wide, tiles): shape)
    O = 13
    act, _, nn_layout = act.partition("+")
    model = policy(M, O, space, hidden, shared, act, nn_layout == "nn")
    assert fused_wide._layout(fused._linear_layers(model.actor if not shared else model.net)) == (
        0 if M == 1 else 2 if nn_layout else 1)
    assert fused_wide.unsupported(model, model.head, DEVICE) is None
    assert fused.unsupported(model, model.head, "ppo", DEVICE) is not None  # (outside the narrow kernels)
    g = torch.Generator().manual_seed(8)
    obs = torch.randn(M * rows, O, generator=g).to(DEVICE)
    noise = torch.rand(M * rows, model.head.out_dim, generator=g).to(DEVICE)
    want = reference(model, obs, noise)
    got = [torch.full_like(want[0], -1), torch.zeros_like(want[1]), torch.zeros_like(want[2])]
    step = fused_wide.FusedWidePolicyStep(model, model.head, M, PRECISION)
    actions = step(obs, noise, *got)
    assert actions.data_ptr() == got[0].data_ptr()
    if GPU:  # bf16 dots and tanh.approx.f32 against fp32: near-ties may break the other way
        same = (got[0] == want[0]).reshape(M * rows, -1).all(-1)
        assert same.float().mean() > 0.95
        torch.testing.assert_close(got[1][same], want[1][same], rtol=0.03, atol=0.03)
        torch.testing.assert_close(got[2], want[2], rtol=0.03, atol=0.03)
        want[0] = got[0].clone()  # (the recording below is checked against the kernel's own actions)
    else:
        assert torch.equal(got[0], want[0])
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[2], want[2], rtol=1e-4, atol=1e-4)
    assert got[0].float().std() > 0  # (not one action everywhere)

    # recording: the observations into the rollout buffer and the actions into agents 1..2 of an env's
    # [replicas, 4(, heads)] action array, rows being (replica, agent) pairs of the group's 2 agents
    obs_out = torch.zeros(M * rows, O, device=DEVICE)
    env_action = torch.full((M * rows // 2, 4) + model.head.act_shape, -1, dtype=torch.int32, device=DEVICE)
    step(obs, noise, *[torch.zeros_like(w) for w in want], obs_out=obs_out, env_action=env_action,
         agents=slice(1, 3))
    torch.testing.assert_close(obs_out, obs)
    assert torch.equal(env_action[:, 1:3].reshape(want[0].shape), want[0].int())
    assert (env_action[:, [0, 3]] == -1).all()


def test_wide_step_refuses_what_it_cannot_run():
    model = policy(1, 5, Discrete(3), (320, 64))
    assert "at most 256 units" in fused_wide.unsupported(model, model.head, DEVICE)
    if GPU:
        assert "bf16" in fused_wide.unsupported(policy(1, 5, Discrete(3), (64, 64)), model.head, DEVICE, "tf32")
    gaussian = ActorCritic(5, Box(shape=(2,)), (64, 64)).to(DEVICE)
    assert "MultiDiscrete" in fused_wide.unsupported(gaussian, ActionHead(gaussian.head.space), DEVICE)


@pytest.mark.skipif(not GPU, reason="the wide step computes in bf16 on GPUs (the CPU interpreter's run: test_fused.py)")
@pytest.mark.parametrize("shared_body,activation", [(False, None), (True, None), (True, "relu")])
def test_tag_trains_with_the_wide_step_in_bf16(shared_body, activation):
    """WarpDrive's Tag layers (256 wide) and MultiDiscrete heads on the GPU's defaults: both policies act
    through the wide step, their first rollout's log-probabilities are those of the near-uniform
    initial policies (the output layers start at gain 0.01), and training stays finite; with two
    networks or one shared body (tanh, or WarpDrive's ReLU)."""
    import math

    import workbench as wb
    config = wb.A2CConfig(env="tag_continuous", target="cuda", num_envs=64, rollout_length=16, hidden_sizes=(256, 256),
                          total_env_steps=64 * 16, seed=1, shared_body=shared_body, activation=activation,
                          env_params=dict(num_taggers=3, num_runners=20, num_other_agents_observed=5))
    trainer = wb.make_trainer(config)
    assert set(trainer.collector._fused_step) == {"taggers", "runners"} == trainer.collector._fused_sends
    assert all(isinstance(s, fused_wide.FusedWidePolicyStep) for s in trainer.collector._fused_step.values())
    history = trainer.train().history
    uniform = -sum(math.log(n) for n in trainer.env.action_space.nvec)
    for name in ("taggers", "runners"):
        logp = trainer.buffers[name].logp_old
        assert float(logp.mean()) == pytest.approx(uniform, rel=0.02)
        assert history[0][f"entropy/{name}"] == pytest.approx(-uniform, rel=0.02)
    assert all(math.isfinite(row[f"{k}/{name}"]) for row in history for k in ("policy_loss", "value_loss")
               for name in ("taggers", "runners"))


@pytest.mark.parametrize("M,shared,act", [(1, False, "tanh"), (2, False, "tanh"), (2, True, "tanh"),
                                          (2, True, "relu+nn")])
def test_wide_truncated_values_match_torch(M, shared, act):
    """V(final observation) of one step where a replica was truncated and not terminated, else 0,
    for agents 1..2 of 4 (a group's), a step without truncations included."""
    E_member, A, O = 37, 4, 9
    act, _, nn_layout = act.partition("+")
    model = policy(M, O, MultiDiscrete([4, 3]), (96, 160), shared, act, nn_layout == "nn")
    g = torch.Generator().manual_seed(3)
    final_obs = torch.randn(M * E_member, A, O, generator=g).to(DEVICE)
    step = fused_wide.FusedWidePolicyStep(model, model.head, M, PRECISION)
    for share in (0.3, 0.0):
        truncated = (torch.rand(M * E_member, generator=g) < share).float().to(DEVICE)
        terminated = (torch.rand(M * E_member, generator=g) < 0.3).float().to(DEVICE)
        out = torch.full((M * E_member, 2), float("nan"), device=DEVICE)
        step.truncated_values(final_obs, truncated, terminated, out, slice(1, 3))
        with torch.no_grad():
            want = model.value(final_obs[:, 1:3].reshape(-1, O)).reshape(-1, 2) * (truncated * (1 - terminated))[:, None]
        tol = dict(rtol=0.03, atol=0.03) if GPU else dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out, want, **tol)
        assert (out != 0).any() == (share > 0)
