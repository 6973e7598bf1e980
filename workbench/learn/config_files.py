"""Config files: a shipped config's name or a path, and the default config of a registered env that
has no config file (what `train ENV`, `wb.train(ENV)` and the panel start from)."""
from __future__ import annotations

import re

from importlib import resources
from pathlib import Path

import yaml

from . import config as cfg
from ..errors import did_you_mean


def config_file(name_or_path: str) -> Path | None:
    """The config file a name means (a path, or a shipped config's name: NAME, NAME.yaml or configs/NAME.yaml,
    as the docs write it, from any folder), or None."""
    path = Path(name_or_path)
    if path.is_file():  # (a folder of the name, e.g. an env's sources, is not a config)
        return path
    name = name_or_path.removeprefix("configs/").removesuffix(".yaml")
    shipped = resources.files("workbench.configs") / f"{name}.yaml"
    return Path(str(shipped)) if shipped.is_file() else None


def resolve_config(name_or_path: str) -> Path:
    """A config file path, or the name of a shipped config (configs/NAME.yaml)."""
    found = config_file(name_or_path)
    if found is not None:
        return found
    names = shipped_configs()
    hint = did_you_mean(Path(name_or_path).stem, names, repr)
    raise cfg.ConfigError(f"no config file {name_or_path!r}{hint}; shipped configs: {names}; an env's source file "
                          f"trains with a default config (python -m workbench train my_env.py), as does an env "
                          f"registered in this process (wb.register, %%warpenv) from Python: wb.train(ENV_NAME)")


def shipped_configs() -> list:
    """The shipped configs' names (configs/NAME.yaml)."""
    return sorted(p.name[:-5] for p in resources.files("workbench.configs").iterdir() if p.name.endswith(".yaml"))


def default_config(env: str, algorithm: str | None = None):
    """A config for the registered env `env` after the shipped configs' conventions: PPO (whatever the
    action space, as the shipped Box env mountain_car_continuous), observations normalised, 64
    replicas x 64 steps for one agent, 128 x 32 for several (the Tag configs), an entropy bonus for
    discrete actions only; for PPO on Box actions, rewards scaled (normalize_reward) and CleanRL's
    continuous-control update (10 epochs of 32 minibatches); `algorithm` "ddpg" follows pendulum.yaml,
    "a2c" takes A2CConfig's defaults (its rewards unscaled: A2C drove mountain_car_continuous's mean off
    the Box with them scaled)."""
    from ..compiler.envdef import Box
    from ..runtime import registry
    algorithm = (algorithm or "ppo").lower()
    if algorithm not in cfg.ALGORITHMS:
        raise cfg.ConfigError(f"algorithm must be one of {sorted(cfg.ALGORITHMS)}, got {algorithm!r}")
    defn = registry.definition(env)
    single, box = defn.num_agents == 1, isinstance(defn.action, Box)
    if algorithm == "ddpg":
        values = dict(num_envs=16, rollout_length=1, updates_per_rollout=16, batch_size=256, learning_starts=2000,
                      buffer_size=200_000, hidden_sizes=[256, 256], total_env_steps=200_000, log_every=50)
    elif algorithm == "ppo":
        values = dict(num_envs=64 if single else 128, rollout_length=64 if single else 32,
                      num_minibatches=32 if box else 4, update_epochs=10 if box else 4, lr=1e-3,
                      ent_coef=0.0 if box else 0.01, normalize_obs=True, normalize_reward=box,
                      total_env_steps=1_000_000, log_every=2)
    else:
        values = dict(normalize_obs=True, num_envs=64 if single else 128)
    return cfg.from_dict({"algorithm": algorithm, "env": env, **values})


def is_default_config(config) -> bool:
    """Whether `config` is its env's default config for its algorithm (default_config's, unchanged)."""
    try:
        return config == default_config(config.env, config.algorithm)
    except Exception:  # (an env not registered here has no default to be)
        return False


ENV_SOURCE_LANGUAGES = {".py": "python", ".cu": "cuda"}


