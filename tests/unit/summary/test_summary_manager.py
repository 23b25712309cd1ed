"""Tests for torchgarden.summary: real event files read back with TensorBoard's reader."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing import event_accumulator

from torchgarden.summary import (
    ImageScalarSummaryManager,
    SummaryManager,
    SummaryManagerInterface,
    scalar_summary,
)


def _read(directory):
    acc = event_accumulator.EventAccumulator(
        str(directory), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0}
    )
    acc.Reload()
    return acc


def _scalars(directory, tag):
    return [(e.step, pytest.approx(e.value)) for e in _read(directory).Scalars(tag)]


def _files(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def test_scalars_written_with_int_step_and_step_override(tmp_path):
    manager = SummaryManager(tmp_path, global_step=7)
    manager.write_summaries({"loss": 0.5, "acc": np.float32(0.25)})
    manager.write_summaries({"loss": torch.tensor(0.125)}, step=9)
    manager.flush()
    assert _scalars(tmp_path, "loss") == [(7, 0.5), (9, 0.125)]
    assert _scalars(tmp_path, "acc") == [(7, 0.25)]


def test_callable_global_step_is_read_at_each_write(tmp_path):
    step = {"value": 10}
    manager = SummaryManager(tmp_path, global_step=lambda: step["value"])
    manager.write_summaries({"lr": torch.tensor([0.1])})
    step["value"] = 20
    manager.write_summaries({"lr": 0.05})
    manager.close()
    assert _scalars(tmp_path, "lr") == [(10, 0.1), (20, 0.05)]


def test_nested_dict_becomes_subdirectory(tmp_path):
    manager = SummaryManager(tmp_path, global_step=3)
    manager.write_summaries({"train": {"loss": 1.5, "coco": {"AP": 0.3, "AP50": 0.6}}, "top": 2})
    manager.flush()
    assert _scalars(tmp_path / "train" / "coco", "AP") == [(3, 0.3)]
    assert _scalars(tmp_path / "train" / "coco", "AP50") == [(3, 0.6)]
    assert _scalars(tmp_path / "train", "loss") == [(3, 1.5)]
    assert _scalars(tmp_path, "top") == [(3, 2.0)]
    assert "AP" not in _read(tmp_path / "train").Tags()["scalars"]
    assert manager.summary_writer("train/coco") is manager.summary_writer("train/coco/")


def test_null_manager_writes_no_files(tmp_path):
    manager = SummaryManager(None, global_step=1)
    manager.write_summaries({"loss": 1.0, "nested": {"x": torch.ones(())}})
    manager.summary_writer("sub").add_scalar("x", 1.0, 0)
    manager.flush()
    manager.close()
    assert not manager.enabled
    assert not manager.summary_writer()
    assert list(tmp_path.iterdir()) == []


def test_unused_manager_creates_no_directory(tmp_path):
    manager = SummaryManager(tmp_path / "train")
    manager.flush()
    manager.close()
    assert not (tmp_path / "train").exists()


def test_custom_summary_fn_receives_every_leaf(tmp_path):
    calls = []

    def record(writer, name, value, step):
        calls.append((writer.log_dir, name, value, step))

    manager = SummaryManager(tmp_path, summary_fn=record, global_step=4)
    manager.write_summaries({"a": 1, "b": {"c": 2, "d": {"e": 3}}}, step=5)
    manager.close()
    assert calls == [
        (str(tmp_path), "a", 1, 5),
        (os.path.join(str(tmp_path), "b"), "c", 2, 5),
        (os.path.join(str(tmp_path), "b", "d"), "e", 3, 5),
    ]


def test_non_scalar_leaf_is_rejected_with_its_name(tmp_path):
    manager = SummaryManager(tmp_path)
    with pytest.raises(ValueError, match=r"summary 'hist'.*shape \(3,\)"):
        manager.write_summaries({"hist": torch.zeros(3)})
    with pytest.raises(TypeError, match=r"summary 'note'.*str"):
        scalar_summary(manager.summary_writer(), "note", "text", 0)
    manager.close()


def test_image_manager_writes_images_and_scalars(tmp_path):
    manager = ImageScalarSummaryManager(tmp_path, max_outputs=2, global_step=6)
    nhwc_uint8 = np.full((3, 5, 7, 3), 200, dtype=np.uint8)
    nchw_float = torch.rand(4, 1, 6, 5)
    manager.write_summaries(
        {
            "AP": 0.75,
            "image/nhwc": nhwc_uint8,
            "image/nchw": nchw_float,
            "image/hwc": torch.rand(5, 8, 4),
            "image/hw": np.zeros((9, 2), dtype=np.float32),
            "eval": {"image/nested": np.ones((1, 3, 3, 1))},
        }
    )
    manager.close()
    acc = _read(tmp_path)
    assert _scalars(tmp_path, "AP") == [(6, 0.75)]
    sizes = {
        tag: [(e.step, e.width, e.height) for e in acc.Images(tag)] for tag in acc.Tags()["images"]
    }
    # add_images tiles the first max_outputs images side by side in one grid image.
    assert sizes == {
        "image/nhwc": [(6, 2 * 7, 5)],
        "image/nchw": [(6, 2 * 5, 6)],
        "image/hwc": [(6, 8, 5)],
        "image/hw": [(6, 2, 9)],
    }
    nested = _read(tmp_path / "eval")
    assert [(e.width, e.height) for e in nested.Images("image/nested")] == [(3, 3)]


def test_image_manager_rejects_bad_shape_and_max_outputs(tmp_path):
    with pytest.raises(ValueError, match="max_outputs must be a positive int, got 0"):
        ImageScalarSummaryManager(tmp_path, max_outputs=0)
    manager = ImageScalarSummaryManager(tmp_path)
    with pytest.raises(ValueError, match=r"image summary 'image/x'.*got shape \(2, 5, 5\)"):
        manager.write_summaries({"image/x": np.zeros((2, 5, 5))})
    manager.close()


def test_managers_implement_the_interface():
    assert isinstance(SummaryManager(None), SummaryManagerInterface)
    assert isinstance(ImageScalarSummaryManager(None), SummaryManagerInterface)
    with pytest.raises(TypeError):
        SummaryManagerInterface()


def test_import_does_not_load_tensorboard():
    code = (
        "import sys, torchgarden.summary as s; "
        "s.SummaryManager(None).write_summaries({'a': 1}); "
        "print('torch.utils.tensorboard' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
