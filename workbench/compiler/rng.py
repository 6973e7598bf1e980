"""Counter-based random numbers that give the same values on every target.

A key is a 64-bit hash of (seed, replica, agent, episode, step); the i-th draw of a key is
a further hash of (key, i). No state is carried between calls, so the numbers do not depend
on how agents are mapped to threads. The functions below are plain Python over numpy uint64
scalars: each target compiles this module's source into its kernels (see targets/), and
`reference_uniform` runs it on the host for tests.
"""
import math

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S40 = np.uint64(40)
_ONE = np.uint64(1)
_TO_UNIT = np.float32(1.0 / 16777216.0)
_TWO_PI = np.float32(2.0 * math.pi)
_TINY = np.float32(1e-12)
RESET_STEP = 0xFFFFFFFF  # the step of reset's keys: reset draws never meet a step's
OBSERVE_STEP = np.uint64(0x100000000)  # observe's keys use step t + OBSERVE_STEP, apart from the phases' t


def mix64(x):
    """splitmix64 finaliser: a bijective 64-bit hash."""
    x = (x ^ (x >> _S30)) * _MUL1
    x = (x ^ (x >> _S27)) * _MUL2
    return x ^ (x >> _S31)


def make_key(seed, env, agent, episode, step):
    """Key of one agent's random stream at one step of one episode of one replica."""
    k = mix64(np.uint64(seed) + _GOLDEN)
    k = mix64(k ^ (np.uint64(env) * _GOLDEN))
    k = mix64(k ^ (np.uint64(agent) * _MUL1))
    k = mix64(k ^ (np.uint64(episode) * _MUL2))
    return mix64(k ^ np.uint64(step))


def uniform(key, i):
    """i-th uniform float32 in [0, 1) of the stream `key`."""
    x = mix64(key + (np.uint64(i) + _ONE) * _GOLDEN)
    return np.float32(x >> _S40) * _TO_UNIT


def uniform_range(key, i, low, high):
    """i-th uniform float32 in [low, high)."""
    return np.float32(low) + (np.float32(high) - np.float32(low)) * uniform(key, i)


def randint(key, i, n):
    """i-th integer uniform in [0, n)."""
    x = mix64(key + (np.uint64(i) + _ONE) * _GOLDEN)
    return np.int32((x >> _S30) % np.uint64(n))


def normal(key, i):
    """i-th standard normal float32 (Box-Muller over draws 2i and 2i+1)."""
    u1 = uniform(key, 2 * i) + _TINY
    u2 = uniform(key, 2 * i + 1)
    return np.float32(math.sqrt(np.float32(-2.0) * math.log(u1))) * np.float32(math.cos(_TWO_PI * u2))


def reference_uniform(seed, env, agent, episode, step, i):
    """Host evaluation of `uniform(make_key(...), i)` for tests."""
    with np.errstate(over="ignore"):
        return float(uniform(make_key(seed, env, agent, episode, step), i))
