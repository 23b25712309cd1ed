"""NMS: hand-computed cases, a reference greedy loop, and the batched post-processing."""

from __future__ import annotations

import pytest
import torch

from torchgarden.vision.boxes import box_iou
from torchgarden.vision.nms import batched_nms, nms


def _reference_greedy(boxes, scores, threshold, classes):
    """The textbook loop, written independently of the implementation."""
    scores = scores.tolist()
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    iou = box_iou(boxes, boxes).tolist()
    kept: list[int] = []
    for i in order:
        if all(not (iou[k][i] > threshold and classes[k] == classes[i]) for k in kept):
            kept.append(i)
    return kept


def test_nms_drops_the_lower_scored_overlapping_box():
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]])
    assert nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]
    # Same boxes, scores reversed: box 1 now wins and suppresses box 0.
    assert nms(boxes, torch.tensor([0.7, 0.8, 0.9]), 0.5).tolist() == [2, 1]


def test_nms_chain_keeps_a_box_whose_suppressor_was_suppressed():
    # IoU(A, B) = IoU(B, C) = 70/130 > 0.5; IoU(A, C) = 40/160 = 0.25.
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 3, 10, 13], [0, 6, 10, 16]])
    assert nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]


def test_nms_is_class_aware_and_threshold_is_strict():
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 5, 10, 15]])  # IoU exactly 1/3
    scores = torch.tensor([0.9, 0.8])
    assert nms(boxes, scores, 0.3).tolist() == [0]
    assert nms(boxes, scores, 1 / 3).tolist() == [0, 1]  # not greater than the threshold
    assert nms(boxes, scores, 0.3, classes=torch.tensor([1, 2])).tolist() == [0, 1]


def test_nms_empty_and_single_inputs():
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).tolist() == []
    assert nms(torch.ones(1, 4), torch.ones(1), 0.5).tolist() == [0]
    with pytest.raises(ValueError, match=r"scores must have shape \[2\]"):
        nms(torch.zeros(2, 4), torch.zeros(3), 0.5)


def test_nms_matches_the_reference_loop_on_random_boxes():
    generator = torch.Generator().manual_seed(0)
    for trial in range(30):
        n = 5 + trial * 3
        corners = torch.rand(n, 2, generator=generator) * 40
        boxes = torch.cat([corners, corners + torch.rand(n, 2, generator=generator) * 20 + 1], 1)
        scores = torch.rand(n, generator=generator)
        classes = torch.randint(0, 3, (n,), generator=generator)
        for threshold in (0.3, 0.6):
            got = nms(boxes, scores, threshold, classes=classes).tolist()
            assert got == _reference_greedy(boxes, scores, threshold, classes.tolist())


def test_batched_nms_thresholds_pads_and_keeps_images_apart():
    boxes = torch.tensor([
        [[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [40, 40, 50, 50]],
        [[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [40, 40, 50, 50]],
    ])
    scores = torch.zeros(2, 4, 2)
    scores[0, :, 0] = torch.tensor([0.9, 0.8, 0.04, 0.6])  # box 2 below the threshold
    scores[0, 1, 1] = 0.7  # box 1 as class 1: survives, class-aware
    scores[1, 2, 1] = 0.5
    out = batched_nms(boxes, scores, score_threshold=0.05, iou_threshold=0.5, max_detections=3)
    assert out["num_detections"].tolist() == [3, 1]
    assert out["detection_scores"][0].tolist() == pytest.approx([0.9, 0.7, 0.6])
    assert out["detection_classes"].tolist() == [[0, 1, 0], [1, -1, -1]]
    assert out["detection_boxes"][0].tolist() == [[0.0, 0, 10, 10], [1, 1, 11, 11],
                                                  [40, 40, 50, 50]]
    assert out["detection_boxes"][1, 0].tolist() == [20.0, 20, 30, 30]
    assert out["detection_boxes"][1, 1:].abs().sum().item() == 0.0

    capped = batched_nms(boxes, scores, max_detections=1)
    assert capped["num_detections"].tolist() == [1, 1]
    assert capped["detection_scores"][:, 0].tolist() == pytest.approx([0.9, 0.5])
    top1 = batched_nms(boxes, scores, pre_nms_top_k=1)  # only the best candidate enters
    assert top1["num_detections"].tolist() == [1, 1]


def test_batched_nms_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"scores must have shape \[1, 3, C\]"):
        batched_nms(torch.zeros(1, 3, 4), torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="max_detections .0. and pre_nms_top_k"):
        batched_nms(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2), max_detections=0)
