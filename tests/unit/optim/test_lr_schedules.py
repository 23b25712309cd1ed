"""Learning-rate schedules against hand-computed values."""

from __future__ import annotations

import math

import pytest

from torchgarden.optim import (
    ConstantSchedule,
    CosineDecay,
    ExponentialDecay,
    LinearWarmup,
    PiecewiseConstantDecay,
    PolynomialDecay,
    PolynomialWarmup,
    PowerDecay,
    build_learning_rate,
)


def values(schedule, steps):
    return [schedule(s) for s in steps]


def test_constant_is_flat_and_marked_constant():
    schedule = ConstantSchedule(0.3)
    assert values(schedule, [0, 1, 10**6]) == [0.3, 0.3, 0.3]
    assert schedule.is_constant
    assert not CosineDecay(1.0, 10).is_constant


def test_piecewise_uses_keras_boundary_semantics():
    schedule = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    assert values(schedule, [0, 10, 11, 20, 21, 1000]) == [1.0, 1.0, 0.5, 0.5, 0.1, 0.1]


def test_piecewise_offset_shifts_and_clamps_at_zero():
    schedule = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1], offset=5)
    assert values(schedule, [0, 3, 15, 16, 26]) == [1.0, 1.0, 1.0, 0.5, 0.1]


def test_piecewise_rejects_wrong_number_of_values():
    with pytest.raises(ValueError, match=r"len\(boundaries\) \+ 1 = 3 entries.*got 2"):
        PiecewiseConstantDecay([10, 20], [1.0, 0.5])
    with pytest.raises(ValueError, match="strictly increasing"):
        PiecewiseConstantDecay([20, 10], [1.0, 0.5, 0.1])


def test_exponential_smooth_staircase_and_offset():
    smooth = ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5)
    assert values(smooth, [0, 10, 20]) == [1.0, 0.5, 0.25]
    assert smooth(5) == pytest.approx(math.sqrt(0.5))
    stairs = ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5, staircase=True)
    assert values(stairs, [9, 15, 19, 20]) == [1.0, 0.5, 0.5, 0.25]
    shifted = ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5, offset=10)
    # Model Garden evaluates the formula at step - offset, negative steps included.
    assert values(shifted, [5, 10, 20]) == [pytest.approx(math.sqrt(2.0)), 1.0, 0.5]


def test_exponential_rejects_non_positive_decay_steps():
    with pytest.raises(ValueError, match="decay_steps.*> 0, got 0"):
        ExponentialDecay(1.0, decay_steps=0, decay_rate=0.5)


def test_polynomial_clamps_without_cycle():
    squared = PolynomialDecay(1.0, decay_steps=10, end_learning_rate=0.0, power=2.0)
    assert values(squared, [0, 5, 10, 20]) == [1.0, 0.25, 0.0, 0.0]
    linear = PolynomialDecay(1.0, decay_steps=10, end_learning_rate=0.1)
    assert linear(5) == pytest.approx(0.55)
    assert linear(100) == pytest.approx(0.1)


def test_polynomial_cycle_extends_the_horizon():
    schedule = PolynomialDecay(1.0, decay_steps=10, end_learning_rate=0.0, cycle=True)
    assert values(schedule, [0, 5, 10]) == [1.0, 0.5, 0.0]
    assert schedule(15) == pytest.approx(0.25)  # horizon 20
    assert schedule(20) == pytest.approx(0.0)
    assert schedule(21) == pytest.approx(1 - 21 / 30)


def test_cosine_has_alpha_floor_and_clamps():
    schedule = CosineDecay(2.0, decay_steps=100, alpha=0.1)
    assert schedule(0) == pytest.approx(2.0)
    assert schedule(50) == pytest.approx(2.0 * (0.9 * 0.5 + 0.1))
    assert schedule(100) == pytest.approx(0.2)
    assert schedule(200) == pytest.approx(0.2)
    assert CosineDecay(2.0, 100, alpha=0.1, offset=50)(100) == pytest.approx(1.1)


