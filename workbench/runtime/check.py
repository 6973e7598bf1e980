"""`check_env`: the same env on several targets must agree, and every target must keep the runner's contract."""
from __future__ import annotations

import ast
import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..compiler.envdef import Discrete, MultiDiscrete
from ..errors import ConsistencyError, EnvParameterError
from .env_metrics import checked_metrics

CHECK_STEPS = 64  # check_new_env's: a check_env on the cpu target this long (or past an episode's end) counts as one


@dataclass
class CheckReport:
    name: str
    targets: tuple
    steps: int
    num_envs: int
    episodes_finished: int
    max_abs_diff: dict = field(default_factory=dict)  # {array: largest |difference| from the first target}
    max_steps: int | None = None  # the env's MAX_STEPS
    zero_obs: tuple = ()  # flat indices of observation entries that were 0 everywhere, at every step

    @property
    def caveat(self) -> str:
        """What looks wrong or went unchecked ("" for nothing): an observation entry always 0 (one observe
        never writes?), or no episode ended (the auto-reset untested)."""
        notes = []
        if self.zero_obs:
            shown = ", ".join(f"obs[..., {i}]" for i in self.zero_obs[:4]) + (" ..." if len(self.zero_obs) > 4 else "")
            notes.append(f"{shown} stayed 0 for every agent at every step: does observe write it (or is OBSERVATION "
                         f"larger than what observe fills)?")
        if not self.episodes_finished:
            more = (f" (MAX_STEPS is {self.max_steps}: steps={self.max_steps + 8} would)"
                    if self.max_steps and self.max_steps < 100_000 else "")
            notes.append(f"no episode ended, so the reset and the final observations were not compared: check more "
                         f"steps{more}")
        return "; ".join(notes)

    def __str__(self):
        diffs = ", ".join(f"{k}: {v:.2e}" for k, v in self.max_abs_diff.items())
        return (f"check_env({self.name!r}) passed on {list(self.targets)}: {self.steps} steps x {self.num_envs} "
                f"replicas, {self.episodes_finished} episodes finished; largest differences {diffs or 'none'}"
                + (f"; but {self.caveat}" if self.caveat else ""))


def _host_actions(space, shape, rng):
    if isinstance(space, Discrete):
        return torch.from_numpy(rng.integers(0, space.n, size=shape, dtype=np.int32))
    if isinstance(space, MultiDiscrete):
        cols = [rng.integers(0, n, size=shape[:2], dtype=np.int32) for n in space.nvec]
        return torch.from_numpy(np.stack(cols, axis=-1))
    low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape)
    low = np.where(np.isfinite(low), low, -1.0)
    high = np.where(np.isfinite(high), high, 1.0)
    return torch.from_numpy(rng.uniform(low, high, size=shape).astype(np.float32))


def _contract(env, name):
    for arr, tensor in env.store.items():
        spec = env.store.spec(arr)
        if tuple(tensor.shape) != env.store.full_shape(spec):
            raise ConsistencyError(f"{name}: array '{arr}' has shape {tuple(tensor.shape)}, "
                                   f"expected {env.store.full_shape(spec)}")
    for arr in ("obs", "reward"):
        if not bool(torch.isfinite(env.store[arr]).all()):
            raise ConsistencyError(f"{name} on {env.target.name}: '{arr}' holds NaN or inf")


def _final_observe_changes_nothing(ref, twin, name):
    """`twin` took the same step as `ref` without the final observation where an episode terminated (as the
    trainer steps): every array but final_obs must agree, else observe changed state a later step reads."""
    for arr in [n for n in ref.store if n not in ("obs", "final_obs")] + ["obs"]:  # (obs last: it shows the cause)
        a, b = ref.store[arr].cpu(), twin.store[arr].cpu()
        same = (a == b) | (a.isnan() & b.isnan()) if a.dtype.is_floating_point else a == b
        if not bool(same.all()):
            where = tuple(int(i) for i in (~same).nonzero()[0])
            raise ConsistencyError(
                f"{name}: observe changes '{arr}' (index {where}), which a later step reads. The trainer skips the "
                f"final observation where an episode terminates (Env.keep_final_obs = False), so training would "
                f"see other values; let observe only compute the observation (obs) and move the change into a "
                f"STEP phase")


