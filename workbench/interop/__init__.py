"""Adapters to other ecosystems' env APIs (Gymnasium, Stable-Baselines3, PettingZoo, TorchRL) and
a PyTorch Lightning module. Each adapter module imports its ecosystem lazily, through
workbench.extras.require, so `import workbench` stays light."""

from ..errors import WorkbenchError


class AdapterError(WorkbenchError, ValueError):
    """An adapter was asked for an env it cannot represent, or given input it cannot pass on."""
