"""ExponentialMovingAverage: decay math, swapping, checkpoint state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.optim import ExponentialMovingAverage


def _two_param_model(weight: float, bias: float) -> nn.Linear:
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(weight)
        model.bias.fill_(bias)
    return model


def _set(model: nn.Linear, weight: float, bias: float) -> None:
    with torch.no_grad():
        model.weight.fill_(weight)
        model.bias.fill_(bias)


def _shadow(ema: ExponentialMovingAverage) -> list[float]:
    return [t.item() for t in ema.state_dict()["shadow"].values()]


def test_fixed_decay_update_by_hand():
    model = _two_param_model(1.0, -2.0)
    ema = ExponentialMovingAverage(model, average_decay=0.75, dynamic_decay=False)
    _set(model, 5.0, 2.0)
    ema.update(step=1)
    assert _shadow(ema) == [0.75 * 1.0 + 0.25 * 5.0, 0.75 * -2.0 + 0.25 * 2.0]
    _set(model, 0.0, 0.0)
    ema.update(step=2)
    assert _shadow(ema) == pytest.approx([0.75 * 2.0, 0.75 * -1.0])


def test_dynamic_decay_and_start_step():
    model = _two_param_model(0.0, 0.0)
    ema = ExponentialMovingAverage(model, average_decay=0.9, start_step=2)
    assert [ema.decay(s) for s in (0, 1, 2, 12)] == [0.0, 0.0, 0.1, 0.55]
    assert ema.decay(10_000) == 0.9
    _set(model, 4.0, 8.0)
    ema.update(step=1)  # before start_step: a plain copy
    assert _shadow(ema) == [4.0, 8.0]
    _set(model, 14.0, -2.0)
    ema.update(step=2)  # decay 0.1
    assert _shadow(ema) == pytest.approx([0.1 * 4.0 + 0.9 * 14.0, 0.1 * 8.0 + 0.9 * -2.0])


def test_swap_round_trip_restores_exact_weights():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    ema = ExponentialMovingAverage(model, average_decay=0.5, dynamic_decay=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    ema.update(step=1)
    trained = [p.detach().clone() for p in model.parameters()]
    averaged = [t.clone() for t in ema.state_dict()["shadow"].values()]
    with ema.average_weights():
        assert ema.swapped
        for p, a in zip(model.parameters(), averaged):
            assert torch.equal(p, a)
        with pytest.raises(RuntimeError, match="swapped"):
            ema.update(step=2)
    assert not ema.swapped
    for p, t in zip(model.parameters(), trained):
        assert torch.equal(p, t)
    ema.swap_weights()
    ema.swap_weights()
    for p, t in zip(model.parameters(), trained):
        assert torch.equal(p, t)


def test_all_weights_include_float_buffers_only():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[1].weight.requires_grad_(False)
    trainable = ExponentialMovingAverage(model)
    everything = ExponentialMovingAverage(model, trainable_weights_only=False)
    assert sorted(trainable.state_dict()["shadow"]) == ["0.bias", "0.weight", "1.bias"]
    assert sorted(everything.state_dict()["shadow"]) == [
        "0.bias",
        "0.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "1.weight",
    ]


def test_state_dict_round_trip_and_copy_to():
    model = _two_param_model(1.0, 1.0)
    ema = ExponentialMovingAverage(model, average_decay=0.5, dynamic_decay=False)
    _set(model, 3.0, 5.0)
    ema.update(step=1)
    state = ema.state_dict()

    other = _two_param_model(0.0, 0.0)
    restored = ExponentialMovingAverage(other, average_decay=0.5, dynamic_decay=False)
    restored.load_state_dict(state)
    assert _shadow(restored) == [2.0, 3.0]
    export = _two_param_model(9.0, 9.0)
    restored.copy_to(export)
    assert (export.weight.item(), export.bias.item()) == (2.0, 3.0)
    restored.swap_weights()  # copy_to still copies the averages while swapped
    restored.copy_to(export)
    assert (export.weight.item(), export.bias.item()) == (2.0, 3.0)


def test_load_state_dict_rejects_other_models():
    ema = ExponentialMovingAverage(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"missing \['bias'\]"):
        ExponentialMovingAverage(nn.Linear(2, 2)).load_state_dict(
            {"shadow": {"weight": torch.zeros(2, 2)}}
        )
    with pytest.raises(ValueError, match=r"'weight' has shape \(3, 2\), expected \(2, 2\)"):
        ema.load_state_dict({"shadow": {"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}})
