"""Populations: M members trained as one batched program. The test that proves the batching right:
member k of a population learns exactly what a standalone run of `member_config(config, k)` learns
(same reports to float tolerance, same final weights), for PPO and A2C, single- and multi-agent,
discrete and continuous actions, on the cpu target and (tiny) on the cuda target."""
from __future__ import annotations

import copy
import csv
import math

import pytest
import torch

from workbench.learn import config as cfg
from workbench.learn import population
from workbench.learn.members import MemberAdam, PopulationError, member_state, stack_members
from workbench.learn.policies import ActorCritic
from workbench.learn.streams import MemberStreams
from workbench.learn.trainer import make_trainer
from workbench.compiler.envdef import Discrete

TAG = {"num_taggers": 2, "num_runners": 3, "episode_length": 10, "grid_length": 4.0}
CASES = {
    "ppo-cartpole": ("ppo", "cartpole", {}),
    "a2c-cartpole": ("a2c", "cartpole", {}),
    "ppo-tag-mappo-norm": ("ppo", "tag_continuous", {"env_params": TAG, "normalize_obs": True,
                                                     "normalize_reward": True, "centralised_critic": ["runners"]}),
    # (a chunk of 1024 samples, the floor: 256 a member, 14 of its 16 steps of 6 x 3 runners, then 2)
    "a2c-tag": ("a2c", "tag_continuous", {"env_params": TAG, "rollout_length": 16, "learner_memory_gb": 1e-9}),
    "a2c-tag-shared-body-relu": ("a2c", "tag_continuous", {"env_params": TAG, "shared_body": True,
                                                           "activation": "relu"}),
    "ppo-pendulum-gaussian": ("ppo", "pendulum", {"env_params": {"max_steps": 12}, "normalize_obs": True,
                                                  "normalize_reward": True}),
}


def small(algorithm, env, extra, target="cpu", num_envs=6, T=8, iterations=3, **changes):
    base = {"env": env, "algorithm": algorithm, "num_envs": num_envs, "rollout_length": T, "target": target,
            "total_env_steps": num_envs * T * iterations, "seed": 11, "cpu_threads": 1, **extra, **changes}
    if algorithm == "ppo":
        base.setdefault("num_minibatches", 2)
        base.setdefault("update_epochs", 2)
    return cfg.from_dict(base)


def assert_same_reports(population_history, k, standalone_history, rtol=1e-4, least=10):
    assert len(population_history) == len(standalone_history) > 0
    compared = 0
    for pop_report, alone in zip(population_history, standalone_history):
        mine = pop_report["members"][k]
        for key, value in alone.items():
            if key in ("env_steps_per_s", "time_s") or not isinstance(value, float):
                continue
            assert key in mine, key
            if math.isnan(value):
                assert math.isnan(mine[key]), (k, key)
                continue
            assert mine[key] == pytest.approx(value, rel=rtol, abs=rtol), (k, alone["iteration"], key)
            compared += 1
    assert compared > least


DDPG = {"learning_starts": 24, "batch_size": 16, "updates_per_rollout": 2, "buffer_size": 120,
        "hidden_sizes": [32, 32]}
# three agents with Box actions in two policies (tests/test_cuda_c.py's probe: barriers, atomics, every rng function)
PROBE_POLICIES = {"first": [0], "others": [1, 2]}
CASES.update({
    "ddpg-pendulum": ("ddpg", "pendulum", {**DDPG, "env_params": {"max_steps": 10}, "normalize_obs": True}),
    "ddpg-multi-agent": ("ddpg", "probe_population", {**DDPG}),
})
SWEEPS = {"ppo": {"lr": [1e-3, 3e-3], "gamma": [0.9]}, "a2c": {"ent_coef": [0.0, 0.05]},
          "ddpg": {"tau": [0.005, 0.05], "critic_lr": [1e-3]}}


@pytest.fixture(scope="module")
def probe_env():
    import workbench as wb
    from test_cuda_c import PROBE_PY
    wb.register("probe_population", PROBE_PY)


