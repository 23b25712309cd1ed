"""Box ops: hand-computed conversions, areas, IoU, clipping and the delta coder."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.vision.boxes import (
    box_area,
    box_iou,
    clip_boxes,
    convert_boxes,
    decode_boxes,
    encode_boxes,
)


def test_convert_boxes_between_all_layouts():
    yxyx = torch.tensor([[1.0, 2.0, 5.0, 8.0]])
    xyxy = convert_boxes(yxyx, source="yxyx", target="xyxy")
    xywh = convert_boxes(yxyx, source="yxyx", target="xywh")
    assert xyxy.tolist() == [[2.0, 1.0, 8.0, 5.0]]
    assert xywh.tolist() == [[2.0, 1.0, 6.0, 4.0]]
    assert convert_boxes(xywh, source="xywh", target="yxyx").tolist() == yxyx.tolist()
    assert convert_boxes(xywh, source="xywh", target="xyxy").tolist() == xyxy.tolist()
    assert convert_boxes(xyxy, source="xyxy", target="xywh").tolist() == xywh.tolist()
    batched = torch.rand(2, 3, 4)
    assert convert_boxes(batched, source="yxyx", target="yxyx").shape == (2, 3, 4)


def test_convert_boxes_rejects_unknown_layout_and_shape():
    with pytest.raises(ValueError, match="source must be one of yxyx, xyxy, xywh.*'xywh'"):
        convert_boxes(torch.zeros(1, 4), source="xwyh", target="yxyx")
    with pytest.raises(ValueError, match=r"boxes must have shape \[\.\.\., 4\], got \(2, 3\)"):
        convert_boxes(torch.zeros(2, 3), source="yxyx", target="xyxy")


def test_box_area_and_inverted_boxes():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 3.0], [5.0, 5.0, 4.0, 9.0]])
    assert box_area(boxes).tolist() == [6.0, 0.0]


def test_box_iou_hand_computed_cases():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    others = torch.tensor([
        [0.0, 5.0, 10.0, 15.0],   # half overlap: 50 / 150
        [0.0, 0.0, 10.0, 10.0],   # identical
        [20.0, 20.0, 30.0, 30.0],  # disjoint
        [0.0, 0.0, 5.0, 5.0],     # contained: 25 / 100
        [10.0, 0.0, 20.0, 10.0],  # touching edge
    ])
    iou = box_iou(a, others)
    assert iou.shape == (1, 5)
    assert iou[0].tolist() == pytest.approx([1 / 3, 1.0, 0.0, 0.25, 0.0])
    degenerate = torch.zeros(1, 4)
    assert box_iou(degenerate, degenerate).tolist() == [[0.0]]  # no NaN


def test_box_iou_broadcasts_batches():
    first, second = torch.rand(2, 3, 4), torch.rand(2, 5, 4)
    first[..., 2:] += first[..., :2]
    second[..., 2:] += second[..., :2]
    batched = box_iou(first, second)
    assert batched.shape == (2, 3, 5)
    assert torch.allclose(batched[1], box_iou(first[1], second[1]))
    shared = box_iou(first[0], second)  # [3, 4] against [2, 5, 4]
    assert shared.shape == (2, 3, 5)
    assert torch.allclose(shared[1], box_iou(first[0], second[1]))


def test_clip_boxes_to_image_and_per_image_sizes():
    boxes = torch.tensor([[-5.0, 3.0, 70.0, 80.0]])
    assert clip_boxes(boxes, (64, 48)).tolist() == [[0.0, 3.0, 64.0, 48.0]]
    batch = torch.tensor([[[0.0, 0.0, 50.0, 50.0]], [[0.0, 0.0, 50.0, 50.0]]])
    sizes = torch.tensor([[[40.0, 30.0]], [[64.0, 64.0]]])
    assert clip_boxes(batch, sizes).tolist() == [[[0.0, 0.0, 40.0, 30.0]],
                                                 [[0.0, 0.0, 50.0, 50.0]]]


def test_encode_boxes_hand_computed_with_and_without_weights():
    anchor = torch.tensor([0.0, 0.0, 10.0, 10.0])  # centre (5, 5), 10 x 10
    box = torch.tensor([2.0, 4.0, 12.0, 24.0])  # centre (7, 14), 10 high, 20 wide
    assert encode_boxes(box, anchor).tolist() == pytest.approx([0.2, 0.9, 0.0, math.log(2)])
    weighted = encode_boxes(box, anchor, weights=(10, 10, 5, 5))
    assert weighted.tolist() == pytest.approx([2.0, 9.0, 0.0, 5 * math.log(2)])


def test_decode_inverts_encode():
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(50, 2, generator=generator) * 60
    sizes = torch.rand(50, 2, generator=generator) * 30 + 1
    boxes = torch.cat([corners, corners + sizes], dim=1)
    anchors = torch.cat([corners - 2, corners + sizes * 1.3], dim=1)
    for weights in [(1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)]:
        deltas = encode_boxes(boxes, anchors, weights)
        assert torch.allclose(decode_boxes(deltas, anchors, weights), boxes, atol=1e-4)


def test_decode_clips_huge_size_deltas():
    anchor = torch.tensor([[0.0, 0.0, 16.0, 16.0]])
    box = decode_boxes(torch.tensor([[0.0, 0.0, 100.0, 100.0]]), anchor)
    assert torch.isfinite(box).all()
    assert (box[0, 2] - box[0, 0]).item() == pytest.approx(1000.0, rel=1e-4)
