"""A trained policy as a plain obs -> action function (wb.policy, PolicyFunction): the same actions as the
trainer's own on the same observations (discrete, Box with observation normalisation, MultiDiscrete
with two policies and a centralised critic, DDPG, a custom model, a population's member), numpy and
single observations, a jit trace and a pickle acting alike, and errors that name what is expected."""
import gc
import weakref

import numba
import numpy as np
import pytest
import torch
from torch import nn

import workbench as wb
from workbench.errors import ConfigError
from workbench.learn.policy_function import PolicyFunction, PolicyFunctionError
from workbench.learn.runs import export_member

TINY = dict(target="cpu", num_envs=8, hidden_sizes=[16, 16], cpu_threads=1, progress=False)
PPO = dict(rollout_length=8, num_minibatches=2, update_epochs=1, total_env_steps=3 * 64)


class TinyNet(nn.Module):
    """A user's own PPO model: forward(obs) -> (logits, value)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.pi, self.v = nn.Linear(8, 2), nn.Linear(8, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs, trained once for the module: {name: run folder}."""
    root = tmp_path_factory.mktemp("policy_function")
    made = {}

    def train(name, config, **changes):
        made[name] = root / name
        wb.train(config, run_dir=str(made[name]), **{**TINY, **(PPO if "ddpg" not in name else {}), **changes})

    train("cartpole", "cartpole")
    train("pendulum", wb.PPOConfig(env="pendulum"), normalize_obs=True, normalize_reward=True, shared_body=True)
    train("tag", "tag_continuous", centralised_critic=["taggers"], normalize_obs=True,
          env_params={"num_taggers": 1, "num_runners": 2, "episode_length": 20})
    train("ddpg", "pendulum", rollout_length=1, learning_starts=16, buffer_size=256, batch_size=16,
          updates_per_rollout=2, total_env_steps=64, normalize_obs=True)
    train("custom", "cartpole", models={"shared": TinyNet()})
    train("population", "cartpole", seeds=2, normalize_obs=True)
    return made


def assert_acts_as_the_trainer(run, policy=None, steps=4, models=None, **options):
    """The function's actions equal Trainer.act's on each of `steps` consecutive observations of 8 replicas."""
    trainer = wb.load_policy(run, num_envs=8, models=models, member=options.get("member"))
    function = wb.policy(run, policy, models=models, **options)
    group = next(g for g in trainer.groups if g.name == function.policy)
    for _ in range(steps):
        obs = group.gather(trainer.env.store["obs"]).reshape(-1, function.obs_dim).clone()
        expected = group.gather(trainer.act(deterministic=True)).reshape((-1,) + function.act_shape).clone()
        actions = function(obs)
        assert actions.shape == expected.shape
        if function.kind in ("gaussian", "ddpg"):
            assert actions.dtype == torch.float32 and torch.equal(actions, expected)
        else:
            assert actions.dtype == torch.int64 and torch.equal(actions, expected.long())
        trainer.env.step()
    return function


def test_discrete_actions_equal_the_trainers(runs):
    function = assert_acts_as_the_trainer(runs["cartpole"])
    assert isinstance(function, nn.Module) and function.env == "cartpole" and function.policy == "shared"
    assert function.norm is None and function.obs_dim == 4


def test_box_actions_equal_the_trainers_with_the_observations_normalised_and_clipped(runs):
    function = assert_acts_as_the_trainer(runs["pendulum"])
    assert function.norm is not None and function.act_shape == (1,)
    saved = torch.load(runs["pendulum"] / "checkpoint.pt", weights_only=False)["norms"]["shared"]
    assert torch.equal(function.norm.mean, saved["mean"]) and torch.equal(function.norm.var, saved["var"])
    far = torch.full((3, 3), 1e4)  # (means far out of the Box: clipped to [-2, 2] as the trainer clips)
    function.actor.net[-1].bias.data.fill_(1e6)
    assert torch.equal(function(far), torch.full((3, 1), 2.0))


def test_each_policy_of_a_two_policy_run_is_picked_by_name(runs):
    taggers = assert_acts_as_the_trainer(runs["tag"], "taggers")  # (its critic centralised: the actor alone)
    runners = assert_acts_as_the_trainer(runs["tag"], "runners")
    assert taggers.kind == runners.kind == "multi" and taggers.act_shape == (2,)
    assert not any("critic" in name for name, _ in taggers.named_parameters())