def check_env(name_or_env, targets=None, *, num_envs: int = 8, steps: int = 64, seed: int = 0, rtol: float = 1e-4,
              atol: float = 1e-5, replicas_per_seed: int | None = None, env_params: dict | None = None,
              **params) -> CheckReport:
    """Run one env on each of `targets` in lockstep and compare every array after every step.
    replicas_per_seed: seed the replicas in blocks, as a population's env is (default: one block, or
    a given Env's own blocks when they divide num_envs).

    The env's parameters are the free keywords, or env_params (for one named like an argument here: steps).

    Each step starts every target from the first target's state (so float32 rounding cannot
    accumulate into a different trajectory), applies the same actions, and compares all arrays.
    Also checks shapes, finiteness, the auto-reset contract (t restarts at 0, the episode counter
    moves on, final_obs keeps the last observation) and that observe changes no state: a twin of the
    first target's env steps without the final observation where an episode terminates, as the
    trainer does, and must end every step equal but for final_obs; and runs the env's EVAL_METRICS on the
    first target's arrays (EnvDefinitionError naming a metric that fails). Raises ConsistencyError.
    """
    from . import registry
    from .env import Env
    from ..compiler.envdef_c import C_LANGUAGES
    from ..compiler.targets import available_targets

    params = {**(env_params or {}), **params}
    if isinstance(name_or_env, Env):
        name, params = name_or_env.name, {**name_or_env.definition.params, **params}
        base_target = name_or_env.target.name
        own = name_or_env.replicas_per_seed
        if replicas_per_seed is None and own != name_or_env.num_envs and num_envs % own == 0:
            replicas_per_seed = own
    else:
        name, base_target = name_or_env, None
    if "target" in params:  # (make's keyword; here the env's parameters are the free keywords)
        raise EnvParameterError(f"check_env compares targets: pass targets=({params['target']!r}, ...), not "
                                f"target={params['target']!r}")
    language = (name_or_env.definition.language if isinstance(name_or_env, Env)
                else registry.lookup(name).language)
    if targets is None and language in C_LANGUAGES:  # (an env written in CUDA C alone runs on cuda-c only)
        targets = ["cuda-c"]
    if targets is None:
        targets = [t for t in ("cpu", "cuda") if t in available_targets()]
        if base_target and base_target not in targets:
            targets.insert(0, base_target)
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    # debug kernels: bounds checked where the target can, an out-of-bounds access named by array, index and line
    definition = registry.definition(name, **params)  # (an env parameter named seed is the env's, not make's)
    envs = [Env(definition, num_envs=num_envs, target=t, seed=seed, debug=True, replicas_per_seed=replicas_per_seed)
            for t in targets]
    ref = envs[0]
    twin = Env(definition, num_envs=num_envs, target=targets[0], seed=seed, debug=True,
               replicas_per_seed=replicas_per_seed)
    twin.keep_final_obs = False
    names = list(ref.store)
    if ref.definition.obs_state:  # the observation is the state: a difference is named by its state array
        names.remove("obs")
        names.append("obs")
    worst = {arr: 0.0 for arr in names if ref.store[arr].dtype.is_floating_point} if len(targets) > 1 else {}

    def compare(stage):
        for env in envs[1:]:
            for arr in names:
                a = ref.store[arr].cpu()
                b = env.store[arr].cpu()
                if a.dtype.is_floating_point:
                    diff = (a.double() - b.double()).abs()
                    limit = atol + rtol * a.double().abs()
                    if bool((diff > limit).any()):
                        where = tuple(int(i) for i in (diff > limit).nonzero()[0])
                        raise ConsistencyError(
                            f"{name}: '{arr}' differs between {targets[0]} and {env.target.name} {stage} at index "
                            f"{where}: {a[where].item()} vs {b[where].item()}{_writers_hint(definition, arr)}")
                    worst[arr] = max(worst[arr], float(diff.max()) if diff.numel() else 0.0)
                elif not torch.equal(a, b):
                    where = tuple(int(i) for i in (a != b).nonzero()[0])
                    raise ConsistencyError(f"{name}: '{arr}' differs between {targets[0]} and {env.target.name} "
                                           f"{stage} at index {where}: {a[where].item()} vs {b[where].item()}"
                                           f"{_writers_hint(definition, arr)}")

    for env in envs:
        _contract(env, name)
    compare("after reset")
    rng = np.random.default_rng(seed)
    finished = 0
    obs_size = int(np.prod(ref.obs_shape))
    seen = ref.store["obs"].reshape(-1, obs_size).ne(0).any(0).cpu()  # [O]: entries ever nonzero
    for k in range(steps):
        snap = {n: t.cpu() for n, t in ref.store.items()}
        for env in envs[1:] + [twin]:  # (before any step: on cpu, snap holds ref's own tensors)
            env.store.load_snapshot(snap)
        before_t = snap["t"].clone()
        before_ep = snap["episode"].clone()
        actions = _host_actions(ref.action_space, tuple(ref.store["action"].shape), rng)
        for env in envs:
            env.step(actions.to(env.device))
            _contract(env, name)
        compare(f"after step {k + 1}")
        twin.step(actions.to(twin.device))
        _final_observe_changes_nothing(ref, twin, name)
        done = ref.store["done"].cpu().bool()
        t_after = ref.store["t"].cpu()
        if not torch.equal(t_after[done], torch.zeros_like(t_after[done])):
            raise ConsistencyError(f"{name}: finished replicas must restart at t=0")
        if not torch.equal(t_after[~done], before_t[~done] + 1):
            raise ConsistencyError(f"{name}: running replicas must advance t by one")
        if not torch.equal(ref.store["episode"].cpu()[done], before_ep[done] + 1):
            raise ConsistencyError(f"{name}: a finished replica must start a new episode")
        trunc = ref.store["truncated"].cpu().bool()
        if bool((trunc != (before_t + 1 >= ref.definition.max_steps)).any()):
            raise ConsistencyError(f"{name}: truncated must be set exactly when t reaches MAX_STEPS")
        finished += int(done.sum())
        seen |= ref.store["obs"].reshape(-1, obs_size).ne(0).any(0).cpu()
    zero = tuple(int(i) for i in (~seen).nonzero().reshape(-1))
    checked_metrics(ref)  # (EVAL_METRICS on the arrays of finished episodes)
    if "cpu" in targets and steps >= min(CHECK_STEPS, ref.definition.max_steps + 1):  # (bounds checked: enough)
        _remember_checked(ref.definition)
    return CheckReport(name, targets, steps, num_envs, finished, worst, ref.definition.max_steps, zero)


