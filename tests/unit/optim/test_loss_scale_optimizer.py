"""LossScaleOptimizer: skip on overflow, scale updates, equality with unscaled steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.optim import LossScaleOptimizer, add_gradient_clipping


def _setup(fused: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, fused=fused)
    return model, optimizer


def _loss(model: nn.Module) -> torch.Tensor:
    x = torch.arange(6.0).reshape(2, 3) / 6
    return model(x).pow(2).mean()


@pytest.mark.parametrize("fused", [True, False])
def test_finite_step_equals_unscaled_optimizer_step(fused):
    model, optimizer = _setup(fused)
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=2.0**10)
    reference_model, reference = _setup(fused)
    for _ in range(3):
        scaled_opt.scale(_loss(model)).backward()
        scaled_opt.step()
        scaled_opt.zero_grad()
        _loss(reference_model).backward()
        reference.step()
        reference.zero_grad()
    for ours, theirs in zip(model.parameters(), reference_model.parameters()):
        assert torch.equal(ours, theirs)
    assert scaled_opt.loss_scale == 2.0**10


@pytest.mark.parametrize("fused", [True, False])
def test_overflow_skips_the_step_and_halves_the_scale(fused):
    model, optimizer = _setup(fused)
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=256.0)
    before = [p.detach().clone() for p in model.parameters()]
    scaled_opt.scale(_loss(model)).backward()
    model.weight.grad[0, 0] = float("inf")
    scaled_opt.step()
    for after, original in zip(model.parameters(), before):
        assert torch.equal(after, original)
    assert scaled_opt.loss_scale == 128.0
    assert not optimizer.state or all(float(s["step"]) == 0.0 for s in optimizer.state.values())


def test_fixed_scale_stays_constant_but_still_skips():
    model, optimizer = _setup()
    scaled_opt = LossScaleOptimizer(optimizer, dynamic=False, initial_scale=64.0, growth_interval=1)
    before = model.bias.detach().clone()
    scaled_opt.scale(_loss(model)).backward()
    model.bias.grad[0] = float("nan")
    scaled_opt.step()
    assert torch.equal(model.bias, before)
    assert scaled_opt.loss_scale == 64.0
    scaled_opt.zero_grad()
    scaled_opt.scale(_loss(model)).backward()
    scaled_opt.step()
    assert not torch.equal(model.bias, before)
    assert scaled_opt.loss_scale == 64.0  # growth_interval=1 would have doubled a dynamic scale


def test_dynamic_scale_grows_after_growth_interval():
    model, optimizer = _setup()
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=4.0, growth_interval=2)
    for _ in range(2):
        scaled_opt.scale(_loss(model)).backward()
        scaled_opt.step()
        scaled_opt.zero_grad()
    assert scaled_opt.loss_scale == 8.0


def test_explicit_unscale_gives_true_gradients_and_clipping_sees_them():
    model, optimizer = _setup()
    seen = []
    add_gradient_clipping(optimizer, clipvalue=1e9)
    optimizer.register_step_pre_hook(lambda opt, a, k: seen.append(model.bias.grad.clone()))
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=1024.0)
    scaled_opt.scale(_loss(model)).backward()
    scaled_opt.unscale_()
    unscaled = model.bias.grad.clone()
    reference_model, _ = _setup()
    _loss(reference_model).backward()
    assert torch.equal(unscaled, reference_model.bias.grad)
    with pytest.raises(RuntimeError, match="at most once per step"):
        scaled_opt.unscale_()
    scaled_opt.step()
    assert torch.equal(seen[0], unscaled)


def test_step_before_scale_explains_the_fix():
    _, optimizer = _setup()
    with pytest.raises(RuntimeError, match=r"optimizer\.scale\(loss\)\.backward\(\)"):
        LossScaleOptimizer(optimizer).step()


def test_state_dict_round_trip_restores_optimizer_and_scale():
    model, optimizer = _setup()
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=32.0)
    scaled_opt.scale(_loss(model)).backward()
    model.bias.grad[0] = float("inf")
    scaled_opt.step()
    scaled_opt.zero_grad()
    scaled_opt.scale(_loss(model)).backward()
    scaled_opt.step()
    state = scaled_opt.state_dict()
    assert state["loss_scaler"]["scale"] == 16.0
    assert state["loss_scaler"]["_growth_tracker"] == 1

    _, fresh_inner = _setup()
    restored = LossScaleOptimizer(fresh_inner, initial_scale=2.0**15)
    restored.load_state_dict(state)
    assert restored.loss_scale == 16.0
    restored_state = fresh_inner.state_dict()["state"]
    for key, slot in state["optimizer"]["state"].items():
        assert torch.equal(restored_state[key]["exp_avg"], slot["exp_avg"])
    with pytest.raises(KeyError, match="loss_scaler"):
        restored.load_state_dict({"optimizer": state["optimizer"]})


def test_exposes_param_groups_and_keras_alias():
    model, optimizer = _setup()
    scaled_opt = LossScaleOptimizer(optimizer, initial_scale=8.0)
    assert scaled_opt.param_groups is optimizer.param_groups
    assert scaled_opt.inner_optimizer is optimizer
    loss = _loss(model)
    assert torch.equal(scaled_opt.get_scaled_loss(loss), loss * 8.0)
