"""Non-maximum suppression in plain torch: greedy, class-aware, batched over images.

`nms` keeps exactly what the classic greedy algorithm keeps (visit boxes by decreasing
score; keep one unless a kept, higher-scored box of its class overlaps it by more than
the threshold) but computes it without a Python loop over boxes: the keep mask is the
fixed point of "not overlapped by any kept higher-scored box", iterated from "keep
all". After ``t`` rounds the first ``t`` boxes in score order are final, so the
iteration ends with the greedy answer, usually after a handful of rounds.

`batched_nms` is the detection post-processing step: per image, score threshold,
top-k, class-aware NMS and a fixed number of padded outputs.

Example:
    >>> import torch
    >>> boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]])
    >>> nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5).tolist()
    [0, 2]
"""

from __future__ import annotations

import torch

from torchgarden.vision.boxes import box_iou

__all__ = ["batched_nms", "nms"]


def nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    *,
    classes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Greedy non-maximum suppression; class-aware when ``classes`` is given.

    Args:
        boxes: ``[N, 4]`` corner-format boxes (``yxyx`` or ``xyxy``).
        scores: ``[N]`` scores.
        iou_threshold: A box is dropped when its IoU with a kept, higher-scored box
            (of the same class, with ``classes``) is greater than this.
        classes: Optional ``[N]`` integer labels; boxes of different labels never
            suppress each other. Defaults to None (one class).

    Returns:
        int64 indices into ``boxes`` of the kept boxes, by decreasing score (ties keep
        the input order).

    Raises:
        ValueError: For mismatched shapes.
    """
    if boxes.ndim != 2 or boxes.shape[-1] != 4:
        raise ValueError(f"nms: boxes must have shape [N, 4], got {tuple(boxes.shape)}.")
    if scores.shape != boxes.shape[:1]:
        raise ValueError(f"nms: scores must have shape [{boxes.shape[0]}] (one per box), got "
                         f"{tuple(scores.shape)}.")
    if classes is not None and classes.shape != scores.shape:
        raise ValueError(f"nms: classes must have shape [{boxes.shape[0]}] (one per box), got "
                         f"{tuple(classes.shape)}.")
    order = torch.argsort(scores, descending=True, stable=True)
    if order.numel() <= 1:
        return order
    ordered = boxes[order]
    # overlaps[i, j]: higher-scored box i would suppress box j (i before j in score order).
    overlaps = box_iou(ordered, ordered) > iou_threshold
    if classes is not None:
        labels = classes[order]
        overlaps &= labels[:, None] == labels[None, :]
    overlaps = torch.triu(overlaps, diagonal=1)
    keep = torch.ones_like(order, dtype=torch.bool)
    for _ in range(order.numel()):
        updated = ~(overlaps & keep[:, None]).any(dim=0)
        if torch.equal(updated, keep):  # host sync: one per round
            break
        keep = updated
    return order[keep]


def batched_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    *,
    score_threshold: float = 0.05,
    iou_threshold: float = 0.5,
    max_detections: int = 100,
    pre_nms_top_k: int = 1000,
) -> dict[str, torch.Tensor]:
    """Per-image, per-class NMS over a batch of multi-class candidates.

    Every (box, class) pair with a score above ``score_threshold`` is a candidate; the
    ``pre_nms_top_k`` best candidates of an image go through class-aware `nms`; the
    ``max_detections`` best survivors are returned, padded.

    Args:
        boxes: ``[B, N, 4]`` boxes (shared by all classes of a row).
        scores: ``[B, N, C]`` per-class scores (e.g. sigmoid probabilities).
        score_threshold: Candidates must score strictly more. Defaults to 0.05.
        iou_threshold: NMS overlap threshold. Defaults to 0.5.
        max_detections: Outputs per image. Defaults to 100.
        pre_nms_top_k: Candidates per image entering NMS. Defaults to 1000.

    Returns:
        ``detection_boxes [B, K, 4]``, ``detection_scores [B, K]``,
        ``detection_classes [B, K]`` (int64 column index of ``scores``, -1 for padding),
        ``num_detections [B]`` (int64) with ``K = max_detections``; rows past
        ``num_detections`` are zeros (classes -1). Sorted by decreasing score.

    Raises:
        ValueError: For mismatched shapes or non-positive counts.
    """
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError(f"batched_nms: boxes must have shape [B, N, 4], got "
                         f"{tuple(boxes.shape)}.")
    if scores.ndim != 3 or scores.shape[:2] != boxes.shape[:2]:
        raise ValueError(f"batched_nms: scores must have shape [{boxes.shape[0]}, "
                         f"{boxes.shape[1]}, C], got {tuple(scores.shape)}.")
    if max_detections < 1 or pre_nms_top_k < 1:
        raise ValueError(f"batched_nms: max_detections ({max_detections}) and pre_nms_top_k "
                         f"({pre_nms_top_k}) must be >= 1.")
    batch, _, num_classes = scores.shape
    device = boxes.device
    out_boxes = torch.zeros(batch, max_detections, 4, dtype=boxes.dtype, device=device)
    out_scores = torch.zeros(batch, max_detections, dtype=scores.dtype, device=device)
    out_classes = torch.full((batch, max_detections), -1, dtype=torch.long, device=device)
    out_counts = torch.zeros(batch, dtype=torch.long, device=device)
    for b in range(batch):
        flat = scores[b].reshape(-1)
        candidates = torch.nonzero(flat > score_threshold).squeeze(1)  # host sync
        if candidates.numel() > pre_nms_top_k:
            top = torch.topk(flat[candidates], pre_nms_top_k, sorted=False).indices
            candidates = candidates[top]
        rows = torch.div(candidates, num_classes, rounding_mode="floor")
        labels = candidates % num_classes
        candidate_scores = flat[candidates]
        keep = nms(boxes[b, rows], candidate_scores, iou_threshold, classes=labels)
        keep = keep[:max_detections]
        count = keep.numel()
        out_boxes[b, :count] = boxes[b, rows[keep]]
        out_scores[b, :count] = candidate_scores[keep]
        out_classes[b, :count] = labels[keep]
        out_counts[b] = count
    return {"detection_boxes": out_boxes, "detection_scores": out_scores,
            "detection_classes": out_classes, "num_detections": out_counts}
