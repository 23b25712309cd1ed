"""The small RetinaNet: output shapes, flattening order, prior init, post-processing."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.vision.anchors import generate_anchors
from torchgarden.vision.retinanet_model import RetinaNet, flatten_levels


def _tiny(**kwargs) -> RetinaNet:
    options = dict(num_classes=2, min_level=2, max_level=3, backbone_channels=(4, 8, 8),
                   fpn_channels=8, head_channels=8, num_head_convs=1, num_scales=1,
                   aspect_ratios=(1.0, 2.0))
    options.update(kwargs)
    return RetinaNet(**options)


def test_outputs_per_level_match_the_anchors():
    torch.manual_seed(0)
    model = _tiny()
    outputs = model(torch.randn(3, 3, 32, 24))
    assert sorted(outputs["cls_outputs"]) == ["2", "3"]
    assert outputs["cls_outputs"]["2"].shape == (3, 2 * 2, 8, 6)  # A=2 anchors x 2 classes
    assert outputs["box_outputs"]["3"].shape == (3, 2 * 4, 4, 3)
    anchors = outputs["anchor_boxes"]
    assert anchors.shape == ((8 * 6 + 4 * 3) * 2, 4)
    assert torch.equal(anchors, generate_anchors((32, 24), min_level=2, max_level=3,
                                                 num_scales=1, aspect_ratios=(1.0, 2.0),
                                                 anchor_size=2.0))
    assert flatten_levels(outputs["cls_outputs"], 2).shape == (3, anchors.shape[0], 2)
    assert "detection_boxes" not in outputs  # training mode: no post-processing


def test_flatten_levels_orders_rows_like_the_anchors():
    # Level "2": 2 x 3 locations, 2 anchors, 1 value; encode (y, x, anchor) in the value.
    value = torch.zeros(1, 2, 2, 3)
    for y in range(2):
        for x in range(3):
            for a in range(2):
                value[0, a, y, x] = 100 * y + 10 * x + a
    coarse = torch.full((1, 2, 1, 1), -1.0)
    rows = flatten_levels({"3": coarse, "2": value}, 1)[0, :, 0].tolist()
    assert rows == [0, 1, 10, 11, 20, 21, 100, 101, 110, 111, 120, 121, -1, -1]


def test_classifier_starts_at_the_prior_probability():
    torch.manual_seed(0)
    model = _tiny(prior_probability=0.01).eval()
    with torch.no_grad():
        outputs = model(torch.randn(2, 3, 32, 32))
    probs = torch.sigmoid(flatten_levels(outputs["cls_outputs"], 2))
    assert probs.mean().item() == pytest.approx(0.01, rel=0.05)
    assert model.head.cls_logits.bias[0].item() == pytest.approx(-math.log(99))
    assert outputs["num_detections"].tolist() == [0, 0]  # all below score_threshold 0.05


def test_postprocess_decodes_a_single_confident_anchor():
    model = _tiny(max_detections=5)
    anchors = model.anchor_boxes((32, 32))
    cls_outputs = {"2": torch.full((1, 4, 8, 8), -10.0), "3": torch.full((1, 4, 4, 4), -10.0)}
    box_outputs = {"2": torch.zeros(1, 8, 8, 8), "3": torch.zeros(1, 8, 4, 4)}
    # Level 3, row 1, column 2, anchor 0 (ratio 1.0), class index 1 -> label 2.
    cls_outputs["3"][0, 0 * 2 + 1, 1, 2] = 5.0
    box_outputs["3"][0, 0:4, 1, 2] = torch.tensor([0.1, 0.0, 0.0, math.log(0.5)])
    out = model.postprocess(cls_outputs, box_outputs, (32, 32))
    assert out["num_detections"].tolist() == [1]
    assert out["detection_classes"][0].tolist() == [2, 0, 0, 0, 0]
    assert out["detection_scores"][0, 0].item() == pytest.approx(torch.sigmoid(torch.tensor(5.0)))
    row = 8 * 8 * 2 + (1 * 4 + 2) * 2
    ymin, xmin, ymax, xmax = anchors[row].tolist()  # 16 x 16 anchor centred (12, 20)
    assert [ymin, xmin, ymax, xmax] == pytest.approx([4.0, 12.0, 20.0, 28.0])
    # dy = 0.1 moves the centre by 1.6 px; dw = log(0.5) halves the width.
    assert out["detection_boxes"][0, 0].tolist() == pytest.approx([5.6, 16.0, 21.6, 24.0],
                                                                   abs=1e-4)


def test_postprocess_clips_boxes_to_the_image():
    model = _tiny()
    cls_outputs = {"2": torch.full((1, 4, 8, 8), -10.0), "3": torch.full((1, 4, 4, 4), -10.0)}
    box_outputs = {"2": torch.zeros(1, 8, 8, 8), "3": torch.zeros(1, 8, 4, 4)}
    cls_outputs["2"][0, 0, 0, 0] = 5.0  # the top-left anchor sticks out of the image
    out = model.postprocess(cls_outputs, box_outputs, (32, 32))
    assert out["detection_boxes"][0, 0].tolist() == pytest.approx([0.0, 0.0, 6.0, 6.0])


def test_constructor_rejects_inconsistent_levels():
    with pytest.raises(ValueError, match=r"backbone_channels needs one entry per level 1..3"):
        RetinaNet(num_classes=2, max_level=3, backbone_channels=(4, 8))
    with pytest.raises(ValueError, match="1 <= min_level <= max_level"):
        RetinaNet(num_classes=2, min_level=4, max_level=3, backbone_channels=(4, 8, 8))
    with pytest.raises(ValueError, match=r"expects images of shape \[B, C, H, W\]"):
        _tiny()(torch.zeros(3, 32, 32))
