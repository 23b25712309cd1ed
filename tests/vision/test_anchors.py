"""Anchor generation and RetinaNet target assignment on hand-made boxes."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.vision.anchors import assign_targets, feature_shapes, generate_anchors
from torchgarden.vision.boxes import encode_boxes


def test_feature_shapes_round_up():
    assert feature_shapes((64, 64), min_level=2, max_level=4) == [(16, 16), (8, 8), (4, 4)]
    assert feature_shapes((65, 33), min_level=3, max_level=3) == [(9, 5)]
    with pytest.raises(ValueError, match="min_level <= max_level"):
        feature_shapes((64, 64), min_level=4, max_level=2)


def test_anchor_count_order_and_first_boxes():
    anchors = generate_anchors((64, 64), min_level=2, max_level=4, num_scales=3,
                               aspect_ratios=(0.5, 1.0, 2.0), anchor_size=2.0)
    assert anchors.shape == ((16 * 16 + 8 * 8 + 4 * 4) * 9, 4)
    # Level 2 (stride 4), location (0, 0) centred at (2, 2); first anchor: scale 0,
    # ratio 0.5 -> base 8, height 8 / sqrt(0.5), width 8 * sqrt(0.5).
    half_h, half_w = 8 / math.sqrt(0.5) / 2, 8 * math.sqrt(0.5) / 2
    assert anchors[0].tolist() == pytest.approx([2 - half_h, 2 - half_w, 2 + half_h, 2 + half_w])
    # Anchor 4 of the location is scale 1 (base 8 * 2**(1/3)), ratio 1.0.
    half = 8 * 2 ** (1 / 3) / 2
    assert anchors[4].tolist() == pytest.approx([2 - half, 2 - half, 2 + half, 2 + half])
    # The next location (row 0, column 1) is 4 pixels to the right.
    assert (anchors[9] - anchors[0]).tolist() == pytest.approx([0.0, 4.0, 0.0, 4.0])
    # Level 3 starts after all level-2 anchors: stride 8, centre (4, 4), base 16.
    level3 = anchors[16 * 16 * 9 + 1]  # scale 0, ratio 1.0
    assert level3.tolist() == pytest.approx([-4.0, -4.0, 12.0, 12.0])


def test_generate_anchors_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_scales must be >= 1"):
        generate_anchors((8, 8), num_scales=0)
    with pytest.raises(ValueError, match="aspect_ratios must be a non-empty list"):
        generate_anchors((8, 8), aspect_ratios=())
    with pytest.raises(ValueError, match="anchor_size must be > 0"):
        generate_anchors((8, 8), anchor_size=0.0)


def _hand_anchors() -> torch.Tensor:
    return torch.tensor([
        [0.0, 0.0, 10.0, 10.0],    # 0: IoU 1.0 with gt 0 -> positive
        [0.0, 0.0, 10.0, 12.5],    # 1: IoU 0.8 with gt 0 -> positive
        [0.0, 0.0, 10.0, 22.0],    # 2: IoU 100/220 = 0.45 -> ignored
        [0.0, 5.0, 10.0, 15.0],    # 3: IoU 1/3 -> negative
        [38.0, 38.0, 48.0, 48.0],  # 4: IoU 0.16 with gt 1 -> forced positive (its best)
        [60.0, 60.0, 70.0, 70.0],  # 5: no overlap -> negative
    ])


def test_assign_targets_thresholds_and_forced_match():
    anchors = _hand_anchors()
    gt_boxes = torch.tensor([[[0.0, 0.0, 10.0, 10.0], [40.0, 40.0, 44.0, 44.0],
                              [0.0, 0.0, 0.0, 0.0]]])
    gt_classes = torch.tensor([[2, 3, 0]])  # last row is padding
    targets = assign_targets(anchors, gt_boxes, gt_classes)
    assert targets.classes.tolist() == [[2, 2, -1, 0, 3, 0]]
    assert targets.positive.tolist() == [[True, True, False, False, True, False]]
    assert targets.ignored.tolist() == [[False, False, True, False, False, False]]
    assert targets.num_positives.item() == 3.0
    assert targets.matched_iou[0].tolist() == pytest.approx([1.0, 0.8, 100 / 220, 1 / 3, 0.16,
                                                             0.0])
    expected = encode_boxes(gt_boxes[0, [0, 0, 1]], anchors[[0, 1, 4]])
    assert torch.allclose(targets.boxes[0, [0, 1, 4]], expected)
    assert targets.boxes[0, [2, 3, 5]].abs().sum().item() == 0.0

    without = assign_targets(anchors, gt_boxes, gt_classes, match_each_groundtruth=False)
    assert without.classes.tolist() == [[2, 2, -1, 0, 0, 0]]


def test_assign_targets_later_groundtruth_wins_a_shared_best_anchor():
    anchors = _hand_anchors()
    # Both small boxes have anchor 4 as their best; neither reaches 0.4 anywhere.
    gt_boxes = torch.tensor([[[40.0, 40.0, 44.0, 44.0], [41.0, 41.0, 45.0, 45.0]]])
    targets = assign_targets(anchors, gt_boxes, torch.tensor([[1, 2]]))
    assert targets.classes.tolist() == [[0, 0, 0, 0, 2, 0]]
    assert torch.allclose(targets.boxes[0, 4], encode_boxes(gt_boxes[0, 1], anchors[4]))


def test_assign_targets_images_without_objects_are_all_negative():
    anchors = _hand_anchors()
    padded = assign_targets(anchors, torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long))
    assert padded.classes.tolist() == [[0] * 6, [0] * 6]
    assert padded.matched_iou.tolist() == [[-1.0] * 6, [-1.0] * 6]
    empty = assign_targets(anchors, torch.zeros(2, 0, 4), torch.zeros(2, 0, dtype=torch.long))
    assert empty.classes.tolist() == [[0] * 6, [0] * 6]
    assert empty.num_positives.item() == 0.0


def test_assign_targets_batches_are_independent():
    anchors = _hand_anchors()
    first = torch.tensor([[[0.0, 0.0, 10.0, 10.0]]])
    second = torch.tensor([[[60.0, 60.0, 70.0, 70.0]]])
    batch = assign_targets(anchors, torch.cat([first, second]), torch.tensor([[1], [4]]))
    assert batch.classes[0].tolist() == assign_targets(anchors, first,
                                                       torch.tensor([[1]])).classes[0].tolist()
    assert batch.classes[1].tolist() == [0, 0, 0, 0, 0, 4]


def test_assign_targets_rejects_bad_shapes_and_thresholds():
    anchors = _hand_anchors()
    with pytest.raises(ValueError, match=r"gt_boxes must have shape \[B, M, 4\]"):
        assign_targets(anchors, torch.zeros(3, 4), torch.zeros(3))
    with pytest.raises(ValueError, match=r"gt_classes must have shape \(1, 3\)"):
        assign_targets(anchors, torch.zeros(1, 3, 4), torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"negative_threshold \(0.6\) must be <="):
        assign_targets(anchors, torch.zeros(1, 1, 4), torch.zeros(1, 1),
                       negative_threshold=0.6)
