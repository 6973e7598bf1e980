"""A sweep of bad inputs, as a new user would try them: each must end in a clear error (its class,
and a message naming the field, the value and the fix), never in a wrong result or a traceback.
docs/errors.md counts the cases. Fast: one small CartPole and one Pendulum serve every env case."""
import errno
import os
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.learn import checkpoint as ckpt
from workbench import cli, cli_options
from workbench.learn import config as cfg
from workbench.learn import runs
from workbench.learn.config_env import check_against_env
from workbench.learn import distributed as wbd
from workbench.runtime import store as store_mod
from workbench.runtime.env import ActionCheck
from workbench.compiler.envdef import Box, Discrete, MultiDiscrete
from workbench.errors import EnvParameterError, InsufficientMemoryError


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Relative run folders ("unused") land in the test's own folder, not the repository."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def cartpole():
    return wb.make("cartpole", num_envs=8, target="cpu")


@pytest.fixture(scope="module")
def pendulum():
    return wb.make("pendulum", num_envs=4, target="cpu")


def raises(error, *keywords):
    """A case's expectation: `error` whose message holds every keyword."""
    return error, keywords


def check(call, expected):
    error, keywords = expected
    with pytest.raises(error) as info:
        call()
    text = str(info.value)
    for word in keywords:
        assert word in text, f"{word!r} not in {text!r}"
    return text


# -- configs ---------------------------------------------------------------------------------------

CONFIG_CASES = {
    "PPOConfig(algorithm='sac')": (lambda: wb.PPOConfig(algorithm="sac"),
                                   raises(cfg.ConfigError, "algorithm", "'sac'", "ppo (PPOConfig)")),
    "A2CConfig(algorithm='ppo')": (lambda: wb.A2CConfig(algorithm="ppo"),
                                   raises(cfg.ConfigError, "A2CConfig.algorithm", "use PPOConfig")),
    "from_dict algorithm sac": (lambda: cfg.from_dict({"algorithm": "sac"}),
                                raises(cfg.ConfigError, "algorithm must be one of", "'sac'")),
    "replace(algorithm='sac')": (lambda: cfg.replace(wb.PPOConfig(), algorithm="sac"),
                                 raises(cfg.ConfigError, "algorithm", "'sac'")),
    "PPOConfig(seed='abc')": (lambda: wb.PPOConfig(seed="abc"), raises(cfg.ConfigError, "PPOConfig.seed", "'abc'")),
    "PPOConfig(num_envs=0)": (lambda: wb.PPOConfig(num_envs=0), raises(cfg.ConfigError, "num_envs", ">= 1")),
    "PPOConfig(gamma=2)": (lambda: wb.PPOConfig(gamma=2.0), raises(cfg.ConfigError, "gamma", "[0, 1]")),
    "PPOConfig(lr=0)": (lambda: wb.PPOConfig(lr=0.0), raises(cfg.ConfigError, "lr", "> 0")),
    "PPOConfig(hidden_sizes='wide')": (lambda: wb.PPOConfig(hidden_sizes="wide"),
                                       raises(cfg.ConfigError, "hidden_sizes", "'wide'")),
    "PPOConfig(hidden_sizes=['a', 'b'])": (lambda: wb.PPOConfig(hidden_sizes=["a", "b"]),
                                           raises(cfg.ConfigError, "hidden_sizes must be a list of whole numbers",
                                                  "'a' is no whole number")),
    "PPOConfig(hidden_sizes=[64.5])": (lambda: wb.PPOConfig(hidden_sizes=[64.5]),
                                       raises(cfg.ConfigError, "hidden_sizes", "64.5 is no whole number")),
    "num_envs given and swept": (lambda: wb.train("cartpole", num_envs=16, sweep={"num_envs": [8, 16]}),
                                 raises(cfg.ConfigError, "sweep names 'num_envs'", "members can differ in are")),
    "DDPGConfig(batch_size > buffer)": (lambda: wb.DDPGConfig(batch_size=10, buffer_size=5),
                                        raises(cfg.ConfigError, "batch_size", "buffer_size=5", "raise buffer_size")),
    "from_dict unknown key": (lambda: cfg.from_dict({"learning_rate": 1.0}),
                              raises(cfg.ConfigError, "unknown key", "learning_rate", "did you mean 'lr'")),
    "DDPGConfig(learning_rate=)": (lambda: wb.DDPGConfig(env="pendulum", learning_rate=1e-3),
                                   raises(cfg.ConfigError, "DDPG learns at 'actor_lr' and 'critic_lr' (for "
                                                           "'learning_rate')")),
    "DDPGConfig(policy_delay=)": (lambda: wb.DDPGConfig(env="pendulum", policy_delay=2),
                                  raises(cfg.ConfigError, "'policy_delay' is TD3's", "does not implement")),
    "from_dict misspelt key": (lambda: cfg.from_dict({"total_steps": 1000}),
                               raises(cfg.ConfigError, "unknown key", "did you mean 'total_env_steps' for 'total_steps'?")),
    "from_dict misspelt synonym": (lambda: cfg.from_dict({"learning_rat": 1e-3}),
                                   raises(cfg.ConfigError, "unknown key", "did you mean 'lr' for 'learning_rat'?")),
    "train(num_taggers=4), an env parameter": (
        lambda: wb.train("tag_grid", num_taggers=4, progress=False),
        raises(cfg.ConfigError, "'num_taggers' is a parameter of env 'tag_grid'", "env_params={'num_taggers': ...}")),
    "train(tau=0.1): DDPG's field and CartPole's parameter": (
        lambda: wb.train("cartpole", tau=0.1, progress=False),
        raises(cfg.ConfigError, "'tau' is a field of DDPGConfig (set algorithm: ddpg to use it), and also a parameter "
                                "of env 'cartpole': for the env's, pass env_params={'tau': ...}")),
    "train(iterations=1)": (lambda: wb.train("cartpole", iterations=1, progress=False),
                            raises(cfg.ConfigError, "unknown key", "a run's length is 'total_env_steps'",
                                   "num_iterations=N")),
    "PPOConfig(tau), a DDPG field": (lambda: wb.PPOConfig(tau=0.01),
                                     raises(cfg.ConfigError, "'tau' is a field of DDPGConfig", "algorithm: ddpg")),
    "DDPGConfig(target_kl), a PPO field": (lambda: wb.DDPGConfig(target_kl=0.01),
                                           raises(cfg.ConfigError, "'target_kl' is a field of PPOConfig")),
    "DDPGConfig(gradient_steps), SB3's name": (lambda: wb.DDPGConfig(gradient_steps=2),
                                               raises(cfg.ConfigError, "did you mean 'updates_per_rollout'")),
    "PPOConfig(gradient_steps), SB3's name of a DDPG field": (
        lambda: wb.PPOConfig(gradient_steps=2),
        raises(cfg.ConfigError, "'gradient_steps' is what we call 'updates_per_rollout', a field of DDPGConfig")),
    "DDPG sweep of lr": (lambda: wb.DDPGConfig(sweep={"lr": [1e-3, 3e-4]}),
                         raises(cfg.ConfigError, "sweep names 'lr'", "actor_lr and critic_lr: sweep those")),
    "PPO sweep of tau, a DDPG hyperparameter": (lambda: wb.PPOConfig(sweep={"tau": [0.01]}),
                                                raises(cfg.ConfigError, "'tau' is a hyperparameter of ddpg")),
    "auto-scale of DDPG": (lambda: __import__("workbench.learn.autoscale", fromlist=["auto_scale"]).auto_scale(
                               wb.DDPGConfig(env="pendulum")),
                           raises(cfg.ConfigError, "auto-scale sizes on-policy runs", "set num_envs yourself")),
}