def test_ddpg_actions_equal_the_trainers(runs):
    function = assert_acts_as_the_trainer(runs["ddpg"])
    assert function.kind == "ddpg" and function.norm is not None


def test_a_custom_model_acts_through_its_own_forward(runs):
    assert_acts_as_the_trainer(runs["custom"], models={"shared": TinyNet()})


def test_a_population_member_equals_that_member_exported_and_the_live_trainers_member(runs, tmp_path):
    run = runs["population"]
    function = assert_acts_as_the_trainer(run, member=1)
    assert function.member.startswith("member 1 of 2")
    exported = wb.policy(export_member(run, 1, path=tmp_path / "member.pt"))
    trainer = wb.load_policy(run, num_envs=1, member="all")
    live = PolicyFunction.from_trainer(trainer, member=1)
    obs = torch.randn(32, 4) * 2
    for other in (exported, live):
        assert other.state_dict().keys() == function.state_dict().keys()
        assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), function.state_dict().values()))
        assert torch.equal(other(obs), function(obs))
    assert not torch.equal(PolicyFunction.from_trainer(trainer, member=0).norm.mean, function.norm.mean)
    with pytest.raises(PolicyFunctionError, match=r"a population of 2 members: name one, member=K with K in 0\.\.1"):
        PolicyFunction.from_trainer(trainer)


def test_numpy_and_single_observations_give_the_same_kind_back(runs):
    function = wb.policy(runs["pendulum"])
    batch = np.random.default_rng(0).normal(size=(5, 3))
    actions = function(batch)
    assert isinstance(actions, np.ndarray) and actions.shape == (5, 1) and actions.dtype == np.float32
    assert np.array_equal(actions, function(torch.as_tensor(batch, dtype=torch.float32)).numpy())
    one = function(batch[2])
    assert isinstance(one, np.ndarray) and one.shape == (1,) and np.array_equal(one, function(batch[2:3])[0])
    assert np.allclose(one, actions[2], rtol=1e-5, atol=1e-6)  # (a matmul of one row may round apart from five's)
    assert function(torch.as_tensor(batch[2])).shape == (1,)
    discrete = wb.policy(runs["cartpole"])
    assert discrete([0.0, 0.1, 0.0, -0.1]).shape == () and discrete(np.zeros((2, 4), np.int32)).dtype == np.int64


def test_samples_are_the_trainers_from_the_same_generator_and_a_seed_repeats_them(runs):
    trainer = wb.load_policy(runs["pendulum"], num_envs=8)
    function = wb.policy(runs["pendulum"], deterministic=False)
    obs = trainer.env.store["obs"][:, 0].clone()
    expected = trainer.act(deterministic=False, generator=torch.Generator().manual_seed(5))[:, 0].clone()
    assert torch.equal(function(obs, torch.Generator().manual_seed(5)), expected)
    assert not torch.equal(function(obs, torch.Generator().manual_seed(6)), expected)
    seeded = [wb.policy(runs["cartpole"], deterministic=False, seed=3) for _ in range(2)]
    many = torch.randn(64, 4)
    assert torch.equal(seeded[0](many), seeded[1](many))


def test_a_ddpg_policy_asked_to_sample_says_it_is_deterministic(runs):
    with pytest.warns(UserWarning, match="trained by DDPG, whose actor is deterministic: deterministic=False "
                                         "samples nothing"):
        sampled = wb.policy(runs["ddpg"], deterministic=False, seed=0)
    obs = torch.randn(16, sampled.obs_dim)
    assert torch.equal(sampled(obs), wb.policy(runs["ddpg"])(obs))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (torch 2.9+ deprecates torch.jit for torch.export)
@pytest.mark.parametrize("name, policy", [("cartpole", None), ("pendulum", None), ("tag", "runners"),
                                          ("ddpg", None)])
