"""Custom losses: a ``losses.Loss`` subclass, reductions, built-ins and a loss closure.

Mirrors "Customize Loss" in Model Garden's *Customize Training Process* guide (a loss
class with hyperparameters in ``__init__``, ``reduction`` and ``name`` passed to the base,
and a per-element ``call(labels, predictions)``: there a focal loss) and the custom loss
function of the custom-and-distributed-training course notes (``my_huber_loss(threshold)``,
a closure that fixes a hyperparameter and is handed to the model as its loss).

``Loss.__call__(y_true, y_pred, sample_weight=None)`` multiplies ``call``'s per-example
values by ``sample_weight`` and applies the ``Reduction``: ``none``, ``sum``,
``sum_over_batch_size`` (the default) or ``mean`` (weighted mean). The closure becomes a
``Loss`` through ``losses.get`` and is used in a task's ``build_losses``.

Run: ``python examples/custom_losses.py``
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

import torchgarden as tg
from torchgarden import losses
from torchgarden.tasks import ToyRegressionTask


class MyFocalLoss(losses.Loss):
    """Sigmoid focal loss written out by hand (element-wise, like the guide's)."""

    def __init__(self, alpha: float = 0.25, gamma: float = 1.5, *,
                 reduction: losses.Reduction | str = losses.Reduction.NONE,
                 name: str | None = None) -> None:
        self._alpha = alpha
        self._gamma = gamma
        super().__init__(reduction=reduction, name=name)

    def call(self, labels: torch.Tensor, predictions: torch.Tensor) -> torch.Tensor:
        positive_label_mask = labels == 1.0
        cross_entropy = F.binary_cross_entropy_with_logits(predictions, labels, reduction="none")
        probs = torch.sigmoid(predictions)
        probs_of_label = torch.where(positive_label_mask, probs, 1.0 - probs)
        modulator = torch.pow(1.0 - probs_of_label, self._gamma)
        loss = modulator * cross_entropy
        return torch.where(positive_label_mask, self._alpha * loss, (1.0 - self._alpha) * loss)


def my_huber_loss(threshold: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The course notes' closure: a Huber loss with its threshold fixed."""

    def my_huber_loss(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        error = y_true - y_pred
        is_small_error = torch.abs(error) <= threshold
        small_error_loss = torch.square(error) / 2
        big_error_loss = threshold * (torch.abs(error) - 0.5 * threshold)
        return torch.where(is_small_error, small_error_loss, big_error_loss)

    return my_huber_loss


class HuberRegressionTask(ToyRegressionTask):
    """The toy regression trained with ``my_huber_loss(threshold=1.2)``."""

    def build_losses(self, labels: torch.Tensor, model_outputs: torch.Tensor,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        if not hasattr(self, "_loss_fn"):
            self._loss_fn = losses.get(my_huber_loss(threshold=1.2))  # -> a losses.Loss
        loss = self._loss_fn(labels, model_outputs)
        return loss + sum(aux_losses or [])


def loss_values() -> dict[str, Any]:
    """Every loss on fixed tensors, next to a plain-torch reference where one exists."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, generator=generator)
    targets = (torch.rand(4, 3, generator=generator) > 0.5).float()
    weights = torch.tensor([1.0, 0.0, 2.0, 2.0])
    labels = torch.tensor([0, 2, 1, 2])
    y_true, y_pred = torch.tensor([[0.0], [1.0], [3.0], [-2.0]]), torch.zeros(4, 1)

    values: dict[str, Any] = {
        "my_focal": MyFocalLoss()(targets, logits),
        "builtin_focal": losses.FocalLoss(reduction="none")(targets, logits),
    }
    # One logit per example: the reductions over 4 examples weighted by ``weights``.
    for reduction in ("none", "sum", "sum_over_batch_size", "mean"):
        focal = MyFocalLoss(reduction=reduction)
        values[f"reduction_{reduction}"] = focal(targets[:, 0], logits[:, 0],
                                                 sample_weight=weights)
    values["huber"] = losses.Huber(delta=1.2)(y_true, y_pred)
    values["my_huber"] = losses.get(my_huber_loss(1.2))(y_true, y_pred)
    values["torch_huber"] = F.huber_loss(y_pred, y_true, delta=1.2)
    values["sparse_ce_smoothed"] = losses.SparseCategoricalCrossentropy(
        from_logits=True, label_smoothing=0.1)(labels, logits)
    values["sparse_ce_smoothed_from_probabilities"] = losses.SparseCategoricalCrossentropy(
        label_smoothing=0.1)(labels, logits.softmax(dim=1))
    values["categorical_ce_smoothed"] = losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=0.1)(F.one_hot(labels, 3).float(), logits)
    values["torch_ce_smoothed"] = F.cross_entropy(logits, labels, label_smoothing=0.1)
    values["binary_ce"] = losses.BinaryCrossentropy(from_logits=True)(targets, logits)
    values["torch_binary_ce"] = F.binary_cross_entropy_with_logits(logits, targets)
    return values


def build_params(train_steps: int = 100) -> tg.ExperimentConfig:
    """The toy regression, shortened, with one evaluation at the end."""
    params = tg.get_experiment("toy_regression")
    params.override({"trainer": {"train_steps": train_steps, "validation_interval": train_steps,
                                 "progress_bar": False},
                     "runtime": {"device": "cpu"}})
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 100) -> dict[str, Any]:
    """Computes ``loss_values()`` and trains the toy regression with the Huber closure.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 100.

    Returns:
        ``values`` (from ``loss_values``), the trained ``model``, and the first and last
        window-averaged ``training_loss``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_losses_")
    params = build_params(train_steps)
    task = HuberRegressionTask(params.task, logging_dir=model_dir)
    history: list[float] = []
    recorder = tg.callbacks.LambdaCallback(
        on_train_loop_end=lambda step, logs: history.append(float(logs["training_loss"])))
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir, callbacks=[recorder])
    return {"values": loss_values(), "model": model, "first_loss": history[0],
            "last_loss": history[-1], "eval_logs": eval_logs}


if __name__ == "__main__":
    result = main()
    print({k: round(float(v.sum()), 4) for k, v in result["values"].items()})
    print(f"Huber-closure training loss {result['first_loss']:.4f} -> {result['last_loss']:.4f}")
