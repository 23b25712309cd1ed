"""The fixed-shape NMS of exported detectors keeps exactly what `batched_nms` keeps."""

from __future__ import annotations

import pytest
import torch

from torchgarden.vision.nms import batched_nms
from torchgarden.vision.padded_nms import padded_batched_nms


def _candidates(seed: int, batch: int = 3, rows: int = 200, classes: int = 3):
    generator = torch.Generator().manual_seed(seed)
    corner = torch.rand(batch, rows, 2, generator=generator) * 40
    size = torch.rand(batch, rows, 2, generator=generator) * 15 + 1
    boxes = torch.cat([corner, corner + size], dim=-1)
    scores = torch.rand(batch, rows, classes, generator=generator) ** 3
    return boxes, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("settings", [
    {},  # defaults: 0.05 threshold, 100 detections, 1000 candidates
    {"pre_nms_top_k": 40, "max_detections": 10, "iou_threshold": 0.3},
    {"score_threshold": 0.9, "max_detections": 300},  # fewer survivors than slots
    {"pre_nms_top_k": 30, "max_detections": 50},  # fewer candidates than slots
])
def test_padded_nms_equals_batched_nms(seed, settings):
    boxes, scores = _candidates(seed)
    expected = batched_nms(boxes, scores, **settings)
    got = padded_batched_nms(boxes, scores, **settings)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key].shape == expected[key].shape, key
        assert torch.equal(got[key], expected[key]), key


@pytest.mark.slow  # torch.export's first trace in a process costs seconds
def test_exported_padded_nms_takes_any_batch():
    class Detect(torch.nn.Module):
        def forward(self, boxes, scores):
            return padded_batched_nms(boxes, scores, max_detections=20, pre_nms_top_k=100)

    boxes, scores = _candidates(3, batch=2, rows=60)
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(Detect(), (boxes, scores),
                                  dynamic_shapes=({0: batch}, {0: batch}))
    boxes, scores = _candidates(4, batch=5, rows=60)
    got = program.module()(boxes, scores)
    expected = batched_nms(boxes, scores, max_detections=20, pre_nms_top_k=100)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert int(expected["num_detections"].min()) > 0