def test_a_jit_trace_and_a_pickle_act_alike(runs, tmp_path, name, policy):
    function = wb.policy(runs[name], policy)
    example, other = torch.randn(5, function.obs_dim), torch.randn(17, function.obs_dim) * 3
    traced = torch.jit.trace(function, example)
    assert torch.equal(traced(other), function(other))
    torch.jit.save(traced, tmp_path / "traced.pt")
    assert torch.equal(torch.jit.load(tmp_path / "traced.pt")(other), function(other))
    torch.save(function, tmp_path / "module.pt")
    assert torch.equal(torch.load(tmp_path / "module.pt", weights_only=False)(other), function(other))


def test_torch_export_with_a_dynamic_batch_acts_alike(runs):
    function = wb.policy(runs["tag"], "taggers")
    batch = torch.export.Dim("batch")
    exported = torch.export.export(function, (torch.randn(8, function.obs_dim),), dynamic_shapes=({0: batch},))
    other = torch.randn(33, function.obs_dim) * 3
    assert torch.equal(exported.module()(other), function(other))


def test_the_function_keeps_nothing_of_the_trainer(runs):
    trainer = wb.load_policy(runs["cartpole"], num_envs=1)
    function = PolicyFunction.from_trainer(trainer)
    theirs = {p.data_ptr() for p in trainer.models["shared"].parameters()}
    assert not theirs & {t.data_ptr() for t in (*function.parameters(), *function.buffers())}
    gone = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert gone() is None
    function.train()
    assert not function.training and not function.actor.training


def test_a_run_whose_minibatches_need_its_replicas_acts_and_the_thread_counts_stay(tmp_path):
    run = tmp_path / "run"
    wb.train("cartpole", run_dir=str(run), **{**TINY, **PPO, "num_minibatches": 16})  # (one replica's 8 steps: fewer)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    threads = torch.get_num_threads(), numba.get_num_threads()
    function = wb.policy(run)  # (its trainer of one replica sets cpu_threads=1 while it is built)
    assert (torch.get_num_threads(), numba.get_num_threads()) == threads
    assert function(np.zeros(4)) in (0, 1)


def test_errors_name_the_policies_the_member_and_the_observation_width(runs):
    with pytest.raises(PolicyFunctionError, match=r"has no policy 'runner'; its policies: \['taggers', 'runners'\]; "
                                                  r"did you mean 'runners'\?"):
        wb.policy(runs["tag"], "runner")
    with pytest.raises(PolicyFunctionError, match=r"has 2 policies, \['taggers', 'runners'\]: name one"):
        wb.policy(runs["tag"])
    with pytest.raises(ConfigError, match=r"member='all' names every member .* pick one, member=K or member='best'"):
        wb.policy(runs["population"], member="all")
    with pytest.raises(ConfigError, match=r"is not a population's run: it has no member 1"):
        wb.policy(runs["cartpole"], member=1)
    function = wb.policy(runs["cartpole"])
    for bad in (torch.zeros(3, 5), torch.zeros(2, 2, 4)):
        with pytest.raises(PolicyFunctionError, match=r"policy 'shared' of env 'cartpole' takes observations "
                                                      r"\[B, 4\] .* got shape"):
            function(bad)
    with pytest.raises(PolicyFunctionError, match=r"takes one observation of 4 values \(shape \(4,\)\), or a batch "
                                                  r"\[B, 4\]; got shape \(5,\)"):
        function(np.zeros(5))
    with pytest.raises(PolicyFunctionError, match=r"a pair \(obs, info\), as Gymnasium's reset\(\) returns"):
        function((np.zeros(4), {}))
    bad = np.zeros((3, 4), np.float32)
    bad[1, 2], bad[2, 0] = np.nan, np.inf
    for obs, rows in ((bad, r"rows \[1, 2\]"), (torch.from_numpy(bad[1]), r"row \[0\]")):
        with pytest.raises(PolicyFunctionError, match=r"got observations that are not finite \(NaN or inf\) in "
                                                      + rows + ": its actions would be meaningless"):
            function(obs)


def test_trainer_act_given_observations_points_to_wb_policy():
    import torch
    trainer = wb.make_trainer(wb.PPOConfig(env="cartpole", num_envs=4, target="cpu", progress=False))
    with pytest.raises(TypeError, match=r"takes True or False, got Tensor: .*wb.policy\(run\)\(obs\)"):
        trainer.act(torch.zeros(4, 1, 4))
    assert trainer.act(deterministic=True).shape[0] == 4
