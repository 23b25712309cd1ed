"""SegmentationModel: output shapes, resolution handling, learning and argument errors."""

from __future__ import annotations

import pytest
import torch

from torchgarden.vision.segmentation_model import SegmentationModel


@pytest.mark.parametrize("stem_stride", [1, 2])
@pytest.mark.parametrize("size", [(16, 16), (13, 22)])
def test_logits_match_the_input_size(stem_stride, size):
    model = SegmentationModel(5, widths=(4, 8, 8), stem_stride=stem_stride)
    assert model(torch.rand(2, 3, *size)).shape == (2, 5, *size)


def test_parameter_count_follows_widths():
    # in 3 -> 4 -> 8 encoder, one decoder level (12 -> 4), 1x1 classifier to 3 classes.
    model = SegmentationModel(3, widths=(4, 8))
    conv = (3 * 4 * 9 + 4 * 4 * 9) + (4 * 8 * 9 + 8 * 8 * 9) + (12 * 4 * 9 + 4 * 4 * 9)
    batch_norm = 2 * (4 + 4 + 8 + 8 + 4 + 4)
    classifier = 4 * 3 + 3
    assert sum(p.numel() for p in model.parameters()) == conv + batch_norm + classifier


def test_overfits_a_single_mask():
    torch.manual_seed(0)
    image = torch.rand(1, 3, 16, 16)
    mask = torch.zeros(1, 16, 16, dtype=torch.long)
    mask[:, 4:12, 2:9] = 1
    model = SegmentationModel(2, widths=(8, 16), stem_stride=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(model(image), mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    accuracy = (model(image).argmax(1) == mask).float().mean().item()
    assert loss.item() < 0.2 and accuracy > 0.97


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, "num_classes must be >= 2"),
        ({"num_classes": 3, "widths": ()}, "widths must be positive"),
        ({"num_classes": 3, "stem_stride": 4}, "stem_stride must be 1 or 2"),
    ],
)
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SegmentationModel(**kwargs)
