"""Gradient clipping runs inside optimizer.step() with Keras semantics."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.optim import add_gradient_clipping, build_optimizer


def _params_with_grads(*grads: list[float]) -> list[nn.Parameter]:
    params = []
    for grad in grads:
        param = nn.Parameter(torch.zeros(len(grad)))
        param.grad = torch.tensor(grad)
        params.append(param)
    return params


def _step_delta(params, **clip) -> list[torch.Tensor]:
    optimizer = torch.optim.SGD(params, lr=1.0)
    add_gradient_clipping(optimizer, **clip)
    optimizer.step()
    return [p.detach().neg() for p in params]  # the applied (clipped) gradient


def test_global_clipnorm_scales_all_gradients_together():
    applied = _step_delta(_params_with_grads([3.0], [4.0]), global_clipnorm=1.0)
    scale = 1.0 / (5.0 + 1e-6)
    assert torch.allclose(applied[0], torch.tensor([3.0 * scale]))
    assert torch.allclose(applied[1], torch.tensor([4.0 * scale]))


def test_clipnorm_clips_each_tensor_on_its_own():
    applied = _step_delta(_params_with_grads([3.0, 4.0], [0.3, 0.4]), clipnorm=1.0)
    assert torch.allclose(applied[0], torch.tensor([0.6, 0.8]))
    assert torch.equal(applied[1], torch.tensor([0.3, 0.4]))  # below the limit: untouched


def test_clipvalue_clamps_elements_after_norm_clipping():
    applied = _step_delta(_params_with_grads([30.0, 40.0, 0.1]), clipnorm=10.0, clipvalue=7.0)
    assert torch.allclose(applied[0], torch.tensor([6.0, 7.0, 0.02]))


def test_unset_clipping_registers_no_hook_and_bad_values_fail():
    optimizer = torch.optim.SGD(_params_with_grads([1.0]), lr=1.0)
    assert add_gradient_clipping(optimizer) == []
    with pytest.raises(ValueError, match="only one of clipnorm"):
        add_gradient_clipping(optimizer, clipnorm=1.0, global_clipnorm=1.0)
    with pytest.raises(ValueError, match="clipvalue` must be > 0"):
        add_gradient_clipping(optimizer, clipvalue=0.0)


def test_build_optimizer_wires_global_clipnorm(make_config):
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = build_optimizer(
        make_config("sgd", global_clipnorm=0.5, lr=("constant", {"learning_rate": 1.0})), model
    )
    model.weight.grad = torch.tensor([[6.0, 8.0]])
    optimizer.step()
    assert torch.allclose(model.weight.detach(), torch.tensor([[-0.3, -0.4]]))
