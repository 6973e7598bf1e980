"""shared_body: one MLP body for the policy and the value (SharedActorCritic, WarpDrive's fully
connected layout), and `activation` (tanh, or WarpDrive's ReLU). Its outputs are the body's columns, its initial output rows have ActorCritic's
gains, CartPole learns with it on the cpu target, a run folder reloads it, and the configs it
cannot serve are refused by name. (The rollout's wide kernel: test_fused_wide.py; the padded
layers: test_padded_linear.py; members equal standalone runs: test_population.py.)"""
import pytest
import torch

import workbench as wb
from workbench.compiler.envdef import Discrete, MultiDiscrete
from workbench.learn import config as cfg
from workbench.learn.policies import ActorCritic, SharedActorCritic
from workbench.learn.runs import load_policy
from workbench.learn.trainer import make_trainer


def test_outputs_are_the_body_columns_and_the_gains_are_actor_critics():
    torch.manual_seed(0)
    model = SharedActorCritic(7, MultiDiscrete([4, 3]), (32, 16))
    obs = torch.randn(5, 7)
    logits, value = model(obs)
    full = model.net(obs)
    assert full.shape == (5, 8) and logits.shape == (5, 7) and value.shape == (5,)
    torch.testing.assert_close(logits, full[:, :7])
    torch.testing.assert_close(value, full[:, 7])
    torch.testing.assert_close(model.value(obs), value)
    out = model.net[-1].weight  # [8, 16]: orthogonal rows of norm 0.01 (policy) and 1 (value)
    torch.testing.assert_close(out[:-1].norm(dim=1), torch.full((7,), 0.01), rtol=1e-4, atol=1e-6)
    assert out[-1].norm().item() == pytest.approx(1.0, rel=1e-4)
    assert sum(p.numel() for p in model.parameters()) < 0.6 * sum(p.numel() for p in ActorCritic(7, Discrete(4),
                                                                                              (32, 16)).parameters())


@pytest.mark.parametrize("activation", [None, "tanh"])
def test_cartpole_learns_with_one_body_on_the_cpu(activation):
    config = wb.PPOConfig(env="cartpole", target="cpu", shared_body=True, num_envs=64, rollout_length=64,
                          lr=2.5e-3, total_env_steps=120_000, seed=2, cpu_threads=1,  # configs/cartpole.yaml's shape
                          activation=activation)
    trainer = make_trainer(config)
    model = trainer.models["shared"]
    assert type(model) is SharedActorCritic
    assert isinstance(model.net[1], torch.nn.Tanh if activation == "tanh" else torch.nn.ReLU)  # (None: relu)
    assert trainer.config.activation == (activation or "relu")  # resolved: the run's files say which
    history = trainer.train().history
    first, last = history[0]["mean_return"], history[-1]["mean_return"]
    assert first < 30 and last > 60, (first, last)  # a random policy's episodes last about 22 steps


def test_a_run_folder_reloads_the_shared_body(tmp_path):
    config = cfg.from_dict(dict(env="cartpole", target="cpu", num_envs=8, rollout_length=8, total_env_steps=128,
                                hidden_sizes=[16, 16], shared_body=True, cpu_threads=1, run_dir=str(tmp_path)))
    trainer = make_trainer(config)
    trainer.train()
    loaded = load_policy(tmp_path, num_envs=8)
    model = loaded.models["shared"]
    assert type(model) is SharedActorCritic
    for key, value in trainer.models["shared"].state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


@pytest.mark.parametrize("changes,words", [
    (dict(algorithm="ddpg", env="pendulum"), "DDPG"),
    (dict(algorithm="a2c", env="tag_continuous", centralised_critic=["runners"]), "centralised_critic"),
])
def test_configs_a_shared_body_cannot_serve_are_refused(changes, words):
    with pytest.raises(cfg.ConfigError, match=r"shared_body .*" + words):
        cfg.from_dict(dict(shared_body=True, **changes))


