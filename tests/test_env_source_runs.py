"""A run of an env defined in this process (wb.register, %%warpenv) outlives the process: its checkpoint
keeps the env's source, so a fresh process resumes, evaluates and replays it; a name registered here
with another source is refused with what differs; wb.train(NAME) of a registered env without a config
file trains it with a default config."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import workbench as wb
from workbench import cli
from workbench.learn import config as cfg
from workbench.learn import runs
from workbench.learn.runs import ResumeError
from workbench.runtime import registry

E, T = 8, 8
SMALL = dict(target="cpu", num_envs=E, rollout_length=T, update_epochs=1, num_minibatches=2, hidden_sizes=[16, 16],
             seed=5, cpu_threads=1, log_every=1, progress=False)

KEEPAWAY = textwrap.dedent('''
    """Keep-away on a line: one agent steps left, stays or steps right, away from a drifting chaser."""
    from workbench.envdef import Box, Discrete, per_env
    from workbench.rng import uniform_range

    PARAMS = dict(half_width=5.0, max_steps=16)
    NUM_AGENTS = 1
    MAX_STEPS = "max_steps"
    OBSERVATION = Box(shape=(2,))
    ACTION = Discrete(3)
    STATE = dict(x=per_env(), chaser=per_env())

    def reset(env, key, x, chaser):
        x[env] = uniform_range(key, 0, -half_width, half_width)
        chaser[env] = uniform_range(key, 1, -half_width, half_width)

    def step(env, agent, action, x, chaser, reward):
        x[env] = min(max(x[env] + action[env, agent] - 1, -half_width), half_width)
        chaser[env] += 0.5 if x[env] > chaser[env] else -0.5
        reward[env, agent] = abs(x[env] - chaser[env]) / half_width

    def observe(env, agent, x, chaser, obs):
        obs[env, agent, 0] = x[env] / half_width
        obs[env, agent, 1] = (chaser[env] - x[env]) / half_width
''')

FRESH = textwrap.dedent('''
    import json, sys
    import workbench as wb
    from workbench import cli
    run = sys.argv[1]
    assert "keepaway" not in wb.env_names()  # nothing registered it in this process
    codes = [cli.main(["evaluate", run, "--episodes", "1", "--num-envs", "2", "--json", run + "/eval.json"])]
    animation = wb.replay(run, max_steps=6)
    print(json.dumps({"codes": codes, "steps": animation.total_steps, "envs": wb.env_names()}))
''')


def _python(*args, timeout=600):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


@pytest.fixture(scope="module")
def keepaway_run(tmp_path_factory):
    """keepaway registered here and trained 2 iterations with its default config into a run folder."""
    run = tmp_path_factory.mktemp("keepaway") / "run"
    wb.register("keepaway", KEEPAWAY)
    trainer, _ = wb.train("keepaway", run_dir=str(run), total_env_steps=2 * E * T, **SMALL)
    assert trainer.iteration == 2
    return run


def test_a_registered_env_trains_with_a_default_config(keepaway_run):
    saved = cfg.load_yaml(keepaway_run / "config.yaml")
    assert saved.algorithm == "ppo" and saved.env == "keepaway" and saved.normalize_obs
    assert saved.ent_coef == 0.01 and saved.update_epochs == 1 and saved.num_envs == E  # the changes won
    assert (keepaway_run / "env_source.py").read_text() == KEEPAWAY
    kept = torch.load(keepaway_run / "checkpoint.pt", weights_only=False)["env_source"]
    assert kept["name"] == "keepaway" and kept["source"] == KEEPAWAY and kept["language"] == "python"


def test_a_fresh_process_resumes_evaluates_and_replays_the_run(keepaway_run):
    resumed = _python("-m", "workbench", "train", "--resume", str(keepaway_run), "--total-env-steps", str(3 * E * T))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert torch.load(keepaway_run / "checkpoint.pt", weights_only=False)["iteration"] == 3
    fresh = _python("-c", FRESH, str(keepaway_run))
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    out = json.loads(fresh.stdout.strip().splitlines()[-1])
    assert out["codes"] == [0] and 1 <= out["steps"] <= 6 and "keepaway" in out["envs"]
    results = json.loads((keepaway_run / "eval.json").read_text())
    assert "trained" in results


def test_another_source_under_the_name_is_refused(keepaway_run, capsys):
    changed = KEEPAWAY.replace("chaser[env] += 0.5", "chaser[env] += 0.75")
    line = KEEPAWAY.splitlines().index("    chaser[env] += 0.5 if x[env] > chaser[env] else -0.5") + 1
    wb.register("keepaway", changed)
    try:
        with pytest.raises(ResumeError) as info:
            wb.train(resume=keepaway_run, total_env_steps=4 * E * T, progress=False)
        text = str(info.value)
        assert "trained env 'keepaway' from another source than the 'keepaway' registered in this process" in text
        assert f"first at line {line}: 'chaser[env] += 0.75 if" in text
        assert f"wb.register('keepaway', open('{keepaway_run / 'env_source.py'}').read())" in text
        assert cli.main(["evaluate", str(keepaway_run)]) == 2
        assert "another source" in capsys.readouterr().err
        with pytest.raises(ResumeError, match="another source"):
            wb.replay(keepaway_run, max_steps=2)
    finally:
        wb.register("keepaway", KEEPAWAY)
    assert runs.load_policy(keepaway_run, num_envs=2).iteration >= 2  # the run's own source is accepted again


def test_a_warpenv_cell_run_loads_after_the_cell_is_gone(tmp_path):
    from workbench.notebook import magic
    magic.warpenv("keepaway_cell", KEEPAWAY, target="cpu", agents=None, check=False)
    run = tmp_path / "run"
    wb.train("keepaway_cell", run_dir=str(run), total_env_steps=2 * E * T, **SMALL)
    registry._REGISTRY.pop("keepaway_cell")  # as a restarted notebook kernel
    magic.clear_cache()
    trainer = runs.load_policy(run, num_envs=2)
    assert trainer.env.name == "keepaway_cell" and registry.lookup("keepaway_cell").source == "\n" + KEEPAWAY


def test_default_config_follows_the_shipped_conventions():
    wb.register("keepaway_box", KEEPAWAY.replace("ACTION = Discrete(3)", "ACTION = Box(-1.0, 1.0, (1,))")
                .replace("action[env, agent] - 1", "action[env, agent, 0]"))
    box = runs.default_config("keepaway_box")
    assert (box.algorithm, box.ent_coef, box.num_envs, box.rollout_length, box.normalize_obs) == \
        ("ppo", 0.0, 64, 64, True)
    assert (box.normalize_reward, box.update_epochs, box.num_minibatches) == (True, 10, 32)  # (CleanRL's continuous)
    assert not runs.default_config("keepaway_box", "a2c").normalize_reward  # (A2C drove a Box mean off its bounds)
    wb.register("keepaway", KEEPAWAY)
    assert not runs.default_config("keepaway").normalize_reward  # (discrete actions)
    ddpg = runs.default_config("keepaway_box", "ddpg")
    pendulum = cfg.load_yaml(runs.resolve_config("pendulum"))
    for key in ("rollout_length", "updates_per_rollout", "batch_size", "learning_starts", "hidden_sizes"):
        assert getattr(ddpg, key) == getattr(pendulum, key), key
    team_source = KEEPAWAY.replace("NUM_AGENTS = 1", "NUM_AGENTS = 3").replace(  # (one agent moves the pieces)
        "def step(env, agent, action, x, chaser, reward):\n", "def step(env, agent, action, x, chaser, reward):\n"
        "    if agent != 0:\n        return\n")
    wb.register("keepaway_team", team_source)
    team = runs.default_config("keepaway_team")
    tag = cfg.load_yaml(runs.resolve_config("tag_grid"))
    assert (team.num_envs, team.rollout_length) == (tag.num_envs, tag.rollout_length)
    with pytest.raises(cfg.ConfigError, match=r"no config file 'no_such_env'; shipped configs: .*wb.train\(ENV_NAME\)"):
        wb.train("no_such_env")


def test_another_algorithm_for_a_shipped_config_starts_from_its_own_defaults(recwarn):
    ppo = runs.load_config("pendulum", "ppo")  # (pendulum.yaml is DDPG's)
    assert ppo == cfg.replace(runs.default_config("pendulum", "ppo"), target_return=-200.0)
    assert ppo.normalize_reward and ppo.num_envs == 64
    assert not [w for w in recwarn if "left behind" in str(w.message)]
    assert runs.load_config("pendulum", "ddpg") == cfg.load_yaml(runs.resolve_config("pendulum"))


def test_a_shipped_name_gives_way_to_the_run_kept_source():
    shipped = registry.lookup("cartpole")
    try:
        kept = {"name": "cartpole", "source": KEEPAWAY, "language": "python", "params": {"max_steps": 8}}
        with pytest.warns(UserWarning, match="the run's env 'cartpole' is a changed source of the shipped env"):
            assert registry.register_stored(kept) is None
        assert registry.lookup("cartpole").source == KEEPAWAY
        assert registry.definition("cartpole").max_steps == 8
        # another run's version replaces one that a run registered (not one the user registered)
        assert registry.register_stored({**kept, "params": {"max_steps": 9}}) is None
        assert registry.definition("cartpole").max_steps == 9
        assert registry.shipped_for_run("cartpole") is None  # a run of the shipped env puts it back
        assert registry.lookup("cartpole") == shipped
        wb.register("cartpole", shipped.source)  # the shipped text registered again: a shipped run still loads
        assert registry.shipped_for_run("cartpole") is None
        registry._REGISTRY["cartpole"] = shipped
        wb.register("keepaway_user", KEEPAWAY)
        assert "registration parameters" in registry.register_stored({**kept, "name": "keepaway_user"})
    finally:
        registry._REGISTRY["cartpole"] = shipped


def test_a_shipped_env_run_after_a_changed_one_plays_the_shipped_env(tmp_path):
    """Before: loading a run of a changed 'cartpole' left it registered, and a run of the shipped
    CartPole loaded after it replayed on the changed env (a 37-step time limit) without a word."""
    shipped = registry.lookup("cartpole")
    small = {**SMALL, "total_env_steps": 2 * E * T}
    wb.train("cartpole", run_dir=str(tmp_path / "shipped"), **small)
    try:
        with pytest.warns(UserWarning, match="replaces the shipped env"):
            wb.register("cartpole", shipped.source.replace("max_steps=500", "max_steps=37"))
        wb.train("cartpole", run_dir=str(tmp_path / "changed"), **small)
        with pytest.raises(ResumeError, match=r"trained env 'cartpole' from another source than the 'cartpole' "
                                              r"registered in this process \(it trained the shipped env, which "
                                              r"wb.register replaced in this process\)"):
            runs.load_policy(tmp_path / "shipped", num_envs=2)
        registry._REGISTRY["cartpole"] = shipped  # as a new process
        with pytest.warns(UserWarning, match="replaces the shipped one in this process"):
            assert runs.load_policy(tmp_path / "changed", num_envs=2).env.definition.max_steps == 37
        assert runs.load_policy(tmp_path / "shipped", num_envs=2).env.definition.max_steps == 500
        assert registry.lookup("cartpole") == shipped
    finally:
        registry._REGISTRY["cartpole"] = shipped


def test_a_source_registered_under_a_shipped_name_warns_and_trains_with_the_default_config(tmp_path, monkeypatch):
    shipped = registry.lookup("cartpole")
    monkeypatch.chdir(tmp_path)  # (no configs/ folder here: configs/cartpole.yaml names the shipped config)
    try:
        with pytest.warns(UserWarning, match=r"wb.register\('cartpole'\) replaces the shipped env 'cartpole' in this "
                                             r"process: .* the default config \(not configs/cartpole.yaml"):
            wb.register("cartpole", KEEPAWAY)
        assert runs.load_config("cartpole") == runs.default_config("cartpole")  # not CartPole's tuned file
        assert runs.load_config("cartpole").target_return is None
        assert runs.load_config("configs/cartpole.yaml") == runs.default_config("cartpole")  # (the path, the same)
    finally:
        registry._REGISTRY["cartpole"] = shipped
    assert runs.load_config("cartpole").target_return == 475.0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wb.register("cartpole", shipped.source)  # the shipped source itself: nothing replaced
    assert runs.load_config("cartpole").target_return == 475.0
    registry._REGISTRY["cartpole"] = shipped


def test_a_shipped_env_run_loaded_after_its_source_changed_warns(tmp_path):
    """Before: a run of a shipped env kept no fingerprint of its source, so after an upgrade (or an edit
    of envs/cartpole.py in an editable install) resume, evaluate and replay ran on the changed env
    without a word."""
    import dataclasses
    import warnings
    shipped = registry.lookup("cartpole")
    wb.train("cartpole", run_dir=str(tmp_path / "run"), **{**SMALL, "total_env_steps": 2 * E * T})
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["env_digest"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runs.load_policy(tmp_path / "run", num_envs=2).env.definition.max_steps == 500
    try:  # as a new installation whose envs/cartpole.py changed
        registry._REGISTRY["cartpole"] = dataclasses.replace(
            shipped, source=shipped.source.replace("max_steps=500", "max_steps=37"))
        with pytest.warns(UserWarning, match=r"trained env 'cartpole' from another version of its source than this "
                                             r"installation's \(an upgrade, or an edit of envs/cartpole.py\)"):
            assert runs.load_policy(tmp_path / "run", num_envs=2).env.definition.max_steps == 37
    finally:
        registry._REGISTRY["cartpole"] = shipped


def test_the_cli_trains_and_checks_an_env_from_its_source_file(tmp_path, monkeypatch, capsys):
    """Before: `train my_env.py` read the source as YAML ("not valid YAML at line 1"), `check my_env.py`
    said "unknown env"."""
    from test_learner_edges import REACH  # (a Box env of one agent)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reach_file.py").write_text(REACH)
    assert cli.main(["check", "reach_file.py", "--targets", "cpu", "--num-envs", "2", "--steps", "8"]) == 0
    assert "check_env('reach_file') passed on ['cpu']" in capsys.readouterr().out
    assert cli.main(["envs", "reach_file.py"]) == 0
    assert capsys.readouterr().out.startswith("reach_file: ")
    assert cli.main(["train", "reach_file.py", "--target", "cpu", "--num-envs", "8", "--total-env-steps", "512",
                     "--run-dir", "run"]) in (0, 1)
    assert "training reach_file with PPO" in capsys.readouterr().out
    assert (tmp_path / "run" / "env_source.py").read_text() == REACH
    assert cli.main(["evaluate", "run", "--num-envs", "2", "--random"]) == 0
    assert cli.main(["train", "--env", "reach_file.py", "--target", "cpu", "--num-envs", "8", "--total-env-steps",
                     "256", "--run-dir", "run2"]) in (0, 1)
    assert "training reach_file with PPO" in capsys.readouterr().out
    (tmp_path / "reach-file.py").write_text(REACH)
    assert cli.main(["check", "reach-file.py"]) == 2
    assert "an env's file name is its name, which must be a Python identifier: rename it reach_file.py" \
        in capsys.readouterr().err
    assert cli.main(["train", "missing.yaml"]) == 2
    assert "an env's source file trains with a default config (python -m workbench train my_env.py)" \
        in capsys.readouterr().err


def test_an_env_files_run_resumes_from_the_file_with_its_own_settings(tmp_path, monkeypatch):
    """A run trained before the file's default config changed (here: rewards unscaled, 4 x 4 minibatches)
    resumes from `train my_env.py --resume RUN`: the file names the env, the run keeps its settings."""
    from test_learner_edges import REACH
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reach_resumed.py").write_text(REACH)
    older = dict(normalize_reward=False, update_epochs=4, num_minibatches=4, num_envs=8, target="cpu", progress=False)
    wb.train("reach_resumed.py", run_dir="run", total_env_steps=8 * 64, **older)
    trainer, result = wb.train("reach_resumed.py", resume="run", total_env_steps=2 * 8 * 64, progress=False)
    assert result.env_steps == 2 * 8 * 64
    assert (trainer.config.normalize_reward, trainer.config.update_epochs, trainer.config.num_minibatches) == \
        (False, 4, 4)
    assert cli.main(["train", "reach_resumed.py", "--resume", "run", "--total-env-steps", str(3 * 8 * 64)]) in (0, 1)


def test_a_config_file_names_an_env_file_beside_it(tmp_path, monkeypatch, capsys):
    """Before: `env: my_env.py` in a YAML config, or `train cfg.yaml --env my_env.py`, gave "unknown env"."""
    from test_learner_edges import REACH
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "reach_cfg.py").write_text(REACH)
    (tmp_path / "exp" / "tuned.yaml").write_text("env: reach_cfg.py\nalgorithm: ppo\nnum_envs: 8\nrollout_length: 8\n"
                                                 "num_minibatches: 2\ntarget: cpu\ntotal_env_steps: 128\n")
    assert cli.main(["train", "exp/tuned.yaml", "--run-dir", "run"]) in (0, 1)  # (the path: from the config's folder)
    assert "training reach_cfg with PPO" in capsys.readouterr().out
    assert cfg.load_yaml(tmp_path / "run" / "config.yaml").env == "reach_cfg"
    assert cli.main(["train", "--env", "exp/reach_cfg.py", "--target", "cpu", "--num-envs", "8",
                     "--total-env-steps", "128", "--run-dir", "run2"]) in (0, 1)  # (from the working folder)
    assert "training reach_cfg with" in capsys.readouterr().out
    # another env's config would train this env with the other's target_return and tuning
    assert cli.main(["train", "cartpole", "--env", "exp/reach_cfg.py", "--run-dir", "run3"]) == 2
    assert "config 'cartpole' is tuned for env 'cartpole' (its target_return, learning rate and the rest): --env " \
           "exp/reach_cfg.py (env= from Python) would train 'exp/reach_cfg.py' with them" in capsys.readouterr().err
    (tmp_path / "exp" / "no_env.yaml").write_text("num_envs: 8\nrollout_length: 8\nnum_minibatches: 2\ntarget: cpu\n"
                                                  "total_env_steps: 128\n")
    assert cli.main(["train", "exp/no_env.yaml", "--run-dir", "run4"]) == 2  # (before: CartPole, silently)
    assert "'exp/no_env.yaml' names no env: add `env: NAME` to it" in capsys.readouterr().err
    assert cli.main(["train", "exp/no_env.yaml", "--env", "exp/reach_cfg.py", "--run-dir", "run4"]) in (0, 1)
    assert cfg.load_yaml(tmp_path / "run4" / "config.yaml").env == "reach_cfg"
    assert not (tmp_path / "run3").exists()
    (tmp_path / "exp" / "gone.yaml").write_text("env: nowhere.py\ntarget: cpu\n")
    assert cli.main(["train", "exp/gone.yaml"]) == 2
    assert "env: 'nowhere.py' names an env source file, which is not there" in capsys.readouterr().err


def test_a_resume_takes_a_config_file_of_changes_naming_no_env(tmp_path, monkeypatch):
    """A resumed run keeps its env: a file holding only the changes (log_every: 3) goes on as them (the
    no-env refusal is for a new run's config)."""
    monkeypatch.chdir(tmp_path)
    wb.train("cartpole", run_dir="first", total_env_steps=512, num_envs=8, rollout_length=16, num_minibatches=2,
             progress=False, target="cpu")
    (tmp_path / "changes.yaml").write_text("log_every: 3\n")
    trainer, _ = wb.train("changes.yaml", resume="first", total_env_steps=1024, run_dir="fork", progress=False)
    assert trainer.config.env == "cartpole" and trainer.config.log_every == 3
