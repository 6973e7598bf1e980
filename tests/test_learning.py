"""Learning, not just running: short CPU trainings whose final policies must clearly beat the uniformly
random policy, both measured by workbench.learn.evaluate in the same test from the same starts.

Fixed seeds and one thread (torch and numba) make every number here the same on every run on the CPU
target; the margins are a fraction of the gap these short runs reach. The shipped configs' full runs
(and their figures) are in docs/learning.md (bench/learning_runs.py).
"""
import math
import re

import numba
import pytest
import torch

import workbench as wb
from workbench import cli
from workbench.learn.evaluate import EvaluationError, compare, evaluate, format_comparison, tag_side_labels
from workbench.learn.streams import MemberStreams, random_policy_site


@pytest.fixture(autouse=True)
def one_thread():
    """Deterministic float sums, and no oversubscription on a small shared machine."""
    torch_threads, numba_threads = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    yield
    torch.set_num_threads(torch_threads)
    numba.set_num_threads(numba_threads)


def train_then_compare(config):
    """(trained return, random-policy return, the whole comparison) from the same starts."""
    trainer = wb.make_trainer(config)
    trainer.train()
    results = compare(trainer, seed=7)
    return results["trained"]["return/shared"], results["random"]["return/shared"], results


def test_ppo_acrobot_far_above_random():
    config = wb.PPOConfig(env="acrobot", num_envs=64, rollout_length=64, num_minibatches=4, update_epochs=4,
                          lr=1e-3, normalize_obs=True, total_env_steps=64 * 64 * 50, log_every=5, target="cpu",
                          seed=0)
    trained, random, results = train_then_compare(config)
    # random play rarely swings the tip up within the 500 steps (about -490); this run reaches about -150
    assert random < -400
    assert trained > random + 200, results


def test_ddpg_pendulum_above_random():
    config = wb.DDPGConfig(env="pendulum", num_envs=16, rollout_length=1, updates_per_rollout=8, batch_size=128,
                           learning_starts=1000, buffer_size=50_000, exploration_noise=0.1, hidden_sizes=(64, 64),
                           actor_lr=1e-3, critic_lr=1e-3, max_grad_norm=0, total_env_steps=16 * 400, log_every=100,
                           target="cpu", seed=0)
    trained, random, results = train_then_compare(config)
    assert random < -1000
    assert trained > random + 400, results


def test_ppo_learns_pendulum_with_rewards_scaled():
    """Pendulum's rewards (-16 to 0 a step, returns near -1000 at gamma 0.99) leave an unscaled value
    function far behind: this run reaches about -235; without normalize_reward it stays near -1160."""
    config = wb.PPOConfig(env="pendulum", num_envs=16, rollout_length=256, num_minibatches=16, update_epochs=10,
                          lr=1e-3, gamma=0.99, normalize_obs=True, normalize_reward=True,
                          total_env_steps=16 * 256 * 25, log_every=5, target="cpu", seed=0)
    trained, random, results = train_then_compare(config)
    assert random < -1000
    assert trained > random + 400, results


TAG_GRID = dict(num_taggers=1, num_runners=3, grid_length=9, episode_length=30, tag_penalty_for_runner=10.0)


def tag_grid_config(**kw):
    base = dict(env="tag_grid", env_params=TAG_GRID, num_envs=64, rollout_length=32, num_minibatches=4,
                update_epochs=4, lr=1e-3, ent_coef=0.0, log_every=10, target="cpu", seed=0)
    return wb.PPOConfig(**{**base, **kw})


def test_tag_metrics_agree_with_a_count_of_tag_penalties():
    """The device metrics (in-game flags at each episode's end) against a host count of the steps on
    which a runner paid the tag penalty, over the same starts and the same random actions."""
    trainer = wb.make_trainer(tag_grid_config(total_env_steps=64))
    report = evaluate(trainer, random_policies=("taggers", "runners"), seed=3)
    env, runners = trainer.env, slice(1, 4)
    env.reset(seed=3)
    tagged = torch.zeros(env.num_envs)
    finished = torch.zeros(env.num_envs)
    streams = MemberStreams([3], env.device)  # (evaluate's random play: a stream per member, keyed by the seed)
    for _ in range(TAG_GRID["episode_length"]):
        uniform = streams.uniform((env.data["action"].numel(),), random_policy_site())
        streams.advance()
        env.step(env.actions_from_uniform(uniform.reshape(env.data["action"].shape)))
        first = (finished == 0).float()
        tagged += (env.data["reward"][:, runners] < -5).sum(1).float() * first
        finished += env.data["done"].float()
    assert bool((finished == 1).all())
    assert report["episodes"] == env.num_envs
    assert report["runners_tagged"] == pytest.approx(float(tagged.mean()), abs=1e-6)
    assert report["tag_rate"] == pytest.approx(float(tagged.mean()) / 3, abs=1e-6)
    assert report["runner_survival"] == pytest.approx(1 - float(tagged.mean()) / 3, abs=1e-6)
    sem = float(tagged.std() / math.sqrt(env.num_envs))  # (one episode a replica)
    assert report["stderr"]["runners_tagged"] == pytest.approx(sem, rel=1e-4) and sem > 0
    assert report["stderr"]["tag_rate"] == pytest.approx(sem / 3, rel=1e-4)
    assert 0.05 < report["tag_rate"] < 0.5  # random play does tag, and not everyone


