"""Model Garden's own schedules and warmups against its formulas and published values."""

from __future__ import annotations

import math

import pytest

from torchgarden.config.optimization import OptimizationConfig
from torchgarden.optim import (
    InverseTimeDecay,
    PowerAndLinearDecay,
    PowerDecayWithOffset,
    StepCosineDecayWithOffset,
    build_learning_rate,
)


def _build(lr: dict, warmup: dict | None = None, optimizer: dict | None = None):
    config = {"learning_rate": lr}
    if warmup:
        config["warmup"] = warmup
    if optimizer:
        config["optimizer"] = optimizer
    return build_learning_rate(OptimizationConfig.from_dict(config))


# The table of Model Garden's lr_schedule_test.py (PowerAndLinearDecayTest).
@pytest.mark.parametrize("power, fraction, offset, expected", [
    (-1.0, 0.0, 0, [(0, 1.0), (1, 1.0), (40, 1 / 40), (60, 1 / 60), (100, 1 / 100)]),
    (0.0, 1.0, 0, [(0, 1.0), (1, 0.99), (40, 0.6), (60, 0.4), (100, 0.0)]),
    (-1.0, 0.5, 0, [(0, 1.0), (1, 1.0), (40, 1 / 40), (60, 1 / 60 * 0.8), (100, 0.0)]),
    (-1.0, 0.5, 90, [(0, 1.0), (90, 1.0), (91, 1.0), (130, 1 / 40), (150, 1 / 60 * 0.8),
                     (190, 0.0), (200, 0.0)]),
])
def test_power_linear_matches_model_garden_table(power, fraction, offset, expected):
    schedule = _build({"type": "power_linear", "power_linear": {
        "initial_learning_rate": 1.0, "total_decay_steps": 100, "power": power,
        "linear_decay_fraction": fraction, "offset": offset}})
    assert isinstance(schedule, PowerAndLinearDecay)
    for step, value in expected:
        assert schedule(step) == pytest.approx(value), step


def test_power_with_offset_is_constant_then_capped_power_decay():
    schedule = _build({"type": "power_with_offset", "power_with_offset": {
        "initial_learning_rate": 2.0, "power": -0.5, "offset": 10,
        "pre_offset_learning_rate": 1.5}})
    assert isinstance(schedule, PowerDecayWithOffset)
    # Up to the offset: 1.5. Then 2 * (s - 10) ** -0.5, capped at 1.5 (2.0 > 1.5 at s=11).
    assert [schedule(s) for s in (0, 10, 11, 14, 26)] == pytest.approx([1.5, 1.5, 1.5, 1.0, 0.5])


def test_step_cosine_with_offset_decays_segment_by_segment():
    schedule = _build({"type": "step_cosine_with_offset", "step_cosine_with_offset": {
        "boundaries": [0, 100, 150], "values": [1.0, 0.5, 0.1], "offset": 10}})
    assert isinstance(schedule, StepCosineDecayWithOffset)
    half = lambda hi, lo, frac: (hi - lo) * (1 + math.cos(math.pi * frac)) / 2 + lo  # noqa: E731
    assert schedule(10) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.75)  # Half-way down the first segment.
    assert schedule(35) == pytest.approx(half(1.0, 0.5, 0.25))
    assert schedule(110) == pytest.approx(0.5)
    assert schedule(135) == pytest.approx(half(0.5, 0.1, 0.5))
    assert schedule(160) == pytest.approx(0.1)  # Model Garden: NaN here; held at values[-1].
    assert schedule(10_000) == pytest.approx(0.1)


def test_step_cosine_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="equal length"):
        StepCosineDecayWithOffset([0, 10], [1.0])


def test_polynomial_with_power_two_and_cycle():
    schedule = _build({"type": "polynomial", "polynomial": {
        "initial_learning_rate": 1.0, "decay_steps": 10, "end_learning_rate": 0.0,
        "power": 2.0}})
    assert [schedule(s) for s in (0, 5, 10, 20)] == pytest.approx([1.0, 0.25, 0.0, 0.0])
    cycled = _build({"type": "polynomial", "polynomial": {
        "initial_learning_rate": 1.0, "decay_steps": 10, "end_learning_rate": 0.0,
        "power": 2.0, "cycle": True}})
    assert cycled(15) == pytest.approx((1 - 15 / 20) ** 2)  # Horizon grows to 20.