@pytest.mark.parametrize("loss", ["head", "value", "both"])
def test_the_padded_output_split_matches_autograds_slices(loss, monkeypatch):
    """padded_linear.LinearSplit (the GPU path's output layer, in fp32; on the CPU without a GPU) against
    the layer-by-layer path: the same outputs and gradients when only the head's, only the value's or
    both outputs reach the loss (a gradient autograd leaves out is zero)."""
    from workbench.learn import padded_linear
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # fp32 matmuls on both paths (set and put back by hand: pytest >= 9.2's monkeypatch undoes a
    # setattr with delattr, which torch.backends.cuda.matmul does not take)
    tf32, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    torch.manual_seed(3)
    model = SharedActorCritic(13, MultiDiscrete([5, 4]), (24, 16)).to(device)  # 10 outputs: padded to 16
    obs = torch.randn(37, 13, device=device)
    results = []
    try:
        for padded in (True, False):
            monkeypatch.setattr(padded_linear, "serves", lambda x, padded=padded: padded)
            model.zero_grad(set_to_none=True)
            head, value = model(obs)
            weights = torch.linspace(-1, 1, head.shape[1], device=device)
            terms = {"head": (head * weights).sum(), "value": (value ** 2).sum()}
            (terms["head"] + terms["value"] if loss == "both" else terms[loss]).backward()
            results.append([head.detach(), value.detach()] + [p.grad.clone() for p in model.parameters()])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    for mine, ref in zip(*results):
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-6)


def test_activation_defaults_per_algorithm_and_bad_names_are_refused():
    ppo = make_trainer(cfg.from_dict(dict(env="cartpole", target="cpu", num_envs=4, rollout_length=4,
                                          hidden_sizes=[8, 8], cpu_threads=1)))
    assert isinstance(ppo.models["shared"].actor[1], torch.nn.Tanh)
    ddpg = make_trainer(cfg.from_dict(dict(algorithm="ddpg", env="pendulum", target="cpu", num_envs=4,
                                           rollout_length=4, hidden_sizes=[8, 8], cpu_threads=1)))
    assert isinstance(ddpg.models["shared"].actor.net[1], torch.nn.ReLU)
    relu = make_trainer(cfg.from_dict(dict(env="cartpole", target="cpu", num_envs=4, rollout_length=4,
                                           hidden_sizes=[8, 8], cpu_threads=1, activation="relu")))
    assert isinstance(relu.models["shared"].critic[3], torch.nn.ReLU)
    with pytest.raises(cfg.ConfigError, match=r"activation must be tanh or relu"):
        cfg.from_dict(dict(env="cartpole", activation="sigmoid"))
    shared = make_trainer(cfg.from_dict(dict(env="cartpole", target="cpu", num_envs=4, rollout_length=4,
                                             hidden_sizes=[8, 8], cpu_threads=1, shared_body=True)))
    assert isinstance(shared.models["shared"].net[1], torch.nn.ReLU) and shared.config.activation == "relu"


def test_a_run_saved_before_the_shared_body_default_changed_keeps_its_tanh(tmp_path):
    """Runs that left activation to the default stored None, which meant tanh for a shared body; the
    signature recorded the resolved one, and the run comes back with it."""
    config = cfg.from_dict(dict(env="cartpole", target="cpu", num_envs=8, rollout_length=8, total_env_steps=128,
                                hidden_sizes=[16, 16], shared_body=True, activation="tanh", cpu_threads=1,
                                run_dir=str(tmp_path)))
    wb.train(config, progress=False)
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    payload["config"]["activation"] = None  # as written then
    torch.save(payload, tmp_path / "checkpoint.pt")
    (tmp_path / "config.yaml").write_text((tmp_path / "config.yaml").read_text().replace("activation: tanh",
                                                                                        "activation: null"))
    assert isinstance(load_policy(tmp_path).models["shared"].net[1], torch.nn.Tanh)
    resumed, _ = wb.train(resume=tmp_path, total_env_steps=256, progress=False)
    assert resumed.config.activation == "tanh" and isinstance(resumed.models["shared"].net[1], torch.nn.Tanh)
