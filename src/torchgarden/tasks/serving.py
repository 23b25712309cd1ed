"""Serving modules of the built-in tasks: raw uint8 images in, answers out.

Each is what ``Task.build_serving_module`` hands to ``torchgarden export``, Model
Garden's ``official/vision/serving`` modules' twin: pre-processing (uint8
``[B, H, W, C]`` -> normalized float ``[B, C, H, W]``), the model, and post-processing
(softmax + top-k; argmax masks; decoded boxes + NMS) in one traceable ``forward``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from torchgarden.core.serving import normalize_images
from torchgarden.vision.boxes import clip_boxes, decode_boxes
from torchgarden.vision.padded_nms import padded_batched_nms
from torchgarden.vision.retinanet_model import RetinaNet, flatten_levels

if TYPE_CHECKING:
    from torchgarden.core.task import Task

__all__ = ["ClassifierServing", "DetectorServing", "SegmenterServing"]


class _ImageServing(nn.Module):
    """Holds the task (for ``inference_step``), the model and the normalization."""

    def __init__(self, task: Task, model: nn.Module, mean: Sequence[float] | None,
                 std: Sequence[float] | None) -> None:
        super().__init__()
        self.model = model
        self._task = task  # Not a submodule: only its inference_step is called.
        self._mean = list(mean) if mean is not None else None
        self._std = list(std) if std is not None else None

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        return normalize_images(images, self._mean, self._std)


class ClassifierServing(_ImageServing):
    """uint8 ``images [B, H, W, C]`` -> ``probabilities [B, classes]``, ``top_k_scores``
    and ``top_k_classes [B, k]`` (int64, best first).

    Args:
        task: Its ``inference_step`` gives the logits.
        model: The classifier.
        top_k: How many classes to return per image.
        mean: Per-channel mean of [0, 1] pixels subtracted before the model. Defaults to
            None (the pixels are only scaled to [0, 1], as the image loaders do).
        std: Per-channel standard deviation. Defaults to None.
    """

    def __init__(self, task: Task, model: nn.Module, *, top_k: int,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None
                 ) -> None:
        super().__init__(task, model, mean, std)
        self.top_k = top_k

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self._task.inference_step(self.preprocess(images), self.model)
        probabilities = torch.softmax(logits.float(), dim=-1)
        scores, classes = torch.topk(probabilities, self.top_k, dim=-1)
        return {"probabilities": probabilities, "top_k_scores": scores, "top_k_classes": classes}


class SegmenterServing(_ImageServing):
    """uint8 ``images [B, H, W, 3]`` -> ``masks [B, H, W]`` (int64 class per pixel) and
    ``scores [B, H, W]`` (the winning class' softmax probability)."""

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self._task.inference_step(self.preprocess(images), self.model)
        scores, masks = torch.softmax(logits.float(), dim=1).max(dim=1)
        return {"masks": masks, "scores": scores}


class DetectorServing(_ImageServing):
    """uint8 ``images [B, H, W, 3]`` -> RetinaNet detections with fixed shapes.

    Returns ``detection_boxes [B, K, 4]`` (``ymin, xmin, ymax, xmax`` pixels of the
    input), ``detection_scores [B, K]``, ``detection_classes [B, K]`` (``1..num_classes``,
    0 pads) and ``num_detections [B]``, ``K = max_detections``: what ``inference_step``
    returns in ``eval()`` mode, with `padded_batched_nms` in place of the Python loop.

    Args:
        task: The RetinaNet task.
        model: A ``RetinaNet``.
        image_size: ``(height, width)`` of the served images (anchors are fixed for it).
        mean: Per-channel mean of [0, 1] pixels.
        std: Per-channel standard deviation.
    """

    def __init__(self, task: Task, model: RetinaNet, *, image_size: Sequence[int],
                 mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__(task, model, mean, std)
        self.image_size = [int(v) for v in image_size]
        anchors = model.anchor_boxes(self.image_size, next(model.parameters()).device)
        self.register_buffer("anchors", anchors.clone(), persistent=False)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        model = self.model
        features = model.backbone(self.preprocess(images))
        cls_outputs, box_outputs = model.head(model.fpn({k: features[k] for k in model.fpn.levels}))
        logits = flatten_levels(cls_outputs, model.num_classes).float()
        deltas = flatten_levels(box_outputs, 4).float()
        boxes = clip_boxes(decode_boxes(deltas, self.anchors[None], model.box_weights),
                           [float(v) for v in self.image_size])
        detections = padded_batched_nms(
            boxes, torch.sigmoid(logits), score_threshold=model.score_threshold,
            iou_threshold=model.iou_threshold, max_detections=model.max_detections,
            pre_nms_top_k=model.pre_nms_top_k)
        detections["detection_classes"] = detections["detection_classes"] + 1
        return detections
