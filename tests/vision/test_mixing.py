"""Model Garden's MixupAndCutmix and RandomErasing: values from replayed random draws."""

from __future__ import annotations

import torch

from torchgarden.vision.autoaugment import fill_rectangle
from torchgarden.vision.mixing import MixupAndCutmix, RandomErasing, smooth_labels


def _batch(size: int = 4, hw: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    # Image i is constant i + 1, so every pasted pixel is visible.
    images = torch.arange(1, size + 1, dtype=torch.float32).view(-1, 1, 1, 1)
    return images.expand(size, 3, hw, hw).clone(), torch.arange(size) % 3


def test_smooth_labels():
    soft = smooth_labels(torch.tensor([2, 0]), 4, 0.2)
    assert torch.allclose(soft, torch.tensor([[0.05, 0.05, 0.85, 0.05],
                                              [0.85, 0.05, 0.05, 0.05]]))


def test_mixup_blends_with_the_mirrored_batch_and_its_labels():
    images, labels = _batch()
    mix = MixupAndCutmix(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1, num_classes=3)
    out, soft = mix(images, labels, torch.Generator().manual_seed(7))
    replay = torch.Generator().manual_seed(7)
    torch.rand((), generator=replay)  # prob draw (mixed: prob 1.0)
    torch.rand((), generator=replay)  # switch draw (Mixup: switch_prob -1)
    lam = MixupAndCutmix.sample_lam(0.8, 4, replay)
    expected = lam.view(-1, 1, 1, 1) * images + (1 - lam.view(-1, 1, 1, 1)) * images.flip(0)
    assert torch.allclose(out, expected)
    one_hot = smooth_labels(labels, 3, 0.1)
    assert torch.allclose(soft, lam[:, None] * one_hot + (1 - lam[:, None]) * one_hot.flip(0))
    assert torch.allclose(soft.sum(1), torch.ones(4))


def test_cutmix_pastes_the_box_whose_area_sets_lam():
    images, labels = _batch(hw=16)
    mix = MixupAndCutmix(mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=0.0, num_classes=3)
    out, soft = mix(images, labels, torch.Generator().manual_seed(3))
    replay = torch.Generator().manual_seed(3)
    torch.rand((), generator=replay)
    torch.rand((), generator=replay)
    lam0 = MixupAndCutmix.sample_lam(1.0, 4, replay)
    side = (torch.sqrt(1 - lam0) * 16).long()
    cy, cx = torch.randint(0, 16, (4,), generator=replay), torch.randint(0, 16, (4,), generator=replay)
    partner = images.flip(0)
    for i in range(4):
        half = int(side[i]) // 2
        expected = fill_rectangle(images[i], (int(cy[i]), int(cx[i])), (half, half), partner[i])
        assert out[i].equal(expected)
        lam = 1 - float(side[i] ** 2) / 256  # Model Garden: the unclipped box's area
        hot = torch.nn.functional.one_hot(labels, 3).float()
        assert torch.allclose(soft[i], lam * hot[i] + (1 - lam) * hot.flip(0)[i])
        top, left = max(0, int(cy[i]) - half), max(0, int(cx[i]) - half)
        bottom, right = min(16, int(cy[i]) + half), min(16, int(cx[i]) + half)
        pasted = int((out[i, 0] != images[i, 0]).sum())  # partners differ everywhere
        assert pasted == max(0, bottom - top) * max(0, right - left)


def test_cutmix_box_inside_the_image_has_area_one_minus_lam():
    mix = MixupAndCutmix(mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=0.0, num_classes=2)
    images = torch.stack([torch.zeros(1, 20, 20), torch.ones(1, 20, 20)])
    found = 0
    for seed in range(200):
        out, soft = mix(images, torch.tensor([0, 1]), torch.Generator().manual_seed(seed))
        area = int(out[0].sum())  # ones pasted into the zero image
        lam = float(soft[0, 0])
        side = round((400 * (1 - lam)) ** 0.5)
        interior = side % 2 == 0 and area == side * side
        if interior:
            found += 1
            assert abs((1 - lam) * 400 - area) < 1e-3
    assert found > 20


def test_unmixed_batches_get_smoothed_one_hots_and_lam_is_uniform():
    images, labels = _batch()
    never = MixupAndCutmix(prob=0.0, num_classes=3, label_smoothing=0.3)
    out, soft = never(images, labels, torch.Generator().manual_seed(0))
    assert out.equal(images) and torch.allclose(soft, smooth_labels(labels, 3, 0.3))
    # Model Garden's Gamma(1, rate=alpha) draw: Uniform(0, 1) whatever alpha is.
    lam = MixupAndCutmix.sample_lam(0.2, 20000, torch.Generator().manual_seed(0))
    assert abs(float(lam.mean()) - 0.5) < 0.01 and abs(float(lam.var()) - 1 / 12) < 0.005


def test_random_erasing_fills_one_rectangle_with_noise():
    image = torch.zeros(3, 32, 32)
    erase = RandomErasing(probability=1.0, min_area=0.1, max_area=0.1, min_aspect=1.0)
    out = erase(image, torch.Generator().manual_seed(0))
    changed = out[0] != 0
    rows, cols = changed.any(1).nonzero().flatten(), changed.any(0).nonzero().flatten()
    # area 102.4 at aspect 1: half sides round(sqrt(102.4) / 2) = 5, clipped at the top/left.
    assert len(cols) <= 10 and len(rows) <= 10 and int(changed.sum()) == len(rows) * len(cols)
    assert float(out.std()) > 0
    assert RandomErasing(probability=0.0)(image, torch.Generator()).equal(image)