@pytest.mark.parametrize("case", list(CASES))
def test_member_equals_standalone(case, probe_env):
    algorithm, env, extra = CASES[case]
    config = small(algorithm, env, extra, seeds=2, sweep=SWEEPS[algorithm], iterations=8 if algorithm == "ddpg" else 3)
    policies = PROBE_POLICIES if env == "probe_population" else None
    trainer = make_trainer(config, policies=policies)
    result = trainer.train()
    assert trainer.M == population.size(config) == 4
    assert trainer.env.num_envs == 4 * config.num_envs
    episodes = 0
    for k in range(trainer.M):
        alone = make_trainer(population.member_config(config, k), policies=policies)
        alone_result = alone.train()
        assert_same_reports(result.history, k, alone_result.history)
        episodes += sum(r.get("episodes", 0) for r in alone_result.history)
        for name, model in trainer.models.items():
            for key, value in alone.models[name].state_dict().items():
                assert torch.allclose(member_state(model, k)[key], value, rtol=1e-4, atol=1e-5), (k, name, key)
    assert episodes > 0  # the reports compared held finished episodes


def test_member_rows_are_the_index_gather_of_their_samples():
    """MemberSamples.take (strided copies of whole steps or a piece of one) gives what Batch.take of
    the members' sample ids gathers, and its chunks cover each member's samples once, in order."""
    from types import SimpleNamespace

    from workbench.learn.members import MemberSamples
    from workbench.learn.rollout import Batch
    M, T, E, n = 3, 5, 6, 4  # 8 samples a member a step
    samples = MemberSamples(SimpleNamespace(members=M, device=torch.device("cpu")), T, E, n)
    g = torch.Generator().manual_seed(0)
    B = T * E * n
    fields = {"obs": torch.randn(B, 7, generator=g), "values": torch.randn(B, generator=g),
              "mask": torch.rand(B, generator=g) > 0.3,
              "actions": torch.randint(0, 5, (B, 2), generator=g)}
    batch, ids = Batch(fields, torch.randn(T * E, 3, generator=g), agents_per_replica=n), samples.all()
    for chunk in (1, 3, 8, 13, 16, 40, 1000):
        parts = samples.chunks(chunk)
        assert torch.equal(torch.cat([torch.arange(p.start, p.stop) for p in parts]), torch.arange(samples.size))
        assert all(p.stop - p.start <= chunk for p in parts), chunk
        for p in parts:
            got, want = samples.take(batch, p), batch.take(ids[:, p].reshape(-1))
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), (chunk, p)
    assert torch.equal(samples.rows(fields["obs"]).reshape(M, -1, 7), fields["obs"][ids])
    with pytest.raises(ValueError, match="span part of two steps of 8"):
        samples.rows(fields["obs"], slice(4, 12))


def test_members_differ_and_seeds_are_consecutive():
    config = small("ppo", "cartpole", {}, seeds=3)
    trainer = make_trainer(config)
    assert [m.seed for m in trainer.members] == [11, 12, 13]
    weights = trainer.models["shared"].actor[0].weight
    assert not torch.equal(weights[0], weights[1])
    obs = trainer.env.store["obs"].reshape(3, config.num_envs, -1)
    assert not torch.equal(obs[0], obs[1])  # each member's replicas have their own seed


def test_population_on_the_cuda_target_equals_standalone(target):
    if target != "cuda":
        pytest.skip("the cpu target is covered above")
    # fp32: under the GPU's default bf16 the rollout rounds weights to bf16, so last-bit differences
    # (the gradient kernel splits one member's rows over more programs than a population's member's,
    # and so sums them in another order) become bf16 steps, and the runs part by about 0.2% within 2
    # iterations
    # (a max_grad_norm of 0 for members 0 and 1: not clipped, in the fused Adam step on a GPU too)
    config = small("a2c", "cartpole", {}, target="cuda", num_envs=2, T=4, iterations=2, seeds=2, precision="fp32",
                   sweep={"max_grad_norm": [0.0, 0.05]})
    result = make_trainer(config).train()
    for k in range(4):
        alone = make_trainer(population.member_config(config, k)).train()
        assert_same_reports(result.history, k, alone.history, least=5)


