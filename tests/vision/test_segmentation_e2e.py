"""End to end: the registered semantic_segmentation experiment through the real CLI.

Trains the default config on freshly generated shapes data and checks that the
validation mean IoU clears a floor far above chance, and that TensorBoard holds
the per-class IoU scalars and the three image summaries.
"""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from torchgarden.cli.main import main

# Chance: predicting background everywhere gives mean IoU ~0.2 (background IoU
# ~0.75, shapes 0). Measured finals of the default config: see
# docs/tutorials/semantic_segmentation.md.
MEAN_IOU_FLOOR = 0.6


@pytest.mark.slow
def test_default_experiment_reaches_the_mean_iou_floor(tmp_path):
    model_dir = tmp_path / "run"
    code = main([
        "train", "--experiment", "semantic_segmentation", "--mode", "train_and_eval",
        "--model_dir", str(model_dir),
        "--params_override",
        f"task.generated_data.data_dir={tmp_path / 'data'},trainer.progress_bar=false",
    ])
    assert code == 0
    validation = EventAccumulator(
        str(model_dir / "validation"), size_guidance={"scalars": 0, "images": 0}
    )
    validation.Reload()
    mean_iou = validation.Scalars("mean_iou")
    final_step, final_iou = mean_iou[-1].step, mean_iou[-1].value
    assert final_iou >= MEAN_IOU_FLOOR, f"mean_iou {final_iou:.3f} at step {final_step}"
    assert mean_iou[-1].value > mean_iou[0].value

    per_class = EventAccumulator(str(model_dir / "validation" / "iou"))
    per_class.Reload()
    shapes_iou = [per_class.Scalars(f"class_{k}")[-1].value for k in (1, 2, 3)]
    assert min(shapes_iou) > 0.3, f"every shape class is learned: {shapes_iou}"

    assert set(validation.Tags()["images"]) == {
        "image/input", "image/ground_truth", "image/prediction"
    }
    prediction = validation.Images("image/prediction")[-1]
    assert prediction.step == final_step
    assert (prediction.height, prediction.width) == (64, 4 * 64)  # 4 examples side by side
    assert prediction.encoded_image_string.startswith(b"\x89PNG")

    info = json.loads((model_dir / "best_ckpt" / "info.json").read_text())
    assert info["mean_iou"] == pytest.approx(max(e.value for e in mean_iou), abs=1e-6)