_CHECKED_IN_PROCESS: set = set()


@functools.lru_cache(maxsize=1)
def _compiler_digest() -> str:
    """A digest of the env compiler's own sources: on an editable install a changed code generator
    keeps the package's version, and its kernels are not the ones checked before."""
    from .. import compiler
    root = Path(compiler.__file__).parent
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        sha.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()[:24]


def _checked_key(definition) -> str:
    from ..compiler import kernel_cache
    text = repr((definition.source, definition.c_source, sorted((k, repr(v)) for k, v in definition.params.items()),
                 sorted(kernel_cache.versions().items()), _compiler_digest()))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _checked_marker(key: str):
    from ..compiler import kernel_cache
    return kernel_cache.cache_root() / "checked" / key if kernel_cache.enabled() else None


def _remember_checked(definition) -> None:
    key = _checked_key(definition)
    _CHECKED_IN_PROCESS.add(key)
    marker = _checked_marker(key)
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            from ..compiler.kernel_cache import write_once
            write_once(marker, definition.name.encode())
        except OSError:  # (a read-only cache: the check runs again in the next process)
            pass


def _writers_hint(definition, array: str) -> str:
    """Where the env's phases store `array` (function, line, text), and what most often makes targets
    differ there; '' for an array no phase stores (the framework's, or a CUDA C env's)."""
    if definition.language != "python":
        return ""
    try:
        tree = ast.parse(definition.source)
    except SyntaxError:
        return ""
    lines = definition.source.splitlines()
    phases = {fn.__name__ for fn in definition.reset_phases + definition.step_phases + definition.observe_phases}
    stores = [f"{fn.name}() line {node.lineno}: {lines[node.lineno - 1].strip()}"
              for fn in tree.body if isinstance(fn, ast.FunctionDef) and fn.name in phases
              for node in ast.walk(fn) if isinstance(node, (ast.Assign, ast.AugAssign))
              for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
              if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == array]
    if not stores:
        return ""
    shown = "\n    ".join(stores[:4]) + ("\n    ..." if len(stores) > 4 else "")
    return (f"\n  stored by:\n    {shown}\n  (most often: a comparison or a branch on a float32 value against a "
            f"Python float, which the compiled targets make in float64 and the CUDA simulator in float32; an entry "
            f"two agents of a replica both store in one phase; integer arithmetic past 64 bits; see "
            f"docs/writing-an-env.md, 'What a phase may use')")


def check_new_env(definition, params: dict) -> None:
    """Before a registered env (a source file, wb.register, %%warpenv; not a shipped env, nor one a run
    kept) first trains: check_env on the cpu target at 4 replicas, its kernels bounds checked, so that an
    index outside an array is an EnvIndexError naming the array, index and line rather than memory the
    unchecked training kernels overwrite in silence. Once per source and parameters on this machine (a
    marker in the compile cache; check_env leaves the same marker, so a %%warpenv cell's check counts).
    WORKBENCH_CHECK_NEW_ENVS=0 skips it."""
    from . import registry
    from ..compiler.envdef_c import C_LANGUAGES
    if os.environ.get("WORKBENCH_CHECK_NEW_ENVS", "1").lower() in ("0", "off", "false", "no"):
        return
    entry = registry.lookup(definition.name)
    if entry.shipped or entry.from_run or entry.language in C_LANGUAGES or entry.source != definition.source:
        return  # (a CUDA C source has no bounds-checked build; an Env made by hand is the caller's)
    key = _checked_key(definition)
    marker = _checked_marker(key)
    if key in _CHECKED_IN_PROCESS or (marker is not None and marker.exists()):
        return
    check_env(definition.name, targets=("cpu",), num_envs=4, steps=CHECK_STEPS, env_params=params)
