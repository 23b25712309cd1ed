"""examples/hand_written_loop.py: the tutorial's loop with torchgarden metrics and summaries."""

from __future__ import annotations

import os

import hand_written_loop as example
import pytest
import torch

from torchgarden import data


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("loop") / "run"), epochs=3)


def test_metrics_reset_every_epoch_and_validation_improves(result):
    history = result["history"]
    assert [h["step"] for h in history] == [23, 46, 69]  # 1438 images, batches of 64
    assert all(h["train_count"] == 1438 and h["val_count"] == 359 for h in history)
    assert history[-1]["loss"] < history[0]["loss"] / 3
    assert history[-1]["val_accuracy"] > history[0]["val_accuracy"]
    assert history[-1]["val_accuracy"] > 0.85


def test_last_validation_accuracy_equals_a_hand_computation(result):
    x, y = data.load_digits_arrays("validation")
    with torch.no_grad():
        accuracy = (result["model"](x).argmax(1) == y).float().mean().item()
    assert result["history"][-1]["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)


def test_per_epoch_summaries_are_written(result, read_scalars):
    train = read_scalars(os.path.join(result["model_dir"], "train"))
    validation = read_scalars(os.path.join(result["model_dir"], "validation"))
    assert [s for s, _ in train["loss"]] == [23, 46, 69]
    assert [v for _, v in validation["accuracy"]] == pytest.approx(
        [h["val_accuracy"] for h in result["history"]], rel=1e-6)


@pytest.mark.slow
def test_compiled_step_matches_the_eager_step(result, tmp_path):
    compiled = example.main(str(tmp_path), epochs=2, compile_step=True)
    for eager, graph in zip(result["history"][:2], compiled["history"]):
        assert graph["loss"] == pytest.approx(eager["loss"], rel=1e-4)
        assert graph["val_accuracy"] == pytest.approx(eager["val_accuracy"], abs=0.01)
