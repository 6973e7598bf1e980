"""bench/probe_cartpole_step.py's variants edit the cuda-c program as generated today: each edit still
finds what it changes (codegen_c needs no GPU), so a codegen change that breaks one shows here."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import probe_cartpole_step as probe  # noqa: E402

from workbench.compiler.codegen import gpu_layout  # noqa: E402
from workbench.runtime import registry  # noqa: E402


@pytest.mark.parametrize("name", sorted(probe.VARIANTS))
def test_variant_edits_todays_program(name):
    defn = registry.definition("cartpole", **probe.VARIANTS[name][2])
    original, edited = probe.program(name)
    layout = gpu_layout(defn.num_agents)
    source = edited(defn, layout)
    assert "wb_step(" in source
    step_edit, whole_edit, _, _ = probe.VARIANTS[name]
    if step_edit is not None or whole_edit is not None:
        assert source != original(defn, layout)
