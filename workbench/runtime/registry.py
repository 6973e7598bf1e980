"""Env sources by name: the shipped files in workbench.envs and those added by `register`
(which the `%%warpenv` magic calls). Both go through the same parse and compile path.

A checkpoint keeps the source of a registered env (`stored`), so that a new process can resume,
evaluate or replay its run (`register_stored`) without the notebook cell that defined it."""
from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from ..compiler import envdef, envdef_c
from ..errors import EnvDefinitionError, UnknownEnvError, WorkbenchWarning, did_you_mean

# every spelling of an env's language (`register`'s language, `%%warpenv --lang`) -> the one kept
LANGUAGES = {"python": "python", "py": "python", "cuda": "cuda", "cuda-c": "cuda", "c": "cuda"}


def canonical_language(language) -> str | None:
    """"python" or "cuda" for any spelling in LANGUAGES (case aside), else None."""
    return LANGUAGES.get(language.lower()) if isinstance(language, str) else None


@dataclass(frozen=True)
class EnvSource:
    name: str
    source: str
    filename: str
    language: str = "python"  # "python" (cpu, cuda targets) or "cuda" (CUDA C, target cuda-c)
    c_source: str | None = None  # a Python env's CUDA C phases (its sibling NAME.cu), for target cuda-c
    c_filename: str | None = None
    params: tuple = ()  # (name, value) pairs: defaults given at registration (the magic's --agents), before make()'s
    shipped: bool = False  # a file of workbench.envs, which every process has
    from_run: bool = False  # registered by loading a run that kept it (register_stored), not by the user


_REGISTRY: dict = {}
_BUILTINS_LOADED = False


def _load_builtins():
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    package = resources.files("workbench.envs")
    for entry in sorted(package.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".py") and not entry.name.startswith("_"):
            name = entry.name[:-3]
            c_file = package / f"{name}.cu"
            c_source, c_filename = (c_file.read_text(), str(c_file)) if c_file.is_file() else (None, None)
            _REGISTRY.setdefault(name, EnvSource(name, entry.read_text(), str(entry), "python", c_source, c_filename,
                                                 shipped=True))


def register(name: str, source: str, *, language: str = "python", filename: str | None = None,
             params: dict | None = None, c_source: str | None = None, c_filename: str | None = None) -> EnvSource:
    """Register (or replace) the env `name` from source text; `params` override its PARAMS defaults.
    `language`: "python" (the default) or "cuda" (a CUDA C source), spelt as `%%warpenv --lang` takes it.
    c_source: a Python env's CUDA C twin (its phases as `__device__` functions of the same names, as a
    shipped NAME.py's NAME.cu), which the cuda-c target compiles while cpu and cuda run the Python."""
    if not isinstance(name, str) or not name.isidentifier():
        raise EnvDefinitionError(f"wb.register: the env name must be a Python identifier (e.g. 'chase'), got {name!r}")
    if not isinstance(source, str):
        raise EnvDefinitionError(f"wb.register({name!r}, source): source must be the env's source text (a str, e.g. "
                                 f"open('{name}.py').read()), got {type(source).__name__}")
    canonical = canonical_language(language)
    if canonical is None:
        hint = did_you_mean(language, LANGUAGES, repr) if isinstance(language, str) else ""
        raise EnvDefinitionError(f"wb.register({name!r}): language={language!r} is not an env language; use 'python' "
                                 f"(the default; also 'py') or 'cuda' (a CUDA C source with a /*@workbench ... */ "
                                 f"block; also 'cuda-c' or 'c'){hint}")
    if c_source is not None and (canonical != "python" or not isinstance(c_source, str)):
        raise EnvDefinitionError(f"wb.register({name!r}): c_source is the CUDA C twin of a Python source (text); "
                                 + ("a CUDA C env holds its phases itself: drop c_source" if canonical != "python"
                                    else f"got {type(c_source).__name__}"))
    if params is not None and not isinstance(params, Mapping):
        raise EnvDefinitionError(f"wb.register({name!r}): params must be a dict of parameter values, got {params!r}")
    _load_builtins()
    entry = EnvSource(name, source, filename or f"<warpenv {name}>", canonical, c_source,
                      (c_filename or f"<warpenv {name} C>") if c_source is not None else None,
                      params=tuple((params or {}).items()))
    _definition(entry, dict(entry.params))  # (a broken source is refused here, at its line, and replaces nothing)
    replaced = _REGISTRY.get(name)
    if replaced is not None and replaced.shipped and replaced.source != source:
        warnings.warn(f"wb.register({name!r}) replaces the shipped env {name!r} in this process: wb.train({name!r}) "
                      f"and the CLI now train this source with the default config (not configs/{name}.yaml, which "
                      f"is tuned for the shipped env); register it under another name to keep both",
                      WorkbenchWarning, stacklevel=2)
    _REGISTRY[name] = entry
    return entry


def shipped_for_run(name: str) -> str | None:
    """Make `name` the shipped env again for a run that trained it, where loading another run put a
    changed source in its place; None when done (or `name` is no shipped env), else why not: the
    user registered another source under the shipped name in this process."""
    if not replaced_shipped(name):  # (a registration of the shipped text itself replaces nothing)
        return None
    if _REGISTRY[name].from_run:
        del _REGISTRY[name]
        global _BUILTINS_LOADED
        _BUILTINS_LOADED = False
        _load_builtins()
        return None
    return "it trained the shipped env, which wb.register replaced in this process"


