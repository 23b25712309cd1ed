"""Augmentations: hand-computed flips and crops, jitter, normalization, determinism."""

from __future__ import annotations

import pytest
import torch

from torchgarden.vision.augment import (
    Augmentation,
    color_jitter,
    horizontal_flip,
    normalize,
    random_horizontal_flip,
    random_scale_crop,
    scale_crop,
)


def test_horizontal_flip_of_a_known_box_and_mask():
    image = torch.arange(10.0).repeat(1, 2, 1)  # [1, 2, 10], pixel value = column
    boxes = torch.tensor([[1.0, 0.0, 4.0, 2.0], [0.0, 0.0, 10.0, 1.0]])
    masks = torch.zeros(2, 10, dtype=torch.long)
    masks[:, 1:4] = 7
    flipped, fboxes, fmasks = horizontal_flip(image, boxes, masks)
    assert flipped[0, 0].tolist() == [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    assert fboxes.tolist() == [[6.0, 0.0, 9.0, 2.0], [0.0, 0.0, 10.0, 1.0]]
    assert fmasks[0].tolist() == [0, 0, 0, 0, 0, 0, 7, 7, 7, 0]
    # The flipped box covers exactly the flipped mask's columns.
    cols = fmasks[0].nonzero().flatten()
    assert (int(cols.min()), int(cols.max()) + 1) == (6, 9)


def test_random_flip_probability_extremes_and_no_inputs():
    image = torch.rand(3, 4, 5)
    same, boxes, masks = random_horizontal_flip(image, probability=0.0)
    assert torch.equal(same, image) and boxes is None and masks is None
    flipped, _, _ = random_horizontal_flip(image, probability=1.0)
    assert torch.equal(flipped, image.flip(-1))


def test_scale_crop_at_scale_one_crops_a_known_window():
    mask = torch.arange(16).reshape(4, 4)
    image = mask[None].float()
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 4.0], [3.5, 0.0, 4.0, 1.0]])
    out, oboxes, omask, keep = scale_crop(
        image, boxes, mask, output_size=(2, 2), scale=2.0, offset=(1, 1)
    )
    # factor = 2 * min(2/4, 2/4) = 1: no resize, window rows/cols 1..2.
    assert omask.tolist() == [[5, 6], [9, 10]]
    assert out[0].tolist() == [[5.0, 6.0], [9.0, 10.0]]
    assert keep.tolist() == [True, True, False]
    assert oboxes.tolist() == [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0]]


def test_scale_crop_upsamples_masks_nearest_and_pads_with_fill():
    mask = torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8)
    image = torch.ones(3, 2, 2)
    boxes = torch.tensor([[1.0, 0.0, 2.0, 1.0]])
    out, oboxes, omask, keep = scale_crop(
        image, boxes, mask, output_size=(6, 6), scale=2 / 3, offset=(0, 0), mask_fill=255
    )
    # factor = 2/3 * 3 = 2: the 2x2 mask becomes 4x4 blocks, padded to 6x6 with 255.
    expected = [
        [1, 1, 2, 2, 255, 255],
        [1, 1, 2, 2, 255, 255],
        [3, 3, 4, 4, 255, 255],
        [3, 3, 4, 4, 255, 255],
    ] + [[255] * 6] * 2
    assert omask.dtype == torch.uint8 and omask.tolist() == expected
    assert out[:, :4, :4].eq(1).all() and out[:, 4:].eq(0).all() and out[:, :, 4:].eq(0).all()
    assert keep.tolist() == [True] and oboxes.tolist() == [[2.0, 0.0, 4.0, 2.0]]


def test_scale_crop_downscale_instance_masks_and_min_box_size():
    masks = torch.zeros(2, 8, 8, dtype=torch.bool)
    masks[0, :4, :4] = True
    masks[1, 6:, 6:] = True
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [6.0, 6.0, 8.0, 8.0]])
    out, oboxes, omasks, keep = scale_crop(
        torch.rand(3, 8, 8), boxes, masks, output_size=(4, 4), min_box_size=1.0
    )
    assert out.shape == (3, 4, 4) and omasks.shape == (2, 4, 4)
    assert omasks[0].nonzero().max().item() == 1  # top-left 2x2 block
    assert keep.tolist() == [True, False]  # the second is exactly 1 px wide: not > 1
    assert oboxes.tolist() == [[0.0, 0.0, 2.0, 2.0]]


def test_scale_crop_errors():
    with pytest.raises(ValueError, match=r"offset \(3, 0\) is outside"):
        scale_crop(torch.rand(1, 4, 4), output_size=(2, 2), scale=1.0, offset=(3, 0))
    with pytest.raises(ValueError, match="scale must be > 0"):
        scale_crop(torch.rand(1, 4, 4), output_size=(2, 2), scale=0.0)
    with pytest.raises(ValueError, match="scale_range"):
        random_scale_crop(torch.rand(1, 4, 4), output_size=(2, 2), scale_range=(2.0, 1.0))


