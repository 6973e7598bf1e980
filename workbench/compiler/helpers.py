"""Small math helpers that compile on every target (numpy's versions do not on the GPU targets).

Import them in an env (`from workbench.compiler.helpers import rint, clip`); each numba target compiles this
module's source into its kernels, and cuda/wb_runtime.cuh gives CUDA C phases the same functions.
"""
import math


def round_half_even(x):
    """x rounded to the nearest integer, ties to even, as a float (np.rint, C rint)."""
    low = math.floor(x)
    rest = x - low
    if rest > 0.5 or (rest == 0.5 and low % 2 != 0):
        low += 1
    return float(low)


def rint(x):
    """np.rint(x) on every target: round_half_even."""
    return round_half_even(x)


def clip(x, low, high):
    """x limited to [low, high] (np.clip of one value)."""
    return min(max(x, low), high)


def sign(x):
    """-1, 0 or 1 with the sign of x (np.sign of one value), in x's type."""
    if x > 0:
        return x - x + 1
    if x < 0:
        return x - x - 1
    return x - x
