"""Tests for load_model_weights (init_checkpoint / init_checkpoint_modules)."""

from __future__ import annotations

import os

import pytest
import torch

from torchgarden.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointMismatchError,
    load_model_weights,
)


class Net(torch.nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.backbone = torch.nn.Linear(4, 6)
        self.head = torch.nn.Linear(6, classes)


def test_prefix_restores_only_that_module_from_latest_checkpoint(tmp_path):
    torch.manual_seed(0)
    source = Net(classes=10)
    manager = CheckpointManager(Checkpoint(model=source), tmp_path)
    manager.save(1)
    latest = manager.save(2)
    target = Net(classes=3)
    head_before = target.head.weight.clone()
    assert load_model_weights(target, tmp_path, prefixes=["backbone"]) == latest
    assert torch.equal(target.backbone.weight, source.backbone.weight)
    assert torch.equal(target.head.weight, head_before)  # untouched despite its other shape


def test_all_weights_require_matching_shapes(tmp_path):
    path = CheckpointManager(Checkpoint(model=Net(classes=10)), tmp_path).save(1)
    with pytest.raises(
        CheckpointMismatchError, match=r"'head\.weight': checkpoint \(10, 6\) vs model \(3, 6\)"
    ):
        load_model_weights(Net(classes=3), path)
    with pytest.raises(
        CheckpointMismatchError, match=r"prefixes \['neck'\].*\['backbone', 'head'\]"
    ):
        load_model_weights(Net(classes=10), path, prefixes=["neck"])


def test_plain_state_dict_file_with_ddp_prefix(tmp_path):
    source = Net()
    file = os.path.join(tmp_path, "weights.pt")
    torch.save({f"module.{k}": v for k, v in source.state_dict().items()}, file)
    target = Net()
    assert load_model_weights(target, file) == file
    assert torch.equal(target.head.bias, source.head.bias)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no 'ckpt-<N>' in it"):
        load_model_weights(target, tmp_path / "empty")