def test_switching_algorithm_takes_the_new_ones_defaults_and_names_what_stays_behind():
    """A PPO config's tunings (rollout_length 128, PPO's max_grad_norm default) do not become a DDPG
    run's: fields at the old default take the new class's, set ones go on only where both classes
    share the field and its default; a warning names the set values left behind."""
    ppo = cfg.load_yaml(Path(__file__).parent.parent / "configs" / "mountain_car_continuous.yaml")
    with pytest.warns(UserWarning, match=r"PPOConfig -> DDPGConfig: values set for ppo left behind: lr=0.001 \(it "
                                         r"learns at actor_lr and critic_lr\), rollout_length=128 \(its default is "
                                         r"4\), update_epochs=8 \(no such field\)"):
        ddpg = cfg.replace(ppo, algorithm="ddpg", actor_lr=1e-3)
    with pytest.warns(UserWarning, match=r"carried over as set for ppo: num_envs=64, .*normalize_obs=True.* \(tuned "
                                         r"for it: check them\)"):
        cfg.replace(ppo, algorithm="ddpg")
    default = wb.DDPGConfig()
    assert (ddpg.max_grad_norm, ddpg.rollout_length, ddpg.actor_lr) == (default.max_grad_norm, default.rollout_length,
                                                                         1e-3)
    assert (ddpg.num_envs, ddpg.normalize_obs, ddpg.total_env_steps) == (64, True, 1_500_000)  # the shared ones
    swept = cfg.replace(wb.PPOConfig(env="pendulum", seeds=2), sweep={"lr": [1e-3, 3e-4], "gamma": [0.9, 0.99]})
    with pytest.warns(UserWarning, match=r"sweep\['lr'\]=\[0.001, 0.0003\] \(its members cannot differ in it\)"):
        assert cfg.replace(swept, algorithm="ddpg").sweep == {"gamma": [0.9, 0.99]}  # what DDPG can sweep stays
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing set: nothing to name
        assert cfg.replace(wb.PPOConfig(), algorithm="a2c").rollout_length == wb.A2CConfig().rollout_length


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_config(case):
    call, expected = CONFIG_CASES[case]
    check(call, expected)


def test_config_coerces_what_it_can():
    config = wb.PPOConfig(lr=1, hidden_sizes=[32, 32], num_envs=torch.tensor(8).numpy()[()])
    assert config.lr == 1.0 and isinstance(config.lr, float)
    assert config.hidden_sizes == (32, 32) and type(config.num_envs) is int


def test_malformed_yaml_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("env: cartpole\nhidden_sizes: [64,\nlr: 0.1\n")
    text = check(lambda: cfg.load_yaml(path), raises(cfg.ConfigError, str(path), "not valid YAML at line 4, column 1",
                                                      "flow sequence that starts at line 2, column 15"))
    assert "\n" not in text


FAKE_ENV = types.SimpleNamespace(num_envs=8, num_agents=3)

ENV_CONFIG_CASES = {
    "num_minibatches 7 of 8x16x3": (wb.PPOConfig(num_envs=8, rollout_length=16, num_minibatches=7), None,
                                    raises(cfg.ConfigError, "num_minibatches=7", "policy 'shared'",
                                           "num_envs 8 x rollout_length 16 x 3 agent(s) = 384", "pick one of")),
    "one policy's batch not divided": (wb.PPOConfig(num_envs=8, rollout_length=1, num_minibatches=16),
                                       {"a": [0], "b": [1, 2]},
                                       raises(cfg.ConfigError, "policy 'a'", "= 8")),
    "config.num_envs != env.num_envs": (wb.A2CConfig(num_envs=1024), None,
                                        raises(cfg.ConfigError, "num_envs is 1024", "num_envs=8",
                                               "replace(config, num_envs=8)")),
    "rank_by a misspelt policy": (wb.PPOConfig(num_envs=8, rank_by="return/runner"), {"taggers": [0], "runners": [1, 2]},
                                  raises(cfg.ConfigError, "rank_by is 'return/runner'", "does not report",
                                         "'return/taggers', 'return/runners'", "did you mean 'return/runners'?")),
    "rank_by lowest first, misspelt": (wb.PPOConfig(num_envs=8, rank_by="-episode_lenght"), None,
                                       raises(cfg.ConfigError, "rank_by is '-episode_lenght'", "'-' to rank the lowest",
                                              "did you mean '-episode_length'?")),
    "rank_by lowest first, an alias": (wb.PPOConfig(num_envs=8, rank_by="-return"), None,
                                       raises(cfg.ConfigError, "did you mean '-mean_return'?")),
}


@pytest.mark.parametrize("case", ENV_CONFIG_CASES)
def test_check_against_env(case):
    config, groups, expected = ENV_CONFIG_CASES[case]
    check(lambda: check_against_env(config, FAKE_ENV, groups), expected)


def test_check_against_env_accepts_a_good_config_and_group_objects():
    config = wb.PPOConfig(num_envs=8, rollout_length=16, num_minibatches=4)
    check_against_env(config, FAKE_ENV, None)
    groups = [types.SimpleNamespace(name="taggers", ids=[0]), types.SimpleNamespace(name="runners", ids=[1, 2])]
    check_against_env(config, FAKE_ENV, groups)
    with pytest.raises(cfg.ConfigError, match="policy 'taggers'"):
        check_against_env(cfg.replace(config, num_minibatches=256), FAKE_ENV, groups)


