"""examples/custom_losses.py: Loss subclass, reductions, built-ins, the Huber closure."""

from __future__ import annotations

import custom_losses as example
import pytest
import torch

from torchgarden import data


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return example.main(str(tmp_path_factory.mktemp("losses") / "run"))


def test_hand_written_focal_loss_equals_the_builtin(result):
    values = result["values"]
    assert values["my_focal"].shape == (4, 3)
    torch.testing.assert_close(values["my_focal"], values["builtin_focal"])


def test_reductions_and_sample_weight_follow_their_definitions(result):
    values = result["values"]
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, generator=generator)
    targets = (torch.rand(4, 3, generator=generator) > 0.5).float()
    per_example = example.MyFocalLoss()(targets[:, 0], logits[:, 0])
    weights = torch.tensor([1.0, 0.0, 2.0, 2.0])
    torch.testing.assert_close(values["reduction_none"], per_example * weights)
    weighted_sum = (per_example * weights).sum()
    torch.testing.assert_close(values["reduction_sum"], weighted_sum)
    torch.testing.assert_close(values["reduction_sum_over_batch_size"], weighted_sum / 4)
    torch.testing.assert_close(values["reduction_mean"], weighted_sum / weights.sum())


def test_builtins_equal_torch_references(result):
    values = result["values"]
    for mine, reference in (("huber", "torch_huber"), ("my_huber", "torch_huber"),
                            ("sparse_ce_smoothed", "torch_ce_smoothed"),
                            ("sparse_ce_smoothed_from_probabilities", "torch_ce_smoothed"),
                            ("categorical_ce_smoothed", "torch_ce_smoothed"),
                            ("binary_ce", "torch_binary_ce")):
        torch.testing.assert_close(values[mine], values[reference], msg=mine)
    # errors 0, 1, 3, 2 with threshold 1.2: 0, 0.5, 1.2 * (3 - 0.6), 1.2 * (2 - 0.6)
    expected = (0 + 0.5 + 1.2 * 2.4 + 1.2 * 1.4) / 4
    assert values["my_huber"].item() == pytest.approx(expected, rel=1e-6)


def test_the_huber_closure_trains_the_regression(result):
    assert result["last_loss"] < result["first_loss"] / 100
    x, y = data.make_toy_regression(num_examples=512, seed=0)
    with torch.no_grad():
        prediction = result["model"](x[256:])
    closure = example.my_huber_loss(1.2)
    assert float(result["eval_logs"]["validation_loss"]) == pytest.approx(
        closure(y[256:], prediction).mean().item(), rel=1e-4)
