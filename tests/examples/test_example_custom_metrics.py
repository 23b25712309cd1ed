"""examples/custom_metrics.py: custom, built-in and torchmetrics metrics in logs/summaries."""

from __future__ import annotations

import os

import custom_metrics
import pytest
import torch
from sklearn.metrics import f1_score

from torchgarden import data

NAMES = {"accuracy", "true_class_probability", "multiclass_accuracy", "f1_macro"}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return custom_metrics.main(str(tmp_path_factory.mktemp("metrics") / "run"))


def test_builtin_metrics_equal_hand_arithmetic(result):
    values = result["builtins"]
    assert values["mean"] == pytest.approx((1 + 2 + 3 + 10 * 3) / (3 + 3))
    assert values["sum"] == pytest.approx(1 * 3 + 2 * 0.5)
    assert values["accuracy"] == pytest.approx(3 / 4)  # argmax [0, 2, 2, 1] vs [0, 1, 2, 1]
    # correct [1, 0, 1, 1] weighted by [1, 2, 1, 0]
    assert values["weighted_sparse_categorical_accuracy"] == pytest.approx(2 / 4)
    assert values["top_2_accuracy"] == pytest.approx(1.0)
    # predicted positives (p > 0.5) [1, 1, 0, 1] vs labels [1, 0, 1, 1]: tp 2, fp 1, fn 1
    assert values["precision"] == pytest.approx(2 / 3)
    assert values["recall"] == pytest.approx(2 / 3)
    assert values["mean_iou"] == pytest.approx((1 + 1 / 2 + 1 / 2) / 3)
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 0.5, 1.0], [1.0, 3.0, 2.0]])
    true_probability = logits.softmax(1)[torch.arange(4), torch.tensor([0, 1, 2, 1])]
    weights = torch.tensor([1.0, 2.0, 1.0, 0.0])
    assert values["true_class_probability"] == pytest.approx(
        (weights * true_probability).sum().item() / weights.sum().item(), rel=1e-6)
    assert values["after_reset_count"] == 0.0


def test_eval_metrics_equal_a_hand_computation_on_the_validation_split(result):
    x, y = data.load_digits_arrays("validation")
    with torch.no_grad():
        logits = result["model"].eval()(x.float())
    predictions = logits.argmax(1)
    logs = {k: float(v) for k, v in result["eval_logs"].items()}
    accuracy = (predictions == y).float().mean().item()
    assert logs["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert logs["multiclass_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert logs["true_class_probability"] == pytest.approx(
        logits.softmax(1)[torch.arange(len(y)), y].mean().item(), rel=1e-5)
    assert logs["f1_macro"] == pytest.approx(
        f1_score(y.numpy(), predictions.numpy(), average="macro"), rel=1e-5)
    top3 = (logits.topk(3, dim=1).indices == y[:, None]).any(1).float().mean().item()
    assert logs["top_3_accuracy"] == pytest.approx(top3, abs=1e-6)


def test_every_metric_is_in_the_train_logs_and_both_summary_directories(result, read_scalars):
    assert set(result["train_logs"]) >= NAMES
    assert float(result["train_logs"]["accuracy"]) == pytest.approx(
        float(result["train_logs"]["multiclass_accuracy"]), abs=1e-6)
    train = read_scalars(os.path.join(result["model_dir"], "train"))
    validation = read_scalars(os.path.join(result["model_dir"], "validation"))
    assert set(train) >= NAMES
    assert NAMES | {"top_3_accuracy", "validation_loss"} <= set(validation)
    assert [s for s, _ in train["true_class_probability"]] == [50, 100]
    assert validation["f1_macro"][-1][1] == pytest.approx(
        float(result["eval_logs"]["f1_macro"]), rel=1e-6)
