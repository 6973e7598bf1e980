"""An evaluation's reports as a JSON file (`python -m workbench evaluate --json`): strict JSON (a
mean that no episode made, NaN, is null) and each report with the settings it played."""
from __future__ import annotations

import json
import math
from pathlib import Path


def strict(value):
    """`value` (dicts, lists, numbers) with NaN and infinities as None."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strict(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write(path, results: dict) -> Path:
    """results {label: report} (each with its `settings`) into `path`."""
    path = Path(path)
    path.write_text(json.dumps(strict(results), indent=2, allow_nan=False))
    return path
