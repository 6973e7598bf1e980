"""Training learns, reproduces, checkpoints atomically and rejects bad input by name."""
import math
import re
import textwrap

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn.checkpoint import CheckpointError
from workbench.learn.groups import PolicyMapError

RANDOM_CARTPOLE_RETURN = 22.0  # mean episode length of a uniformly random CartPole policy


def ppo_cartpole(**kw):
    base = dict(num_envs=32, rollout_length=64, num_minibatches=4, update_epochs=4, lr=2.5e-3,
                total_env_steps=60_000, log_every=2, target="cpu")
    return wb.PPOConfig(**{**base, **kw})


def test_ppo_learns_cartpole_far_above_random():
    trainer = wb.make_trainer(ppo_cartpole(target_return=300.0))
    result = trainer.train()
    assert result.metrics["return/shared"] > 10 * RANDOM_CARTPOLE_RETURN


def test_a2c_improves_over_random():
    config = wb.A2CConfig(num_envs=64, rollout_length=16, lr=3e-3, total_env_steps=80_000, log_every=10,
                          target="cpu", target_return=100.0)
    result = wb.make_trainer(config).train()
    assert result.metrics["return/shared"] > 3 * RANDOM_CARTPOLE_RETURN


def test_same_seed_same_metrics_on_cpu():
    runs = [wb.make_trainer(ppo_cartpole(total_env_steps=32 * 64 * 3, log_every=1, seed=5)).train() for _ in range(2)]
    keys = ["return/shared", "policy_loss/shared", "value_loss/shared", "entropy/shared"]
    assert runs[0].warmup_s == 0.0  # no compile or graph capture on the CPU
    for a, b in zip(runs[0].history, runs[1].history):
        assert a["return/shared"] == b["return/shared"]  # the same episodes
        # losses to float rounding: thread counts chosen by timing (and first-call kernels) may differ
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-4)


def test_callback_false_stops_training():
    calls = []
    result = wb.make_trainer(ppo_cartpole(log_every=1)).train(callback=lambda i, m: calls.append(i) or len(calls) < 3)
    assert result.stopped_by == "callback" and result.iterations == 3 and calls == [1, 2, 3]


