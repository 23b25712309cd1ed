"""examples/siamese_network.py: shared weights, contrastive loss, pair accuracy."""

from __future__ import annotations

import pytest
import siamese_network as example
import torch


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("siamese") / "run"))


@pytest.fixture(scope="module")
def validation(result):
    left, right, similar = example.make_pairs("validation", 500, seed=1)
    with torch.no_grad():
        distance = result["model"].eval()((left, right))
        swapped = result["model"]((right, left))
    return similar, distance, swapped


def test_both_inputs_go_through_one_encoder(result, validation):
    model = result["model"]
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in model.encoder.parameters())
    _, distance, swapped = validation
    torch.testing.assert_close(distance, swapped)


def test_eval_logs_equal_the_contrastive_loss_and_accuracy_by_hand(result, validation):
    similar, distance, _ = validation
    loss = similar * distance**2 + (1 - similar) * torch.clamp(1.0 - distance, min=0) ** 2
    assert float(result["eval_logs"]["validation_loss"]) == pytest.approx(
        loss.mean().item(), rel=1e-5)
    accuracy = ((distance < 0.5).float() == similar).float().mean().item()
    assert float(result["eval_logs"]["pair_accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    assert accuracy > 0.85


def test_similar_pairs_end_up_closer_than_dissimilar_ones(validation):
    similar, distance, _ = validation
    assert similar.sum().item() == 250  # half of the pairs are similar
    assert distance[similar == 1].mean() < 0.5 < distance[similar == 0].mean()
