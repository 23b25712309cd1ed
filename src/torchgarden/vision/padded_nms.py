"""Greedy NMS with fixed shapes, for exported programs (``torch.export`` and ONNX).

`batched_nms` loops over images in Python and lets the number of candidates depend on
the data, which an exported program with a dynamic batch cannot hold. `padded_batched_nms`
keeps what it keeps with tensors of static shapes: the ``pre_nms_top_k`` best (box,
class) pairs of each image (those at or below the score threshold masked out), the
pairwise "would suppress" matrix, and the same fixed point as `nms` ("kept = not
overlapped by a kept, higher-scored box of its class"), iterated in a
``torch.while_loop`` until it stops changing. That fixed point is the greedy answer, so
the detections equal `batched_nms`'s (up to the order of exactly tied scores).
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.while_loop import while_loop

from torchgarden.vision.boxes import box_iou

__all__ = ["padded_batched_nms"]


def _greedy_keep(suppresses: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` keep mask: the fixed point of ``valid & ~any(suppresses & keep)``."""

    def unsettled(keep: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
        return changed.clone()  # while_loop refuses an output aliasing an input.

    def settle(keep: torch.Tensor, changed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        updated = valid & ~(suppresses & keep.unsqueeze(-1)).any(dim=1)
        return updated, (updated != keep).any()

    start = (valid.clone(), torch.ones((), dtype=torch.bool, device=valid.device))
    keep, _ = while_loop(unsettled, settle, start)
    return keep


def padded_batched_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    *,
    score_threshold: float = 0.05,
    iou_threshold: float = 0.5,
    max_detections: int = 100,
    pre_nms_top_k: int = 1000,
) -> dict[str, torch.Tensor]:
    """`batched_nms` with static shapes: same arguments, same outputs.

    Args:
        boxes: ``[B, N, 4]`` boxes shared by the classes of a row.
        scores: ``[B, N, C]`` per-class scores.
        score_threshold: Candidates must score strictly more. Defaults to 0.05.
        iou_threshold: NMS overlap threshold. Defaults to 0.5.
        max_detections: Outputs per image. Defaults to 100.
        pre_nms_top_k: Candidates per image entering NMS. Defaults to 1000.

    Returns:
        ``detection_boxes [B, K, 4]``, ``detection_scores [B, K]``,
        ``detection_classes [B, K]`` (column of ``scores``, -1 pads) and
        ``num_detections [B]``, ``K = max_detections``, sorted by decreasing score.
    """
    batch, rows, num_classes = scores.shape
    flat = scores.reshape(batch, rows * num_classes)
    top_k = min(pre_nms_top_k, rows * num_classes)
    top_scores, top_index = torch.topk(flat, top_k, dim=1)  # sorted, best first
    valid = top_scores > score_threshold
    anchor_rows = torch.div(top_index, num_classes, rounding_mode="floor")
    labels = top_index % num_classes
    top_boxes = torch.gather(boxes, 1, anchor_rows.unsqueeze(-1).expand(batch, top_k, 4))
    # suppresses[b, i, j]: candidate i (scored higher) would suppress candidate j.
    suppresses = (box_iou(top_boxes, top_boxes) > iou_threshold) & (
        labels.unsqueeze(-1) == labels.unsqueeze(-2))
    suppresses = torch.triu(suppresses, diagonal=1) & valid.unsqueeze(-1)
    keep = _greedy_keep(suppresses, valid)
    # Kept candidates first (in score order), then the rest; take max_detections slots.
    position = torch.arange(top_k, device=scores.device).expand(batch, top_k)
    order = torch.argsort(torch.where(keep, position, position + top_k), dim=1)
    slots = min(max_detections, top_k)
    chosen = order[:, :slots]
    count = keep.sum(dim=1).clamp(max=slots)
    filled = torch.arange(slots, device=scores.device).expand(batch, slots) < count.unsqueeze(1)
    out_boxes = torch.gather(top_boxes, 1, chosen.unsqueeze(-1).expand(batch, slots, 4))
    out_scores = torch.gather(top_scores, 1, chosen)
    out_classes = torch.gather(labels, 1, chosen)
    out = {
        "detection_boxes": torch.where(filled.unsqueeze(-1), out_boxes, 0.0),
        "detection_scores": torch.where(filled, out_scores, 0.0),
        "detection_classes": torch.where(filled, out_classes, -1),
        "num_detections": count,
    }
    if slots < max_detections:  # fewer candidates than output slots: pad
        pad = max_detections - slots
        out["detection_boxes"] = torch.nn.functional.pad(out["detection_boxes"], (0, 0, 0, pad))
        out["detection_scores"] = torch.nn.functional.pad(out["detection_scores"], (0, pad))
        out["detection_classes"] = torch.nn.functional.pad(
            out["detection_classes"], (0, pad), value=-1)
    return out