# -- envs: parameters, seeds, memory ---------------------------------------------------------------

PARAM_CASES = {
    "cartpole length=0": ("cartpole", {"length": 0.0}, raises(EnvParameterError, "length=0.0", "(0, inf)")),
    "cartpole masscart=-1": ("cartpole", {"masscart": -1.0}, raises(EnvParameterError, "masscart=-1.0", "(0, inf)")),
    "cartpole max_steps=0": ("cartpole", {"max_steps": 0}, raises(EnvParameterError, "max_steps=0", "an int in")),
    "acrobot dt=nan": ("acrobot", {"dt": float("nan")}, raises(EnvParameterError, "dt=nan", "(0, inf)")),
    "mountain_car max_speed=0": ("mountain_car", {"max_speed": 0.0}, raises(EnvParameterError, "max_speed=0.0", "(0, inf)")),
    "mountain_car_continuous power=-1": ("mountain_car_continuous", {"power": -1.0},
                                         raises(EnvParameterError, "power=-1.0", "[0, inf)")),
    "pendulum l=0": ("pendulum", {"l": 0.0}, raises(EnvParameterError, "l=0.0", "(0, inf)")),
    "pendulum dt=inf": ("pendulum", {"dt": float("inf")}, raises(EnvParameterError, "dt=inf", "(0, inf)")),
    "tag_grid grid_length=0": ("tag_grid", {"grid_length": 0}, raises(EnvParameterError, "grid_length", ">= 1")),
    "tag_grid wall_hit_penalty=nan": ("tag_grid", {"wall_hit_penalty": float("nan")},
                                      raises(EnvParameterError, "wall_hit_penalty=nan", "(-inf, inf)")),
    "tag_continuous tagging_distance=0": ("tag_continuous", {"tagging_distance": 0.0},
                                          raises(EnvParameterError, "tagging_distance must be positive", "got 0.0")),
    "tag_continuous max_speed_runner=-1": ("tag_continuous", {"max_speed_runner": -1.0},
                                           raises(EnvParameterError, "max_speed_runner must be >= 0", "got -1.0")),
    "unknown parameter": ("cartpole", {"gravty": 3.0}, raises(wb.EnvDefinitionError, "gravty", "takes")),
    "parameter not a number": ("cartpole", {"length": "long"}, raises(wb.EnvDefinitionError, "length",
                                                                        "must be a number")),
}


@pytest.mark.parametrize("case", PARAM_CASES)
def test_env_parameter(case):
    from workbench.runtime.registry import definition
    name, params, expected = PARAM_CASES[case]
    check(lambda: definition(name, **params), expected)


def test_make_refuses_a_zero_length_pole():
    check(lambda: wb.make("cartpole", 8, target="cpu", length=0.0),
          raises(EnvParameterError, "cartpole", "length=0.0", "(0, inf)"))


def test_every_shipped_env_declares_its_ranges():
    from workbench.runtime.registry import definition, lookup
    for name in ("cartpole", "acrobot", "mountain_car", "mountain_car_continuous", "pendulum", "tag_grid",
                 "tag_continuous"):
        namespace = definition(name).namespace
        assert callable(namespace.get("validate_params")), name
        assert namespace.get("PARAM_RANGES"), name
        assert "check_ranges" in lookup(name).source, name


ENV_CASES = {
    "unknown env": (lambda: wb.make("cartpol", 2, target="cpu"), raises(wb.UnknownEnvError, "cartpol", "known envs")),
    "unknown target": (lambda: wb.make("cartpole", 2, target="tpu"), raises(wb.TargetUnavailableError, "'tpu'")),
    "num_envs=0": (lambda: wb.make("cartpole", 0, target="cpu"), raises(wb.WorkbenchError, "num_envs must be an int")),
    "num_envs='8'": (lambda: wb.make("cartpole", "8", target="cpu"), raises(wb.WorkbenchError, "num_envs must be an int in [1, 2147483647]", "got '8'")),
    "seed='abc'": (lambda: wb.make("cartpole", 2, target="cpu", seed="abc"),
                   raises(wb.WorkbenchError, "seed must be an int", "'abc'")),
}


@pytest.mark.parametrize("case", ENV_CASES)
def test_env(case):
    call, expected = ENV_CASES[case]
    check(call, expected)


def test_too_many_replicas_for_the_free_memory_is_refused_before_allocating(cartpole, monkeypatch):
    monkeypatch.setattr(store_mod, "free_memory_bytes", lambda device: 1 << 30)
    # 56 B a replica (the observation is the state: it takes none of its own), 2e9 replicas: 104.3 GiB
    check(lambda: wb.make("cartpole", 2_000_000_000, target="cpu"),
          raises(InsufficientMemoryError, "2000000000 replicas", "need 104.3 GB", "only 1.0 GB", "free",
                 "fewer replicas"))
    wb.make("cartpole", 8, target="cpu")  # what fits is still made


# -- actions ---------------------------------------------------------------------------------------

def _int_actions(value, where=(0, 0), n=8):
    actions = torch.zeros(n, 1, dtype=torch.int32)
    actions[where] = value
    return actions


ACTION_CASES = {
    "99 on CartPole": (_int_actions(99), raises(wb.ActionError, "action 99", "agent 0", "replica 0", "[0, 1]")),
    "-1 in replica 5": (_int_actions(-1, (5, 0)).long(), raises(wb.ActionError, "action -1", "replica 5")),
    "flat [E] actions out of range": (torch.full((8,), 2, dtype=torch.int32), raises(wb.ActionError, "action 2")),
    "wrong shape": (torch.zeros(3, dtype=torch.int32), raises(wb.ActionError, "shape (3,)", "(8, 1)")),
    "float actions": (torch.zeros(8, 1), raises(wb.ActionError, "dtype torch.float32", "integer actions")),
    "not a tensor": ([0] * 8, raises(wb.ActionError, "must be a torch.Tensor")),
}


@pytest.mark.parametrize("case", ACTION_CASES)
def test_actions(cartpole, case):
    actions, expected = ACTION_CASES[case]
    check(lambda: cartpole.step(actions), expected)
    cartpole.step(torch.ones(8, 1, dtype=torch.int32))  # good actions still step


