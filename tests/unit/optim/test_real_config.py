"""The optim builders read torchgarden's real OptimizationConfig."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torchgarden.optim import build_learning_rate, build_optimizer, get_learning_rate

optimization = pytest.importorskip("torchgarden.config.optimization")


def test_real_config_builds_adamw_with_cosine_warmup():
    config = optimization.OptimizationConfig()
    config.override(
        {
            "optimizer": {
                "type": "adamw",
                "adamw": {
                    "weight_decay_rate": 0.05,
                    "exclude_from_weight_decay": ["bias"],
                    "global_clipnorm": 1.0,
                },
            },
            "learning_rate": {
                "type": "cosine",
                "cosine": {"initial_learning_rate": 0.4, "decay_steps": 100},
            },
            "warmup": {"type": "linear", "linear": {"warmup_steps": 10}},
        }
    )
    schedule = build_learning_rate(config)
    assert schedule(0) == 0.0
    assert schedule(50) == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    optimizer = build_optimizer(config, nn.Linear(2, 2), lr=schedule(3))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert get_learning_rate(optimizer) == pytest.approx(schedule(3))


def test_real_config_defaults_leave_the_types_unset_and_building_raises():
    # Model Garden's OptimizationConfig() has no optimizer or schedule type either, and its
    # factory raises: nothing silently becomes SGD at 0.1.
    config = optimization.OptimizationConfig()
    with pytest.raises(ValueError, match=r"learning_rate\.type is not set"):
        build_learning_rate(config)
    with pytest.raises(ValueError, match=r"optimizer\.type is not set"):
        build_optimizer(config, nn.Linear(2, 2), lr=0.1)
    config.override({"optimizer": {"type": "sgd"}, "learning_rate": {"type": "constant"}})
    schedule = build_learning_rate(config)
    assert schedule.is_constant and schedule(123) == 0.1  # ConstantLrConfig's default, as MG
    assert isinstance(build_optimizer(config, nn.Linear(2, 2)), torch.optim.SGD)
