"""Multi-level anchor boxes and RetinaNet's anchor-to-ground-truth target assignment.

Level ``l`` of a feature pyramid has stride ``2**l``; its feature map of an
``H x W`` image is ``ceil(H / 2**l) x ceil(W / 2**l)`` (what stride-2 convolutions with
padding produce). Each location holds ``num_scales * len(aspect_ratios)`` anchors
centred on the location, of base size ``anchor_size * 2**l * 2**(s / num_scales)``
for ``s`` in ``0..num_scales-1`` and width/height ratio ``r`` (height
``base / sqrt(r)``, width ``base * sqrt(r)``), as in Model Garden's ``Anchor``.

Anchors are flattened level by level, then row, column and anchor (scales outer,
aspect ratios inner); `retinanet_model.flatten_levels` flattens head outputs the same way.

Example:
    >>> anchors = generate_anchors((64, 64), min_level=3, max_level=4, num_scales=1,
    ...                            aspect_ratios=(1.0,), anchor_size=4.0)
    >>> anchors.shape  # 8*8 + 4*4 locations, one anchor each
    torch.Size([80, 4])
    >>> anchors[0].tolist()  # level 3: stride 8, 32-pixel anchors centred at (4, 4)
    [-12.0, -12.0, 20.0, 20.0]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from torchgarden.vision.boxes import box_iou, encode_boxes

__all__ = ["AnchorTargets", "assign_targets", "feature_shapes", "generate_anchors"]


def feature_shapes(
    image_size: Sequence[int], *, min_level: int, max_level: int
) -> list[tuple[int, int]]:
    """``(height, width)`` of each pyramid level's feature map, ``min_level`` first.

    Args:
        image_size: ``(height, width)`` of the input in pixels.
        min_level: Finest level (stride ``2**min_level``).
        max_level: Coarsest level (inclusive).

    Returns:
        One ``(ceil(H / 2**l), ceil(W / 2**l))`` per level.

    Raises:
        ValueError: If ``min_level > max_level`` or ``min_level < 0``.
    """
    if not 0 <= min_level <= max_level:
        raise ValueError(f"anchor levels must satisfy 0 <= min_level <= max_level, got "
                         f"min_level={min_level}, max_level={max_level}.")
    height, width = (int(v) for v in image_size)
    return [(math.ceil(height / 2**level), math.ceil(width / 2**level))
            for level in range(min_level, max_level + 1)]


def generate_anchors(
    image_size: Sequence[int],
    *,
    min_level: int = 3,
    max_level: int = 7,
    num_scales: int = 3,
    aspect_ratios: Sequence[float] = (0.5, 1.0, 2.0),
    anchor_size: float = 4.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """All anchors of an image, ``yxyx`` pixels, flattened level-major.

    Args:
        image_size: ``(height, width)`` in pixels.
        min_level: Finest pyramid level. Defaults to 3 (Model Garden's RetinaNet).
        max_level: Coarsest pyramid level. Defaults to 7.
        num_scales: Scales per octave. Defaults to 3.
        aspect_ratios: Width/height ratios. Defaults to ``(0.5, 1.0, 2.0)``.
        anchor_size: Base anchor size in units of the level's stride. Defaults to 4.0.
        device: Where the tensor is created. Defaults to the CPU.

    Returns:
        A float32 ``[N, 4]`` tensor, ``N = sum_l H_l * W_l * num_scales *
        len(aspect_ratios)``.

    Raises:
        ValueError: For ``num_scales < 1``, no or non-positive aspect ratios, or a
            non-positive ``anchor_size``.
    """
    if num_scales < 1:
        raise ValueError(f"num_scales must be >= 1, got {num_scales}.")
    if not aspect_ratios or any(r <= 0 for r in aspect_ratios):
        raise ValueError(f"aspect_ratios must be a non-empty list of positive numbers, got "
                         f"{list(aspect_ratios)}.")
    if anchor_size <= 0:
        raise ValueError(f"anchor_size must be > 0, got {anchor_size}.")
    shapes = feature_shapes(image_size, min_level=min_level, max_level=max_level)
    per_level = []
    for level, (height, width) in zip(range(min_level, max_level + 1), shapes):
        stride = float(2**level)
        half_sizes = []  # (half height, half width) per anchor of a location
        for scale in range(num_scales):
            base = anchor_size * stride * 2.0 ** (scale / num_scales)
            for ratio in aspect_ratios:
                half_sizes.append((base / math.sqrt(ratio) / 2, base * math.sqrt(ratio) / 2))
        half = torch.tensor(half_sizes, dtype=torch.float32, device=device)  # [A, 2]
        cy = (torch.arange(height, dtype=torch.float32, device=device) + 0.5) * stride
        cx = (torch.arange(width, dtype=torch.float32, device=device) + 0.5) * stride
        centers = torch.stack(torch.meshgrid(cy, cx, indexing="ij"), dim=-1)  # [H, W, 2]
        centers = centers[:, :, None, :]  # [H, W, 1, 2]
        boxes = torch.cat([centers - half, centers + half], dim=-1)  # [H, W, A, 4] yxyx
        per_level.append(boxes.reshape(-1, 4))
    return torch.cat(per_level, dim=0)


@dataclasses.dataclass
class AnchorTargets:
    """Per-anchor training targets of a batch, from `assign_targets`.

    Attributes:
        classes: ``[B, N]`` int64: the matched ground truth's class (``>= 1``) for a
            positive anchor, 0 for a negative (background) one, -1 for an ignored one.
        boxes: ``[B, N, 4]`` encoded deltas to the matched box (zeros unless positive).
        positive: ``[B, N]`` bool, ``classes > 0``.
        matched_iou: ``[B, N]`` IoU with the best-overlapping ground truth (-1 if the
            image has none).
    """

    classes: torch.Tensor
    boxes: torch.Tensor
    positive: torch.Tensor
    matched_iou: torch.Tensor

    @property
    def ignored(self) -> torch.Tensor:
        """``[B, N]`` bool: anchors that count in neither loss."""
        return self.classes < 0

    @property
    def num_positives(self) -> torch.Tensor:
        """Scalar float tensor: positives in the whole batch (no host sync)."""
        return self.positive.sum().to(torch.float32)


def assign_targets(
    anchors: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_classes: torch.Tensor,
    *,
    positive_threshold: float = 0.5,
    negative_threshold: float = 0.4,
    match_each_groundtruth: bool = True,
    box_weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
) -> AnchorTargets:
    """Matches anchors to padded ground-truth boxes by IoU (RetinaNet's rule).

    Each anchor takes the ground truth it overlaps most. IoU ``>= positive_threshold``
    makes it positive, ``< negative_threshold`` negative, anything between ignored. With
    ``match_each_groundtruth`` (the default, Model Garden's ``force_match_for_each_row``)
    every ground truth is also given its single best anchor as a positive, whatever
    that IoU, so small or oddly shaped objects are never left without a positive; when
    two ground truths claim the same best anchor, the later one (higher index) gets it.
    Rows whose class is ``<= 0`` are padding (or crowd regions the caller wants
    skipped) and match nothing. Runs on the anchors' device without host syncs.

    Args:
        anchors: ``[N, 4]`` ``yxyx`` anchors.
        gt_boxes: ``[B, M, 4]`` ``yxyx`` ground-truth boxes, padded.
        gt_classes: ``[B, M]`` class labels ``>= 1``; ``<= 0`` marks padding.
        positive_threshold: Defaults to 0.5.
        negative_threshold: Defaults to 0.4; must be ``<= positive_threshold``.
        match_each_groundtruth: Force a positive for every ground truth. Defaults to
            True.
        box_weights: `encode_boxes` weights. Defaults to ``(1, 1, 1, 1)``.

    Returns:
        The `AnchorTargets`.

    Raises:
        ValueError: For mismatched shapes or thresholds in the wrong order.
    """
    if negative_threshold > positive_threshold:
        raise ValueError(f"negative_threshold ({negative_threshold}) must be <= "
                         f"positive_threshold ({positive_threshold}).")
    if anchors.ndim != 2 or anchors.shape[-1] != 4:
        raise ValueError(f"anchors must have shape [N, 4], got {tuple(anchors.shape)}.")
    if gt_boxes.ndim != 3 or gt_boxes.shape[-1] != 4:
        raise ValueError(f"gt_boxes must have shape [B, M, 4], got {tuple(gt_boxes.shape)}.")
    if gt_classes.shape != gt_boxes.shape[:2]:
        raise ValueError(f"gt_classes must have shape {tuple(gt_boxes.shape[:2])} (gt_boxes' "
                         f"[B, M]), got {tuple(gt_classes.shape)}.")
    batch, num_gt = gt_classes.shape
    num_anchors = anchors.shape[0]
    device = anchors.device
    gt_boxes = gt_boxes.to(device=device, dtype=anchors.dtype)
    gt_classes = gt_classes.to(device)
    valid = gt_classes > 0  # [B, M]
    if num_gt == 0:
        classes = torch.zeros(batch, num_anchors, dtype=torch.long, device=device)
        return AnchorTargets(classes=classes,
                             boxes=torch.zeros(batch, num_anchors, 4, device=device),
                             positive=classes > 0,
                             matched_iou=torch.full((batch, num_anchors), -1.0, device=device))

    iou = box_iou(anchors, gt_boxes)  # [B, N, M]
    iou = iou.masked_fill(~valid[:, None, :], -1.0)
    matched_iou, matched = iou.max(dim=2)  # [B, N]
    positive = matched_iou >= positive_threshold
    negative = matched_iou < negative_threshold
    if match_each_groundtruth:
        best_iou, best_anchor = iou.max(dim=1)  # [B, M]
        claims = valid & (best_iou > 0)
        # [B, M, N]: ground truth m claims anchor n. The highest claiming m wins.
        onehot = (best_anchor[:, :, None] == torch.arange(num_anchors, device=device))
        onehot &= claims[:, :, None]
        rank = torch.arange(1, num_gt + 1, device=device)[None, :, None]
        claimant = (onehot * rank).amax(dim=1) - 1  # [B, N], -1 where unclaimed
        forced = claimant >= 0
        matched = torch.where(forced, claimant, matched)
        positive |= forced
        negative &= ~forced
    matched_classes = torch.gather(gt_classes.long(), 1, matched)
    classes = torch.where(positive, matched_classes,
                          torch.where(negative, 0, -1))
    matched_boxes = torch.gather(gt_boxes, 1, matched[:, :, None].expand(-1, -1, 4))
    deltas = encode_boxes(matched_boxes, anchors[None], box_weights)
    deltas = torch.where(positive[:, :, None], deltas, 0.0)
    return AnchorTargets(classes=classes, boxes=deltas, positive=positive,
                         matched_iou=matched_iou)