def test_power_decay_uses_max_step_one():
    schedule = PowerDecay(1.0, power=-0.5)
    assert values(schedule, [0, 1, 4, 100]) == [1.0, 1.0, 0.5, 0.1]
    shifted = PowerDecay(1.0, power=-0.5, offset=3)
    assert values(shifted, [2, 7]) == [1.0, 0.5]


def test_linear_warmup_interpolates_then_hands_off_at_raw_step():
    after = PiecewiseConstantDecay([5, 20], [1.0, 2.0, 3.0])
    schedule = LinearWarmup(after, warmup_steps=10, warmup_learning_rate=0.0)
    assert values(schedule, [0, 5, 10, 20, 21]) == [0.0, 1.0, 2.0, 2.0, 3.0]
    assert not schedule.is_constant


def test_linear_warmup_is_continuous_into_cosine():
    after = CosineDecay(1.0, decay_steps=1000)
    schedule = LinearWarmup(after, warmup_steps=100, warmup_learning_rate=0.1)
    assert schedule(0) == pytest.approx(0.1)
    assert schedule(50) == pytest.approx(0.1 + 0.5 * (after(100) - 0.1))
    assert schedule(100) == after(100)
    assert abs(schedule(99) - schedule(100)) < 0.01


def test_polynomial_warmup_and_disabled_warmup():
    schedule = PolynomialWarmup(ConstantSchedule(1.0), warmup_steps=10, power=2.0)
    assert values(schedule, [0, 1, 5, 10, 50]) == pytest.approx([0.01, 0.01, 0.25, 1.0, 1.0])
    disabled = PolynomialWarmup(ConstantSchedule(0.5), warmup_steps=0)
    assert disabled(0) == 0.5
    assert disabled.is_constant
    assert LinearWarmup(ConstantSchedule(0.5), warmup_steps=0).is_constant


def test_get_config_rebuilds_the_same_schedule():
    original = PolynomialDecay(1.0, 10, end_learning_rate=0.2, power=2.0, cycle=True, offset=3)
    rebuilt = PolynomialDecay(**original.get_config())
    assert values(rebuilt, range(40)) == values(original, range(40))
    nested = LinearWarmup(original, warmup_steps=5).get_config()
    assert nested["after"] == {"class_name": "PolynomialDecay", "config": original.get_config()}


def test_build_learning_rate_applies_warmup(make_config):
    config = make_config(
        lr=(
            "cosine",
            {"initial_learning_rate": 1.6, "decay_steps": 100, "alpha": 0.0, "offset": 0},
        ),
        warmup=("linear", {"warmup_steps": 10, "warmup_learning_rate": 0.0}),
    )
    schedule = build_learning_rate(config)
    assert isinstance(schedule, LinearWarmup)
    cosine_at_10 = 1.6 * 0.5 * (1 + math.cos(math.pi * 0.1))
    assert schedule(5) == pytest.approx(0.5 * cosine_at_10)
    assert schedule(60) == pytest.approx(1.6 * 0.5 * (1 + math.cos(math.pi * 0.6)))


def test_build_learning_rate_without_warmup_and_with_defaults(make_config):
    config = make_config(lr=("power", {"initial_learning_rate": 2.0}))
    schedule = build_learning_rate(config)
    assert isinstance(schedule, PowerDecay)
    assert schedule(4) == pytest.approx(1.0)  # default power -0.5


def test_build_learning_rate_unknown_type_suggests_closest(make_config):
    config = make_config(lr=("cosin", {}))
    with pytest.raises(ValueError, match=r"learning_rate\.type is 'cosin'.*Did you mean 'cosine'"):
        build_learning_rate(config)
    config = make_config(warmup=("liner", {}))
    with pytest.raises(ValueError, match=r"warmup\.type is 'liner'.*Did you mean 'linear'"):
        build_learning_rate(config)


def test_build_learning_rate_names_missing_field(make_config):
    config = make_config(lr=("stepwise", {"boundaries": [10], "values": None}))
    with pytest.raises(ValueError, match=r"learning_rate\.stepwise\.values must be set"):
        build_learning_rate(config)