def test_random_scale_crop_keeps_boxes_on_their_mask():
    torch.manual_seed(0)
    for _ in range(20):
        masks = torch.zeros(1, 32, 32, dtype=torch.uint8)
        masks[0, 8:20, 4:28] = 1
        boxes = torch.tensor([[4.0, 8.0, 28.0, 20.0]])
        _, oboxes, omasks, keep = random_scale_crop(
            torch.rand(3, 32, 32), boxes, masks, output_size=(32, 32), scale_range=(1.0, 2.0)
        )
        if keep[0]:
            rows, cols = omasks[0].nonzero().unbind(1)
            x1, y1, x2, y2 = oboxes[0].tolist()
            # Nearest resampling moves mask edges by at most one pixel from the box.
            assert abs(cols.min() - x1) <= 1 and abs(cols.max() + 1 - x2) <= 1
            assert abs(rows.min() - y1) <= 1 and abs(rows.max() + 1 - y2) <= 1


def test_color_jitter_factors_and_identity():
    image = torch.tensor([[[0.2, 0.4]], [[0.2, 0.4]], [[0.2, 0.4]]])  # gray, [3, 1, 2]
    assert torch.equal(color_jitter(image), image)
    generator = torch.Generator().manual_seed(5)
    factor = 0.5 + float(torch.rand((), generator=torch.Generator().manual_seed(5)))
    bright = color_jitter(image, brightness=0.5, generator=generator)
    torch.testing.assert_close(bright, (image * factor).clamp(0, 1))
    # Saturation leaves gray pixels unchanged; contrast keeps the mean gray level.
    assert torch.allclose(color_jitter(image, saturation=0.9), image)
    contrasted = color_jitter(image, contrast=0.5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(contrasted.mean(), image.mean())
    with pytest.raises(ValueError, match="brightness must be >= 0"):
        color_jitter(image, brightness=-1)


def test_normalize_values_and_errors():
    image = torch.full((3, 2, 2), 0.75)
    out = normalize(image, [0.5, 0.25, 0.75], [0.25, 0.5, 1.0])
    assert out[:, 0, 0].tolist() == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="one entry per channel of the 3-channel image"):
        normalize(image, [0.5], [0.5])
    with pytest.raises(ValueError, match="std must be > 0"):
        normalize(image, [0.5] * 3, [0.5, 0.0, 0.5])


def _pipeline() -> Augmentation:
    return Augmentation(
        output_size=(24, 24), horizontal_flip=True, scale_range=(0.5, 1.5),
        brightness=0.3, contrast=0.3, saturation=0.3, mean=[0.5] * 3, std=[0.25] * 3,
        mask_fill=255,
    )


def test_augmentation_is_deterministic_under_a_seed():
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    mask = torch.randint(0, 3, (32, 32), generator=torch.Generator().manual_seed(1))
    boxes = torch.tensor([[2.0, 2.0, 20.0, 30.0], [25.0, 0.0, 32.0, 6.0]])
    labels = torch.tensor([1, 2])
    augment = _pipeline()
    first = augment(image, boxes, mask, labels, generator=torch.Generator().manual_seed(7))
    again = augment(image, boxes, mask, labels, generator=torch.Generator().manual_seed(7))
    other = augment(image, boxes, mask, labels, generator=torch.Generator().manual_seed(8))
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert not torch.equal(first.image, other.image)
    assert first.image.shape == (3, 24, 24) and first.masks.shape == (24, 24)
    assert len(first.boxes) == len(first.labels)
    # The global RNG is used when no generator is given, and seeding it reproduces.
    torch.manual_seed(3)
    global_a = augment(image, masks=mask)
    torch.manual_seed(3)
    global_b = augment(image, masks=mask)
    assert torch.equal(global_a.image, global_b.image)
    assert torch.equal(global_a.masks, global_b.masks)


def test_augmentation_filters_labels_and_instance_masks_with_dropped_boxes():
    image = torch.rand(3, 16, 16)
    masks = torch.zeros(2, 16, 16, dtype=torch.uint8)
    masks[0, :4, :4] = 1
    masks[1, 10:, 10:] = 1
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [10.0, 10.0, 16.0, 16.0]])
    augment = Augmentation(output_size=(8, 8), scale_range=(2.0, 2.0))
    torch.manual_seed(0)
    counts = set()
    for _ in range(20):
        out = augment(image, boxes, masks, torch.tensor([1, 2]))
        assert out.masks.shape[0] == len(out.boxes) == len(out.labels) <= 2
        counts.add(len(out.labels))
        for box, mask in zip(out.boxes, out.masks):
            # Each surviving mask still has pixels inside its own (cropped) box.
            x1, y1, x2, y2 = (int(v) for v in box)
            assert mask[y1:y2, x1:x2].sum() == (x2 - x1) * (y2 - y1)
    assert {0, 1} & counts, "a 8x8 crop of a 16x16 image drops a box some of the time"
    assert augment(image).boxes is None


def test_augmentation_argument_errors():
    with pytest.raises(ValueError, match="both mean and std"):
        Augmentation(mean=[0.5])
    with pytest.raises(ValueError, match="scale_range"):
        Augmentation(scale_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="output_size"):
        Augmentation(output_size=(0, 4))
