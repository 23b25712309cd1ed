"""Model Garden's optimizer-factory tests (optimizer_factory_test, lr_schedule_test) replayed
through torchgarden: the same configs give the same learning rates, clips and errors, and
what Model Garden leaves unset is an error here too, never a silent default."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.config.optimization import OptimizationConfig
from torchgarden.optim import SGDTorch, build_learning_rate, build_optimizer
from torchgarden.optim.schedules import (
    CosineDecay,
    ExponentialDecay,
    PiecewiseConstantDecay,
    PolynomialDecay,
)

_SGD = {"type": "sgd", "sgd": {"momentum": 0.9}}
_STEPWISE = {"type": "stepwise", "stepwise": {"boundaries": [10000, 20000],
                                              "values": [0.1, 0.01, 0.001]}}


def _lr(learning_rate: dict, warmup: dict | None = None):
    config = {"optimizer": _SGD, "learning_rate": learning_rate}
    if warmup:
        config["warmup"] = warmup
    return build_learning_rate(OptimizationConfig.from_dict(config))


def test_missing_optimizer_or_learning_rate_type_raises():
    with pytest.raises(ValueError, match=r"learning_rate\.type is not set"):
        build_learning_rate(OptimizationConfig.from_dict({"optimizer": _SGD}))
    config = OptimizationConfig.from_dict({"learning_rate": _STEPWISE})
    with pytest.raises(ValueError, match=r"optimizer\.type is not set"):
        build_optimizer(config, torch.nn.Linear(2, 1))
    with pytest.raises(ConfigError, match=r"optimizer_config\.optimizer\.type is not set"):
        config.check_buildable()


@pytest.mark.parametrize("learning_rate, warmup, field", [
    ({"type": "cosine", "cosine": {"decay_steps": 10}}, None, "cosine.initial_learning_rate"),
    ({"type": "cosine", "cosine": {"initial_learning_rate": 0.1}}, None, "cosine.decay_steps"),
    ({"type": "exponential", "exponential": {"initial_learning_rate": 0.1, "decay_steps": 5}},
     None, "exponential.decay_rate"),
    ({"type": "polynomial", "polynomial": {"decay_steps": 5}}, None,
     "polynomial.initial_learning_rate"),
    ({"type": "stepwise", "stepwise": {"boundaries": [5]}}, None, "stepwise.values"),
    ({"type": "power", "power": {}}, None, "power.initial_learning_rate"),
    ({"type": "power_linear", "power_linear": {"initial_learning_rate": 1.0}}, None,
     "power_linear.total_decay_steps"),
    ({"type": "step_cosine_with_offset", "step_cosine_with_offset": {"values": [1.0]}}, None,
     "step_cosine_with_offset.boundaries"),
    ({"type": "constant"}, {"type": "linear"}, "linear.warmup_steps"),
    ({"type": "constant"}, {"type": "polynomial", "polynomial": {"power": 2.0}},
     "polynomial.warmup_steps"),
])
def test_fields_model_garden_leaves_unset_are_required(learning_rate, warmup, field):
    config = {"optimizer": _SGD, "learning_rate": learning_rate}
    if warmup:
        config["warmup"] = warmup
    config = OptimizationConfig.from_dict(config)
    with pytest.raises(ValueError, match=rf"{field} must be set"):
        build_learning_rate(config)
    with pytest.raises(ConfigError, match=rf"{field} must be set"):
        config.check_buildable()


@pytest.mark.parametrize("learning_rate, warmup, expected", [
    (_STEPWISE, None, [(0, 0.1), (5000, 0.1), (10000, 0.1), (10001, 0.01), (20000, 0.01),
                       (20001, 0.001)]),
    (_STEPWISE, {"type": "linear", "linear": {"warmup_steps": 500, "warmup_learning_rate": 0.01}},
     [(0, 0.01), (250, 0.055), (500, 0.1), (5500, 0.1), (10000, 0.1), (10001, 0.01),
      (20000, 0.01), (20001, 0.001)]),
    ({"type": "exponential", "exponential": {"initial_learning_rate": 0.1, "decay_steps": 1000,
                                             "decay_rate": 0.96, "staircase": True}}, None,
     [(0, 0.1), (999, 0.1), (1000, 0.096), (1999, 0.096), (2000, 0.09216)]),
    ({"type": "polynomial", "polynomial": {"initial_learning_rate": 0.1, "decay_steps": 1000,
                                           "end_learning_rate": 0.001}}, None,
     [(0, 0.1), (500, 0.0505), (1000, 0.001)]),
    ({"type": "cosine", "cosine": {"initial_learning_rate": 0.1, "decay_steps": 1000}}, None,
     [(0, 0.1), (250, 0.08535534), (500, 0.04999999), (750, 0.01464466), (1000, 0.0)]),
    ({"type": "constant", "constant": {"learning_rate": 0.1}},
     {"type": "linear", "linear": {"warmup_steps": 500, "warmup_learning_rate": 0.01}},
     [(0, 0.01), (250, 0.055), (500, 0.1), (5000, 0.1), (20000, 0.1)]),
    (_STEPWISE, {"type": "polynomial", "polynomial": {"warmup_steps": 500, "power": 2.0}},
     # Model Garden's test: 0.0 to 6 places; its warmup reads step 0 as 1: 0.1 / 500 ** 2.
     [(0, 4e-7), (250, 0.025), (500, 0.1), (5500, 0.1), (10001, 0.01), (20001, 0.001)]),
    ({"type": "power", "power": {"initial_learning_rate": 1.0, "power": -1.0}}, None,
     [(0, 1.0), (1, 1.0), (250, 1 / 250)]),
    ({"type": "power_linear", "power_linear": {
        "initial_learning_rate": 1.0, "power": -1.0, "linear_decay_fraction": 0.5,
        "total_decay_steps": 100, "offset": 0}}, None,
     [(0, 1.0), (1, 1.0), (40, 1 / 40), (60, 1 / 60 * 0.8)]),
    ({"type": "power_with_offset", "power_with_offset": {
        "initial_learning_rate": 1.0, "power": -1.0, "offset": 10,
        "pre_offset_learning_rate": 3.0}}, None, [(1, 3.0), (10, 3.0), (20, 1 / 10)]),
    ({"type": "step_cosine_with_offset", "step_cosine_with_offset": {
        "values": [0.0001, 0.00005], "boundaries": [0, 500000], "offset": 10000}},
     {"type": "linear", "linear": {"warmup_steps": 10000, "warmup_learning_rate": 0.0}},
     [(0, 0.0), (5000, 1e-4 / 2.0), (10000, 1e-4), (20000, 9.994863e-05), (499999, 5e-05)]),
])
def test_schedules_give_model_garden_values(learning_rate, warmup, expected):
    schedule = _lr(learning_rate, warmup)
    for step, value in expected:
        assert schedule(step) == pytest.approx(value, abs=5e-8), step


@pytest.mark.parametrize("cls, kwargs", [
    (PiecewiseConstantDecay, {"boundaries": [50, 80], "values": [1.0, 0.5, 0.1]}),
    (PolynomialDecay, {"initial_learning_rate": 1.0, "decay_steps": 100}),
    (ExponentialDecay, {"initial_learning_rate": 1.0, "decay_steps": 100, "decay_rate": 0.5}),
    (CosineDecay, {"initial_learning_rate": 1.0, "decay_steps": 100}),
])
def test_offset_shifts_the_schedule_before_the_offset_too(cls, kwargs):
    base, shifted = cls(**kwargs), cls(offset=10, **kwargs)
    for step in range(10, 101, 10):  # lr_schedule_test's OffsetLearningRateTest
        assert shifted(step) == base(step - 10)
    # Before the offset Model Garden evaluates the formula at a negative step: no clamp.
    assert shifted(0) == pytest.approx(cls(**kwargs).__call__(-10))
    if cls is ExponentialDecay:
        assert shifted(0) == pytest.approx(0.5 ** -0.1)


@pytest.mark.parametrize("clipnorm, clipvalue, expected", [
    (None, None, [1.0, 1.0]), (1.0, None, [2.4452999, 3.1679497]), (None, 1.0, [2.0, 3.0])])
def test_gradient_clipping_gives_model_garden_values(clipnorm, clipvalue, expected):
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": "sgd", "sgd": {"clipnorm": clipnorm, "clipvalue": clipvalue}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 1.0}}})
    var0 = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    var1 = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    optimizer = build_optimizer(config, [var0, var1])
    var0.grad, var1.grad = torch.tensor([0.1, 0.1]), torch.tensor([2.0, 3.0])
    optimizer.step()
    assert var0.tolist() == pytest.approx([0.9, 1.9])
    assert var1.tolist() == pytest.approx(expected, abs=1e-6)


def test_adamw_pattern_lists_take_one_regex_string_as_model_garden_does():
    with pytest.warns(UserWarning, match="weight_decay mapped: '"):
        config = ExperimentConfig().override({"trainer": {"optimizer_config": {"optimizer": {
            "type": "adamw", "adamw": {"include_in_weight_decay": r".*(kernel|weight):0$",
                                       "exclude_from_weight_decay": "bias",
                                       "weight_decay_rate": 0.1}}}}})
    adamw = config.trainer.optimizer_config.optimizer.adamw
    assert adamw.include_in_weight_decay == [r".*(kernel|weight):0$"]
    assert adamw.exclude_from_weight_decay == ["bias"]
    config.trainer.optimizer_config.learning_rate.type = "constant"
    model = torch.nn.Linear(2, 2)
    optimizer = build_optimizer(config.trainer.optimizer_config, model)
    decays = {g["weight_decay"]: [p is model.bias for p in g["params"]]
              for g in optimizer.param_groups}
    assert decays == {0.1: [False], 0.0: [True]}


def test_adamw_gradient_clip_norm_defaults_to_model_garden_one_and_zero_is_off():
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": "adamw"},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.0}}})
    assert config.optimizer.adamw.gradient_clip_norm == 1.0
    for clip, expected_norm in ((1.0, 1.0), (0.0, 5.0)):
        config.optimizer.adamw.gradient_clip_norm = clip
        param = torch.nn.Parameter(torch.zeros(2))
        optimizer = build_optimizer(config, [param])
        param.grad = torch.tensor([3.0, 4.0])
        optimizer.step()
        assert param.grad.norm().item() == pytest.approx(expected_norm)


def test_sgd_torch_ramps_momentum_and_decays_only_weight_keys():
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": "sgd_torch", "sgd_torch": {
            "momentum": 0.9, "momentum_start": 0.5, "warmup_steps": 2, "weight_decay": 0.1}},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.5}}})
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(1.0)
    optimizer = build_optimizer(config, model)
    assert isinstance(optimizer, SGDTorch)
    weight = bias = 1.0
    buf_w = buf_b = 0.0
    for t, mu in enumerate((0.5, 0.7, 0.9, 0.9)):  # momentum_start + t * 0.4 / 2, then 0.9
        model.weight.grad, model.bias.grad = torch.ones(1, 1), torch.ones(1)
        optimizer.step()
        buf_w = mu * buf_w + (1.0 + 0.1 * weight)  # weight decay on "weight" only
        buf_b = mu * buf_b + 1.0
        weight, bias = weight - 0.5 * buf_w, bias - 0.5 * buf_b
        assert model.weight.item() == pytest.approx(weight), t
        assert model.bias.item() == pytest.approx(bias), t


def test_a_stepwise_schedule_takes_what_the_file_leaves_from_the_experiment():
    config = ExperimentConfig().override({"trainer": {"optimizer_config": {
        "optimizer": _SGD, "learning_rate": _STEPWISE}}})
    config.override({"trainer": {"optimizer_config": {"learning_rate": {
        "type": "stepwise", "stepwise": {"boundaries": [100, 200]}}}}})
    schedule = build_learning_rate(config.trainer.optimizer_config)
    assert [schedule(s) for s in (100, 101, 201)] == [0.1, 0.01, 0.001]
    assert math.isclose(schedule(0), 0.1)


def test_sgd_torch_without_momentum_warmup_steps_is_refused_as_model_garden_breaks():
    config = OptimizationConfig.from_dict({
        "optimizer": {"type": "sgd_torch"},
        "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.5}}})
    with pytest.raises(ValueError, match=r"sgd_torch\.warmup_steps is 0: Model Garden divides"):
        build_optimizer(config, torch.nn.Linear(1, 1))


# Model Garden's optimizer_config.py defaults, field by field (name fields aside).
_MG_DEFAULTS = {
    "sgd": {"decay": 0.0, "nesterov": False, "momentum": 0.0},
    "adam": {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False},
    "adamw": {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False,
              "weight_decay_rate": 0.0, "include_in_weight_decay": None,
              "exclude_from_weight_decay": None, "gradient_clip_norm": 1.0},
    "adamw_experimental": {"epsilon": 1e-7, "weight_decay": 0.0, "global_clipnorm": 1.0},
    "lamb": {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6, "weight_decay_rate": 0.0,
             "exclude_from_weight_decay": None, "exclude_from_layer_adaptation": None},
    "lars": {"momentum": 0.9, "eeta": 0.001, "weight_decay_rate": 0.0, "nesterov": False,
             "classic_momentum": True},
    "rmsprop": {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": False},
    "adagrad": {"initial_accumulator_value": 0.1, "epsilon": 1e-7},
    "sgd_torch": {"decay": 0.0, "nesterov": False, "momentum_start": 0.0, "momentum": 0.9,
                  "warmup_steps": 0, "weight_decay": 0.0, "weight_keys": ["kernel", "weight"],
                  "bias_keys": ["bias", "beta"]},
}


@pytest.mark.parametrize("kind", sorted(_MG_DEFAULTS))
def test_optimizer_defaults_are_model_gardens(kind):
    sub = getattr(OptimizationConfig().optimizer, kind)
    assert {k: getattr(sub, k) for k in _MG_DEFAULTS[kind]} == _MG_DEFAULTS[kind]
    assert (sub.clipnorm, sub.clipvalue) == (None, None)
