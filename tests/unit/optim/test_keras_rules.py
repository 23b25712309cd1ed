"""``update_rule: keras``: Keras' SGD momentum, Adam epsilon and RMSprop, as Model Garden runs
them, step by step against the Keras formulas on a rate that changes every step."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.config.optimization import OptimizationConfig
from torchgarden.optim import build_optimizer, set_learning_rate
from torchgarden.optim.keras_rules import KerasAdam, KerasRMSprop, KerasSGD

RATES = (0.1, 0.3, 0.2, 0.05)
GRADS = (0.5, -1.0, 2.0, 0.25)


def _run(kind: str, fields: dict, start: float = 1.0) -> list[float]:
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": kind, kind: {"update_rule": "keras", **fields}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": RATES[0]}}})
    param = torch.nn.Parameter(torch.tensor([start], dtype=torch.float64))
    optimizer = build_optimizer(config, [param])
    seen = []
    for rate, grad in zip(RATES, GRADS):
        set_learning_rate(optimizer, rate)
        param.grad = torch.tensor([grad], dtype=torch.float64)
        optimizer.step()
        seen.append(param.item())
    return seen


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_accumulates_rate_scaled_steps(nesterov):
    p, v, expected = 1.0, 0.0, []
    for lr, g in zip(RATES, GRADS):
        v = 0.9 * v - lr * g
        p = p + (0.9 * v - lr * g if nesterov else v)
        expected.append(p)
    assert _run("sgd", {"momentum": 0.9, "nesterov": nesterov}) == pytest.approx(expected)


@pytest.mark.parametrize("kind, decay", [("adam", 0.0), ("adamw", 0.1)])
def test_adam_uses_keras_epsilon_hat_and_adamw_decays_first(kind, decay):
    fields = {"epsilon": 0.1}
    if kind == "adamw":
        fields.update(weight_decay_rate=decay, gradient_clip_norm=0.0)
    p, m, v, expected = 1.0, 0.0, 0.0, []
    for t, (lr, g) in enumerate(zip(RATES, GRADS), start=1):
        p -= lr * decay * p
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        p -= lr * math.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (math.sqrt(v) + 0.1)
        expected.append(p)
    assert _run(kind, fields) == pytest.approx(expected)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_puts_epsilon_where_keras_does(momentum):
    p, ms, mom, expected = 1.0, 0.0, 0.0, []
    for lr, g in zip(RATES, GRADS):
        ms = 0.9 * ms + 0.1 * g * g
        if momentum:
            mom = momentum * mom + lr * g / math.sqrt(ms + 0.002)
            p -= mom
        else:
            p -= lr * g / (math.sqrt(ms) + 0.002)
        expected.append(p)
    fields = {"epsilon": 0.002, "momentum": momentum}
    assert _run("rmsprop", fields) == pytest.approx(expected)


def test_the_default_stays_torch_and_keras_refuses_fused():
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "constant"}})
    assert type(build_optimizer(config, torch.nn.Linear(1, 1))) is torch.optim.SGD
    config.optimizer.sgd.update_rule = "keras"
    assert isinstance(build_optimizer(config, torch.nn.Linear(1, 1)), KerasSGD)
    config.optimizer.sgd.fused = True
    with pytest.raises(ValueError, match="update_rule keras has no fused kernel"):
        build_optimizer(config, torch.nn.Linear(1, 1))
    for kind, cls in (("adam_experimental", KerasAdam), ("rmsprop", KerasRMSprop)):
        config = OptimizationConfig.from_dict({
            "optimizer": {"type": kind, kind: {"update_rule": "keras"}},
            "learning_rate": {"type": "constant"}})
        assert isinstance(build_optimizer(config, torch.nn.Linear(1, 1)), cls)
