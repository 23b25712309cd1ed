"""examples/python_evaluator.py: COCO numbers equal pycocotools; Orbit's truthy-state rule."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import python_evaluator as example
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

import torchgarden as tg

STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
         "ARs", "ARm", "ARl")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("evaluator") / "run"))


@pytest.fixture(scope="module")
def validation(result):
    images, boxes, classes, ids = example.make_squares(128, seed=1)
    with torch.no_grad():
        box_pred, logits = result["model"].eval()(images)
    return boxes.numpy(), classes.numpy(), ids.numpy(), box_pred.numpy(), logits.softmax(1).numpy()


def xywh(box):
    ymin, xmin, ymax, xmax = (float(v) for v in box)
    return [xmin, ymin, xmax - xmin, ymax - ymin]


def test_coco_metrics_equal_pycocotools_on_the_same_detections(result, validation):
    boxes, classes, ids, box_pred, probabilities = validation
    dataset = {
        "images": [{"id": int(i), "height": 24, "width": 24} for i in ids],
        "categories": [{"id": 1}, {"id": 2}],
        "annotations": [
            {"id": k + 1, "image_id": int(ids[k]), "category_id": int(classes[k]),
             "bbox": xywh(boxes[k]), "area": xywh(boxes[k])[2] * xywh(boxes[k])[3],
             "iscrowd": 0}
            for k in range(len(ids))
        ],
    }
    detections = [
        {"image_id": int(ids[k]), "category_id": int(probabilities[k].argmax() + 1),
         "bbox": xywh(box_pred[k]), "score": float(probabilities[k].max())}
        for k in range(len(ids))
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        ground_truth = COCO()
        ground_truth.dataset = dataset
        ground_truth.createIndex()
        evaluation = COCOeval(ground_truth, ground_truth.loadRes(detections), iouType="bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    logs = result["eval_logs"]
    assert [float(logs[name]) for name in STATS] == pytest.approx(
        list(evaluation.stats), abs=1e-6)
    assert float(logs["AP50"]) > 0.3  # the detector learned something


def test_custom_evaluator_equals_numpy_iou(result, validation):
    boxes, _, _, box_pred, _ = validation
    low = np.maximum(boxes[:, :2], box_pred[:, :2])
    high = np.minimum(boxes[:, 2:], box_pred[:, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=1)
    areas = [(b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) for b in (boxes, box_pred)]
    iou = inter / (areas[0] + areas[1] - inter)
    assert float(result["eval_logs"]["mean_box_iou"]) == pytest.approx(iou.mean(), rel=1e-5)
    assert float(result["eval_logs"]["box_iou_above_0.5"]) == pytest.approx((iou > 0.5).mean())


class RecordingTask(example.SquareDetectionTask):
    """Records the state each aggregate_logs call receives; optionally returns None."""

    truthy = True

    def aggregate_logs(self, state=None, step_logs=None):
        self.seen.append(state)
        new_state = super().aggregate_logs(state, step_logs)
        return new_state if self.truthy else None

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        self.reduced.append(aggregated_logs)
        return super().reduce_aggregated_logs(aggregated_logs, global_step)


@pytest.mark.parametrize("truthy", [True, False])
def test_reduce_runs_only_when_the_aggregated_state_is_truthy(truthy, tmp_path):
    params = example.build_params()
    task = RecordingTask(params.task)
    task.truthy, task.seen, task.reduced = truthy, [], []
    trainer = tg.create_trainer(params, task, train=False, evaluate=True,
                                model_dir=str(tmp_path))
    logs = trainer.evaluate(-1)
    assert task.seen == ([None, True] if truthy else [None, None])  # 128 images, batch 64
    assert task.reduced == ([True] if truthy else [])
    assert ("AP" in logs) is truthy
    assert "validation_loss" in logs
