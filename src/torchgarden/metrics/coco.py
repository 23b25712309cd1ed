"""`COCOEvaluator`: COCO box (and mask) AP/AR with pycocotools, on the host."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from torchgarden.metrics._coco_format import (
    build_detections,
    build_groundtruth_dataset,
    to_numpy,
)
from torchgarden.metrics.evaluator import Evaluator

logger = logging.getLogger(__name__)

_PREDICTION_KEYS = ("source_id", "detection_boxes", "detection_scores", "detection_classes",
                    "num_detections")
_GROUNDTRUTH_KEYS = ("source_id", "height", "width", "num_detections", "boxes", "classes")
_STAT_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax{N}",
               "ARs", "ARm", "ARl")


def _pycocotools() -> tuple[Any, Any]:
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise ImportError("COCOEvaluator needs pycocotools: pip install 'torchgarden[coco]'") \
            from None
    return COCO, COCOeval


@contextlib.contextmanager
def _quiet(what: str):
    """Captures pycocotools' prints and re-emits them at debug level."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    if buffer.getvalue():
        logger.debug("pycocotools %s:\n%s", what, buffer.getvalue().rstrip())


class COCOEvaluator(Evaluator):
    """COCO detection metrics (box, optionally mask) computed with pycocotools.

    Feed it per-batch outputs with `update_state`; `result()` runs ``COCOeval`` over
    everything accumulated, returns the metrics and resets. Only the images seen in
    `update_state` are evaluated, also when the ground truth comes from an annotation file.

    Predictions (dict of tensors or arrays; per-replica lists/tuples are concatenated):
    ``source_id [B]``, ``detection_boxes [B, N, 4]`` as (ymin, xmin, ymax, xmax) in
    pixels, ``detection_scores [B, N]``, ``detection_classes [B, N]``,
    ``num_detections [B]``; ``image_info [B, 4, 2]`` when ``need_rescale_bboxes`` (boxes
    are divided by its scale row, ``image_info[:, 2]``); ``detection_masks`` when
    ``include_mask``: binary image-sized masks ``[B, N, H, W]`` or per-image lists of
    RLE dicts.

    Ground truths (only without an annotation file): ``source_id``, ``height``,
    ``width``, ``num_detections``, ``boxes [B, M, 4]`` (ymin, xmin, ymax, xmax),
    ``classes [B, M]``, optional ``areas [B, M]`` (defaults to box areas) and
    ``is_crowds [B, M]`` (defaults to 0), and ``masks`` when ``include_mask``.

    Returned keys: ``AP, AP50, AP75, APs, APm, APl, ARmax1, ARmax10, ARmax{N}, ARs, ARm,
    ARl`` with ``N = max_num_eval_detections``; the same with a ``mask_`` prefix when
    ``include_mask``; with ``per_category_metrics``, ``Precision mAP ByCategory/<id>``,
    ``Precision mAP@.50IOU ByCategory/<id>``, ``Precision mAP@.75IOU ByCategory/<id>`` and
    ``Recall AR@{N} ByCategory/<id>`` (-1 where COCO has no value), also ``mask_``-prefixed.

    Example:
        >>> evaluator = COCOEvaluator()
        >>> evaluator.update_state(groundtruths, predictions)  # doctest: +SKIP
        >>> evaluator.result()["AP"]  # doctest: +SKIP

    Args:
        annotation_file: COCO-format JSON holding the ground truth. Defaults to None
            (ground truth comes through `update_state`).
        include_mask: Also evaluate instance masks (``segm``). Defaults to False.
        per_category_metrics: Add per-category AP/AR. Defaults to False.
        max_num_eval_detections: Detections per image kept by COCOeval. Defaults to 100.
        need_rescale_bboxes: Divide predicted boxes by ``image_info[:, 2]`` to return to
            original image pixels. Defaults to False.
        name: Log key. Defaults to ``"coco_metric"``.
        sync_on_result: Under ``torchrun``, gather every rank's detections to rank 0
            before ``result()`` evaluates them (see `Evaluator`). Defaults to True.

    Raises:
        ValueError: If ``max_num_eval_detections`` is not a positive int.
        FileNotFoundError: If ``annotation_file`` does not exist.
    """

    def __init__(self, annotation_file: str | os.PathLike | None = None, *,
                 include_mask: bool = False, per_category_metrics: bool = False,
                 max_num_eval_detections: int = 100, need_rescale_bboxes: bool = False,
                 name: str = "coco_metric", sync_on_result: bool = True) -> None:
        super().__init__(name, sync_on_result=sync_on_result)
        if (not isinstance(max_num_eval_detections, int) or isinstance(max_num_eval_detections, bool)
                or max_num_eval_detections < 1):
            raise ValueError("COCOEvaluator: max_num_eval_detections must be a positive int, got "
                             f"{max_num_eval_detections!r}.")
        if annotation_file is not None and not os.path.isfile(annotation_file):
            raise FileNotFoundError(f"COCOEvaluator: annotation_file {str(annotation_file)!r} "
                                    "does not exist.")
        self._annotation_file = annotation_file
        self._include_mask = include_mask
        self._per_category_metrics = per_category_metrics
        self._max_dets = max_num_eval_detections
        self._need_rescale_bboxes = need_rescale_bboxes
        self._coco_gt_from_file: Any = None
        self._predictions: dict[str, list[Any]] = {}
        self._groundtruths: dict[str, list[Any]] = {}

    def reset_states(self) -> None:
        """Drops the accumulated predictions and ground truths."""
        self._predictions = {}
        self._groundtruths = {}

    def local_state(self) -> dict[str, Any]:
        """This rank's accumulated batches (NumPy arrays), for gathering to rank 0."""
        return {"predictions": self._predictions, "groundtruths": self._groundtruths}

    def load_states(self, states: list[dict[str, Any]]) -> None:
        """Holds the batches of every state given, in order (each image once per rank)."""
        self.reset_states()
        for state in states:
            for mine, theirs in ((self._predictions, state["predictions"]),
                                 (self._groundtruths, state["groundtruths"])):
                for key, batches in theirs.items():
                    mine.setdefault(key, []).extend(batches)

    def _required_prediction_keys(self) -> tuple[str, ...]:
        keys = _PREDICTION_KEYS
        if self._need_rescale_bboxes:
            keys += ("image_info",)
        if self._include_mask:
            keys += ("detection_masks",)
        return keys

    def update_state(self, groundtruths: Mapping[str, Any] | None,
                     predictions: Mapping[str, Any]) -> None:
        """Converts one batch to NumPy on the host and stores it.

        Raises:
            ValueError: If a required key is missing (the message names it).
        """
        for key in self._required_prediction_keys():
            if key not in predictions:
                raise ValueError(f"Missing the required key {key!r} in predictions")
        batch = {key: to_numpy(value) for key, value in predictions.items()}
        if self._need_rescale_bboxes:
            scale = np.tile(batch["image_info"][:, 2:3, :].astype(np.float64), (1, 1, 2))
            batch["detection_boxes"] = batch["detection_boxes"].astype(np.float64) / scale
        for key, value in batch.items():
            self._predictions.setdefault(key, []).append(value)

        if self._annotation_file is not None:
            return
        if groundtruths is None:
            raise ValueError("COCOEvaluator without an annotation_file needs groundtruths in "
                             "update_state(groundtruths, predictions); got None.")
        required = _GROUNDTRUTH_KEYS + (("masks",) if self._include_mask else ())
        for key in required:
            if key not in groundtruths:
                raise ValueError(f"Missing the required key {key!r} in groundtruths")
        for key, value in groundtruths.items():
            self._groundtruths.setdefault(key, []).append(to_numpy(value))

    def result(self) -> dict[str, float]:
        """Runs COCOeval on everything accumulated, returns the metrics, then resets."""
        try:
            return self.evaluate()
        finally:
            self.reset_states()

    def evaluate(self) -> dict[str, float]:
        """Runs COCOeval on everything accumulated (without resetting).

        Raises:
            ValueError: If nothing was accumulated.
        """
        if not self._predictions:
            raise ValueError("COCOEvaluator.result() called before any update_state(...).")
        coco_gt = self._groundtruth_coco()
        image_ids = sorted({int(i) for batch in self._predictions["source_id"]
                            for i in np.asarray(batch).reshape(-1)})
        iou_types = ["bbox"] + (["segm"] if self._include_mask else [])
        metrics: dict[str, float] = {}
        for iou_type in iou_types:
            prefix = "mask_" if iou_type == "segm" else ""
            detections = build_detections(self._predictions, masks=iou_type == "segm")
            coco_eval = self._run_cocoeval(coco_gt, detections, image_ids, iou_type)
            names = [n.replace("{N}", str(self._max_dets)) for n in _STAT_NAMES]
            metrics.update({prefix + n: float(v) for n, v in zip(names, coco_eval.stats)})
            if self._per_category_metrics:
                metrics.update({prefix + k: v for k, v in _per_category(coco_eval).items()})
        return metrics

    def _groundtruth_coco(self) -> Any:
        coco_cls, _ = _pycocotools()
        if self._annotation_file is not None:
            if self._coco_gt_from_file is None:
                with _quiet("loading annotations"):
                    self._coco_gt_from_file = coco_cls(str(self._annotation_file))
            return self._coco_gt_from_file
        coco_gt = coco_cls()
        coco_gt.dataset = build_groundtruth_dataset(self._groundtruths,
                                                    masks=self._include_mask)
        with _quiet("indexing ground truth"):
            coco_gt.createIndex()
        return coco_gt

    def _run_cocoeval(self, coco_gt: Any, detections: list[dict[str, Any]],
                      image_ids: list[int], iou_type: str) -> Any:
        coco_cls, cocoeval_cls = _pycocotools()
        with _quiet(f"{iou_type} evaluation"):
            if detections:
                coco_dt = coco_gt.loadRes(detections)
            else:
                # loadRes cannot take an empty list; no detections scores 0 everywhere.
                coco_dt = coco_cls()
                coco_dt.dataset = {"images": list(coco_gt.dataset["images"]),
                                   "categories": list(coco_gt.dataset.get("categories", [])),
                                   "annotations": []}
                coco_dt.createIndex()
            coco_eval = cocoeval_cls(coco_gt, coco_dt, iouType=iou_type)
            coco_eval.params.imgIds = image_ids
            coco_eval.params.maxDets = [1, 10, self._max_dets]
            coco_eval.evaluate()
            coco_eval.accumulate()
            coco_eval.summarize()
        # pycocotools' summarize() reads AP at maxDets=100 whatever maxDets[-1] is.
        coco_eval.stats[0] = _mean_valid(coco_eval.eval["precision"][:, :, :, 0, -1])
        return coco_eval


