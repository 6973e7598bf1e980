"""Optional dependencies: import them on first use, or say which pip extra brings them."""
from __future__ import annotations

import importlib

from .errors import WorkbenchError


class MissingExtraError(WorkbenchError, ImportError):
    """An optional package is not installed; the message names the pip extra that installs it."""


def require(module: str, extra: str, purpose: str = ""):
    """Import `module`, or raise MissingExtraError naming `pip install "warp-workbench[extra]"`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" for {purpose}" if purpose else ""
        raise MissingExtraError(f"{module} is needed{what} but cannot be imported ({exc}); install it with "
                                f'pip install "warp-workbench[{extra}]"') from None
