"""Streaming metrics: a ``metrics.Metric`` subclass, built-ins and torchmetrics objects.

Mirrors "Customize metrics / Keras metrics" in Model Garden's *Customize Training
Process* guide: a metric class with ``total``/``count`` state created in ``__init__``,
accumulated by ``update_state(y_true, y_pred, sample_weight=None)``, read by ``result()``
and cleared by ``reset_states()``; and the guide's ``metrics`` argument of the steps.

In torchgarden the state is created with ``self.add_weight(name)``: registered tensors
that live on the model's device, are updated without host syncs, move with
``metric.to(device)`` and are checkpointed with the metric. ``build_metrics`` may return
torchgarden metrics and ``torchmetrics`` objects side by side; both report under their
``name`` in the train logs (window averages over each ``steps_per_loop``), the eval logs
and both TensorBoard directories.

``builtin_metrics()`` shows the built-ins on tensors small enough to check by hand.

Run: ``python examples/custom_metrics.py``
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
import torch.nn.functional as F
import torchmetrics

import torchgarden as tg
from torchgarden import metrics
from torchgarden.tasks import ImageClassificationTask


class MyMetric(metrics.Metric):
    """Mean probability the model gives to the true class (a weighted total / count).

    ``y_true``: integer labels ``[N]``; ``y_pred``: logits ``[N, C]``; ``sample_weight``:
    ``[N]``, defaulting to 1 for every example.
    """

    def __init__(self, name: str = "true_class_probability") -> None:
        super().__init__(name)
        self.total = self.add_weight("total", initializer="zeros")
        self.count = self.add_weight("count", initializer="zeros")

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                     sample_weight: torch.Tensor | None = None) -> None:
        probabilities = torch.softmax(y_pred, dim=1)
        one_hot = F.one_hot(y_true, probabilities.shape[1]).to(probabilities.dtype)
        if sample_weight is None:
            sample_weight = torch.ones(y_true.shape[0], device=y_pred.device)
        self.total += torch.sum(sample_weight[:, None] * one_hot * probabilities)
        self.count += torch.sum(sample_weight)

    def result(self) -> torch.Tensor:
        return self.total / self.count

    def reset_states(self) -> None:  # optional: the base class re-applies the initializers
        self.total.fill_(0.0)
        self.count.fill_(0.0)


class MetricsTask(ImageClassificationTask):
    """Digits classification reporting a custom, built-in and torchmetrics metrics."""

    def build_metrics(self, training: bool = True) -> list[Any]:
        built: list[Any] = [
            metrics.SparseCategoricalAccuracy(name="accuracy"),
            MyMetric(),
            # A torchmetrics object is adapted automatically; its log key is the
            # snake_case class name ("multiclass_accuracy") ...
            torchmetrics.classification.MulticlassAccuracy(num_classes=10, average="micro"),
            # ... or the name given to the adapter.
            metrics.TorchMetricsAdapter(
                torchmetrics.classification.MulticlassF1Score(num_classes=10, average="macro"),
                name="f1_macro"),
        ]
        if not training:
            built.append(metrics.TopKAccuracy(k=3))
        return built


def builtin_metrics() -> dict[str, float]:
    """Each built-in metric on a hand-checkable batch (see the test for the arithmetic)."""
    labels = torch.tensor([0, 1, 2, 1])
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 0.5, 1.0], [1.0, 3.0, 2.0]])
    binary_true = torch.tensor([1.0, 0.0, 1.0, 1.0])
    binary_prob = torch.tensor([0.9, 0.6, 0.4, 0.7])
    weights = torch.tensor([1.0, 2.0, 1.0, 0.0])

    results: dict[str, float] = {}
    mean = metrics.Mean()
    mean.update_state(torch.tensor([1.0, 2.0, 3.0]))
    mean.update_state(torch.tensor(10.0), sample_weight=3.0)
    results["mean"] = float(mean.result())
    total = metrics.Sum()
    total.update_state(torch.tensor([1.0, 2.0]), sample_weight=torch.tensor([3.0, 0.5]))
    results["sum"] = float(total.result())
    accuracy = metrics.Accuracy()
    accuracy.update_state(labels, logits.argmax(1))
    results["accuracy"] = float(accuracy.result())
    sparse = metrics.SparseCategoricalAccuracy()
    sparse.update_state(labels, logits, sample_weight=weights)
    results["weighted_sparse_categorical_accuracy"] = float(sparse.result())
    top2 = metrics.TopKAccuracy(k=2)
    top2.update_state(labels, logits)
    results["top_2_accuracy"] = float(top2.result())
    precision, recall = metrics.Precision(), metrics.Recall()
    precision.update_state(binary_true, binary_prob)
    recall.update_state(binary_true, binary_prob)
    results["precision"], results["recall"] = float(precision.result()), float(recall.result())
    iou = metrics.MeanIoU(num_classes=3)
    iou.update_state(labels, logits)
    results["mean_iou"] = float(iou.result())
    mine = MyMetric()
    mine.update_state(labels, logits, sample_weight=weights)
    results["true_class_probability"] = float(mine.result())
    mine.reset_state()  # the Keras 3 spelling works too
    results["after_reset_count"] = float(mine.count)
    return results


def build_params(train_steps: int = 100) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened; one validation batch of 360 images."""
    params = tg.get_experiment("image_classification")
    params.override({
        "task": {"validation_data": {"global_batch_size": 360}},
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 50, "summary_interval": 50,
            "validation_interval": train_steps, "checkpoint_interval": train_steps,
            "best_checkpoint_export_subdir": "", "progress_bar": False,
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 100) -> dict[str, Any]:
    """Trains ``MetricsTask`` and returns the logs in which every metric appears.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 100.

    Returns:
        ``model_dir``, the trained ``model``, the last ``train_logs``, the ``eval_logs``
        and the ``builtin_metrics()`` values.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_metrics_")
    params = build_params(train_steps)
    task = MetricsTask(params.task, logging_dir=model_dir)
    train_logs: dict[str, Any] = {}
    recorder = tg.callbacks.LambdaCallback(
        on_train_loop_end=lambda step, logs: train_logs.update(logs))
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir, callbacks=[recorder])
    return {"model_dir": model_dir, "model": model, "train_logs": train_logs,
            "eval_logs": eval_logs, "builtins": builtin_metrics()}


if __name__ == "__main__":
    result = main()
    print("built-in metrics:", {k: round(v, 4) for k, v in result["builtins"].items()})
    print("eval:", {k: round(float(v), 4) for k, v in result["eval_logs"].items()})