def test_metrics_csv_has_a_row_per_member_with_its_values(tmp_path):
    config = small("ppo", "cartpole", {}, seeds=2, sweep={"lr": [1e-3, 2e-3]}, run_dir=str(tmp_path))
    result = make_trainer(config).train()
    with (tmp_path / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 * len(result.history)
    assert [int(r["member"]) for r in rows[:4]] == [0, 1, 2, 3]
    assert [int(r["seed"]) for r in rows[:4]] == [11, 12, 13, 14]
    assert [float(r["lr"]) for r in rows[:4]] == [1e-3, 1e-3, 2e-3, 2e-3]
    last = result.history[-1]
    returns = sorted(m["return/shared"] for m in last["members"] if not math.isnan(m["return/shared"]))
    assert last["num_members"] == 4
    assert last["return_q25/shared"] <= last["return/shared"] <= last["return_q75/shared"]
    assert returns[0] <= last["return/shared"] <= returns[-1]


@pytest.mark.parametrize("extra", [{}, {"normalize_reward": True}])
def test_checkpoint_of_a_population_resumes_exactly(tmp_path, extra):
    config = small("ppo", "cartpole", extra, seeds=2, iterations=4)
    first = make_trainer(config)
    first.train(num_iterations=2)
    first.save(tmp_path / "checkpoint.pt")
    continued = first.train(num_iterations=2).history[-1]
    resumed = make_trainer(config).load(tmp_path / "checkpoint.pt").train(num_iterations=2).history[-1]
    for a, b in zip(continued["members"], resumed["members"]):
        for key in ("return/shared", "policy_loss/shared", "value_loss/shared", "approx_kl/shared"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6) or (math.isnan(a[key]) and math.isnan(b[key]))


def test_target_kl_stops_each_member_on_its_own_kl(monkeypatch):
    """Members whose approximate KL passes target_kl stop their epochs apart (the others' updates go
    on): member k still learns exactly what its standalone run learns."""
    from workbench.learn.algorithms import ppo
    stepping = []
    original = ppo.clip_and_step

    def counting(model, optimizer, max_grad_norm, active=None):
        stepping.append(None if active is None else int(active.sum()))
        return original(model, optimizer, max_grad_norm, *([] if active is None else [active]))

    monkeypatch.setattr(ppo, "clip_and_step", counting)
    config = small("ppo", "cartpole", {}, seeds=2, sweep={"lr": [1e-3, 1e-2]}, update_epochs=8, num_minibatches=4,
                   target_kl=0.002)
    trainer = make_trainer(config)
    result = trainer.train()
    assert trainer.M == 4 and {1, 2, 3} & set(stepping)  # some minibatches stepped only some members
    for k in range(trainer.M):
        alone = make_trainer(population.member_config(config, k))
        assert_same_reports(result.history, k, alone.train().history)
        for key, value in alone.models["shared"].state_dict().items():
            assert torch.allclose(member_state(trainer.models["shared"], k)[key], value, rtol=1e-4, atol=1e-5), (k, key)


@pytest.mark.parametrize("algorithm, field, values", [
    ("ppo", "max_grad_norm", [0.0, 0.05]), ("ppo", "clip_coef", [0.05, 0.3]), ("ppo", "gae_lambda", [0.5, 1.0]),
    ("ppo", "vf_coef", [0.25, 2.0]), ("a2c", "max_grad_norm", [0.0, 0.05]), ("ddpg", "max_grad_norm", [0.0, 0.05]),
])
def test_each_swept_hyperparameter_is_each_members_own(algorithm, field, values):
    """A sweep of one field, edge values included (max_grad_norm 0: no clipping, as a run of its
    own), learns what each member's standalone run learns."""
    env, extra = ("pendulum", {**DDPG, "env_params": {"max_steps": 10}}) if algorithm == "ddpg" else ("cartpole", {})
    config = small(algorithm, env, extra, sweep={field: values}, iterations=8 if algorithm == "ddpg" else 3)
    trainer = make_trainer(config)
    result = trainer.train()
    for k in range(2):
        alone = make_trainer(population.member_config(config, k))
        assert getattr(alone.config, field) == values[k]
        assert_same_reports(result.history, k, alone.train().history, least=5)
        for name, model in trainer.models.items():
            for key, value in alone.models[name].state_dict().items():
                assert torch.allclose(member_state(model, k)[key], value, rtol=1e-4, atol=1e-5), (k, name, key)


def test_a_swept_learning_rate_is_each_members_own():
    """A member with lr 0 keeps its weights while its neighbour with lr 1e-2 moves."""
    config = small("a2c", "cartpole", {}, sweep={"lr": [1e-2, 1e-30]}, iterations=2)
    trainer = make_trainer(config)
    before = trainer.models["shared"].actor[0].weight.detach().clone()
    trainer.train()
    after = trainer.models["shared"].actor[0].weight.detach()
    assert not torch.allclose(before[0], after[0])
    assert torch.allclose(before[1], after[1], atol=1e-12)


def test_member_adam_equals_torch_adam_per_member():
    torch.manual_seed(0)
    models = [ActorCritic(4, Discrete(2), (8,)) for _ in range(3)]
    copies = [ActorCritic(4, Discrete(2), (8,)) for _ in range(3)]
    for mine, theirs in zip(copies, models):
        mine.load_state_dict(theirs.state_dict())
    stacked = stack_members(models)
    lrs = torch.tensor([1e-3, 1e-2, 3e-2])
    opt = MemberAdam(stacked, lrs)
    # the parameters are views of the optimiser's flat buffer: its step moves them, nothing is copied back
    params = list(stacked.parameters())
    assert all(p.untyped_storage().data_ptr() == opt.flat.untyped_storage().data_ptr() for p in params)
    assert torch.equal(torch.cat([p.detach().reshape(3, -1) for p in params], 1), opt.flat)
    singles = [torch.optim.Adam(m.parameters(), lr=float(lr), eps=1e-5) for m, lr in zip(copies, lrs)]
    obs = torch.randn(3 * 5, 4)
    for _ in range(3):
        opt.zero_grad()
        logits, value = stacked(obs)
        (logits.square().sum(1) + value).reshape(3, 5).sum(1).mul(torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        opt.clip(0.5)
        opt.step()
        for k, (model, single) in enumerate(zip(copies, singles)):
            single.zero_grad()
            logits, value = model(obs[5 * k:5 * (k + 1)])
            ((logits.square().sum(1) + value).sum() * (k + 1)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            single.step()
    for k, model in enumerate(copies):
        for key, value in model.state_dict().items():
            assert torch.allclose(member_state(stacked, k)[key], value, atol=1e-6), (k, key)
    stacked.to(torch.float64)  # (replaces the parameters' storage)
    with pytest.raises(RuntimeError, match="make the optimiser after moving"):
        opt.step()


def test_a_cpu_population_with_few_outputs_trains_in_bf16():
    """Under the CPU's autocast the stacked heads take baddbmm (before: a bf16 gradient met the float32
    weight in _NarrowMemberLinear's backward)."""
    for algorithm in ("ppo", "a2c"):
        trainer = make_trainer(cfg.from_dict(dict(algorithm=algorithm, env="cartpole", num_envs=4, rollout_length=8,
                                                  seeds=2, precision="bf16", target="cpu", log_every=1)))
        assert math.isfinite(trainer.train(num_iterations=2).history[-1]["members"][0]["policy_loss/shared"])


@pytest.mark.parametrize("outputs", [1, 2, 7, 8])
@pytest.mark.parametrize("input_grad", [True, False])
def test_stacked_layers_of_few_outputs_compute_what_baddbmm_does(outputs, input_grad):
    """MemberLinear's CPU path for fewer than 8 outputs (members._NarrowMemberLinear: the weight and its
    gradient as [M, out, in]) gives baddbmm's values and gradients."""
    from torch import nn
    from workbench.learn.members import MemberLinear
    torch.manual_seed(outputs)
    layer = MemberLinear([nn.Linear(16, outputs) for _ in range(3)])
    x = torch.randn(3 * 40, 16, requires_grad=input_grad)
    dy = torch.randn(3 * 40, outputs)
    layer(x).backward(dy)
    mine = [layer.weight.grad, layer.bias.grad] + ([x.grad] if input_grad else [])
    weight, bias = layer.weight.detach().clone().requires_grad_(), layer.bias.detach().clone().requires_grad_()
    x_ref = x.detach().clone().requires_grad_(input_grad)
    y_ref = torch.baddbmm(bias, x_ref.reshape(3, 40, 16), weight).reshape(-1, outputs)
    torch.testing.assert_close(layer(x), y_ref, rtol=1e-6, atol=1e-6)
    y_ref.backward(dy)
    for got, want in zip(mine, [weight.grad, bias.grad] + ([x_ref.grad] if input_grad else [])):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_streams_are_uniform_normal_and_independent_of_the_others():
    streams = MemberStreams([5, 6, 7], "cpu")
    u = streams.uniform((20000,), site=1)
    assert u.shape == (3, 20000) and float(u.min()) > 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.01 and abs(float(u.var()) - 1 / 12) < 0.005
    n = streams.normal((20000,), site=2)
    assert abs(float(n.mean())) < 0.03 and abs(float(n.std()) - 1) < 0.03
    alone = MemberStreams([6], "cpu")
    assert torch.equal(alone.uniform((20000,), site=1)[0], u[1])
    assert torch.equal(alone.uniform((100,), site=1, offset=500)[0], u[1, 500:600])  # blocks of a draw
    assert not torch.equal(streams.uniform((100,), site=3), streams.uniform((100,), site=4))
    streams.advance()
    assert not torch.equal(streams.uniform((20000,), site=1), u)
    perm = streams.permutations(50, site=0)
    assert torch.equal(perm.sort(1).values, torch.arange(50).expand(3, 50))


@pytest.mark.parametrize("changes, message", [
    ({"seeds": 0}, "seeds must be >= 1"),
    ({"sweep": {"learning_rate": [1e-3]}}, "the hyperparameters ppo members can differ in are"),
    ({"sweep": {"ent_coeff": [0.01]}}, r"'max_grad_norm'\]; did you mean 'ent_coef'\?"),
    ({"sweep": {"lr": []}}, "must be a non-empty list of numbers"),
    ({"sweep": {"lr": [1e-3, -1.0]}}, r"sweep\['lr'\] holds -1.0, not a valid lr: .*lr must be > 0"),
    ({"sweep": {"gamma": [0.99, 1.5]}}, r"sweep\['gamma'\] holds 1.5, not a valid gamma: .*gamma must be in \[0, 1\]"),
    ({"sweep": {"clip_coef": [0.1]}, "algorithm": "a2c"}, "a2c members can differ in"),
])
def test_bad_population_settings_name_the_field(changes, message):
    with pytest.raises(cfg.ConfigError, match=message):
        small(changes.pop("algorithm", "ppo"), "cartpole", {}, **changes)


def test_population_refusals_say_what_to_do():
    with pytest.raises(PopulationError, match="default MLP policies"):
        make_trainer(small("ppo", "cartpole", {}, seeds=2), models={"shared": ActorCritic(4, Discrete(2))})
    from workbench import make
    config = small("ppo", "cartpole", {}, seeds=2)
    with pytest.raises(cfg.ConfigError, match="replicas_per_seed=6"):
        make_trainer(config, env=make("cartpole", num_envs=12, target="cpu"))


@pytest.mark.parametrize("case", ["ppo-cartpole", "ppo-tag-mappo-norm"])
def test_an_exported_member_trains_on_as_it_would_in_its_population(tmp_path, case):
    from workbench.learn.runs import export_member
    algorithm, env, extra = CASES[case]
    config = small(algorithm, env, extra, seeds=3, iterations=4, run_dir=str(tmp_path))
    trainer = make_trainer(config)
    trainer.train(num_iterations=2)
    trainer.save(tmp_path / "checkpoint.pt")
    path = export_member(tmp_path, 1)
    assert path == tmp_path / "member_1" / "checkpoint.pt"
    exported = torch.load(path, weights_only=False)["history"]
    assert [r["env_steps_per_s"] for r in exported] == pytest.approx(
        [r["env_steps_per_s"] / 3 for r in trainer.history])  # the member's share of the population's rate
    assert all("member" not in r and "seed" not in r for r in exported)
    on = trainer.train(num_iterations=2).history[-2:]
    member = make_trainer(population.member_config(config, 1)).load(path)
    assert len(member.history) == 0 or member.history[-1]["iteration"] == 2
    alone = member.train(num_iterations=2).history[-2:]
    assert_same_reports(on, 1, alone, least=5)


def test_best_member_is_loaded_for_replay_and_evaluate(tmp_path, capsys):
    from workbench.cli import main
    from workbench.learn.population import best_member
    from workbench.learn.runs import load_policy
    config = small("a2c", "cartpole", {}, seeds=3, iterations=3, run_dir=str(tmp_path))
    trainer = make_trainer(config)
    result = trainer.train()
    trainer.save(tmp_path / "checkpoint.pt")
    best = best_member(result.history)
    finals = [m["mean_return"] for m in result.history[-1]["members"]]
    assert finals[best] == max(v for v in finals if v == v)
    policy = load_policy(tmp_path, member="best", num_envs=2)
    assert policy.M == 1 and policy.config.seed == 11 + best
    weights = policy.models["shared"].actor[0].weight
    assert torch.allclose(weights, member_state(trainer.models["shared"], best)["actor.0.weight"])
    assert main(["evaluate", str(tmp_path), "--member", "2", "--num-envs", "2", "--random"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path), "--num-envs", "2", "--steps", "5"]) == 0
    assert f"member {best} of 3 (the best by mean_return, in its last training report)" in capsys.readouterr().out
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    for report in payload["history"]:  # no member with a finished episode: 'best' says what it fell back to
        for m in report["members"]:
            m["mean_return"] = float("nan")
    with pytest.warns(UserWarning, match="no member of this population has a value of mean_return yet"):
        assert population.member_payload(payload, "best")["member_of"] == {"members": 3, "member": 0, "seed": 11,
                                                                           "values": {}}  # (not the best by any)
    with pytest.raises(cfg.ConfigError, match=r"member \(--member\) must be an index in 0..2"):
        load_policy(tmp_path, member=5)
    with pytest.raises(cfg.ConfigError, match=r"must be an index in 0..2 or 'best' \('all' .*\), got 'worst'"):
        load_policy(tmp_path, member="worst")


def test_cli_trains_a_sweep_and_writes_its_ranking(tmp_path, capsys):
    from workbench.cli import main
    run = tmp_path / "run"
    assert main(["train", "cartpole", "--seeds", "2", "--sweep", "lr=1e-3,3e-3", "--num-envs", "8",
                 "--total-env-steps", "512", "--target", "cpu", "--cpu-threads", "1", "--run-dir", str(run),
                 "--rank-by", "-episode_length"]) == 0  # (a value with a minus, as argparse would refuse it)
    out = capsys.readouterr().out
    assert "4 members x 8 replicas" in out and "episode_length (lowest first) mean" in out and "over 4 members" in out
    with (run / "ranking.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(float(r["lr"]) for r in rows) == [1e-3, 3e-3] and all(int(r["members"]) == 2 for r in rows)
    assert float(rows[0]["episode_length_mean"]) <= float(rows[1]["episode_length_mean"])
    assert main(["evaluate", str(run), "--steps", "8"]) == 0
    assert "(the best by episode_length, the lowest, in its last training report)" in capsys.readouterr().out
    assert main(["train", "cartpole", "--sweep", "lr=fast", "--target", "cpu"]) == 2
    assert "--sweep takes NAME=V1,V2" in capsys.readouterr().err
    assert main(["train", "cartpole", "--sweep", "lr=1e-3", "--sweep", "lr=3e-3", "--target", "cpu"]) == 2
    assert "--sweep names lr twice; give all its values in one: --sweep lr=0.001,0.003" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(run), "--member", "worst"])
    assert "--member: a member's index (0, 1, ...), best or all, not 'worst'" in capsys.readouterr().err


def _csv_rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_an_exported_member_is_a_run_of_its_own_that_trains_on_beside_its_population(tmp_path, capsys):
    """export-member writes a run folder (member_K: checkpoint, the member's config and reports), which
    trains on, evaluates and replays as any run; a member exported to a file trains on into a folder
    named after it; neither writes into the population's folder, and nothing is overwritten."""
    from workbench.cli import main
    from workbench.learn.runs import load_policy
    run = tmp_path / "run"
    assert main(["train", "cartpole", "--seeds", "2", "--sweep", "lr=1e-3,3e-3", "--num-envs", "8",
                 "--total-env-steps", "512", "--target", "cpu", "--cpu-threads", "1", "--run-dir", str(run)]) == 0
    population_checkpoint = (run / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--seeds", "3"]) == 2
    assert "seeds cannot change (2 -> 3)" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--sweep", "lr=1e-2,2e-2"]) == 2  # as many members, other values
    assert "sweep cannot change ({'lr': [0.001, 0.003]} -> {'lr': [0.01, 0.02]})" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--seed", "100"]) == 2
    assert "seed cannot change (0 -> 100)" in capsys.readouterr().err
    assert main(["export-member", str(run), "--member", "2"]) == 0
    folder = run / "member_2"
    assert f"--resume {folder}" in capsys.readouterr().out
    saved = cfg.load_yaml(folder / "config.yaml")
    member = population.member_config(cfg.load_yaml(run / "config.yaml"), 2)
    assert (saved.seeds, saved.sweep, saved.run_dir) == (1, None, str(folder))
    assert (saved.seed, saved.lr) == (member.seed, member.lr) and member.lr == 3e-3
    population_rows = [r for r in _csv_rows(run / "metrics.csv") if r["member"] == "2"]
    exported_rows = _csv_rows(folder / "metrics.csv")
    assert exported_rows and not {"member", "seed", "lr"} & set(exported_rows[0])
    assert [r["mean_return"] for r in exported_rows] == [r["mean_return"] for r in population_rows]
    assert main(["export-member", str(run), "--member", "2"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["train", "--resume", str(folder), "--total-env-steps", "1024"]) == 0
    assert load_policy(folder).env_steps == 1024
    resumed_rows = _csv_rows(folder / "metrics.csv")
    assert len(resumed_rows) > len(exported_rows) and all(v != "" for r in resumed_rows for v in r.values())
    assert main(["evaluate", str(folder), "--num-envs", "2", "--episodes", "1"]) == 0
    assert main(["evaluate", str(folder), "--member", "1"]) == 2
    assert "is not a population's run: it has no member 1 (play or evaluate its one policy without a member" \
        in capsys.readouterr().err
    for out in (run / "checkpoint.pt", folder / "checkpoint.pt", run):  # the population, a run, a folder
        assert main(["export-member", str(run), "--member", "0", "--out", str(out)]) == 2
        assert "which the export would replace: write the member to a file of its own" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == population_checkpoint
    assert main(["export-member", str(run), "--member", "0", "--out", str(run / "m0.pt")]) == 0
    assert main(["train", "--resume", str(run / "m0.pt"), "--total-env-steps", "1024"]) == 0
    assert (run / "m0" / "checkpoint.pt").is_file()
    member_0_rows = [r for r in _csv_rows(run / "metrics.csv") if r["member"] == "0"]
    m0_rows = _csv_rows(run / "m0" / "metrics.csv")
    assert [r["mean_return"] for r in m0_rows[:len(member_0_rows)]] == [r["mean_return"] for r in member_0_rows]
    assert len(m0_rows) > len(member_0_rows) and all(v != "" for r in m0_rows for v in r.values())
    assert load_policy(run / "m0").config.seed == population.member_config(cfg.load_yaml(run / "config.yaml"), 0).seed
    assert main(["train", "--resume", str(run / "m0.pt"), "--total-env-steps", "2048"]) == 2
    assert "holds the run trained on from" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == population_checkpoint


def test_a_single_runs_member_adam_steps_as_torch_adam_and_loads_its_state():
    """A single run's optimiser is a MemberAdam of one member: torch Adam's steps (clipping included),
    and a torch Adam state (a checkpoint written before) loads into it."""
    torch.manual_seed(0)
    model = ActorCritic(4, Discrete(2), (8, 8))
    twin = copy.deepcopy(model)
    mine = MemberAdam(model, torch.tensor([1e-2]), members=1)
    theirs = torch.optim.Adam(twin.parameters(), lr=1e-2, eps=1e-5)
    assert all(p.untyped_storage().data_ptr() == mine.flat.untyped_storage().data_ptr() for p in model.parameters())
    obs = torch.randn(16, 4)
    for _ in range(3):
        for net, opt in ((model, mine), (twin, theirs)):
            opt.zero_grad()
            logits, value = net(obs)
            (logits.square().sum() + value.sum()).backward()
        mine.step(0.5)
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
        theirs.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    fresh = MemberAdam(copy.deepcopy(twin), torch.tensor([0.0]), members=1)
    fresh.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(fresh.exp_avg, mine.exp_avg, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(fresh.exp_avg_sq, mine.exp_avg_sq, rtol=1e-5, atol=1e-10)
    assert float(fresh.steps) == 3.0 and float(fresh.lr) == pytest.approx(1e-2)


def test_a_single_runs_optimiser_state_moves_between_member_adam_and_torch_adam():
    """A single run's checkpoint (MemberAdam of one member) loads into torch's Adam (what single runs
    on GPUs stepped with before), and back."""
    from workbench.learn.trainer_state import load_member_adam
    torch.manual_seed(1)
    model = ActorCritic(4, Discrete(2), (8,))
    mine = MemberAdam(model, torch.tensor([3e-3]), members=1)
    for _ in range(2):
        mine.zero_grad()
        logits, value = model(torch.randn(6, 4))
        (logits.square().sum() + value.sum()).backward()
        mine.step(0.5)
    saved = mine.state_dict()
    assert saved["member_adam"] and saved["step"] == 2.0 and len(saved["exp_avg"]) == len(list(model.parameters()))
    twin = copy.deepcopy(model)
    theirs = torch.optim.Adam(twin.parameters(), lr=1.0, eps=1e-5)
    load_member_adam(theirs, saved)
    for p, part in zip(twin.parameters(), saved["exp_avg"]):
        assert torch.equal(theirs.state[p]["exp_avg"], part)
    assert theirs.param_groups[0]["lr"] == pytest.approx(3e-3)
    again = MemberAdam(copy.deepcopy(twin), torch.tensor([0.0]), members=1)
    again.load_state_dict(theirs.state_dict())
    assert torch.equal(again.exp_avg, mine.exp_avg) and torch.equal(again.exp_avg_sq, mine.exp_avg_sq)
    assert float(again.steps) == 2.0 and float(again.lr) == pytest.approx(3e-3)


def test_rollout_copies_of_stacked_members_in_nn_linear_layout_refresh_to_the_same_values():
    """The rollout's bf16 copies of stacked members the wide step may serve hold their weights laid out
    as nn.Linear's ([M, out, in] in memory): the same tensors' values after a refresh, the same outputs,
    and the other models' copies stay [M, in, out]."""
    from workbench.learn import learners
    nets = []
    for k in range(3):
        torch.manual_seed(k)
        nets.append(ActorCritic(7, Discrete(4), (16, 24)))
    models = {"wide": stack_members(nets), "narrow": stack_members(copy.deepcopy(nets))}
    copies, pairs = learners.rollout_copies(models, True, nn_layout={"wide"})
    for p in models["wide"].parameters():
        p.data.add_(0.25)  # (a learner's step, which the refresh must carry over)
    torch._foreach_copy_(*pairs)
    wide, narrow = copies["wide"].actor[0].weight, copies["narrow"].actor[0].weight
    assert wide.dtype == torch.bfloat16 and not wide.is_contiguous() and wide.transpose(1, 2).is_contiguous()
    assert narrow.is_contiguous()
    for mine, theirs in zip(copies["wide"].parameters(), models["wide"].parameters()):
        assert mine.shape == theirs.shape and torch.equal(mine, theirs.detach().to(mine.dtype))
    x = torch.randn(3 * 5, 7)
    with torch.no_grad():
        got, want = copies["wide"](x.bfloat16()), copies["narrow"](x.bfloat16())
    assert not torch.equal(got[0].float(), want[0].float())  # (the refresh moved the wide copy only)
    with torch.no_grad():
        ref = models["wide"](x)
    torch.testing.assert_close(got[0].float(), ref[0], rtol=0.05, atol=0.05)


def test_target_kl_ends_the_update_after_the_epoch_whose_last_minibatch_passes_it(monkeypatch):
    """CleanRL's rule: after each epoch, the last minibatch's approximate KL (not a running mean over
    the update, which lags behind the first epoch's near-zero KLs) decides whether to go on."""
    from workbench.learn.algorithms import ppo
    kls, original = [], ppo.chunk_loss

    def recording(*args, **kwargs):
        loss, stats = original(*args, **kwargs)
        kls.append(float(stats[ppo.KL].sum()))
        return loss, stats

    monkeypatch.setattr(ppo, "chunk_loss", recording)
    config = small("ppo", "cartpole", {}, num_envs=16, T=16, lr=2e-2, update_epochs=10, num_minibatches=4,
                   target_kl=0.02, iterations=4)
    trainer = make_trainer(config)
    assert trainer.chunk_size["shared"] >= 64  # one chunk a minibatch: one recorded KL a step
    stopped_early = 0
    for _ in range(4):
        kls.clear()
        trainer.train(num_iterations=1)
        expected = config.update_epochs
        for epoch in range(config.update_epochs):
            if kls[4 * epoch + 3] > config.target_kl:
                expected = epoch + 1
                break
        assert len(kls) == 4 * expected, kls
        stopped_early += expected < config.update_epochs
    assert stopped_early >= 2
