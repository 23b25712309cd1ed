"""Box operations in plain torch: formats, areas, pairwise IoU, clipping, anchor deltas.

Boxes are ``[..., 4]`` float tensors in pixels. torchgarden's detection code uses
Model Garden's convention, ``yxyx`` = (ymin, xmin, ymax, xmax); COCO files use ``xywh``
= (x, y, width, height) and torchvision ``xyxy``. A box's extent is ``ymax - ymin`` (no
``+ 1``), so a box is a region of the continuous image plane.

Example:
    >>> import torch
    >>> a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    >>> b = torch.tensor([[0.0, 5.0, 10.0, 15.0]])
    >>> box_iou(a, b)
    tensor([[0.3333]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torchgarden.utils.suggest import did_you_mean

__all__ = [
    "BOX_FORMATS",
    "box_area",
    "box_iou",
    "clip_boxes",
    "convert_boxes",
    "decode_boxes",
    "encode_boxes",
]

BOX_FORMATS = ("yxyx", "xyxy", "xywh")
"""The box layouts `convert_boxes` understands."""

_MAX_LOG_SCALE = math.log(1000.0 / 16.0)
"""Largest ``dh``/``dw`` that `decode_boxes` exponentiates (Detectron's clip), so an
untrained head cannot produce infinite boxes."""


def _check_format(name: str, value: str) -> None:
    if value not in BOX_FORMATS:
        hint = did_you_mean(value, BOX_FORMATS, cutoff=0.0, style="clause")
        raise ValueError(f"{name} must be one of {', '.join(BOX_FORMATS)}, got {value!r}{hint}")


def _check_last_dim(name: str, boxes: torch.Tensor) -> None:
    if boxes.shape[-1:] != (4,):
        raise ValueError(f"{name} must have shape [..., 4], got {tuple(boxes.shape)}.")


def convert_boxes(boxes: torch.Tensor, *, source: str, target: str) -> torch.Tensor:
    """Converts boxes between ``yxyx``, ``xyxy`` and ``xywh``.

    Args:
        boxes: ``[..., 4]`` boxes in the ``source`` layout.
        source: Layout of ``boxes``: one of `BOX_FORMATS`.
        target: Layout wanted: one of `BOX_FORMATS`.

    Returns:
        A new ``[..., 4]`` tensor in the ``target`` layout.

    Raises:
        ValueError: For an unknown layout or a last dimension other than 4.
    """
    _check_format("source", source)
    _check_format("target", target)
    _check_last_dim("boxes", boxes)
    a, b, c, d = boxes.unbind(-1)
    if source == "yxyx":
        xmin, ymin, xmax, ymax = b, a, d, c
    elif source == "xyxy":
        xmin, ymin, xmax, ymax = a, b, c, d
    else:
        xmin, ymin, xmax, ymax = a, b, a + c, b + d
    if target == "yxyx":
        return torch.stack([ymin, xmin, ymax, xmax], dim=-1)
    if target == "xyxy":
        return torch.stack([xmin, ymin, xmax, ymax], dim=-1)
    return torch.stack([xmin, ymin, xmax - xmin, ymax - ymin], dim=-1)


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Areas of corner-format boxes (``yxyx`` or ``xyxy``); inverted boxes give 0.

    Args:
        boxes: ``[..., 4]``.

    Returns:
        ``[...]`` areas.
    """
    _check_last_dim("boxes", boxes)
    extent = (boxes[..., 2:] - boxes[..., :2]).clamp(min=0)
    return extent[..., 0] * extent[..., 1]


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Pairwise intersection over union of corner-format boxes.

    Works for ``yxyx`` and ``xyxy`` alike (both corners swap the same way). Leading
    dimensions broadcast, so ``[B, N, 4]`` against ``[B, M, 4]`` (or ``[M, 4]``) gives
    ``[B, N, M]``. A pair whose union is empty (two degenerate boxes) has IoU 0.

    Args:
        boxes1: ``[..., N, 4]``.
        boxes2: ``[..., M, 4]``.

    Returns:
        ``[..., N, M]`` IoU in [0, 1].
    """
    _check_last_dim("boxes1", boxes1)
    _check_last_dim("boxes2", boxes2)
    first = boxes1.unsqueeze(-2)  # [..., N, 1, 4]
    second = boxes2.unsqueeze(-3)  # [..., 1, M, 4]
    low = torch.maximum(first[..., :2], second[..., :2])
    high = torch.minimum(first[..., 2:], second[..., 2:])
    extent = (high - low).clamp(min=0)
    intersection = extent[..., 0] * extent[..., 1]
    union = box_area(boxes1).unsqueeze(-1) + box_area(boxes2).unsqueeze(-2) - intersection
    return torch.where(union > 0, intersection / union.clamp(min=1e-12), 0.0)


def clip_boxes(boxes: torch.Tensor, image_shape: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Clips ``yxyx`` boxes to an image of ``(height, width)`` pixels.

    Args:
        boxes: ``[..., 4]`` ``yxyx`` boxes.
        image_shape: ``(height, width)``, or a ``[..., 2]`` tensor that broadcasts
            against ``boxes[..., :2]`` (e.g. ``[B, 1, 2]`` for per-image sizes).

    Returns:
        The clipped boxes (a new tensor).
    """
    _check_last_dim("boxes", boxes)
    size = torch.as_tensor(image_shape, dtype=boxes.dtype, device=boxes.device)
    limit = torch.cat([size, size], dim=-1)  # (h, w, h, w)
    return torch.minimum(boxes.clamp(min=0), limit)


def _centers(boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    height = boxes[..., 2] - boxes[..., 0]
    width = boxes[..., 3] - boxes[..., 1]
    return boxes[..., 0] + 0.5 * height, boxes[..., 1] + 0.5 * width, height, width


def encode_boxes(
    boxes: torch.Tensor, anchors: torch.Tensor,
    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
) -> torch.Tensor:
    """Encodes ``yxyx`` boxes as Faster R-CNN deltas relative to ``yxyx`` anchors.

    ``dy = wy * (y - ya) / ha``, ``dx = wx * (x - xa) / wa``, ``dh = wh * log(h / ha)``,
    ``dw = ww * log(w / wa)`` with box centres ``(y, x)`` and sizes ``(h, w)``. Sizes
    below 1e-6 pixels are clamped so degenerate boxes give finite deltas.

    Args:
        boxes: ``[..., 4]`` target boxes.
        anchors: ``[..., 4]`` anchors (broadcast against ``boxes``).
        weights: ``(wy, wx, wh, ww)`` scale factors. Defaults to ``(1, 1, 1, 1)``, as in
            Model Garden's RetinaNet (Faster R-CNN uses ``(10, 10, 5, 5)``).

    Returns:
        ``[..., 4]`` deltas ``(dy, dx, dh, dw)``.
    """
    _check_last_dim("boxes", boxes)
    _check_last_dim("anchors", anchors)
    wy, wx, wh, ww = (float(w) for w in weights)
    y, x, h, w = _centers(boxes)
    ya, xa, ha, wa = _centers(anchors)
    h, w = h.clamp(min=1e-6), w.clamp(min=1e-6)
    ha, wa = ha.clamp(min=1e-6), wa.clamp(min=1e-6)
    return torch.stack([wy * (y - ya) / ha, wx * (x - xa) / wa,
                        wh * torch.log(h / ha), ww * torch.log(w / wa)], dim=-1)


def decode_boxes(
    deltas: torch.Tensor, anchors: torch.Tensor,
    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
) -> torch.Tensor:
    """Inverts `encode_boxes`: deltas relative to ``yxyx`` anchors back to ``yxyx`` boxes.

    ``dh`` and ``dw`` are clipped at ``log(1000 / 16)`` before exponentiation.

    Args:
        deltas: ``[..., 4]`` ``(dy, dx, dh, dw)``.
        anchors: ``[..., 4]`` anchors (broadcast against ``deltas``).
        weights: The ``weights`` given to `encode_boxes`. Defaults to ``(1, 1, 1, 1)``.

    Returns:
        ``[..., 4]`` ``yxyx`` boxes.
    """
    _check_last_dim("deltas", deltas)
    _check_last_dim("anchors", anchors)
    wy, wx, wh, ww = (float(w) for w in weights)
    ya, xa, ha, wa = _centers(anchors)
    dy, dx = deltas[..., 0] / wy, deltas[..., 1] / wx
    dh = (deltas[..., 2] / wh).clamp(max=_MAX_LOG_SCALE)
    dw = (deltas[..., 3] / ww).clamp(max=_MAX_LOG_SCALE)
    y, x = ya + dy * ha, xa + dx * wa
    h, w = ha * torch.exp(dh), wa * torch.exp(dw)
    return torch.stack([y - 0.5 * h, x - 0.5 * w, y + 0.5 * h, x + 0.5 * w], dim=-1)
