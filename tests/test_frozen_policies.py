"""A fixed opponent: policies started from another run's weights (init_from) and policies that act
without learning (frozen), from Python, YAML and the CLI; a population's members and DDPG alike; the
reports, the target and resume; errors that name the field and the fix."""
import subprocess
import sys

import pytest
import torch

import workbench as wb
from workbench.learn.checkpoint import CheckpointError
from workbench.learn.config import ConfigError
from workbench.learn.members import member_state
from workbench.learn.runs import ResumeError

from conftest import gpu_only

GRID = {"num_taggers": 1, "num_runners": 2, "grid_length": 6, "episode_length": 12}


def grid_config(**kw):
    return wb.PPOConfig(**{"env": "tag_grid", "env_params": GRID, "num_envs": 8, "rollout_length": 8,
                           "num_minibatches": 2, "update_epochs": 2, "target": "cpu", "cpu_threads": 1,
                           "total_env_steps": 8 * 8 * 3, "progress": False, **kw})


def weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A short run of both teams whose runners the other tests start from (normalised observations)."""
    run = tmp_path_factory.mktemp("source") / "run"
    trainer, _ = wb.train(grid_config(run_dir=str(run), normalize_obs=True))
    return run, trainer


def test_a_frozen_policy_plays_its_source_s_weights_and_only_the_other_learns(source, tmp_path):
    run, trained = source
    runners = weights(trained.models["runners"])
    norm = {k: v.clone() for k, v in trained.norms["runners"].state_dict().items()}
    trainer, result = wb.train(grid_config(run_dir=str(tmp_path / "b"), normalize_obs=True,
                                           init_from={"runners": str(run)}, frozen=["runners"]))
    assert trainer.pretrained == [f"policy 'runners' starts from 'runners' of {run / 'checkpoint.pt'} (frozen)"]
    assert same(weights(trainer.models["runners"]), runners)  # after three iterations
    assert same({k: v for k, v in trainer.norms["runners"].state_dict().items()}, norm)
    assert not trainer.optimizers["runners"].steps.any()  # (its Adam never stepped)
    fresh = wb.make_trainer(grid_config(normalize_obs=True), pretrained=False)
    assert not same(weights(trainer.models["taggers"]), weights(fresh.models["taggers"]))  # the taggers learned
    assert trainer.optimizers["taggers"].steps.all()
    metrics = result.metrics
    assert "policy_loss/taggers" in metrics and not any(k.endswith("/runners") and k != "return/runners"
                                                        for k in metrics)
    assert metrics["mean_return"] == metrics["return/taggers"]  # (the learning policies' mean)
    # the target waits for the learning policies only
    from workbench.learn.report import reached
    assert reached({"return/taggers": 1.0, "return/runners": -50.0}, 0.5, trainer.frozen)
    assert not reached({"return/taggers": 0.1, "return/runners": 50.0}, 0.5, trainer.frozen)
    assert not reached({"return/taggers": float("nan"), "return/runners": 50.0}, 0.5, trainer.frozen)


def test_init_from_without_frozen_fine_tunes_and_another_policy_name_is_taken_by_name(source, tmp_path):
    run, trained = source
    start = wb.make_trainer(grid_config(normalize_obs=True, init_from={
        "taggers": {"run": str(run), "policy": "runners"}}))
    assert same(weights(start.models["taggers"]), weights(trained.models["runners"]))
    trainer, _ = wb.train(grid_config(run_dir=str(tmp_path / "c"), normalize_obs=True,
                                      init_from={"runners": str(run)}))
    assert not same(weights(trainer.models["runners"]), weights(trained.models["runners"]))  # it learned on


def test_a_population_starts_every_member_from_the_source_and_a_population_source_gives_a_member(source, tmp_path):
    run, trained = source
    population = wb.make_trainer(grid_config(normalize_obs=True, seeds=3, init_from={"runners": str(run)},
                                             frozen=["runners"]))
    for k in range(3):
        assert same(member_state(population.models["runners"], k), weights(trained.models["runners"]))
        assert torch.equal(population.norms["runners"].mean[k], trained.norms["runners"].mean)
    pop_run = tmp_path / "pop"
    pop_trainer, _ = wb.train(grid_config(run_dir=str(pop_run), seeds=2))
    second = wb.make_trainer(grid_config(init_from={"runners": {"run": str(pop_run), "member": 1}}))
    assert same(weights(second.models["runners"]), member_state(pop_trainer.models["runners"], 1))
    assert "member 1 of 2" in second.pretrained[0]
    best = wb.make_trainer(grid_config(init_from={"runners": str(pop_run)}))  # (the best member, recorded)
    assert best.config.init_from["runners"]["member"] in (0, 1)


def test_resume_keeps_the_policy_frozen_without_its_source_and_refuses_a_new_init_from(source, tmp_path):
    import shutil
    run, trained = source
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    first, _ = wb.train(grid_config(run_dir=str(tmp_path / "d"), normalize_obs=True,
                                    init_from={"runners": str(copy)}, frozen=["runners"]))
    shutil.rmtree(copy)  # (a resume restores its checkpoint: the source is not read again)
    resumed, _ = wb.train(resume=str(tmp_path / "d"), total_env_steps=8 * 8 * 5)
    assert resumed.iteration == 5 and resumed.frozen == {"runners"}
    assert same(weights(resumed.models["runners"]), weights(trained.models["runners"]))
    with pytest.raises(ResumeError, match="init_from cannot change"):
        wb.train(resume=str(tmp_path / "d"), total_env_steps=8 * 8 * 6, init_from={"taggers": str(run)})


@pytest.mark.parametrize("change, error, words", [
    ({"frozen": ["runner"]}, ConfigError, ["frozen names 'runner'", "did you mean 'runners'?"]),
    ({"frozen": ["runners", "taggers"]}, ConfigError, ["holds every policy", "nothing would learn"]),
    ({"init_from": "runs/a"}, ConfigError, ["init_from must be dict", "e.g. init_from: {runners: runs/<run>}"]),
    ({"init_from": {"tagger": "x"}}, ConfigError, ["init_from names 'tagger'", "did you mean 'taggers'?"]),
    ({"init_from": {"runners": "no/such/run"}}, CheckpointError, ["init_from['runners']", "does not exist"]),
    ({"init_from": {"runners": 3}}, ConfigError, ["init_from['runners'] must be a run folder or checkpoint"]),
    ({"init_from": {"runners": {"run": "SOURCE", "membr": 1}}}, ConfigError,
     ["has key(s) ['membr']", "did you mean member?"]),
    ({"init_from": {"runners": {"run": "SOURCE", "member": -1}}}, ConfigError,
     ["member must be a member's index (0, 1, ...) or 'best', got -1"]),
    ({"init_from": {"runners": {"run": "SOURCE", "policy": "runner"}}}, CheckpointError,
     ["has no policy 'runner'", "did you mean 'runners'?"]),
    ({"init_from": {"runners": "SOURCE"}, "hidden_sizes": [16]}, CheckpointError,
     ["hidden_sizes=[64, 64]", "set hidden_sizes: [64, 64]"]),
    ({"init_from": {"runners": "SOURCE"}, "normalize_obs": False}, CheckpointError,
     ["normalize_obs=True", "set normalize_obs: True"]),
    ({"init_from": {"runners": {"run": "SOURCE", "member": 2}}}, CheckpointError,
     ["not a population's run", "no member 2"]),
])
def test_errors_name_the_field_and_the_fix(source, change, error, words):
    run, _ = source
    change = {k: (v if k != "init_from" or not isinstance(v, dict) else
                  {p: (str(run) if s == "SOURCE" else {**s, "run": str(run)} if isinstance(s, dict) else s)
                   for p, s in v.items()}) for k, v in change.items()}
    with pytest.raises(error) as info:
        wb.make_trainer(grid_config(**{"normalize_obs": True, **change}))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_the_policy_names_are_checked_before_the_env_compiles():
    from workbench.learn.config_env import check_before_compile
    with pytest.raises(ConfigError, match="frozen names 'hunters'"):
        check_before_compile(grid_config(frozen=["hunters"]))
    with pytest.raises(ConfigError, match="init_from names 'x'"):
        check_before_compile(grid_config(init_from={"x": "runs/a"}))


def test_the_cli_trains_against_a_frozen_opponent(source, tmp_path):
    run, trained = source
    out = subprocess.run([sys.executable, "-m", "workbench", "train", "tag_grid", "--run-dir", str(tmp_path / "e"),
                          "--set", f"env_params={GRID}", "num_envs=8", "rollout_length=8", "num_minibatches=2",
                          "total_env_steps=128", "normalize_obs=true", "target=cpu", "frozen=[runners]",
                          f"init_from={{runners: {run}}}", "progress=false"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "policy 'runners' starts from 'runners' of" in out.stdout and "(frozen)" in out.stdout
    saved = wb.load_policy(tmp_path / "e")
    assert same(weights(saved.models["runners"]), weights(trained.models["runners"]))
    assert saved.config.frozen == ("runners",)  # (config.yaml keeps the source resolved, wherever it is read)
    assert saved.config.init_from == {"runners": {"run": str((run / "checkpoint.pt").resolve()), "policy": "runners"}}
    assert "runners -" in out.stdout and "(frozen)" in out.stdout.splitlines()[-2]


@pytest.fixture(scope="module")
def probe_env():
    from test_cuda_c import PROBE_PY
    wb.register("probe_frozen", PROBE_PY)


def test_ddpg_leaves_a_frozen_policy_as_it_was_and_plays_its_actor_while_the_buffers_fill(probe_env):
    config = wb.DDPGConfig(env="probe_frozen", num_envs=4, rollout_length=2, learning_starts=16, batch_size=8,
                           buffer_size=64, updates_per_rollout=2, hidden_sizes=[16], target="cpu", cpu_threads=1,
                           total_env_steps=4 * 2 * 6, policies={"first": [0], "others": [1, 2]}, frozen=["first"],
                           exploration_noise=0.0)
    trainer = wb.make_trainer(config)
    before = {name: weights(model) for name, model in trainer.models.items()}
    played = []
    trainer.models["first"].actor.register_forward_hook(lambda module, args, out: played.append(out))
    assert not trainer.ddpg_learning()
    trainer.train(num_iterations=1)  # (random actions for "others" until their buffer holds 16 transitions)
    assert len(played) == 2  # (it acted at both steps, while "others" filled their buffer)
    acted = trainer.env.store["action"][:, 0].reshape(4, -1)
    torch.testing.assert_close(acted, trainer.head.to_env(played[-1]).reshape(4, -1))  # (noise 0: the actor's own)
    assert trainer.ddpg_learning()  # (the 16 transitions of "others": "first" keeps no replay to wait for)
    assert not hasattr(trainer.buffers["first"], "obs")
    result = trainer.train()
    assert same(weights(trainer.models["first"]), before["first"])
    assert not same(weights(trainer.models["others"]), before["others"])
    assert "critic_loss/others" in result.metrics and "critic_loss/first" not in result.metrics


@gpu_only
@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_a_frozen_policy_stays_put_under_cuda_graphs_and_the_fused_kernels(algorithm, tmp_path):
    cls = wb.PPOConfig if algorithm == "ppo" else wb.A2CConfig
    source = wb.make_trainer(cls(env="tag_continuous", env_params={"num_taggers": 2, "num_runners": 6},
                                 num_envs=64, rollout_length=8, target="cuda", seeds=2))
    source.train(num_iterations=2)
    source.save(tmp_path / "source.pt")
    trainer = wb.make_trainer(cls(env="tag_continuous", env_params={"num_taggers": 2, "num_runners": 6},
                                  num_envs=64, rollout_length=8, target="cuda", seeds=2, frozen=["runners"],
                                  init_from={"runners": {"run": str(tmp_path / "source.pt"), "member": 0}}))
    start = member_state(source.models["runners"], 0)
    taggers = weights(trainer.models["taggers"])
    trainer.train(num_iterations=4)  # (eager, capture, replays)
    assert trainer.graph.state == "replay"
    for k in range(2):
        assert same(member_state(trainer.models["runners"], k), start)
    assert not same(weights(trainer.models["taggers"]), taggers)


def test_a_user_model_without_trainable_parameters_plays_when_frozen():
    from workbench.learn.groups import PolicyMapError
    from workbench.learn.policies import ActorCritic
    env = wb.make("tag_grid", num_envs=8, target="cpu", **GRID)
    fixed = ActorCritic(env.obs_shape[0], env.action_space, (16,)).requires_grad_(False)
    start = weights(fixed)
    trainer = wb.Trainer(env, grid_config(frozen=["runners"]), policies={"taggers": [0], "runners": [1, 2]},
                         models={"runners": fixed})
    trainer.train()
    assert same(weights(trainer.models["runners"]), start)
    with pytest.raises(PolicyMapError, match="list it in frozen to play it without learning"):
        wb.Trainer(env, grid_config(), policies={"taggers": [0], "runners": [1, 2]},
                   models={"runners": ActorCritic(env.obs_shape[0], env.action_space, (16,)).requires_grad_(False)})


class Chaser(torch.nn.Module):
    """A scripted tagger without parameters: the move toward the runner it sees (tag_grid's partial
    observation: own x, y, then the opponent's), near certainly."""

    def forward(self, obs):
        dx, dy = obs[:, 2] - obs[:, 0], obs[:, 3] - obs[:, 1]
        logits = torch.stack([torch.zeros_like(dx), dx, -dx, dy, -dy], dim=1) * 100.0
        return logits, torch.zeros_like(dx)


def test_a_scripted_policy_without_parameters_plays_when_frozen_and_its_run_resumes(tmp_path):
    from workbench.learn.groups import PolicyMapError
    env = wb.make("tag_grid", num_envs=8, target="cpu", **GRID)
    policies = {"taggers": [0], "runners": [1, 2]}
    trainer = wb.Trainer(env, grid_config(frozen=["taggers"]), policies=policies, models={"taggers": Chaser()})
    assert trainer.pretrained == ["policy 'taggers' is frozen as given (a model of your own)"]
    result = trainer.train(num_iterations=2)
    rollout = trainer.buffers["taggers"]
    logits, _ = Chaser()(rollout.obs.reshape(-1, 6))
    top = logits.topk(2).values
    clear = top[:, 0] - top[:, 1] > 10  # (one move toward the runner stands out: sampled near certainly)
    assert clear.sum() > 20
    assert torch.equal(rollout.actions.reshape(-1)[clear], logits.argmax(1)[clear])
    assert "return/taggers" in result.metrics and "policy_loss/taggers" not in result.metrics
    trainer.save(tmp_path / "scripted.pt")
    again = wb.Trainer(wb.make("tag_grid", num_envs=8, target="cpu", **GRID), grid_config(frozen=["taggers"]),
                       policies=policies, models={"taggers": Chaser()})
    again.load(tmp_path / "scripted.pt")
    assert again.iteration == 2
    again.train(num_iterations=1)
    assert again.iteration == 3
    with pytest.raises(PolicyMapError, match=r"policy 'taggers': the model has no parameters \(a scripted policy\), "
                                             r"and the policy is trained: list it in frozen"):
        wb.Trainer(env, grid_config(), policies=policies, models={"taggers": Chaser()})


def test_ddpg_plays_a_scripted_actor_without_parameters_when_frozen(probe_env):
    from workbench.learn.algorithms.ddpg import DDPGAgent
    from workbench.learn.policies import QCritic

    class Still(torch.nn.Module):  # (the action 0 in every dimension: Box(-1, 1))
        def forward(self, obs):
            return torch.zeros(obs.shape[0], 2, device=obs.device)

    config = wb.DDPGConfig(env="probe_frozen", num_envs=4, rollout_length=2, learning_starts=16, batch_size=8,
                           buffer_size=64, updates_per_rollout=2, hidden_sizes=[16], target="cpu", cpu_threads=1,
                           total_env_steps=4 * 2 * 4, policies={"first": [0], "others": [1, 2]}, frozen=["first"],
                           exploration_noise=0.0)
    env = wb.make("probe_frozen", num_envs=4, target="cpu")
    trainer = wb.Trainer(env, config, policies=config.policies,
                         models={"first": DDPGAgent(Still(), QCritic(4, 2, (8,)))})
    result = trainer.train()
    assert torch.equal(env.store["action"][:, 0], torch.zeros_like(env.store["action"][:, 0]))
    assert "critic_loss/others" in result.metrics and "critic_loss/first" not in result.metrics


@gpu_only
def test_scripted_and_frozen_ddpg_policies_replay_from_cuda_graphs(probe_env):
    env = wb.make("tag_grid", num_envs=64, target="cuda", **GRID)
    trainer = wb.Trainer(env, grid_config(target="cuda", num_envs=64, frozen=["taggers"],
                                          total_env_steps=64 * 8 * 4),
                         policies={"taggers": [0], "runners": [1, 2]}, models={"taggers": Chaser()})
    trainer.train(num_iterations=4)
    assert trainer.graph.state == "replay" and trainer.optimizers["taggers"].fused is None
    config = wb.DDPGConfig(env="probe_frozen", num_envs=64, rollout_length=2, learning_starts=128, batch_size=32,
                           buffer_size=1024, hidden_sizes=[16], target="cuda", total_env_steps=64 * 2 * 5,
                           policies={"first": [0], "others": [1, 2]}, frozen=["first"])
    ddpg = wb.make_trainer(config)
    before = weights(ddpg.models["first"])
    ddpg.train()  # (one iteration fills "others"' 128 transitions: four learn, the last three replayed)
    assert ddpg.graph.state == "replay" and same(weights(ddpg.models["first"]), before)


def test_a_sweep_against_a_frozen_team_ranks_by_the_learning_team_without_a_warning(recwarn):
    from workbench.errors import WorkbenchWarning
    trainer = wb.make_trainer(grid_config(sweep={"lr": [1e-3, 3e-3]}, frozen=["runners"]))
    assert not [w for w in recwarn if issubclass(w.category, WorkbenchWarning)]
    result = trainer.train(num_iterations=2)  # (episodes of 12 steps end in the second rollout of 8)
    for member in result.metrics["members"]:
        assert member["mean_return"] == member["return/taggers"] != member["return/runners"]
    with pytest.warns(WorkbenchWarning, match="rank_by is mean_return"):
        wb.make_trainer(grid_config(sweep={"lr": [1e-3, 3e-3]}))


def test_checks_that_name_the_first_fix_that_helps_and_notes_for_a_frozen_team(source, tmp_path, recwarn):
    from workbench.errors import WorkbenchWarning
    run, _ = source
    acro = tmp_path / "acro"
    wb.train(wb.PPOConfig(env="acrobot", num_envs=4, rollout_length=8, num_minibatches=2, target="cpu",
                          total_env_steps=32, run_dir=str(acro), progress=False))
    with pytest.raises(CheckpointError, match=r"trained env 'acrobot', whose \w+ is .*this run's env 'tag_grid'"):
        wb.make_trainer(grid_config(init_from={"runners": str(acro)}))
    # a shared body defaults to relu: its own mismatch is named first, not the activation it brings along
    with pytest.raises(CheckpointError, match="shared_body=False, this run's policy 'runners' has True: set shared_bo"):
        wb.make_trainer(grid_config(normalize_obs=True, shared_body=True, init_from={"runners": str(run)}))
    alone = wb.make_trainer(grid_config(frozen=["runners"]))  # (no source: its initial weights, said)
    assert alone.pretrained == ["policy 'runners' is frozen at its initial weights (seed 0); init_from={runners: RUN} "
                                "would start it from a trained run"]
    env = wb.make("tag_grid", num_envs=8, target="cpu", **GRID)
    with pytest.raises(ConfigError, match="'shared' is the one policy of every agent that a Trainer without policies"):
        wb.Trainer(env, grid_config(frozen=["runners"]))
    # PPO splits only the learning policies' batches: 3 minibatches of the runners' 192 samples
    three = {**GRID, "num_runners": 3}
    trainer = wb.make_trainer(grid_config(env_params=three, num_minibatches=3, frozen=["taggers"]))
    assert trainer.train().iterations == 3
    with pytest.warns(WorkbenchWarning, match="rank_by is 'return/runners', the return of a frozen policy"):
        wb.make_trainer(grid_config(seeds=2, rank_by="return/runners", frozen=["runners"]))


def test_the_panel_takes_both_fields_as_python_values_or_text():
    pytest.importorskip("ipywidgets")  # (the notebook extra)
    from workbench.widgets import TrainingPanel
    panel = TrainingPanel(env="tag_grid")
    panel.set(frozen=["runners"], centralised_critic=["runners"], init_from={"runners": "runs/a"})
    config = panel.spec().config
    assert config.frozen == ("runners",) and config.centralised_critic == ("runners",)
    assert config.init_from == {"runners": "runs/a"}
    with pytest.raises(ConfigError, match=r"init_from: cannot read 'runs/a' as dict \(e.g. {runners: runs/<run>}\)"):
        panel.set(frozen="'runners'", init_from="runs/a")
        panel.spec()
    panel.set(frozen="'runners'", init_from="")
    assert panel.spec().config.frozen == ("runners",)