def test_tag_grid_trained_teams_beat_random_ones():
    trainer = wb.make_trainer(tag_grid_config(total_env_steps=64 * 32 * 80))
    before = compare(trainer, seed=7, episodes=2)
    trainer.train()
    after = compare(trainer, seed=7, episodes=2)
    trained, random_taggers = after["trained"]["tag_rate"], after["random taggers"]["tag_rate"]
    assert after["trained"]["episodes"] == 2 * 64
    assert 0.0 <= random_taggers <= trained <= 1.0
    assert trained > random_taggers + 0.2, after
    assert trained > before["trained"]["tag_rate"] + 0.15, (before, after)


def test_mappo_learns_tag_at_least_as_well_as_independent_ppo():
    """A centralised critic per team (MAPPO) against independent PPO, same seed and budget: the
    trained tagger's tag rate against its own trained runners."""
    rates = {}
    for name, central in (("ppo", ()), ("mappo", ("all",))):
        trainer = wb.make_trainer(tag_grid_config(total_env_steps=64 * 32 * 50, centralised_critic=central))
        assert type(trainer.models["taggers"]).__name__ == ("CentralisedActorCritic" if central else "ActorCritic")
        trainer.train()
        rates[name] = compare(trainer, seed=7, episodes=2)["trained"]["tag_rate"]
    assert rates["mappo"] >= rates["ppo"] - 0.05, rates
    assert rates["mappo"] > 0.3, rates


