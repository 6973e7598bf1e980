"""A missing optional package is named with the pip extra that installs it."""
import sys

import pytest

import workbench as wb
import workbench.extras  # noqa: F401

ADAPTERS = [("as_gymnasium", "gymnasium", "gymnasium"), ("as_sb3", "stable_baselines3", "sb3"),
            ("as_pettingzoo", "pettingzoo", "pettingzoo"), ("as_torchrl", "torchrl", "torchrl")]


@pytest.mark.parametrize("method, module, extra", ADAPTERS)
def test_adapter_without_its_package_names_the_extra(method, module, extra, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import module -> ImportError
    for name in [n for n in sys.modules if n.startswith("workbench.interop.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(wb.extras.MissingExtraError, match=rf'pip install "warp-workbench\[{extra}\]"'):
        getattr(wb.Env, method)(object())


def test_lightning_without_its_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.delitem(sys.modules, "workbench.interop.lightning", raising=False)
    with pytest.raises(wb.extras.MissingExtraError, match=r'pip install "warp-workbench\[lightning\]"'):
        import workbench.interop.lightning  # noqa: F401
