"""The README's default experiment: digits MLP reaches >= 0.95 validation accuracy."""

from __future__ import annotations

import json
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from torchgarden.cli.main import main


def test_image_classification_reaches_095_accuracy_and_exports_the_best(tmp_path, capsys):
    model_dir = str(tmp_path / "ic")
    assert main(["train", "--experiment", "image_classification", "--mode", "train_and_eval",
                 "--model_dir", model_dir]) == 0
    out = capsys.readouterr().out
    final = out.strip().splitlines()[-1]
    assert final.startswith("torchgarden: final eval: accuracy=")
    accuracy = float(final.split("accuracy=")[1].split(",")[0])
    assert accuracy >= 0.95

    acc = EventAccumulator(os.path.join(model_dir, "validation"), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("accuracy")]
    assert steps == [500, 1000, 1500, 2000]
    best = max(e.value for e in acc.Scalars("accuracy"))
    assert acc.Scalars("best_accuracy")[-1].value == pytest.approx(best)

    with open(os.path.join(model_dir, "best_ckpt", "info.json")) as f:
        info = json.load(f)
    assert info["accuracy"] == pytest.approx(best)
    assert os.path.isdir(os.path.join(model_dir, "best_ckpt", f"best_ckpt-{info['best_ckpt_global_step']}"))
    assert sorted(n for n in os.listdir(model_dir) if n.startswith("ckpt-")) == [
        "ckpt-1000", "ckpt-1500", "ckpt-2000"
    ]
