"""The default MLPs' CPU tanh: 2 sigmoid(2x) - 1 on large blocks (faster there), torch's tanh on small
ones (a rollout step's rows, where the four ops cost more); the same values and gradients either way."""
import torch

from workbench.learn import policies


def test_both_forms_agree_with_torch_tanh_and_each_is_used_where_it_is_faster(monkeypatch):
    for rows in (64, 512):  # 4 k elements: torch's tanh; 32 k: the sigmoid form
        x = torch.randn(rows, 64, dtype=torch.float32, requires_grad=True)
        y = policies.Tanh()(x)
        reference = torch.tanh(x.detach().requires_grad_())
        assert torch.allclose(y, reference, atol=2e-7, rtol=0)
        y.sum().backward()
        reference.sum().backward()
        assert torch.allclose(x.grad, torch.ones_like(x) - reference.detach() ** 2, atol=2e-6, rtol=0)
    calls = []
    monkeypatch.setattr(policies._SigmoidTanh, "apply", lambda x: calls.append(x.numel()) or torch.tanh(x))
    policies.Tanh()(torch.zeros(64, 64))
    policies.Tanh()(torch.zeros(512, 64))
    assert calls == [512 * 64]
