"""Names a user may reach for that are no field of a config: other libraries' names for ours (SYNONYMS),
TD3's, iteration counts, the env's own parameters; and the error for such keys, which names the fix."""
from __future__ import annotations

import dataclasses
import difflib

from ..errors import ConfigError

SYNONYMS = {"learning_rate": "lr", "n_envs": "num_envs", "total_timesteps": "total_env_steps",
            "n_steps": "rollout_length", "num_steps": "rollout_length", "n_epochs": "update_epochs",
            "clip_range": "clip_coef", "target_reward": "target_return", "gradient_steps": "updates_per_rollout",
            "polyak": "tau", "replay_size": "buffer_size", "start_steps": "learning_starts"}
TD3_NAMES = {"policy_delay", "policy_freq", "policy_frequency", "target_policy_noise", "target_noise", "noise_clip",
             "policy_noise", "target_noise_clip"}
# keys a user may reach for to set a run's length, which the config counts in env-steps
ITERATION_COUNTS = {"iterations", "num_iterations", "n_iterations", "max_iterations", "num_updates", "n_updates"}


def _env_parameters(env) -> dict:
    """The PARAMS of the env named `env` ({} when it names none that is registered)."""
    from ..runtime import registry
    try:
        return registry.definition(env).params if isinstance(env, str) and env else {}
    except Exception:  # (only a hint: an env that fails to load says why where it is made)
        return {}


def unknown_keys_error(cls, unknown, env=None, algorithms=()) -> ConfigError:
    """The error for keys the config class `cls` does not have, with "did you mean" from the env's
    parameters, other libraries' names (SYNONYMS), the other `algorithms`' classes or close spellings."""
    names = [f.name for f in dataclasses.fields(cls)]
    env_params = _env_parameters(env)
    hints = []
    for k in sorted(unknown):
        misspelt = difflib.get_close_matches(k, list(SYNONYMS), n=1, cutoff=0.8)
        ours = SYNONYMS.get(k) or (SYNONYMS[misspelt[0]] if misspelt else k)  # (another library's name for it)
        owners = [other for other in algorithms if other is not cls
                  and ours in {f.name for f in dataclasses.fields(other)}]
        if k in env_params:
            algorithm_field = (f"a field of {' and '.join(o.__name__ for o in owners)} (set algorithm: "
                               f"{' or '.join(o.algorithm for o in owners)} to use it), and also " if owners else "")
            hints.append(f"'{k}' is {algorithm_field}a parameter of env '{env}': for the env's, pass "
                         f"env_params={{'{k}': ...}} (CLI: --set \"env_params={{{k}: ...}}\")")
            continue
        close = difflib.get_close_matches(k, names, n=1, cutoff=0.6)
        if k in TD3_NAMES:
            hints.append(f"'{k}' is TD3's (delayed policy updates, target policy smoothing), which the workbench "
                         f"does not implement: DDPG updates its actor at every gradient step")
        elif ours == "lr" and cls.algorithm == "ddpg":
            hints.append(f"DDPG learns at 'actor_lr' and 'critic_lr' (for '{k}')")
        elif k in ITERATION_COUNTS and "total_env_steps" in names:
            hints.append(f"a run's length is 'total_env_steps' (an iteration is num_envs x rollout_length "
                         f"env-steps), not '{k}'; Trainer.train(num_iterations=N) runs N iterations")
        elif ours in names and ours != k:
            hints.append(f"did you mean '{ours}' for '{k}'?")
        elif owners:
            called = f"'{k}' is" if ours == k else f"'{k}' is what we call '{ours}',"
            hints.append(f"{called} a field of {' and '.join(o.__name__ for o in owners)}: set algorithm: "
                         f"{' or '.join(o.algorithm for o in owners)} to use it, or drop it")
        elif close:
            hints.append(f"did you mean '{close[0]}' for '{k}'?")
    hint = f"; {'; '.join(hints)}" if hints else ""
    return ConfigError(f"unknown key(s) {sorted(unknown)} for {cls.__name__}{hint}; valid keys: {names}")
