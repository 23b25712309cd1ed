"""Image classification reads Model Garden's losses and evaluation blocks as Model Garden does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchgarden as tg


def _task(**task):
    params = tg.get_experiment("image_classification")
    params.override({"task": task})
    params.validate()
    built = tg.get_task(params.task)
    model = built.build_model()
    return built, model


LOGITS = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 3.0]])
LABELS = torch.tensor([0, 2])


def test_one_hot_loss_smooths_labels_and_sparse_loss_does_not():
    task, _ = _task(losses={"label_smoothing": 0.2, "one_hot": True})
    smoothed = F.cross_entropy(LOGITS, LABELS, label_smoothing=0.2)
    assert task.build_losses(LABELS, LOGITS).item() == pytest.approx(smoothed.item())
    task, _ = _task(losses={"label_smoothing": 0.2, "one_hot": False})
    assert task.build_losses(LABELS, LOGITS).item() == pytest.approx(
        F.cross_entropy(LOGITS, LABELS).item())


def test_soft_labels_are_distributions_and_loss_weight_scales_everything():
    soft = torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5]])
    task, _ = _task(losses={"one_hot": False, "soft_labels": True, "loss_weight": 2.0})
    expected = -(soft * F.log_softmax(LOGITS, dim=1)).sum(1).mean() * 2.0
    assert task.build_losses(soft, LOGITS).item() == pytest.approx(expected.item())


def test_l2_weight_decay_is_half_the_squared_kernels_not_biases():
    task, model = _task(losses={"l2_weight_decay": 0.01})
    kernels = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    penalty = 0.01 / 2 * sum(float(w.detach().square().sum()) for w in kernels)
    logits = torch.zeros(2, 10)
    labels = torch.tensor([0, 1])
    assert task.build_losses(labels, logits).item() == pytest.approx(
        F.cross_entropy(logits, labels).item() + penalty, rel=1e-5)


def test_evaluation_top_k_names_the_metric():
    task, _ = _task(evaluation={"top_k": 3})
    assert [m.name for m in task.build_metrics(training=False)] == ["accuracy",
                                                                    "top_3_accuracy"]


def test_the_builtin_head_starts_as_kernel_initializer_says():
    _, model = _task(model={"kernel_initializer": "zeros", "dropout_rate": 0.5})
    head = model[-1]
    assert torch.equal(head.weight, torch.zeros_like(head.weight))
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.5 for m in model)
    _, model = _task()
    assert model[-1].weight.abs().max() <= 0.05  # random_uniform, Model Garden's default


def test_input_size_is_height_width_channels():
    _, model = _task(model={"backbone": {"type": "cnn"}, "input_size": [8, 12, 3],
                            "hidden_sizes": [4]})
    assert model(torch.zeros(2, 3, 8, 12)).shape == (2, 10)


@pytest.mark.parametrize("size, expected", [([3, 32, 32], r"did you mean \[32, 32, 3\]\?"),
                                            ([1, 8, 8], r"did you mean \[8, 8, 1\]\?")])
def test_an_input_size_in_the_old_channels_first_order_is_refused_not_misread(size, expected):
    params = tg.get_experiment("image_classification")
    with pytest.raises(tg.config.ConfigError, match=r"\[height, width, channels\] \(Model Garden"
                                                    r"'s order\); .*" + expected):
        params.override({"task": {"model": {"input_size": size}}}).validate()
    params = tg.get_experiment("image_classification")
    params.override({"task": {"model": {"input_size": [32, 32, 3]}}}).validate()  # accepted
