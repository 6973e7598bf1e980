"""Env sources by name: the shipped files in workbench.envs and those added by `register`
(which the `%%warpenv` magic calls). Both go through the same parse and compile path."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from ..compiler import envdef, envdef_c
from ..errors import UnknownEnvError


@dataclass(frozen=True)
class EnvSource:
    name: str
    source: str
    filename: str
    language: str = "python"  # "python" (cpu, cuda targets) or "cuda-c"
    c_source: str | None = None  # a Python env's CUDA C phases (its sibling NAME.cu), for target cuda-c
    c_filename: str | None = None
    params: tuple = ()  # (name, value) pairs: defaults given at registration (the magic's --agents), before make()'s


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
            _REGISTRY.setdefault(name, EnvSource(name, entry.read_text(), str(entry), "python", c_source, c_filename))


def register(name: str, source: str, *, language: str = "python", filename: str | None = None,
             params: dict | None = None) -> EnvSource:
    """Register (or replace) the env `name` from source text; `params` override its PARAMS defaults."""
    if not name.isidentifier():
        raise ValueError(f"env name must be an identifier, got {name!r}")
    _load_builtins()
    entry = EnvSource(name, source, filename or f"<warpenv {name}>", language, params=tuple((params or {}).items()))
    _REGISTRY[name] = entry
    return entry


def lookup(name: str) -> EnvSource:
    _load_builtins()
    if name not in _REGISTRY:
        raise UnknownEnvError(f"unknown env '{name}'; known envs: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def names() -> list:
    _load_builtins()
    return sorted(_REGISTRY)


def definition(name: str, **params) -> envdef.EnvDefinition:
    entry = lookup(name)
    params = {**dict(entry.params), **params}
    if entry.language in envdef_c.C_LANGUAGES:
        return envdef_c.parse_c(entry.name, entry.source, entry.filename, params)
    defn = envdef.parse(entry.name, entry.source, entry.filename, params)
    if entry.c_source is not None:
        defn = envdef_c.attach_c(defn, entry.c_source, entry.c_filename)
    return defn
