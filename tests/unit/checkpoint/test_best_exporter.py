"""Tests for BestCheckpointExporter."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from torchgarden.checkpoint import BestCheckpointExporter, Checkpoint


@pytest.fixture
def ckpt():
    return Checkpoint(model=torch.nn.Linear(2, 1))


def test_higher_is_better_and_first_is_best(tmp_path, ckpt):
    exporter = BestCheckpointExporter(tmp_path, "accuracy", "higher")
    assert exporter.best_metric_value is None and exporter.best_ckpt_path is None
    assert exporter.maybe_export_checkpoint(ckpt, {"accuracy": 0.5}, 100)
    assert not exporter.maybe_export_checkpoint(ckpt, {"accuracy": 0.5}, 200)  # strict
    assert not exporter.maybe_export_checkpoint(ckpt, {"accuracy": 0.4}, 300)
    assert exporter.maybe_export_checkpoint(ckpt, {"accuracy": torch.tensor(0.75)}, 400)
    assert exporter.best_metric_value == 0.75
    assert exporter.best_ckpt_path == os.path.join(str(tmp_path), "best_ckpt-400")
    assert sorted(p for p in os.listdir(tmp_path) if not p.startswith(".")) == [
        "best_ckpt-400",
        "info.json",
    ]
    assert exporter.best_key == "best_accuracy"


def test_lower_is_better(tmp_path, ckpt):
    exporter = BestCheckpointExporter(tmp_path, "loss", "lower")
    assert [
        exporter.maybe_export_checkpoint(ckpt, {"loss": v}, s)
        for s, v in [(1, 2.0), (2, 3.0), (3, 1.0), (4, 1.0)]
    ] == [True, False, True, False]
    assert exporter.best_ckpt_logs == {"loss": 1.0, "best_ckpt_global_step": 3}


def test_nested_metric_and_info_json_keeps_scalars_only(tmp_path, ckpt):
    exporter = BestCheckpointExporter(tmp_path, "coco|AP")
    logs = {
        "coco": {"AP": np.float32(0.25), "AP50": torch.tensor([0.5])},
        "validation_loss": 1,
        "image/boxes": np.zeros((2, 4, 4, 3)),
        "name": "run",
    }
    assert exporter.maybe_export_checkpoint(ckpt, logs, 10)
    with open(tmp_path / "info.json") as f:
        info = json.load(f)
    assert info == {
        "coco": {"AP": 0.25, "AP50": 0.5},
        "validation_loss": 1.0,
        "best_ckpt_global_step": 10,
    }
    assert exporter.best_key == "best_coco|AP"
    with pytest.raises(KeyError, match=r"no key 'AP' under coco; available keys: \['AR'\]"):
        exporter.maybe_export_checkpoint(ckpt, {"coco": {"AR": 1.0}}, 20)


def test_best_so_far_survives_restart(tmp_path, ckpt):
    BestCheckpointExporter(tmp_path, "acc").maybe_export_checkpoint(ckpt, {"acc": 0.6}, 5)
    restarted = BestCheckpointExporter(tmp_path, "acc")
    assert restarted.best_metric_value == pytest.approx(0.6)
    assert restarted.best_ckpt_logs["best_ckpt_global_step"] == 5
    assert not restarted.maybe_export_checkpoint(ckpt, {"acc": 0.55}, 6)
    assert restarted.maybe_export_checkpoint(ckpt, {"acc": 0.7}, 7)
    assert os.path.basename(restarted.best_ckpt_path) == "best_ckpt-7"


def test_invalid_metric_comp(tmp_path):
    with pytest.raises(
        ValueError, match="best checkpoint metric comp must be one of higher, lower. Got: max"
    ):
        BestCheckpointExporter(tmp_path, "acc", "max")
