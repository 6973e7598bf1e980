"""The project's spaces as Gymnasium spaces, agent names for dict-keyed APIs, and the dtype the
adapters hand actions to env.step in."""
from __future__ import annotations


import numpy as np
import torch

from ..compiler.envdef import Box, Discrete, MultiDiscrete
from ..extras import require
from . import AdapterError


def gymnasium_space(space, seed: int | None = None):
    """Discrete, MultiDiscrete or Box (float32) as the gymnasium.spaces equivalent."""
    spaces = require("gymnasium.spaces", "gymnasium", "Gymnasium spaces")
    if isinstance(space, Discrete):
        return spaces.Discrete(int(space.n), seed=seed)
    if isinstance(space, MultiDiscrete):
        return spaces.MultiDiscrete(np.asarray(space.nvec, dtype=np.int64), seed=seed)
    if isinstance(space, Box):
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), shape).copy()
        high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), shape).copy()
        return spaces.Box(low, high, shape, dtype=np.float32, seed=seed)
    raise TypeError(f"no Gymnasium equivalent of {space!r}")


def agent_names(env) -> list:
    """One name per agent id: '<group>_<k>' from the env's AGENT_GROUPS (taggers_0, runners_3, ...),
    else 'agent_<id>'."""
    names = [f"agent_{i}" for i in range(env.num_agents)]
    for group, ids in (env.definition.agent_groups() or {}).items():
        for k, i in enumerate(ids):
            names[i] = f"{group}_{k}"
    return names


def wide_action_dtype(env) -> torch.dtype:
    """The dtype the adapters hand their callers' actions to env.step in: int64 for discrete spaces
    (env.step range-checks them before narrowing them to the store's int8/int16/int32, where 256
    would wrap to 0), float32 for Box."""
    return torch.float32 if env.store["action"].is_floating_point() else torch.int64


def staged_actions(env) -> torch.Tensor:
    """A copy of the store's actions in wide_action_dtype: the adapters that take actions agent by
    agent write them here and pass the whole tensor to env.step."""
    return env.store["action"].to(wide_action_dtype(env), copy=True)


def checked_seed(seed, call: str, nonnegative: bool = True) -> int | None:
    """`seed` as an int (None stays None), or AdapterError naming `call`: an adapter seeds Gymnasium
    spaces before the env, and those refuse what the env would name (a str) or take nothing below 0."""
    if seed is None:
        return None
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or (nonnegative and seed < 0):
        raise AdapterError(f"{call} takes one int{' >= 0' if nonnegative else ''} for all replicas (the env derives "
                           f"every replica's stream from it), got {seed!r} ({type(seed).__name__})")
    return int(seed)


def action_tensor(value, env, shape: tuple, where: str) -> torch.Tensor:
    """`value` (an array, tensor, list or number) as a tensor of `shape` in wide_action_dtype on the
    env's device. Where unambiguous another shape is taken: a Discrete space's `shape + (1,)`, a
    one-number Box's `shape[:-1]`. AdapterError naming `where` and what it takes otherwise: another
    shape (never reshaped or broadcast silently), no numbers, or for discrete spaces floats or
    booleans (a cast would truncate 0.9 to 0)."""
    space = env.action_space
    also = ((shape + (1,),) if isinstance(space, Discrete) else
            (shape[:-1],) if isinstance(space, Box) and tuple(space.shape) == (1,) else ())
    discrete = not isinstance(space, Box)
    kind = "integers" if discrete else "numbers"
    wanted = f"{kind} of shape {list(shape)} ({space!r})"
    if not isinstance(value, torch.Tensor):
        array = None if value is None else np.asarray(value)
        if array is None or array.dtype.kind not in "biuf":
            raise AdapterError(f"{where}: actions must be {wanted}, got {type(value).__name__}"
                               + (f" of dtype {array.dtype}" if array is not None else ""))
        value = torch.as_tensor(array)
    if value.is_complex() or (discrete and (value.is_floating_point() or value.dtype == torch.bool)):
        raise AdapterError(f"{where}: actions must be {wanted}, got dtype {value.dtype}; a discrete action is an "
                           f"integer (cast yours, e.g. actions.astype(np.int64), if they are whole numbers)")
    if tuple(value.shape) != tuple(shape):
        if tuple(value.shape) not in also:
            raise AdapterError(f"{where}: actions must be {wanted}, got shape {list(value.shape)}")
        value = value.reshape(shape)
    return value.to(env.device, wide_action_dtype(env))