def register_env_file(path: str) -> str | None:
    """An env's source file (ENV.py; ENV.cu in CUDA C) registered under its file's stem, whose name is
    returned; None for anything else."""
    from ..runtime import registry
    source = Path(path)
    if source.suffix not in ENV_SOURCE_LANGUAGES or not source.is_file():
        return None
    if not source.stem.isidentifier():
        raise cfg.ConfigError(f"{str(source)!r}: an env's file name is its name, which must be a Python identifier: "
                              f"rename it {re.sub(r'[^0-9a-zA-Z_]', '_', source.stem).lstrip('0123456789') or 'my_env'}"
                              f"{source.suffix}")
    registry.register(source.stem, source.read_text(), language=ENV_SOURCE_LANGUAGES[source.suffix],
                      filename=str(source.resolve()))
    return source.stem


def env_named_by_file(env, base: Path | None = None):
    """The env name an `env` field means: a path to an env's source file (my_env.py, my_env.cu; relative
    to `base`, a config file's folder, where it is found there, else to the working folder) registered
    under its stem; any other value as it is."""
    if not isinstance(env, str) or Path(env).suffix not in ENV_SOURCE_LANGUAGES:
        return env
    path = base / env if base is not None and not Path(env).is_absolute() and (base / env).is_file() else Path(env)
    if not path.is_file():
        raise cfg.ConfigError(f"env: {env!r} names an env source file, which is not there ({str(path.resolve())!r}); "
                              f"a path is taken relative to the config file's folder, then the working folder")
    return register_env_file(str(path))


def load_config(name_or_path: str, algorithm: str | None = None, env: str | None = None, resume: bool = False):
    """A config file, a shipped config's name, an env's source file (register_env_file: trained with
    its default config), or (with neither of that name, or where a registered source replaced the
    shipped env of that name) the default config of the env registered under it (default_config).
    `algorithm` other than a shipped config's: the env's default config for it, with the shipped
    config's env_params and target_return (a file of the user's switches algorithm in cfg.replace).
    `env` (--env, env=): the env a file with no `env:` key trains; a config naming another env is
    refused (its target_return and tuning are that env's). resume: the file's values go on as changes
    of a resumed run (run_config), which keeps its own env."""
    config = _load_config(name_or_path, algorithm)
    if resume:
        return config
    source = f"{name_or_path!r}" if Path(name_or_path).is_file() else f"config {name_or_path!r}"
    if Path(name_or_path).is_file() and Path(name_or_path).suffix not in ENV_SOURCE_LANGUAGES \
            and "env" not in (yaml.safe_load(Path(name_or_path).read_text()) or {}):
        if env is None:
            raise cfg.ConfigError(f"{source} names no env: add `env: NAME` to it (`python -m workbench envs` lists "
                                  f"them), or pass --env NAME (env= from Python)")
        return cfg.replace(config, env=env_named_by_file(env, Path(name_or_path).parent))
    if env is not None and env_named_by_file(env, Path(name_or_path).parent if Path(name_or_path).is_file() else None) \
            != config.env:
        raise cfg.ConfigError(f"{source} is tuned for env '{config.env}' (its target_return, learning rate and the "
                              f"rest): --env {env} (env= from Python) would train '{env}' with them. Train "
                              f"'{env}' with its own config (`python -m workbench train {env}`, wb.train({env!r})), "
                              f"or copy the file, set `env: {env}` and change what does not fit")
    return config


def _load_config(name_or_path: str, algorithm: str | None = None):
    from ..runtime import registry
    algorithm = algorithm.lower() if isinstance(algorithm, str) else algorithm  # (as configs hold the names)
    registered = register_env_file(name_or_path)
    if registered is not None:
        return default_config(registered, algorithm)
    found = config_file(name_or_path)
    name = name_or_path.removeprefix("configs/").removesuffix(".yaml")  # (a shipped config's, as config_file reads it)
    if found is None or (not Path(name_or_path).is_file() and registry.replaced_shipped(name)):
        if name in registry.names():  # (a shipped config is tuned for the shipped env, not its replacement)
            return default_config(name, algorithm)
    path = found or resolve_config(name_or_path)
    config = cfg.load_yaml(path)
    if (env := env_named_by_file(config.env, Path(path).parent)) != config.env:  # (env: my_env.py)
        config = cfg.replace(config, env=env)
    if algorithm and algorithm != config.algorithm and not Path(name_or_path).is_file():
        # a shipped config is tuned for its algorithm: another one starts from its own defaults for the env,
        # keeping the task's settings (pendulum.yaml's DDPG tuning would not learn with PPO)
        return cfg.replace(default_config(config.env, algorithm), env_params=config.env_params,
                           target_return=config.target_return)
    return config