def test_nan_continuous_action_raises(pendulum):
    actions = torch.zeros(4, 1, 1)
    actions[2, 0, 0] = float("nan")
    check(lambda: pendulum.step(actions), raises(wb.ActionError, "component 0 of agent 0 in replica 2 is nan",
                                                 "finite"))
    assert torch.isfinite(pendulum.store["obs"]).all()  # the bad step did not run


def test_multi_discrete_out_of_range_names_the_component():
    actions = torch.zeros(2, 4, 2, dtype=torch.int32)
    actions[1, 3, 1] = 7
    checker = ActionCheck(MultiDiscrete((3, 5)), (2, 4, 2), "cpu", deferred=False)
    check(lambda: checker.check(actions), raises(wb.ActionError, "component 1 of agent 3 in replica 1 is 7",
                                                 "nvec=(3, 5)", "[0, 4]"))


def test_deferred_check_reports_at_the_next_step_without_waiting(cartpole):
    """The GPU path: the fault is recorded on the device, reported by a later call."""
    checker = cartpole._action_check
    checker.deferred = True
    try:
        cartpole.step(_int_actions(5, (3, 0)))  # no host sync: nothing raised yet
        with pytest.raises(wb.ActionError, match=r"action 5 of agent 0 in replica 3 .* earlier step"):
            cartpole.step(torch.ones(8, 1, dtype=torch.int32))
        cartpole.step(torch.ones(8, 1, dtype=torch.int32))  # reported once
        cartpole.step(_int_actions(-4, (1, 0)))
        with pytest.raises(wb.ActionError, match="action -4 of agent 0 in replica 1"):
            cartpole.reset()
    finally:
        checker.deferred = False
        checker.pending = False


def test_the_stores_own_action_tensor_is_not_checked(cartpole, monkeypatch):
    """The trainer samples into store['action'] and steps it: that path must cost no check."""
    def refuse(self, actions):
        raise AssertionError("checked the store's own actions")
    monkeypatch.setattr(ActionCheck, "check", refuse)
    cartpole.store["action"].fill_(1)
    cartpole.step()
    cartpole.step(cartpole.store["action"])
    with pytest.raises(AssertionError, match="checked the store's own actions"):  # (a user's tensor is checked)
        cartpole.step(torch.ones(8, 1, dtype=torch.int32))


def test_box_and_discrete_checks_pass_good_actions():
    ActionCheck(Box(-1.0, 1.0, (2,)), (3, 1, 2), "cpu", deferred=False).check(torch.rand(3, 1, 2))
    ActionCheck(Discrete(5), (3, 2), "cpu", deferred=False).check(torch.full((3, 2), 4))


# -- checkpoints -----------------------------------------------------------------------------------

def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    ckpt.save_atomic({"weights": torch.ones(3)}, path)
    before = path.read_bytes()
    real_fdopen = os.fdopen

    def full_disk(fd, mode="r", *args, **kwargs):
        os.close(fd)
        return real_fdopen(os.open("/dev/full", os.O_WRONLY), mode, *args, **kwargs)
    monkeypatch.setattr(os, "fdopen", full_disk)
    text = check(lambda: ckpt.save_atomic({"weights": torch.zeros(100_000)}, path),
                 raises(ckpt.CheckpointError, str(path), "the disk is full", "previous checkpoint", "intact"))
    assert "\n" not in text
    assert path.read_bytes() == before
    assert list(tmp_path.glob(".checkpoint.pt.*.tmp")) == []


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_saves_temp_files_are_removed_by_the_next_save(tmp_path):
    import socket
    host = socket.gethostname().replace(".", "_")
    path = tmp_path / "checkpoint.pt"
    dead = tmp_path / f".checkpoint.pt.{host}-{_dead_pid()}.abc123.tmp"
    live = tmp_path / f".checkpoint.pt.{host}-{os.getppid()}.def456.tmp"  # a concurrent save: kept
    old_unknown = tmp_path / ".checkpoint.pt.k2j4h5.tmp"  # an older name, an hour old: removed
    new_unknown = tmp_path / ".checkpoint.pt.q9w8e7.tmp"  # an older name, just written: kept
    other_file = tmp_path / ".other.pt.x.tmp"
    for f in (dead, live, old_unknown, new_unknown, other_file):
        f.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(old_unknown, (hour_ago, hour_ago))
    ckpt.save_atomic({"weights": torch.ones(2)}, path)
    assert not dead.exists() and not old_unknown.exists()
    assert live.exists() and new_unknown.exists() and other_file.exists()
    assert ckpt.load(path)["weights"].tolist() == [1.0, 1.0]


def test_unwritable_checkpoint_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    check(lambda: ckpt.save_atomic({}, blocker / "run" / "checkpoint.pt"),
          raises(ckpt.CheckpointError, "cannot write checkpoint"))


# -- CLI -------------------------------------------------------------------------------------------

def _cli(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code, err, *keywords):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for word in keywords:
        assert word in err, f"{word!r} not in {err!r}"