def test_evaluate_refuses_bad_requests_by_name(tmp_path, capsys):
    trainer = wb.make_trainer(tag_grid_config(total_env_steps=64))
    unknown = r"random_policies \(--random\) names \['tagger'\].*\['taggers', 'runners'\]"
    with pytest.raises(EvaluationError, match=unknown):
        evaluate(trainer, random_policies=("tagger",))
    with pytest.raises(EvaluationError, match=r"episodes \(--episodes\) must be >= 1, got 0"):
        evaluate(trainer, episodes=0)
    trainer.save(tmp_path / "checkpoint.pt")
    assert cli.main(["evaluate", str(tmp_path), "--random", "tagger"]) == 2
    assert "error: random_policies (--random) names ['tagger']" in capsys.readouterr().err
    assert cli.main(["evaluate", str(tmp_path / "missing")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "stopped_early").mkdir()  # a run folder before its first checkpoint
    assert cli.main(["evaluate", str(tmp_path / "stopped_early")]) == 2
    assert "stopped_early' has no checkpoint.pt yet" in capsys.readouterr().err


@pytest.mark.parametrize("policies, lines", [
    (None, ["taggers: tag rate", "runners: survival"]),
    ({"chasers": [0], "prey": [1, 2, 3]}, ["taggers: tag rate", "runners: survival"]),
    ({"chaser": [0], "prey_a": [1], "prey_b": [2, 3]}, ["taggers: tag rate"]),
    ({"shared": [0, 1, 2, 3]}, []),
])
def test_evaluate_compares_each_side_with_random_whatever_the_policies_are_called(policies, lines):
    """The trained-against-random lines follow which agents each policy controls, not its name; a
    side split over policies gets no line from compare (each policy is randomised alone), and a
    policy playing both sides gives neither line."""
    trainer = wb.Trainer(wb.make("tag_grid", num_envs=8, target="cpu", **TAG_GRID),
                         tag_grid_config(num_envs=8, total_env_steps=64),
                         policies=policies or {"taggers": [0], "runners": [1, 2, 3]})
    results = compare(trainer, seed=7)
    text = format_comparison(results, tag_side_labels(trainer))
    said = [line for line in text.splitlines() if line.startswith(("taggers:", "runners:"))]
    assert [line.split(" trained")[0].split(" ± ")[0].rsplit(" ", 1)[0] for line in said] == lines, text
    if lines:
        side = tag_side_labels(trainer)["taggers"]
        rate, error = results[side]["tag_rate"], results[side]["stderr"]["tag_rate"]
        assert f"{rate:.3f} ± {error:.3f} for random taggers" in text


def test_evaluate_plays_other_env_parameters_that_keep_the_agents(tmp_path, capsys):
    trainer = wb.Trainer(wb.make("tag_grid", num_envs=8, target="cpu", **TAG_GRID),
                         tag_grid_config(num_envs=8, total_env_steps=64))
    trainer.save(tmp_path / "checkpoint.pt")
    run = ["evaluate", str(tmp_path), "--random", "--num-envs", "8"]
    assert cli.main([*run, "--env-param", "episode_length=7"]) == 0
    assert re.search(r"^steps +7$", capsys.readouterr().out, re.M)  # (one episode, now 7 steps long)
    assert cli.main([*run, "--env-param", f"num_runners={TAG_GRID['num_runners'] + 2}"]) == 2
    err = capsys.readouterr().err
    assert "gives tag_grid num_agents=" in err and f"learned with {trainer.env.num_agents}" in err
    assert cli.main([*run, "--env-param", "episode_length"]) == 2
    assert "--env-param takes NAME=VALUE" in capsys.readouterr().err
    assert cli.main([*run, "--env-param", "episode_length=[7"]) == 2
    assert "--env-param episode_length=[7: the value '[7' is not valid YAML" in capsys.readouterr().err


def test_load_policy_and_replay_play_other_env_parameters_that_keep_the_agents(tmp_path):
    trainer = wb.Trainer(wb.make("tag_grid", num_envs=8, target="cpu", **TAG_GRID),
                         tag_grid_config(num_envs=8, total_env_steps=64))
    trainer.save(tmp_path / "checkpoint.pt")
    loaded = wb.load_policy(tmp_path, env_params={"episode_length": 7})
    assert loaded.env.definition.params["episode_length"] == 7
    assert loaded.config.env_params["num_runners"] == TAG_GRID["num_runners"]  # (the run's others kept)
    animation = wb.replay(tmp_path, env_params={"episode_length": 5}, max_frames=20)
    assert animation.total_steps == 5  # (an episode of 5 steps; 30 at the run's parameters)
    from workbench.learn.config import ConfigError
    with pytest.raises(ConfigError, match="load_policy changes only what keeps the agents"):
        wb.load_policy(tmp_path, env_params={"num_runners": TAG_GRID["num_runners"] + 1})


def test_evaluate_from_the_cli_names_a_split_side_randomised_together(tmp_path, capsys):
    trainer = wb.Trainer(wb.make("tag_grid", num_envs=8, target="cpu", **TAG_GRID),
                         tag_grid_config(num_envs=8, total_env_steps=64),
                         policies={"chaser": [0], "prey_a": [1], "prey_b": [2, 3]})
    trainer.save(tmp_path / "checkpoint.pt")
    assert cli.main(["evaluate", str(tmp_path), "--random", "prey_b", "prey_a", "--num-envs", "8"]) == 0
    out = capsys.readouterr().out
    assert "random prey_a prey_b" in out and "runners: survival" in out and "taggers:" not in out


def test_evaluate_says_when_steps_cut_episodes_short_and_reports_a_population_s_members(tmp_path, capsys):
    """Before: a small steps counted only the episodes that ended early (a mean of 393 over one
    episode, 498 over 64), silently; a population's members were pooled into one mean; the CLI
    evaluated from the run's own seed, the starts of its first training episodes."""
    from workbench.errors import WorkbenchWarning
    config = wb.PPOConfig(env="cartpole", num_envs=8, rollout_length=8, num_minibatches=2, target="cpu",
                          total_env_steps=8 * 8 * 2, progress=False)
    trainer = wb.make_trainer(config)
    with pytest.warns(WorkbenchWarning, match=r"evaluate: \d of the 8 episodes asked for ended within steps=12; "
                                              r"the means count only those.*1 x MAX_STEPS = 500"):
        short = evaluate(trainer, steps=12, seed=1)
    assert isinstance(short["episodes"], int) and short["episodes"] < 8
    from workbench.learn import config as cfg
    population = wb.make_trainer(cfg.replace(config, seeds=3))
    report = evaluate(population, seed=1)
    members = report["members"]
    assert len(members) == 3 and all(m["episodes"] == 8 for m in members) and report["episodes"] == 24
    means = [m["return/shared"] for m in members]
    assert report["return/shared"] == pytest.approx(sum(means) / 3)
    spread = math.sqrt(sum((x - sum(means) / 3) ** 2 for x in means) / 2 / 3)
    assert report["stderr"]["return/shared"] == pytest.approx(spread)
    trainer.save(tmp_path / "checkpoint.pt")
    assert cli.main(["evaluate", str(tmp_path), "--random", "--num-envs", "1",
                     "--json", str(tmp_path / "e.json")]) == 0
    assert f"seed {config.seed + 2**20}" in capsys.readouterr().out
    import json

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    saved = json.loads((tmp_path / "e.json").read_text(), parse_constant=refuse)
    assert saved["trained"]["stderr"]["return/shared"] is None and saved["trained"]["episodes"] == 1
    assert saved["trained"]["settings"] == {"seed": config.seed + 2**20, "deterministic": False, "episodes": 1,
                                            "steps": 500, "num_envs": 1, "env_params": None, "member": None,
                                            "member_of": None,
                                            "checkpoint": str((tmp_path / "checkpoint.pt").resolve())}
