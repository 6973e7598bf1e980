"""Small math helpers that compile on every target (numpy's versions do not on the GPU targets).

Import them in an env (`from workbench.helpers import rint, clip`); each numba target compiles this
module's source into its kernels, and cuda/wb_runtime.cuh gives CUDA C phases the same functions.
The `_np_*` functions are what `np.NAME(...)` of one value means inside a phase (vocabulary.NUMPY
maps each numpy name to one of them or to a `math` function); they carry numpy's results for NaN
and infinities, and the public helpers call them so that both spellings agree.
"""
import math


def round_half_even(x):
    """x rounded to the nearest integer, ties to even, as a float (np.rint, C rint)."""
    return _np_rint(x)


def rint(x):
    """np.rint(x) on every target: round_half_even."""
    return _np_rint(x)


def clip(x, low, high):
    """x limited to [low, high] (np.clip of one value)."""
    return _np_clip(x, low, high)


def sign(x):
    """-1, 0 or 1 with the sign of x (np.sign of one value), in x's type."""
    return _np_sign(x)


def _np_rint(x):
    if not abs(x) < 4503599627370496.0:  # 2**52: already integral, or inf or NaN (math.floor would overflow)
        return x * 1.0
    low = math.floor(x)
    rest = x - low
    if rest > 0.5 or (rest == 0.5 and low % 2 != 0):
        low += 1
    return _signed_zero(float(low), x)


def _signed_zero(result, x):
    """A zero result with x's sign, as numpy's (np.ceil(-0.5) is -0.0: 1 / it is -inf)."""
    return math.copysign(result, x) if result == 0.0 else result


def _np_floor(x):
    if not abs(x) < 4503599627370496.0:
        return x * 1.0
    return _signed_zero(float(math.floor(x)), x)


def _np_ceil(x):
    if not abs(x) < 4503599627370496.0:
        return x * 1.0
    return _signed_zero(float(math.ceil(x)), x)


def _np_trunc(x):
    if not abs(x) < 4503599627370496.0:
        return x * 1.0
    # (floor and ceil, not math.trunc: the CUDA simulator runs this on numpy float32, which has no __trunc__)
    return _signed_zero(float(math.floor(x)) if x >= 0.0 else float(math.ceil(x)), x)


def _np_minimum(a, b):
    return a if (a <= b or a != a) else b  # NaN wins, as in numpy


def _np_maximum(a, b):
    return a if (a >= b or a != a) else b


def _np_fmin(a, b):
    return a if (a <= b or b != b) else b  # NaN loses


def _np_fmax(a, b):
    return a if (a >= b or b != b) else b


def _np_clip(x, low, high):
    return _np_minimum(_np_maximum(x, low), high)


def _np_sign(x):
    if x > 0:
        return x ** 0  # 1 in x's type, for inf as well (x - x + 1 would be NaN)
    if x < 0:
        return -(x ** 0)
    return x - x  # 0 stays 0, NaN stays NaN


def _np_where(condition, a, b):
    return a if condition else b


def _np_abs(x):
    return abs(x)


# numpy's arithmetic, logic and comparison ufuncs of one value each: the operators they name
def _np_add(x, y):
    return x + y


def _np_subtract(x, y):
    return x - y


def _np_multiply(x, y):
    return x * y


def _np_divide(x, y):
    return x / y


def _np_negative(x):
    return -x


def _np_positive(x):
    return +x


def _np_signbit(x):
    return math.copysign(1.0, x * 1.0) < 0.0  # -0.0 and -NaN too


def _np_logical_and(x, y):
    return bool(x) and bool(y)


def _np_logical_or(x, y):
    return bool(x) or bool(y)


def _np_logical_xor(x, y):
    return bool(x) != bool(y)


def _np_logical_not(x):
    return not x


def _np_greater(x, y):
    return x > y


def _np_greater_equal(x, y):
    return x >= y


def _np_less(x, y):
    return x < y


def _np_less_equal(x, y):
    return x <= y


def _np_equal(x, y):
    return x == y


def _np_not_equal(x, y):
    return x != y


def _np_square(x):
    return x * x


def _np_power(x, y):
    return x ** y


def _np_exp2(x):
    return 2.0 ** x


# the three below rely on numpy's division-by-zero results (float: nan or inf, int: 0): the cpu and
# cuda targets compile them with numba's numpy error model, the simulator binds numpy's own functions.
# A finite x over an infinite y takes its own branch: numba-cuda's float % and // give nan there
# (x - floor(x / y) * y is 0 * inf), numpy x, y or a signed zero. `y - y != 0` is true only for +-inf
# (and false for every int), so the branches type the same for ints and floats.
def _np_mod(x, y):
    if y == y and y - y != 0 and x - x == 0:
        if x == 0:
            return x - x if y > 0 else -(x - x)
        return x if (x > 0) == (y > 0) else y
    return x % y  # the sign of y, as np.mod and Python's %


def _np_floor_divide(x, y):
    if y == y and y - y != 0 and x - x == 0:
        zero = x - x
        if x == 0 or (x > 0) == (y > 0):
            return zero if (math.copysign(1.0, x) > 0) == (y > 0) else -zero
        return zero - 1
    return x // y


def _np_fmod(x, y):
    if y == y and y - y != 0 and x - x == 0:
        return x  # C fmod(x, +-inf)
    rest = abs(x) % abs(y)  # exact for operands of one sign
    if x < 0:
        return -rest
    return x - rest if x == 0 else rest  # x - rest keeps the sign of a zero x (C fmod(-0.0, y) is -0.0)
