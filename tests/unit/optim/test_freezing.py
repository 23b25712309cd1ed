"""Frozen parameters: bitwise unchanged, no gradient, no optimizer state; the schedule."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.config import ExperimentConfig
from torchgarden.config.errors import ConfigError
from torchgarden.optim import FreezeSchedule


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, schedule: FreezeSchedule,
          steps: range) -> None:
    torch.manual_seed(1)
    for step in steps:
        model.train()
        schedule.apply(step)
        x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def test_frozen_parameters_and_batch_norm_statistics_stay_bitwise_equal():
    model = make_model()
    schedule = FreezeSchedule(model, freeze=[r"^[01]\."])
    with schedule.all_trainable():
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, optimizer, schedule, range(5))
    after = model.state_dict()
    for name in ("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                 "1.num_batches_tracked"):
        assert torch.equal(after[name], before[name]), name
    assert not torch.equal(after["4.weight"], before["4.weight"])
    frozen = [model[0].weight, model[0].bias, model[1].weight, model[1].bias]
    assert all(p.grad is None for p in frozen)
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert not in_optimizer & {id(p) for p in frozen}  # Frozen for good: not in it at all.
    assert {id(p) for p in optimizer.state} == {id(model[4].weight), id(model[4].bias)}


def test_batch_norm_statistics_update_when_the_switch_is_off():
    model = make_model()
    schedule = FreezeSchedule(model, freeze=[r"^[01]\."], freeze_batch_norm_stats=False)
    with schedule.all_trainable():
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    mean = model[1].running_mean.clone()
    train(model, optimizer, schedule, range(2))
    assert not torch.equal(model[1].running_mean, mean)


def test_unfreeze_schedule_trains_from_its_step_with_state_from_then_on():
    model = make_model()
    schedule = FreezeSchedule(model, freeze=[r"^0\.", r"^1\."],
                              unfreeze=[(3, [r"^1\."]), (5, [])])
    assert schedule.change_steps == {3, 5}
    assert schedule.frozen_at(4) == {"0.weight", "0.bias"}
    with schedule.all_trainable():
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    assert len(optimizer.param_groups[0]["params"]) == 6  # Unfrozen later: in from the start.
    conv = model[0].weight.clone()
    train(model, optimizer, schedule, range(3))
    assert torch.equal(model[0].weight, conv) and model[1].weight not in optimizer.state
    train(model, optimizer, schedule, range(3, 5))
    assert model[1].weight in optimizer.state and model[0].weight not in optimizer.state
    assert torch.equal(model[0].weight, conv)
    train(model, optimizer, schedule, range(5, 6))
    assert not torch.equal(model[0].weight, conv)


def test_bad_patterns_name_the_key_and_the_closest_module():
    model = make_model()
    with pytest.raises(ValueError, match=r"trainer.freeze\[0\]: '\^5\\\\.' matches no parameter"):
        FreezeSchedule(model, freeze=[r"^5\."])
    with pytest.raises(ValueError, match="freezes all 6 parameters at step 0"):
        FreezeSchedule(model, freeze=["."])
    with pytest.raises(ValueError, match=r"unfreeze_schedule\[0\]\[0\]: 'head'"):
        FreezeSchedule(model, freeze=["^0"], unfreeze=[(2, ["head"])])


@pytest.mark.parametrize("override, message", [
    ({"freeze": ["("]}, r"trainer.freeze\[0\]: '\(' is not a regular expression"),
    ({"unfreeze_at_step": 5}, "trainer.freeze is empty"),
    ({"freeze": ["a"], "unfreeze_at_step": 0}, "must be >= 1"),
    ({"param_rules": [{"pattern": "bias", "lr_mult": -1}]}, r"param_rules\[0\]: lr_mult"),
    ({"layerwise_lr_decay": 0}, r"layerwise_lr_decay must be in \(0, 1\]"),
])
def test_config_checks_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        ExperimentConfig().override({"trainer": override}).validate()
