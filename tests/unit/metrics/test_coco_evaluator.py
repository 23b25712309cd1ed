"""COCOEvaluator numbers equal pycocotools run directly on the same data."""

import contextlib
import io
import json

import numpy as np
import pytest
import torch

from torchgarden.metrics import COCOEvaluator, Evaluator

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

STAT_KEYS = ["AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100",
             "ARs", "ARm", "ARl"]

# image id -> (height, width, [(ymin, xmin, ymax, xmax, class, is_crowd)])
IMAGES = {
    1: (200, 200, [(10, 10, 30, 30, 1, 0),        # small, 400 px
                   (50, 50, 100, 120, 2, 0),      # medium, 3500 px
                   (0, 0, 150, 150, 1, 1)]),      # large crowd
    2: (300, 300, [(20, 20, 200, 220, 1, 0),      # large
                   (250, 250, 270, 265, 2, 0)]),  # small
    7: (120, 100, [(10, 10, 80, 90, 2, 0)]),      # medium
}
# image id -> [(ymin, xmin, ymax, xmax, class, score)]
DETECTIONS = {
    1: [(11, 9, 31, 29, 1, 0.9), (55, 50, 100, 118, 2, 0.8), (5, 5, 140, 140, 1, 0.3),
        (60, 60, 90, 90, 1, 0.6)],
    2: [(20, 25, 190, 220, 1, 0.95), (150, 150, 180, 180, 2, 0.4)],
    7: [(12, 8, 85, 95, 2, 0.7), (0, 0, 20, 20, 2, 0.2), (30, 30, 60, 60, 1, 0.5)],
}


def _xywh(box):
    ymin, xmin, ymax, xmax = box
    return [float(xmin), float(ymin), float(xmax - xmin), float(ymax - ymin)]


def _reference(detections, iou_type="bbox", cat_ids=None):
    images = [{"id": i, "height": h, "width": w} for i, (h, w, _) in IMAGES.items()]
    anns = []
    for image_id, (_, _, boxes) in IMAGES.items():
        for *box, cls, crowd in boxes:
            xywh = _xywh(box)
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": cls,
                         "bbox": xywh, "area": xywh[2] * xywh[3], "iscrowd": crowd})
    gt = {"images": images, "annotations": anns, "categories": [{"id": 1}, {"id": 2}]}
    results = [{"image_id": i, "category_id": c, "bbox": _xywh(b), "score": s}
               for i, dets in detections.items() for *b, c, s in dets]
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(results), iou_type)
        if cat_ids is not None:
            coco_eval.params.catIds = cat_ids
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return gt, coco_eval.stats


def _batch(image_ids, detections, max_gt=3, max_det=4):
    n = len(image_ids)
    gt = {"source_id": torch.tensor(image_ids), "height": torch.zeros(n), "width": torch.zeros(n),
          "num_detections": torch.zeros(n, dtype=torch.int64),
          "boxes": torch.zeros(n, max_gt, 4), "classes": -torch.ones(n, max_gt),
          "is_crowds": torch.zeros(n, max_gt)}
    pred = {"source_id": torch.tensor(image_ids), "detection_boxes": torch.zeros(n, max_det, 4),
            "detection_scores": torch.zeros(n, max_det),
            "detection_classes": torch.zeros(n, max_det),
            "num_detections": torch.zeros(n, dtype=torch.int64)}
    for row, image_id in enumerate(image_ids):
        h, w, boxes = IMAGES[image_id]
        gt["height"][row], gt["width"][row] = h, w
        gt["num_detections"][row] = len(boxes)
        for j, (*box, cls, crowd) in enumerate(boxes):
            gt["boxes"][row, j] = torch.tensor(box, dtype=torch.float32)
            gt["classes"][row, j], gt["is_crowds"][row, j] = cls, crowd
        dets = detections.get(image_id, [])
        pred["num_detections"][row] = len(dets)
        for j, (*box, cls, score) in enumerate(dets):
            pred["detection_boxes"][row, j] = torch.tensor(box, dtype=torch.float32)
            pred["detection_classes"][row, j], pred["detection_scores"][row, j] = cls, score
    return gt, pred


def _split_replicas(batch):
    """Image 7's batch delivered as two per-replica halves (a tuple per key)."""
    return {k: (v[:1], v[1:]) for k, v in batch.items()}


def test_matches_pycocotools_with_crowds_and_all_area_ranges():
    _, expected = _reference(DETECTIONS)
    evaluator = COCOEvaluator()
    gt, pred = _batch([1, 2], DETECTIONS)
    evaluator.update_state(gt, pred)
    gt, pred = _batch([7, 7], {7: DETECTIONS[7]})
    gt, pred = ({k: v[:1] for k, v in gt.items()}, {k: v[:1] for k, v in pred.items()})
    evaluator.update_state(gt, pred)
    metrics = evaluator.result()
    assert list(metrics) == STAT_KEYS
    assert [metrics[k] for k in STAT_KEYS] == pytest.approx(list(expected), abs=1e-12)
    assert 0.0 < metrics["AP"] < 1.0 and metrics["APs"] != -1 and metrics["APl"] != -1
    assert evaluator.name == "coco_metric" and isinstance(evaluator, Evaluator)
    with pytest.raises(ValueError, match="before any update_state"):
        evaluator.result()  # result() reset the state