CLI_CASES = {
    "--set hidden_sizes=[64,": (["--set", "hidden_sizes=[64,"], ("--set hidden_sizes=[64,", "not valid YAML",
                                                                  "column")),
    "--set algorithm=sac": (["--set", "algorithm=sac"], ("algorithm", "'sac'")),
    "--set seed=abc": (["--set", "seed=abc"], ("seed", "'abc'")),
    "--set without =": (["--set", "lr"], ("--set takes key=value",)),
    "--set unknown key": (["--set", "learning_rate=1"], ("unknown key", "learning_rate")),
    "--num-minibatches 0": (["--num-minibatches", "0"], ("num_minibatches", ">= 1")),
    "--num-envs and --set num_envs": (["--num-envs", "64", "--set", "num_envs=128"],
                                      ("num_envs is given twice, by --num-envs and by --set num_envs=128: keep one",)),
    "--set gamma twice": (["--set", "gamma=0.9", "gamma=0.95"],
                          ("gamma is given twice, by --set gamma=0.9 and by --set gamma=0.95",)),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_train_option(case, capsys, monkeypatch):
    monkeypatch.setattr(cli, "run_training", lambda *a, **k: pytest.fail("trained despite a bad option"))
    argv, keywords = CLI_CASES[case]
    _assert_one_line_error(*_cli(["train", "cartpole", *argv], capsys)[::2], *keywords)


def test_cli_malformed_config_file(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("env: cartpole\nlr: [0.1\n")
    _assert_one_line_error(*_cli(["train", str(path)], capsys)[::2], str(path), "line", "column")


def test_cli_missing_config_and_checkpoint(tmp_path, capsys):
    _assert_one_line_error(*_cli(["train", "no_such_config"], capsys)[::2], "no config file", "shipped configs")
    _assert_one_line_error(*_cli(["evaluate", str(tmp_path)], capsys)[::2], "has no checkpoint.pt yet")
    _assert_one_line_error(*_cli(["evaluate", str(tmp_path / "gone")], capsys)[::2], "no checkpoint at")
    for name in ("run_a", "run_b"):  # (a folder holding runs: before, "has no checkpoint.pt yet")
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "checkpoint.pt").write_bytes(b"")
    _assert_one_line_error(*_cli(["evaluate", str(tmp_path / "runs")], capsys)[::2], "is a folder of runs (run_a, "
                           "run_b), not a run: name one")


@pytest.mark.parametrize("fault", [OSError(errno.ENOSPC, "No space left on device", "/runs/x/metrics.csv"),
                                   wb.EnvDefinitionError("syntax error at line 3: invalid syntax\n    x = = 1")])
def test_cli_turns_faults_into_one_line(fault, capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise fault
    monkeypatch.setattr(cli, "run_training", fail)
    code, _out, err = _cli(["train", "cartpole", "--run-dir", "unused"], capsys)
    _assert_one_line_error(code, err, str(fault).splitlines()[0] if not isinstance(fault, OSError)
                           else "No space left on device: /runs/x/metrics.csv")


def test_cli_switches_algorithm_with_set(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "run_training", lambda config, **k: seen.setdefault("config", config) and
                        (None, types.SimpleNamespace(stopped_by="budget")))
    assert cli.main(["train", "cartpole", "--run-dir", "unused", "--set", "algorithm=a2c"]) == 0
    assert isinstance(seen["config"], wb.A2CConfig)


@pytest.mark.parametrize("file_line, flags, shown", [
    ("", [], True), ("progress: false\n", [], False), ("progress: true\n", [], True),
    ("progress: false\n", ["--progress", "true"], True), ("", ["--set", "progress=false"], False),
])
def test_cli_progress_bar_follows_the_config_file_and_flags(tmp_path, monkeypatch, file_line, flags, shown):
    """Before: a config file's `progress: false` was ignored (the CLI always drew the bar)."""
    seen = {}
    monkeypatch.setattr(cli, "run_training", lambda config, **k: seen.update(k, config=config) or
                        (None, types.SimpleNamespace(stopped_by="budget")))
    path = tmp_path / "run.yaml"
    path.write_text("env: cartpole\n" + file_line)
    assert cli.main(["train", str(path), "--run-dir", "unused", *flags]) == 0
    assert runs.shows_progress(seen.get("progress"), seen["config"]) is shown


def test_wb_train_and_a_resume_follow_the_config_progress(tmp_path, monkeypatch):
    """Before: wb.train drew the bar whatever the config said, and so did the CLI's --resume of a run
    whose config.yaml says progress: false."""
    bars = []
    from workbench.learn import progress as progress_mod
    monkeypatch.setattr(progress_mod.ProgressBar, "__init__", lambda self, *a, **k: bars.append(1) or setattr(
        self, "bar", types.SimpleNamespace(close=lambda: None)))
    monkeypatch.setattr(progress_mod.ProgressBar, "__call__", lambda self, i, m: True)
    small = dict(target="cpu", num_envs=8, rollout_length=8, hidden_sizes=[8], cpu_threads=1, update_epochs=1)
    wb.train("cartpole", total_env_steps=64, run_dir=str(tmp_path / "quiet"), **small)
    assert len(bars) == 1  # None: a bar by default
    quiet = cfg.replace(runs.load_config("cartpole"), progress=False, total_env_steps=64, **small)
    wb.train(quiet, run_dir=str(tmp_path / "quiet2"))
    assert len(bars) == 1
    assert cli.main(["train", "--resume", str(tmp_path / "quiet2"), "--total-env-steps", "128"]) == 0
    assert len(bars) == 1
    assert cli.main(["train", "--resume", str(tmp_path / "quiet2"), "--total-env-steps", "192", "--progress",
                     "true"]) == 0
    assert len(bars) == 2


def test_cli_set_and_sweep_take_several_items_after_one_flag(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "run_training", lambda config, **k: seen.setdefault("config", config) and
                        (None, types.SimpleNamespace(stopped_by="budget")))
    assert cli.main(["train", "cartpole", "--run-dir", "unused", "--set", "gamma=0.98", "update_epochs=2",
                     "--set", "hidden_sizes=[16]", "--seeds", "2", "--sweep", "lr=1e-3,3e-3", "ent_coef=0,0.01"]) == 0
    config = seen["config"]
    assert (config.gamma, config.update_epochs, config.hidden_sizes) == (0.98, 2, (16,))
    assert config.sweep == {"lr": [1e-3, 3e-3], "ent_coef": [0, 0.01]} and config.seeds == 2


@pytest.mark.parametrize("flag", ["--set", "--sweep"])
def test_cli_config_after_set_or_sweep_says_to_move_it(flag, capsys, monkeypatch):
    """The flags take every word after them, the config's name too: the error says so."""
    monkeypatch.setattr(cli, "run_training", lambda *a, **k: pytest.fail("trained despite a bad option"))
    item = "gamma=0.98" if flag == "--set" else "lr=1e-3,3e-3"
    _assert_one_line_error(*_cli(["train", flag, item, "cartpole"], capsys)[::2],
                           f"got 'cartpole' (put the config cartpole before {flag}, which takes every word after it)")


def test_cli_interrupted_training_says_where_the_checkpoint_went(tmp_path, capsys, monkeypatch):
    result = types.SimpleNamespace(stopped_by="interrupted", iterations=7)

    def interrupted_run(config, **kwargs):
        (tmp_path / "checkpoint.pt").write_bytes(b"saved")
        return None, result
    monkeypatch.setattr(cli, "run_training", interrupted_run)
    code, _out, err = _cli(["train", "cartpole", "--run-dir", str(tmp_path)], capsys)
    assert code == 130
    assert f"interrupted after 7 iterations: checkpoint saved to {tmp_path / 'checkpoint.pt'}" in err
    assert "--resume" in err
    monkeypatch.setenv("RANK", "1")  # under torchrun the other ranks stop as quietly (rank 0 said it)
    code, _out, err = _cli(["train", "cartpole", "--run-dir", str(tmp_path / "other")], capsys)
    assert code == 130 and err == ""


def test_cli_ctrl_c_outside_training_is_one_line(capsys, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "run_training", interrupt)
    code, _out, err = _cli(["train", "cartpole", "--run-dir", "unused"], capsys)
    assert code == 130 and err.strip() == "interrupted"


def test_help_needs_no_torch_and_runs():
    probe = ("import sys\nimport workbench.cli as c\ntry:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print('HEAVY', [m for m in ('torch', 'numba') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "usage: python -m workbench" in out.stdout and "HEAVY []" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "train" in out.stdout and "evaluate" in out.stdout, out.stderr


@pytest.mark.parametrize("command", ["train", "evaluate", "demo", "export-member", "rollouts", "check", "envs"])
def test_every_commands_help_prints(command, capsys):
    """Every config field's doc goes into `train --help` (a '%' in one once broke argparse's formatting)."""
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0 and "usage: python -m workbench" in capsys.readouterr().out


# -- distributed -----------------------------------------------------------------------------------

def test_torchrun_gpu_target_without_gpu_points_at_the_cpu_target():
    text = check(lambda: wbd.check_gpu_count(0, 0, "cuda"), raises(wbd.DistributedError, "target 'cuda' needs a GPU",
                                                                  "--target cpu"))
    assert "--nproc-per-node 1" not in text


def test_package_attributes_load_on_first_use():
    code = ("import sys, workbench as wb; before = 'workbench.compiler.rng' in sys.modules; "
            "print(before, wb.rng.reference_uniform(0, 0, 0, 0, 0, 0), 'workbench.compiler.rng' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    from workbench.compiler.rng import reference_uniform
    assert out == ["False", repr(reference_uniform(0, 0, 0, 0, 0, 0)), "True"]  # (loaded when first named)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        wb.nothing_here  # noqa: B018
    assert Path(wb.__file__).name == "__init__.py"


def test_a_new_run_into_a_folder_holding_a_run_is_refused_and_nothing_is_overwritten(tmp_path, capsys):
    torch.save({"the earlier run": 1}, tmp_path / "checkpoint.pt")
    earlier = (tmp_path / "checkpoint.pt").read_bytes()
    (tmp_path / "metrics.csv").write_text("iteration\n1\n")
    _assert_one_line_error(*_cli(["train", "cartpole", "--run-dir", str(tmp_path)], capsys)[::2],
                           "already holds a run (checkpoint.pt, metrics.csv)", f"--resume {tmp_path}")
    from workbench.learn.runs import ResumeError
    with pytest.raises(ResumeError, match="already holds a run"):
        wb.train("cartpole", run_dir=str(tmp_path))
    assert (tmp_path / "checkpoint.pt").read_bytes() == earlier
    damaged = tmp_path / "damaged"  # (a copy cut short: --resume cannot go on from it, so it is not offered)
    damaged.mkdir()
    (damaged / "checkpoint.pt").write_bytes(earlier[: len(earlier) // 2])
    with pytest.raises(ResumeError, match=r"its checkpoint.pt is damaged \(not a whole file\), so it cannot be "
                                          r"continued: delete the folder"):
        wb.train("cartpole", run_dir=str(damaged))
    assert (tmp_path / "metrics.csv").read_text() == "iteration\n1\n" and not (tmp_path / "config.yaml").exists()


@pytest.mark.parametrize("argv, words", [
    (["cartpole", "--set", "num_envs="], ["PPOConfig.num_envs needs a value", "its default is 1024"]),
    (["cartpole", "--set", "gamma=null"], ["PPOConfig.gamma needs a value"]),
    (["cartpole", "--set", "hidden_sizes=[0]"], ["hidden_sizes must be one or more layer widths, each >= 1"]),
    (["cartpole", "--seed", "99999999999999999999"], ["PPOConfig.seed must be in [0, 4611686018427387904]"]),
    (["cartpole", "--set", "gae_lambda=5"], ["PPOConfig.gae_lambda must be in [0, 1], got 5.0"]),
    (["cartpole", "--set", "ent_coef=-1"], ["PPOConfig.ent_coef must be >= 0"]),
    (["cartpole", "--max-grad-norm", "-1"], ["PPOConfig.max_grad_norm must be >= 0"]),
    (["cartpole", "--sweep", "lr=inf,1e-3"], ["sweep['lr'] holds inf", "lr must be a finite number"]),
    (["cartpole", "--lr", "5e-3", "--sweep", "lr=1e-3,3e-3"],
     ["lr is given (0.005) and swept", "add 0.005 to the sweep"]),
    (["cartpole", "--sweep", "lr=1e-3,0.001"], ["sweep['lr'] lists 0.001 more than once", "seeds"]),
    (["cartpole", "--sweep", "learning_rate=1e-3"], ["sweep names 'learning_rate'", "did you mean 'lr'?"]),
    (["pendulum", "--lr", "1"], ["DDPGConfig.lr is not read by DDPG, which learns at actor_lr and critic_lr", "--actor-lr"]),
    (["pendulum", "--lr=-1"], ["DDPGConfig.lr is not read by DDPG", "--actor-lr"]),
    (["pendulum", "--set", "updates_per_rollout=0"], ["DDPGConfig.updates_per_rollout must be from 1 to 1999"]),
    (["pendulum", "--set", "actor_lr=-1"], ["DDPGConfig.actor_lr must be > 0"]),
])
def test_cli_config_values_out_of_range_are_one_line_errors_before_anything_runs(tmp_path, capsys, argv, words):
    _assert_one_line_error(*_cli(["train", *argv, "--run-dir", str(tmp_path / "run")], capsys)[::2], *words)
    assert not (tmp_path / "run").exists()


def test_numbers_yaml_reads_as_text_are_numbers(tmp_path):
    """YAML 1.1 reads 1e-3 and 1e6 as strings; a config field of a number takes them as numbers."""
    (tmp_path / "c.yaml").write_text("env: cartpole\nlr: 1e-3\ntotal_env_steps: 2e6\n")
    config = cfg.load_yaml(tmp_path / "c.yaml")
    assert (config.lr, config.total_env_steps) == (1e-3, 2_000_000) and type(config.total_env_steps) is int
    assert cfg.from_dict({"lr": "3e-4"}).lr == 3e-4
    with pytest.raises(cfg.ConfigError, match=r"PPOConfig.lr must be float, got 'fast' \(str\)"):
        cfg.from_dict({"lr": "fast"})
    (tmp_path / "bad.yaml").write_text("env: cartpole\nnum_envs: -3\n")
    with pytest.raises(cfg.ConfigError, match=r"bad.yaml: PPOConfig.num_envs must be >= 1, got -3"):
        cfg.load_yaml(tmp_path / "bad.yaml")


@pytest.mark.parametrize("argv, words", [
    (["train", "cartpole", "--normalize-obs", "ture"], "argument --normalize-obs: true or false, not 'ture'"),
    (["train", "--normalize-obs", "cartpole"], "true or false, not 'cartpole' (put the config cartpole before the "
                                               "flag, which takes the word after it)"),
    (["train", "cartpole", "--total-env-steps", "1e6x"], "argument --total-env-steps: an integer (e.g. 1000000, 1e6)"),
    (["evaluate", "run", "--steps", "-5"], "argument --steps: an integer >= 1, not '-5'"),
    (["evaluate", "run", "--num-envs", "0"], "argument --num-envs: an integer >= 1, not '0'"),
    (["train", "pendulum", "--algorithm", "sac"], "argument --algorithm: invalid choice: 'sac'"),
])
def test_cli_flag_values_are_checked_as_they_are_read(capsys, argv, words):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and words in capsys.readouterr().err


def test_cli_flags_take_numbers_as_written():
    args = cli.build_parser().parse_args(["train", "cartpole", "--total-env-steps", "1e6", "--normalize-obs", "off",
                                          "--lr", "3e-4"])
    assert (args.total_env_steps, args.normalize_obs, args.lr) == (1_000_000, False, 3e-4)
    bare = cli.build_parser().parse_args(["train", "pendulum", "--set", "algorithm=ppo", "--normalize-reward"])
    assert cli._overrides(bare) == {"algorithm": "ppo", "normalize_reward": True}  # (a bare boolean flag: true)
    flagged = cli.build_parser().parse_args(["train", "pendulum", "--algorithm", "PPO"])
    assert cli._overrides(flagged) == {"algorithm": "ppo"}  # (--algorithm: as --set algorithm=ppo)
    with pytest.raises(cfg.ConfigError, match="algorithm is given twice"):
        cli._overrides(cli.build_parser().parse_args(["train", "pendulum", "--algorithm", "ppo", "--set",
                                                      "algorithm=a2c"]))
    for null in ("null", "None", "~"):  # a field whose default is None takes null back (a shipped config's value off)
        args = cli.build_parser().parse_args(["train", "cartpole", "--target-return", null])
        assert cli._overrides(args) == {"target_return": None}
    assert cli._overrides(cli.build_parser().parse_args(["train", "cartpole", "--target-return", "400"])) == \
        {"target_return": 400.0}
    with pytest.raises(SystemExit):  # (a field that needs a value does not)
        cli.build_parser().parse_args(["train", "cartpole", "--lr", "null"])


def test_cli_an_allocation_that_fails_is_a_one_line_error(capsys, monkeypatch):
    def allocate(config, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 1024000000000 bytes.")
    monkeypatch.setattr(cli, "run_training", allocate)
    _assert_one_line_error(*_cli(["train", "cartpole", "--run-dir", "unused"], capsys)[::2],
                           "error: out of memory (", "lower num_envs, rollout_length")
    monkeypatch.setattr(cli, "run_training", lambda config, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # other errors are bugs: their traceback stays
        cli.main(["train", "cartpole", "--run-dir", "unused"])


def test_cpu_threads_beyond_the_cores_train_on_the_cores():
    from workbench.learn import threads
    before = torch.get_num_threads()
    try:
        with pytest.warns(UserWarning, match=r"cpu_threads=999 is more than this machine's \d+ cores"):
            chosen = threads.configure(999, lambda: None, lambda: None)
        assert chosen["learner"] == threads.available_cores() == torch.get_num_threads()
        threads.apply({"env": 500, "learner": 500})  # a bigger machine's counts, in its checkpoint
        assert torch.get_num_threads() == threads.available_cores()
    finally:
        torch.set_num_threads(before)


def test_check_env_takes_one_target_name_and_names_a_misspelt_keyword():
    report = wb.check_env("cartpole", targets="cpu", num_envs=2, steps=2)
    assert report.targets == ("cpu",)
    with pytest.raises(EnvParameterError, match=r"pass targets=\('cpu', \.\.\.\), not target='cpu'"):
        wb.check_env("cartpole", target="cpu")


def test_a_folder_named_as_an_env_is_not_its_config(tmp_path, monkeypatch):
    from workbench.learn.runs import config_file
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cartpole").mkdir()
    assert config_file("cartpole").name == "cartpole.yaml" and config_file("cartpole").is_file()


def test_a_new_run_into_the_folder_of_a_run_that_saved_no_checkpoint_says_to_delete_it(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text("iteration,return/shared\n1,nan\n")
    _assert_one_line_error(*_cli(["train", "cartpole", "--run-dir", str(tmp_path)], capsys)[::2],
                           "already holds a run (metrics.csv)", "no checkpoint to continue from: delete the folder")


def test_a_count_parameter_takes_whole_numbers_and_validate_params_errors_name_their_line():
    from workbench.errors import EnvDefinitionError
    source = '''
from workbench.envdef import Box, Discrete, per_env
PARAMS = dict(speed=1.0, cells=4)
NUM_AGENTS = 1
OBSERVATION = Box(shape=(1,))
ACTION = Discrete(2)
STATE = dict(x=per_env())
def validate_params(p):
    if p.sped < 0:
        return "speed must be >= 0"
def reset(env, x):
    x[env] = 0.0
def step(env, x):
    x[env] += speed
def observe(env, agent, x, obs):
    obs[env, agent, 0] = x[env]
'''
    with pytest.raises(EnvDefinitionError, match="validate_params raised AttributeError at line 9: .*'sped'") as err:
        wb.register("typo_in_validate", source)
    assert err.value.line == 9
    wb.register("counted", source.replace("p.sped", "p.speed"))
    with pytest.raises(EnvDefinitionError, match=r"'cells' is a count \(its default is 4\): it must be a whole number, "
                                                  r"got 2.5"):
        wb.make("counted", num_envs=1, target="cpu", cells=2.5)
    assert wb.make("counted", num_envs=1, target="cpu", cells=2.0).definition.params["cells"] == 2
    # a count's declared int range takes 2.0 too (a YAML or --set value written with a point)
    assert wb.make("cartpole", num_envs=1, target="cpu", max_steps=200.0).definition.params["max_steps"] == 200
    with pytest.raises(EnvParameterError, match=r"max_steps=2.5 is out of range: it must be an int in \[1, inf\)"):
        wb.make("cartpole", num_envs=1, target="cpu", max_steps=2.5)


# -- env sources: wb.register's arguments, and the host hooks a source declares ------------------

HOOKED = '''
from workbench.envdef import Box, Discrete, per_agent
PARAMS = dict(num_agents=3)
NUM_AGENTS = "num_agents"
OBSERVATION = Box(shape=(1,))
ACTION = Discrete(2)
STATE = dict(x=per_agent())
def reset(env, agent, x):
    x[env, agent] = 0.0
def step(env, agent, x):
    x[env, agent] += 1.0
def observe(env, agent, x, obs):
    obs[env, agent, 0] = x[env, agent]
'''

REGISTER_CASES = {
    "language='pyhton'": (lambda: wb.register("bad_language", HOOKED, language="pyhton"),
                          raises(wb.WorkbenchError, "language='pyhton' is not an env language",
                                 "did you mean 'python'?", "'cuda'")),
    "language='fortran'": (lambda: wb.register("bad_language", HOOKED, language="fortran"),
                           raises(wb.WorkbenchError, "language='fortran'", "use 'python'", "'cuda-c' or 'c'")),
    "source None": (lambda: wb.register("no_source", None),
                    raises(wb.WorkbenchError, "source must be the env's source text", "got NoneType")),
    "name 5": (lambda: wb.register(5, HOOKED), raises(wb.WorkbenchError, "env name must be a Python identifier",
                                                      "got 5")),
    "name 'my env'": (lambda: wb.register("my env", HOOKED), raises(wb.WorkbenchError, "got 'my env'")),
    "params=[3]": (lambda: wb.register("bad_params", HOOKED, params=[3]),
                   raises(wb.WorkbenchError, "params must be a dict of parameter values, got [3]")),
}


@pytest.mark.parametrize("case", REGISTER_CASES)
def test_register(case):
    from workbench.runtime.registry import names
    call, expected = REGISTER_CASES[case]
    check(call, expected)
    assert not {"bad_language", "no_source", "my env", "bad_params"} & set(names())  # nothing registered


HOOK_CASES = {
    "AGENT_GROUPS naming no parameter": ("AGENT_GROUPS = lambda p: {'a': range(p.num_hunters)}",
                                         ["AGENT_GROUPS raised AttributeError", "num_hunters",
                                          "the parameters are ['num_agents']"]),
    "AGENT_GROUPS past NUM_AGENTS": ("AGENT_GROUPS = lambda p: {'a': range(5)}",
                                     ["gives group 'a' the agent 3", "agents are the ints 0 .. 2"]),
    "AGENT_GROUPS a dict": ("AGENT_GROUPS = {'a': [0, 1, 2]}",
                            ["AGENT_GROUPS must be a function of the parameters", "lambda p:"]),
    "AGENT_GROUPS a list": ("AGENT_GROUPS = lambda p: [0, 1, 2]", ["AGENT_GROUPS returned [0, 1, 2], not a dict"]),
    "AGENT_GROUPS agent twice": ("AGENT_GROUPS = lambda p: {'a': [0, 1], 'b': [1, 2]}",
                                 ["puts agent 1 in 'a' and in 'b'", "default policy map"]),
    "AGENT_GROUPS agent left out": ("AGENT_GROUPS = lambda p: {'a': [0, 1]}", ["leaves agents [2]", "in no group"]),
    "RENDER = 5": ("RENDER = 5", ["RENDER must be a drawer class", "setup(ax) and update(k)", "got 5"]),
    "draw(frame)": ("def draw(frame):\n    pass", ["draw(frame) must take (frame, ax)"]),
}


@pytest.mark.parametrize("case", HOOK_CASES)
def test_a_host_hook_the_trainer_or_viewer_cannot_use_is_refused_at_its_line(case):
    from workbench.errors import EnvDefinitionError
    hook, words = HOOK_CASES[case]
    text = check(lambda: wb.register("hooked", HOOKED + hook + "\n"), raises(EnvDefinitionError, *words))
    line = len(HOOKED.splitlines()) + 1
    assert text.startswith(f"hooked: line {line}: {hook.splitlines()[0]}")


def test_a_negative_number_in_any_form_is_an_options_value(capsys):
    assert cli_options.signed_values(["--lr", "-1e-3", "--target-return", "-2.5E2", "--seed", "-3", "--log-std-init", "-inf",
                               "--rank-by", "-episode_length", "--auto-scale", "cartpole"]) == [
        "--lr=-1e-3", "--target-return=-2.5E2", "--seed=-3", "--log-std-init=-inf", "--rank-by=-episode_length",
        "--auto-scale", "cartpole"]
    assert cli_options.signed_values(["rollouts", "--", "-5"]) == ["rollouts", "--", "-5"]  # ('--' ends the options)
    assert cli.main(["train", "cartpole", "--lr", "-1e-3"]) == 2  # argparse alone would exit on "-1e-3"
    assert "PPOConfig.lr must be > 0, got -0.001" in capsys.readouterr().err


def test_an_option_the_command_does_not_take_is_named_with_the_one_meant(capsys):
    for argv, hint in ((["--learning-rate", "1e-3"], "(--learning-rate: did you mean --lr?)"),
                       (["--iterations", "5"], "(--iterations: a run's length is --total-env-steps"),
                       (["--rollout-lenght", "8"], "(--rollout-lenght: did you mean --rollout-length?)")):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", "cartpole", *argv])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "python -m workbench train: error: unrecognized arguments: " in err and hint in err, err
        assert "`python -m workbench train --help` lists the options" in err


def test_the_cli_prints_the_workbenchs_warnings_on_one_line(monkeypatch):
    import warnings
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # (put back after the test)
    cli._one_line_warnings()
    cli._one_line_warnings()  # (a second call keeps Python's form underneath, not a chain)
    assert warnings.formatwarning("too few steps", wb.BudgetWarning, "trainer.py", 3) == "warning: too few steps\n"
    assert warnings.formatwarning("other", UserWarning, "x.py", 3, "") == "x.py:3: UserWarning: other\n"
