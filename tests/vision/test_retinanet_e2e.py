"""End to end: the registered retinanet experiment trained on freshly generated shapes data.

Checks that validation AP50 clears a floor far above chance, that the COCO numbers the
task reports are exactly what pycocotools computes from the annotation file for the
same model's predictions, and that the best checkpoint was chosen by AP.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import torchgarden as tg

# Chance is AP50 ~0: an untrained model scores every anchor at the 0.01 prior, below
# the 0.05 detection threshold. Measured finals of the default config (1000 steps):
# see docs/tutorials/retinanet.md.
AP50_FLOOR = 0.6

_STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
          "ARs", "ARm", "ARl")


def _pycocotools_stats(annotation_file: str, detections: list[dict]) -> list[float]:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    coco = COCO(annotation_file)
    evaluation = COCOeval(coco, coco.loadRes(detections), iouType="bbox")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return [float(v) for v in evaluation.stats]


@pytest.mark.slow
def test_default_experiment_reaches_the_ap50_floor_and_matches_pycocotools(tmp_path):
    params = tg.get_experiment("retinanet")
    params.override({"task": {"generated_data": {"data_dir": str(tmp_path / "data")}},
                     "trainer": {"progress_bar": False}})
    task = tg.get_task(params.task)
    model_dir = tmp_path / "run"
    model, logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                    model_dir=model_dir)
    assert logs["AP50"] >= AP50_FLOOR, f"AP50 {logs['AP50']:.3f}, AP {logs['AP']:.3f}"
    assert logs["AP"] > 0.3

    # The same predictions, evaluated by pycocotools against the annotation file.
    loader = task.build_inputs(params.task.validation_data)
    detections = []
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            _, predictions = task.validation_step((images, labels), model)["coco_metric"]
            for i, image_id in enumerate(predictions["source_id"].tolist()):
                for j in range(int(predictions["num_detections"][i])):
                    ymin, xmin, ymax, xmax = predictions["detection_boxes"][i, j].tolist()
                    detections.append({
                        "image_id": image_id,
                        "category_id": int(predictions["detection_classes"][i, j]),
                        "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
                        "score": float(predictions["detection_scores"][i, j])})
    expected = _pycocotools_stats(loader.dataset.annotation_file, detections)
    assert [logs[name] for name in _STATS] == pytest.approx(expected, abs=1e-6)

    info = json.loads((model_dir / "best_ckpt" / "info.json").read_text())
    assert info["AP"] >= logs["AP"] - 1e-6
    assert np.isfinite(logs["total_loss"]) and logs["box_loss"] > 0
