"""examples/summary_managers.py: user managers receive every dict; images and histograms."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import summary_managers as example
import torch


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("summaries")))


def test_interface_implementation_receives_every_train_summary_dict(result):
    history = result["image"]["train_history"]
    # 60 steps, loops of 10, summary_interval 20: written at steps 20, 40 and 60.
    assert len(history) == 3
    assert all({"training_loss", "accuracy", "learning_rate"} <= set(d) for d in history)
    path = os.path.join(result["model_dir"], "image", "train", "summaries.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line["step"] for line in lines] == [20, 40, 60]
    assert [line["training_loss"] for line in lines] == pytest.approx(
        [d["training_loss"] for d in history])


def test_image_scalar_manager_writes_image_keys_as_images(result, read_events):
    events = read_events(os.path.join(result["model_dir"], "image", "validation"))
    assert "image/validation_digits" in events.Tags()["images"]
    images = events.Images("image/validation_digits")
    assert [image.step for image in images] == [30, 60]
    # max_outputs=4 of the 8 images: one row of four 8x8 tiles.
    assert (images[-1].height, images[-1].width) == (8, 32)
    assert {"accuracy", "validation_loss"} <= set(events.Tags()["scalars"])
    assert "image/validation_digits" not in events.Tags()["scalars"]


def test_summary_manager_subclass_writes_array_leaves_as_histograms(result, read_events):
    events = read_events(os.path.join(result["model_dir"], "histogram", "validation"))
    histograms = events.Histograms("per_class_accuracy")
    assert [h.step for h in histograms] == [30, 60]
    per_class = np.asarray(result["histogram"]["eval_logs"]["per_class_accuracy"])
    assert per_class.shape == (10,)
    assert histograms[-1].histogram_value.num == 10
    assert histograms[-1].histogram_value.sum == pytest.approx(per_class.sum(), rel=1e-6)
    assert "validation_loss" in events.Tags()["scalars"]


def test_save_summary_false_writes_no_summary(result):
    assert result["no_summary"]["train_history"] == []
    run_dir = os.path.join(result["model_dir"], "no_summary")
    written = [f for _, _, files in os.walk(run_dir) for f in files
               if f.startswith("events.out") or f == "summaries.jsonl"]
    assert written == []
    assert "image/validation_digits" in result["no_summary"]["eval_logs"]


def test_per_class_accuracy_aggregated_over_eval_steps_equals_a_hand_computation(result):
    from torchgarden import data

    x, y = data.load_digits_arrays("validation")  # 359 images: two eval batches of 256
    with torch.no_grad():
        predicted = result["histogram"]["model"].eval()(x).argmax(1)
    expected = [(predicted[y == c] == c).float().mean().item() for c in range(10)]
    per_class = np.asarray(result["histogram"]["eval_logs"]["per_class_accuracy"])
    assert per_class == pytest.approx(expected, abs=1e-6)