def test_linear_warmup_targets_the_schedule_at_warmup_steps():
    schedule = _build({"type": "power_linear", "power_linear": {
        "initial_learning_rate": 1.0, "total_decay_steps": 100, "power": -1.0,
        "linear_decay_fraction": 0.0}},
        warmup={"type": "linear", "linear": {"warmup_steps": 4, "warmup_learning_rate": 0.1}})
    # Target = 1/4 at step 4: 0.1 + s/4 * (0.25 - 0.1).
    assert [schedule(s) for s in (0, 2, 4, 8)] == pytest.approx([0.1, 0.175, 0.25, 0.125])


def test_polynomial_warmup_uses_max_step_one_and_power():
    schedule = _build({"type": "constant", "constant": {"learning_rate": 0.8}},
                      warmup={"type": "polynomial",
                              "polynomial": {"warmup_steps": 4, "power": 2.0}})
    assert [schedule(s) for s in (0, 1, 2, 4)] == pytest.approx([0.05, 0.05, 0.2, 0.8])


def test_sgd_decay_is_keras_inverse_time_decay_after_warmup():
    schedule = _build({"type": "constant", "constant": {"learning_rate": 1.0}},
                      warmup={"type": "linear", "linear": {"warmup_steps": 2}},
                      optimizer={"type": "sgd", "sgd": {"decay": 0.5, "momentum": 0.9}})
    assert isinstance(schedule, InverseTimeDecay)
    assert [schedule(s) for s in (0, 1, 2, 6)] == pytest.approx([0.0, 0.5 / 1.5, 0.5, 0.25])


def test_model_garden_yaml_block_ports_unchanged(tmp_path):
    block = tmp_path / "opt.yaml"
    block.write_text(
        "optimizer:\n"
        "  type: lamb\n"
        "  lamb: {name: LAMB, weight_decay_rate: 0.01, epsilon: 1.0e-6,\n"
        "         exclude_from_weight_decay: ['LayerNorm', 'layer_norm', 'bias']}\n"
        "learning_rate:\n"
        "  type: power_linear\n"
        "  power_linear: {name: PowerAndLinearDecay, initial_learning_rate: 0.01,\n"
        "                 total_decay_steps: 1000, power: -0.5, linear_decay_fraction: 0.1}\n"
        "warmup:\n"
        "  type: polynomial\n"
        "  polynomial: {name: polynomial, power: 1, warmup_steps: 100}\n")
    config = OptimizationConfig.from_yaml(str(block))
    schedule = build_learning_rate(config)
    assert schedule(50) == pytest.approx(0.01 * 100**-0.5 * 0.5)
    assert schedule(950) == pytest.approx(0.01 * 950**-0.5 * 0.5)


def test_model_garden_sgd_block_with_names_and_ema_ports_unchanged(tmp_path):
    block = tmp_path / "opt.yaml"
    block.write_text(
        "optimizer: {type: sgd, sgd: {name: SGD, decay: 0.0, nesterov: true, momentum: 0.9,\n"
        "            clipnorm: null, clipvalue: null, global_clipnorm: null}}\n"
        "learning_rate: {type: stepwise, stepwise: {name: PiecewiseConstantDecay,\n"
        "                boundaries: [10, 20], values: [0.1, 0.01, 0.001], offset: 0}}\n"
        "warmup: {type: linear, linear: {name: linear, warmup_learning_rate: 0.0,\n"
        "         warmup_steps: 5}}\n"
        "ema: {name: ExponentialMovingAverage, average_decay: 0.9999, trainable_weights_only: true,\n"
        "      start_step: 0, dynamic_decay: true}\n")
    config = OptimizationConfig.from_yaml(str(block))
    schedule = build_learning_rate(config)
    assert [schedule(s) for s in (0, 5, 15, 25)] == pytest.approx([0.0, 0.1, 0.01, 0.001])
    assert config.ema.average_decay == 0.9999