def _mean_valid(values: np.ndarray) -> float:
    """Mean of the entries COCO defines (> -1), or -1 if there are none."""
    values = values[values > -1]
    return float(values.mean()) if values.size else -1.0


def _per_category(coco_eval: Any) -> dict[str, float]:
    """Per-category AP (all IoUs, .50, .75) and AR at the largest maxDets, area ``all``."""
    precision = coco_eval.eval["precision"]  # [iou, recall, category, area, max_dets]
    recall = coco_eval.eval["recall"]  # [iou, category, area, max_dets]
    ious = coco_eval.params.iouThrs
    max_dets = coco_eval.params.maxDets[-1]
    at50 = np.where(np.isclose(ious, 0.5))[0]
    at75 = np.where(np.isclose(ious, 0.75))[0]
    metrics: dict[str, float] = {}
    for k, category_id in enumerate(coco_eval.params.catIds):
        metrics[f"Precision mAP ByCategory/{category_id}"] = _mean_valid(precision[:, :, k, 0, -1])
        metrics[f"Precision mAP@.50IOU ByCategory/{category_id}"] = _mean_valid(
            precision[at50, :, k, 0, -1])
        metrics[f"Precision mAP@.75IOU ByCategory/{category_id}"] = _mean_valid(
            precision[at75, :, k, 0, -1])
        metrics[f"Recall AR@{max_dets} ByCategory/{category_id}"] = _mean_valid(
            recall[:, k, 0, -1])
    return metrics