def replaced_shipped(name: str) -> bool:
    """Whether `name` is a shipped env's name that a registered source replaced in this process."""
    _load_builtins()
    entry, file = _REGISTRY.get(name), resources.files("workbench.envs").joinpath(f"{name}.py")
    return entry is not None and not entry.shipped and file.is_file() and entry.source != file.read_text()


def lookup(name: str) -> EnvSource:
    _load_builtins()
    if name not in _REGISTRY:
        raise UnknownEnvError(f"unknown env '{name}'{did_you_mean(name, _REGISTRY, repr)}; known envs: "
                              f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def names() -> list:
    _load_builtins()
    return sorted(_REGISTRY)


def definition(name: str, **params) -> envdef.EnvDefinition:
    entry = lookup(name)
    return _definition(entry, {**dict(entry.params), **params})


def _definition(entry: EnvSource, params: dict) -> envdef.EnvDefinition:
    if entry.language in envdef_c.C_LANGUAGES:
        defn = envdef_c.parse_c(entry.name, entry.source, entry.filename, params)
    else:
        defn = envdef.parse(entry.name, entry.source, entry.filename, params)
        if entry.c_source is not None:
            defn = envdef_c.attach_c(defn, entry.c_source, entry.c_filename)
    return dataclasses.replace(defn, origin=entry)


_KEPT = ("name", "source", "language", "filename", "c_source", "c_filename")


# the name of the readable copy of a registered env's source a run folder keeps, by the source's language
SOURCE_COPIES = {"python": "env_source.py", "cuda": "env_source.cu", "cuda-c": "env_source.cu"}  # (cuda-c: older runs)


def stored(defn: envdef.EnvDefinition) -> dict | None:
    """What a checkpoint keeps of the env `defn` was parsed from: its registered source, language and
    registration parameters; None for a shipped env (every process has it) or one parsed directly."""
    entry = getattr(defn, "origin", None)
    if entry is None or entry.shipped:
        return None
    return {**{k: getattr(entry, k) for k in _KEPT}, "params": dict(entry.params)}


def source_digest(defn: envdef.EnvDefinition) -> str | None:
    """A fingerprint of the source `defn` was parsed from (its C source too), which a checkpoint keeps so
    that loading it where the env's source changed (an upgrade, an edited envs/*.py) says so."""
    entry = getattr(defn, "origin", None)
    if entry is None:
        return None
    return _digest(entry)


def _digest(entry: EnvSource) -> str:
    return hashlib.sha256(f"{entry.source}\0{entry.c_source or ''}".encode()).hexdigest()[:16]


def changed_since(name: str, digest: str | None) -> bool:
    """Whether the env registered as `name` here has another source than the one fingerprinted `digest`
    (False without a digest, as in checkpoints written before they kept one)."""
    _load_builtins()
    return bool(digest) and name in _REGISTRY and _digest(_REGISTRY[name]) != digest


def register_stored(kept: dict | None) -> str | None:
    """Register the env a checkpoint kept (`stored`) unless this process has it already: None when
    done, else what differs from the env registered under that name here (which stays). A shipped
    env of that name gives way to the kept one."""
    if not kept:
        return None
    _load_builtins()
    name = kept["name"]
    wanted = EnvSource(name, kept["source"], kept.get("filename") or f"<warpenv {name}>",
                       kept.get("language", "python"), kept.get("c_source"), kept.get("c_filename"),
                       params=tuple(dict(kept.get("params") or {}).items()), from_run=True)
    current = _REGISTRY.get(name)
    if current is None or current.shipped or (current.from_run and current != wanted):
        if current is not None and current.shipped:
            warnings.warn(f"the run's env {name!r} is a changed source of the shipped env {name!r}: it replaces the "
                          f"shipped one in this process (wb.make({name!r}) makes it) until a run of the shipped env "
                          f"is loaded", WorkbenchWarning, stacklevel=3)
        _REGISTRY[name] = wanted
        return None
    if canonical_language(current.language) != canonical_language(wanted.language):
        return f"its language is {current.language!r} here, {wanted.language!r} in the run"
    for what, here, there in (("source", current.source, wanted.source), ("C source", current.c_source,
                                                                          wanted.c_source)):
        if (here or "") != (there or ""):
            return f"its {what} differs, {_first_difference(here or '', there or '')}"
    if dict(current.params) != dict(wanted.params):
        return f"its registration parameters are {dict(current.params)} here, {dict(wanted.params)} in the run"
    return None


def _first_difference(here: str, there: str) -> str:
    a, b = here.splitlines(), there.splitlines()
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first at line {k + 1}: {x.strip()!r} here, {y.strip()!r} in the run"
    return f"here it has {len(a)} lines, in the run {len(b)}"


def describe_space(space) -> str:
    """A space in a few words: Discrete(5), MultiDiscrete(10, 21), Box(3,) in [-1, 1]."""
    from ..compiler.envdef import Box, Discrete, MultiDiscrete
    if isinstance(space, Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, MultiDiscrete):
        return f"MultiDiscrete({', '.join(str(n) for n in space.nvec)})"
    if isinstance(space, Box):
        bounds = ""
        if all(isinstance(b, (int, float)) for b in (space.low, space.high)) and (
                abs(space.low) != float("inf") or abs(space.high) != float("inf")):
            bounds = f" in [{space.low:g}, {space.high:g}]"
        return f"Box{tuple(space.shape)}{bounds}"
    return repr(space)
