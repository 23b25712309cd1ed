"""Built-in losses against torch.nn.functional and hand-computed numbers."""

import math

import pytest
import torch
import torch.nn.functional as F

from torchgarden import losses as L

torch.manual_seed(0)
Y = torch.randn(4, 3)
P = torch.randn(4, 3)


def test_regression_losses_match_functional():
    assert L.MeanSquaredError()(Y, P).item() == pytest.approx(F.mse_loss(P, Y).item())
    assert L.MeanAbsoluteError()(Y, P).item() == pytest.approx(F.l1_loss(P, Y).item())
    assert L.Huber(0.5)(Y, P).item() == pytest.approx(F.huber_loss(P, Y, delta=0.5).item())
    per_example = L.MeanSquaredError(reduction="none")(Y, P)
    assert per_example.shape == (4,)
    assert per_example.tolist() == pytest.approx(((P - Y) ** 2).mean(-1).tolist())
    with pytest.raises(ValueError, match="must match"):
        L.MeanSquaredError()(torch.zeros(4), torch.zeros(4, 3))


def test_binary_crossentropy_logits_probs_and_smoothing():
    target = (Y > 0).float()
    assert L.BinaryCrossentropy(from_logits=True)(target, P).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(P, target).item(), rel=1e-6)
    probs = torch.sigmoid(P)
    assert L.BinaryCrossentropy()(target, probs).item() == pytest.approx(
        F.binary_cross_entropy(probs, target).item(), rel=1e-5)
    # a clipped probability: -log(1e-7)
    assert L.BinaryCrossentropy()(torch.tensor([1.0]), torch.tensor([0.0])).item() == \
        pytest.approx(-math.log(1e-7), rel=1e-4)
    smoothed = L.BinaryCrossentropy(from_logits=True, label_smoothing=0.2)
    assert smoothed(target, P).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(P, target * 0.8 + 0.1).item(), rel=1e-6)


def test_categorical_crossentropy_matches_cross_entropy():
    labels = torch.tensor([0, 2, 1, 1])
    onehot = F.one_hot(labels, 3).float()
    assert L.CategoricalCrossentropy(from_logits=True)(onehot, P).item() == pytest.approx(
        F.cross_entropy(P, labels).item(), rel=1e-6)
    assert L.CategoricalCrossentropy()(onehot, P.softmax(-1)).item() == pytest.approx(
        F.cross_entropy(P, labels).item(), rel=1e-5)
    assert L.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3)(onehot, P).item() == \
        pytest.approx(F.cross_entropy(P, labels, label_smoothing=0.3).item(), rel=1e-6)


def test_sparse_categorical_crossentropy_matches_cross_entropy():
    labels = torch.tensor([0, 2, 1, 1])
    assert L.SparseCategoricalCrossentropy(from_logits=True)(labels, P).item() == pytest.approx(
        F.cross_entropy(P, labels).item(), rel=1e-6)
    assert L.SparseCategoricalCrossentropy()(labels[:, None], P.softmax(1)).item() == \
        pytest.approx(F.cross_entropy(P, labels).item(), rel=1e-5)


def test_sparse_crossentropy_dense_with_ignore_index():
    logits = torch.randn(2, 3, 2, 2)
    labels = torch.tensor([[[0, 255], [2, 1]], [[255, 255], [1, 0]]])
    loss = L.SparseCategoricalCrossentropy(from_logits=True, ignore_index=255)
    expected = F.cross_entropy(logits, labels, ignore_index=255)
    assert loss(labels, logits).item() == pytest.approx(expected.item(), rel=1e-6)
    per_pixel = L.SparseCategoricalCrossentropy(from_logits=True, ignore_index=255,
                                                reduction="none")(labels, logits)
    assert per_pixel.shape == (2, 2, 2) and per_pixel[labels == 255].abs().sum().item() == 0.0
    # MEAN divides by the weights of the non-ignored pixels only.
    weight = torch.tensor([1.0, 3.0])
    mean = L.SparseCategoricalCrossentropy(from_logits=True, ignore_index=255, reduction="mean")
    w = weight[:, None, None].expand(2, 2, 2) * (labels != 255)
    assert mean(labels, logits, weight).item() == pytest.approx(
        (per_pixel * w).sum().item() / w.sum().item(), rel=1e-6)
    all_ignored = torch.full((1, 2, 2), 255)
    assert loss(all_ignored, logits[:1]).item() == 0.0


def test_focal_loss_against_hand_formula():
    y_true = torch.tensor([1.0, 0.0, 1.0])
    logits = torch.tensor([0.5, -1.0, 2.0])
    alpha, gamma = 0.25, 1.5
    expected = []
    for y, x in zip(y_true.tolist(), logits.tolist()):
        p = 1 / (1 + math.exp(-x))
        ce = -(y * math.log(p) + (1 - y) * math.log(1 - p))
        p_t = p if y == 1 else 1 - p
        expected.append((alpha if y == 1 else 1 - alpha) * (1 - p_t) ** gamma * ce)
    focal = L.FocalLoss(reduction="none")
    assert focal.gamma == 1.5 and focal.alpha == 0.25
    assert focal(y_true, logits).tolist() == pytest.approx(expected, rel=1e-6)
    assert L.FocalLoss(reduction="sum")(y_true, logits).item() == pytest.approx(sum(expected))
    assert L.FocalLoss()(y_true, logits).item() == pytest.approx(sum(expected) / 3)
    with pytest.raises(ValueError, match="alpha"):
        L.FocalLoss(alpha=1.5)


def test_contrastive_loss():
    y_true = torch.tensor([[1.0], [0.0], [0.0]])
    distance = torch.tensor([[0.5], [0.3], [2.0]])
    expected = [0.25, 0.49, 0.0]
    assert L.ContrastiveLoss(reduction="none")(y_true, distance).tolist() == pytest.approx(expected)
    assert L.ContrastiveLoss()(y_true, distance).item() == pytest.approx(sum(expected) / 3)
