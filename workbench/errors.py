"""Errors with short, precise messages; in IPython they render without a long traceback."""
import difflib


def did_you_mean(word: str, candidates, show=str) -> str:
    """'; did you mean X?' (or 'X, Y or Z?') naming the closest candidates, else ''."""
    candidates = sorted(set(candidates))
    same_letters = [c for c in candidates if c.lower() == word.lower() and c != word]  # np.PI, np.NaN
    close = difflib.get_close_matches(word, candidates, n=3, cutoff=0.75)
    if not close and 2 <= len(word) <= 4:  # (short names: one letter off is below the ratio's cutoff, 'ss' for 's')
        close = [c for c in candidates if _one_edit_apart(word, c)][:3]
    found = [show(f) for f in dict.fromkeys(same_letters + close)][:3]
    if not found:
        return ""
    return f"; did you mean {found[0] if len(found) == 1 else ', '.join(found[:-1]) + ' or ' + found[-1]}?"


def _one_edit_apart(a: str, b: str) -> bool:
    """One letter inserted, deleted or replaced turns `a` into `b`."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


class WorkbenchError(Exception):
    """Base class: the message names the field or line and the fix."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


class ConfigError(WorkbenchError, ValueError):
    """A config key that is unknown or of the wrong type (workbench.learn.config's)."""


class EnvDefinitionError(WorkbenchError, ValueError):
    """The env source is malformed; `line` is the source line when known."""

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line


class EnvParameterError(EnvDefinitionError):
    """An env parameter outside its valid range (the env's validate_params refused it)."""


class EnvCompileError(WorkbenchError, RuntimeError):
    """A kernel failed to compile for a target; `details` keeps the compiler's full text."""

    def __init__(self, message, line=None, details=""):
        super().__init__(message)
        self.line = line
        self.details = details


class TargetUnavailableError(WorkbenchError, RuntimeError):
    """The requested target cannot run on this machine."""


class EnvIndexError(WorkbenchError, IndexError):
    """An env's phase indexed an array out of its bounds (found by bounds-checked kernels)."""

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line


class EnvRuntimeError(WorkbenchError, RuntimeError):
    """An env's phase raised a Python error where numba's CUDA simulator runs it (the compiled targets
    do not raise there); the message names the env's line."""

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line


class UnknownEnvError(WorkbenchError, KeyError):
    def __str__(self):
        return str(self.args[0])


class ActionError(WorkbenchError, ValueError):
    """Actions of the wrong shape, dtype, device or range."""


class InsufficientMemoryError(WorkbenchError, MemoryError):
    """The arrays asked for do not fit in the device's free memory."""


class NonFiniteError(WorkbenchError, FloatingPointError):
    """A step produced NaN or inf (raised in debug mode)."""


class WorkbenchWarning(UserWarning):
    """Every warning the workbench gives (filter them by this category); under torchrun only rank 0
    shows them, as every rank would give the same."""


class BudgetWarning(WorkbenchWarning):
    """A run's budget too small for it to learn (DDPG's gradient steps, its learning_starts): given where a
    trainer is built to train, not where a run is loaded to act or be evaluated."""


class ConsistencyError(WorkbenchError, AssertionError):
    """Two targets disagree, or an env breaks the runner's contract."""