def test_resume_continues_the_same_learning_curve(tmp_path):
    straight = wb.make_trainer(ppo_cartpole(log_every=1, seed=3))
    full = straight.train(num_iterations=4).history
    first = wb.make_trainer(ppo_cartpole(log_every=1, seed=3))
    first.train(num_iterations=2)
    first.save(tmp_path / "ck.pt")
    resumed = wb.make_trainer(ppo_cartpole(log_every=1, seed=3))
    resumed.load(tmp_path / "ck.pt")
    rest = resumed.train(num_iterations=2).history
    for a, b in zip(full, rest):
        assert a["iteration"] == b["iteration"]
        assert a["policy_loss/shared"] == pytest.approx(b["policy_loss/shared"], rel=1e-5)
        assert a["return/shared"] == pytest.approx(b["return/shared"], rel=1e-5, nan_ok=True)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    trainer = wb.make_trainer(ppo_cartpole())
    path = tmp_path / "ck.pt"
    trainer.save(path)
    good = path.read_bytes()

    def killed(obj, fh, *a, **k):
        fh.write(b"partial")
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.save(path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_corrupt_and_foreign_checkpoints(tmp_path):
    trainer = wb.make_trainer(ppo_cartpole())
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt or not a checkpoint .*: pass a run folder or the checkpoint.pt in it"):
        trainer.load(bad)
    torch.save({"weights": 1}, tmp_path / "dict.pt")
    with pytest.raises(CheckpointError, match="is not a warp-workbench checkpoint: pass a run folder or the "):
        trainer.load(tmp_path / "dict.pt")
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # a run's own checkpoint, damaged: no advice to pass it
    with pytest.raises(CheckpointError, match=r"corrupt or not a checkpoint \([^)]*\): the run cannot go on from "
                                              r"it; train a new run in another folder \(--run-dir; run_dir=\)$"):
        trainer.load(tmp_path / "checkpoint.pt")
    with pytest.raises(wb.WorkbenchError, match=r"'.*nope' does not exist: pass a run folder \(runs/ENV-DATE\) or its "):
        wb.replay(tmp_path / "nope")
    wb.register("matching", MATCHING)
    other = wb.make_trainer(ppo_cartpole(env="matching", num_envs=8, rollout_length=8))
    other.save(tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="written for env='matching'; this trainer has env='cartpole'"):
        trainer.load(tmp_path / "other.pt")


def test_config_rejects_unknown_and_ill_typed_keys(tmp_path):
    with pytest.raises(cfg.ConfigError, match=r"unknown key\(s\) \['learning_rate'\] for PPOConfig"):
        cfg.from_dict({"algorithm": "ppo", "learning_rate": 0.1})
    with pytest.raises(cfg.ConfigError, match="PPOConfig.num_envs must be int, got 'many'"):
        cfg.from_dict({"algorithm": "ppo", "num_envs": "many"})
    with pytest.raises(cfg.ConfigError, match="PPOConfig.gamma must be in"):
        cfg.from_dict({"algorithm": "ppo", "gamma": 1.5})
    config = wb.PPOConfig(num_envs=8, hidden_sizes=(32, 32))
    cfg.save_yaml(config, tmp_path / "c.yaml")
    assert cfg.load_yaml(tmp_path / "c.yaml") == config


def test_minibatches_that_do_not_divide_fail_at_construction():
    with pytest.raises(ValueError, match="num_minibatches=4 does not divide the batch of policy .shared."):
        wb.make_trainer(ppo_cartpole(num_envs=10, rollout_length=3, num_minibatches=4))


def test_policy_map_errors():
    env = wb.make("cartpole", num_envs=32, target="cpu")
    with pytest.raises(PolicyMapError, match=r"agents \[0\] belong to no policy"):
        wb.Trainer(env, ppo_cartpole(), policies={"p": []})
    with pytest.raises(PolicyMapError, match="agent 3, but the env has agents 0..0"):
        wb.Trainer(env, ppo_cartpole(), policies={"p": [0, 3]})


@pytest.mark.parametrize("policies, message", [
    ({"taggers": "taggers"}, r"policy 'taggers' must list its agents' ids \(a list of ints\), e.g. \{'shared': \[0\]\}"),
    (["shared"], r"policies must map a policy's name to its agents' ids.*got list \['shared'\]"),
    ({"p": 0}, r"policy 'p' must list its agents' ids"),
    ({"p": [0.0]}, r"policy 'p' lists 0.0; agent ids are ints 0..0"),
    ({"p": ["0"]}, r"policy 'p' lists '0'"),
    ({"p": [True]}, r"policy 'p' lists True"),
    ({0: [0]}, r"a policy's name must be a non-empty string without '/', e.g. \{'shared': \[0\]\}; got 0"),
    ({"team/a": [0]}, r"got 'team/a'"),  # (its metrics would read return/team/a)
    ({"": [0]}, r"must be a non-empty string"),
])
def test_policy_maps_of_the_wrong_shape_are_refused_by_name(policies, message):
    env = wb.make("cartpole", num_envs=32, target="cpu")
    with pytest.raises(PolicyMapError, match=message):
        wb.Trainer(env, ppo_cartpole(), policies=policies)


def test_a_frozen_model_and_a_misspelt_centralised_critic_are_named():
    from workbench.learn.policies import ActorCritic
    env = wb.make("cartpole", num_envs=8, target="cpu")
    frozen = ActorCritic(4, env.action_space).requires_grad_(False)
    with pytest.raises(PolicyMapError, match="policy 'shared': the model has no trainable parameters"):
        wb.Trainer(env, ppo_cartpole(num_envs=8), models={"shared": frozen})  # (an IndexError deep in Adam before)
    with pytest.raises(PolicyMapError, match=r"centralised_critic names \['shraed'\].*did you mean shared\?"):
        wb.Trainer(env, ppo_cartpole(num_envs=8, centralised_critic=["shraed"]))


def test_policy_maps_take_numpy_and_torch_ids():
    env = wb.make("cartpole", num_envs=32, target="cpu")
    for ids in (np.arange(1), torch.arange(1), range(1)):
        assert wb.Trainer(env, ppo_cartpole(), policies={"p": ids}).groups[0].ids == [0]


def test_model_with_the_wrong_action_head():
    env = wb.make("cartpole", num_envs=32, target="cpu")

    class Wrong(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 3)

        def forward(self, obs):
            return self.net(obs), obs.sum(-1)

        def value(self, obs):
            return obs.sum(-1)

    with pytest.raises(PolicyMapError, match="action output has 3 units, the env's action space Discrete"):
        wb.Trainer(env, ppo_cartpole(), models={"shared": Wrong()})


MATCHING = textwrap.dedent('''
    """Each agent is rewarded for the action that equals its own id modulo 3 (a multi-policy test)."""
    from workbench.compiler.envdef import Box, Discrete
    NUM_AGENTS = 4
    MAX_STEPS = 8
    OBSERVATION = Box(shape=(2,))
    ACTION = Discrete(3)

    def reset(env, agent):
        pass

    def step(env, agent, action, reward):
        reward[env, agent] = 1.0 if action[env, agent] == agent % 3 else 0.0

    def observe(env, agent, obs):
        obs[env, agent, 0] = agent % 2
        obs[env, agent, 1] = agent // 2
''')


def test_two_policies_over_non_contiguous_agents_learn():
    wb.register("matching", MATCHING)
    env = wb.make("matching", num_envs=64, target="cpu")
    config = wb.PPOConfig(env="matching", num_envs=64, rollout_length=8, num_minibatches=2, lr=1e-2,
                          total_env_steps=64 * 8 * 25,
                          ent_coef=0.0, log_every=5, target="cpu")
    trainer = wb.Trainer(env, config, policies={"even": [0, 2], "odd": [1, 3]})
    result = trainer.train()
    # a random policy earns 8/3 per episode; the optimum is 8
    assert result.metrics["return/even"] > 7.0 and result.metrics["return/odd"] > 7.0


NAN_REWARD = MATCHING.replace("1.0 if action[env, agent] == agent % 3 else 0.0",
                              "math.nan if action[env, agent] == 2 else 0.0").replace(
    "from workbench.compiler.envdef", "import math\nfrom workbench.compiler.envdef")


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    wb.register("nan_reward", NAN_REWARD)
    config = wb.PPOConfig(env="nan_reward", num_envs=8, rollout_length=8, num_minibatches=1, log_every=1,
                          target="cpu", run_dir=str(tmp_path), total_env_steps=10_000)
    trainer = wb.make_trainer(config)
    trainer.save(tmp_path / "checkpoint.pt")
    before = (tmp_path / "checkpoint.pt").read_bytes()
    with pytest.raises(wb.NonFiniteError, match="loss became NaN or inf by iteration 1") as caught:
        trainer.train()
    assert (tmp_path / "checkpoint.pt").read_bytes() == before
    assert "The env made them first: the rewards of policy 'shared' hold NaN or inf" in str(caught.value)
    assert "wb.check_env('nan_reward')" in str(caught.value) and "Lower lr" not in str(caught.value)
    scaled = wb.make_trainer(cfg.replace(config, run_dir=None, normalize_reward=True))
    with pytest.raises(wb.NonFiniteError, match=r"the reward scale of policy 'shared' \(normalize_reward, fed NaN"):
        scaled.train()


NAN_OBS = MATCHING.replace("obs[env, agent, 1] = agent // 2", "obs[env, agent, 1] = math.inf if t[env] > 3 else 0.0").replace(
    "def observe(env, agent, obs)", "def observe(env, agent, obs, t)").replace(
    "from workbench.compiler.envdef", "import math\nfrom workbench.compiler.envdef")


@pytest.mark.parametrize("normalize_obs, named", [
    (False, "the observations of policy 'shared'"),
    (True, "the observation normaliser of policy 'shared' (fed NaN or inf observations)")])
def test_a_nan_observation_is_named_as_the_env_s_not_the_learning_rate(normalize_obs, named):
    """Before, a NaN observation's loss said 'Lower lr' (its returns stay finite)."""
    wb.register("inf_obs", NAN_OBS)
    config = wb.PPOConfig(env="inf_obs", num_envs=8, rollout_length=8, num_minibatches=1, log_every=1,
                          target="cpu", total_env_steps=10_000, normalize_obs=normalize_obs)
    with pytest.raises(wb.NonFiniteError, match="The env made them first: .*" + re.escape(named)):
        wb.make_trainer(config).train()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_rollout_learns_and_replays():
    """On a GPU the rollout is captured once and replayed: the env advances T steps per replay
    (its buffers alias the store) and the policy noise's stream moves on between replays."""
    trainer = wb.make_trainer(ppo_cartpole(target="cuda", num_envs=256, total_env_steps=256 * 64 * 40,
                                           target_return=200.0, cuda_graph=True, compile=True))
    warm = trainer.train(num_iterations=2)
    assert trainer.graph is not None
    assert 0 < warm.warmup_s <= warm.wall_time_s  # compile and capture, reported apart
    before_t = trainer.env.store["t"].clone()
    counter = int(trainer.streams.counter)
    noise = trainer.collector.noise["shared"].clone()
    trainer.train(num_iterations=1)
    assert int(trainer.streams.counter) == counter + 1  # advanced inside the replayed graph
    assert not torch.equal(noise, trainer.collector.noise["shared"])
    assert not torch.equal(before_t, trainer.env.store["t"])
    result = trainer.train()
    assert result.metrics["return/shared"] > 5 * RANDOM_CARTPOLE_RETURN
    assert result.warmup_s == 0.0  # replays only


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("make_config", [
    lambda: ppo_cartpole(target="cuda", num_envs=256, log_every=1),
    lambda: wb.A2CConfig(env="tag_continuous", target="cuda", num_envs=64, rollout_length=8, log_every=1,
                         env_params=dict(num_taggers=2, num_runners=6, grid_length=10.0, episode_length=20,
                                         num_other_agents_observed=3), centralised_critic=("runners",),
                         compile=False),  # compiling two Tag policies takes minutes; CartPole covers compile
    lambda: wb.DDPGConfig(env="pendulum", target="cuda", num_envs=32, rollout_length=2, learning_starts=128,
                          batch_size=64, log_every=1, normalize_obs=True),
], ids=["ppo", "a2c-mappo-masks", "ddpg"])
def test_whole_iteration_graph_replays_what_eager_computes(make_config):
    """The same seed trained with every iteration replayed from one CUDA graph and eagerly logs the
    same metrics: one implementation, two ways of running it."""
    histories = []
    for graph in (True, False):
        trainer = wb.make_trainer(cfg.replace(make_config(), cuda_graph=graph))
        trainer.train(num_iterations=5)
        assert trainer.graph.state == ("replay" if graph else "eager-first")
        histories.append(trainer.history)
    for a, b in zip(*histories):
        for key, value in a.items():
            if key not in ("env_steps_per_s", "time_s") and isinstance(value, float) and not math.isnan(value):
                assert value == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("num_envs", [1000, 4])  # a member's rows split over many programs, and over one
def test_a_seed_trains_to_the_same_bits_twice_on_the_gpu(num_envs):
    """Two runs of one seed with the GPU defaults (graphs, bf16, fused kernels, MemberAdam) end with
    the same weights, bit for bit: no atomic sums on the learner's path."""
    weights = []
    for _ in range(2):
        trainer = wb.make_trainer(ppo_cartpole(target="cuda", num_envs=num_envs, rollout_length=32, log_every=10**6))
        trainer.train(num_iterations=4)
        weights.append([p.detach().clone() for p in trainer.models["shared"].parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tf32_is_on_only_while_a_bf16_trainer_computes():
    """torch's TF32 flags are the process's: a bf16 trainer turns them on for its own iterations and
    leaves the user's setting as it was (fp32 work elsewhere in the process stays fp32)."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    trainer = wb.make_trainer(ppo_cartpole(target="cuda", num_envs=64, precision="bf16", log_every=10**6))
    seen = []
    rollout = trainer.collector.rollout
    trainer.collector.rollout = lambda: (seen.append(torch.backends.cuda.matmul.allow_tf32), rollout())[1]
    trainer.train(num_iterations=3)  # eager, captured, replayed
    assert seen and all(seen)
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False


def test_learner_memory_by_default_is_a_tenth_of_the_gpus_and_2_gb_on_the_cpu(monkeypatch):
    from types import SimpleNamespace

    from workbench.learn import learners
    config = wb.A2CConfig(env="cartpole", target="cpu")
    assert config.learner_memory_gb == 0
    assert learners.learner_memory_gb(config, torch.device("cpu")) == 2.0
    for total_gb, bound in ((80, 8.0), (141, 14.1), (16, 2.0)):
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device, total=total_gb: SimpleNamespace(total_memory=total * 2**30))
        assert learners.learner_memory_gb(config, torch.device("cuda", 0)) == pytest.approx(bound)
    assert learners.learner_memory_gb(wb.A2CConfig(learner_memory_gb=0.5), torch.device("cuda", 0)) == 0.5
    with pytest.raises(cfg.ConfigError, match="learner_memory_gb must be >= 0 .0 picks from the device's memory"):
        wb.A2CConfig(env="cartpole", learner_memory_gb=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_learner_memory_stays_within_its_bound_on_the_gpu():
    """A2C on Tag with a small learner_memory_gb: the batch is processed in chunks and the peak of an
    iteration stays within the rollout buffers plus the bound (and a fixed allowance)."""
    config = wb.A2CConfig(env="tag_continuous", target="cuda", num_envs=256, rollout_length=32, log_every=10**6,
                          env_params=dict(num_taggers=4, num_runners=40, num_other_agents_observed=10),
                          hidden_sizes=(256, 256), learner_memory_gb=0.05, total_env_steps=10**9, compile=False)
    trainer = wb.make_trainer(config)
    assert all(chunk < 256 * 32 * 40 for chunk in trainer.chunk_size.values())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()  # env, rollout buffers, models
    trainer.train(num_iterations=3)  # eager, captured, replayed: the graph's pool holds one iteration
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < 0.05 * 2**30 * 4 + 256 * 2**20