def test_annotation_file_per_replica_tuples_and_per_category(tmp_path):
    gt_json, expected = _reference(DETECTIONS)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(gt_json))
    evaluator = COCOEvaluator(str(path), per_category_metrics=True)
    _, pred = _batch([1, 2, 7], DETECTIONS)
    evaluator.update_state(None, _split_replicas(pred))
    metrics = evaluator.result()
    assert [metrics[k] for k in STAT_KEYS] == pytest.approx(list(expected), abs=1e-12)
    for cat in (1, 2):
        _, per_cat = _reference(DETECTIONS, cat_ids=[cat])
        assert metrics[f"Precision mAP ByCategory/{cat}"] == pytest.approx(per_cat[0])
        assert metrics[f"Precision mAP@.50IOU ByCategory/{cat}"] == pytest.approx(per_cat[1])
        assert metrics[f"Precision mAP@.75IOU ByCategory/{cat}"] == pytest.approx(per_cat[2])
        assert metrics[f"Recall AR@100 ByCategory/{cat}"] == pytest.approx(per_cat[8])


def test_perfect_detector_scores_one_and_rescaling():
    perfect = {i: [(*box, cls, 1.0) for *box, cls, crowd in boxes if not crowd]
               for i, (_, _, boxes) in IMAGES.items()}
    gt, pred = _batch([1, 2, 7], perfect)
    pred["detection_boxes"] *= 2.0  # the model saw images upscaled 2x
    pred["image_info"] = torch.tensor([[[0, 0], [0, 0], [2.0, 2.0], [0, 0]]]).repeat(3, 1, 1)
    evaluator = COCOEvaluator(need_rescale_bboxes=True, max_num_eval_detections=10)
    evaluator.update_state(gt, pred)
    metrics = evaluator.result()
    assert metrics["AP"] == pytest.approx(1.0)
    assert metrics["AP50"] == pytest.approx(1.0)
    assert "ARmax10" in metrics and "ARmax100" not in metrics


def test_no_detections_scores_zero():
    gt, pred = _batch([1, 2], {})
    evaluator = COCOEvaluator()
    evaluator.update_state(gt, pred)
    assert evaluator.result()["AP"] == 0.0


def test_masks_perfect_segmentation():
    masks = np.zeros((1, 2, 40, 40), dtype=np.uint8)
    masks[0, 0, 5:15, 5:20] = 1
    masks[0, 1, 20:38, 10:30] = 1
    gt = {"source_id": np.array([3]), "height": np.array([40]), "width": np.array([40]),
          "num_detections": np.array([2]),
          "boxes": np.array([[[5, 5, 15, 20], [20, 10, 38, 30]]], dtype=np.float32),
          "classes": np.array([[1, 2]]), "masks": masks}
    pred = {"source_id": np.array([3]), "detection_boxes": gt["boxes"],
            "detection_scores": np.array([[0.9, 0.8]]), "detection_classes": np.array([[1, 2]]),
            "num_detections": np.array([2]), "detection_masks": masks.astype(np.float32)}
    evaluator = COCOEvaluator(include_mask=True)
    evaluator.update_state(gt, pred)
    metrics = evaluator.result()
    assert metrics["AP"] == pytest.approx(1.0) and metrics["mask_AP"] == pytest.approx(1.0)
    assert "mask_ARl" in metrics


def test_argument_and_key_errors(tmp_path):
    with pytest.raises(ValueError, match="max_num_eval_detections"):
        COCOEvaluator(max_num_eval_detections=10.5)
    with pytest.raises(FileNotFoundError, match="annotation_file"):
        COCOEvaluator(str(tmp_path / "missing.json"))
    gt, pred = _batch([1], DETECTIONS)
    del pred["detection_boxes"]
    with pytest.raises(ValueError, match="Missing the required key 'detection_boxes' in predictions"):
        COCOEvaluator().update_state(gt, pred)
    gt, pred = _batch([1], DETECTIONS)
    del gt["classes"]
    with pytest.raises(ValueError, match="Missing the required key 'classes' in groundtruths"):
        COCOEvaluator().update_state(gt, pred)


def test_ranks_states_loaded_together_give_the_one_process_result():
    """What ``result()`` does on rank 0 under torchrun: every rank's batches, once each."""
    whole = COCOEvaluator()
    whole.update_state(*_batch([1, 2, 7], DETECTIONS))
    expected = whole.result()
    ranks = [COCOEvaluator(), COCOEvaluator()]
    ranks[0].update_state(*_batch([1, 7], DETECTIONS))
    ranks[1].update_state(*_batch([2], DETECTIONS))
    gathered = COCOEvaluator()
    gathered.load_states([r.local_state() for r in ranks])
    assert gathered.result() == expected
    assert ranks[1].result()["AP"] != expected["AP"]  # One shard alone is another number.
