"""Auxiliary losses that layers add during forward (Keras ``add_loss`` / ``model.losses``).

Mirrors "Low-level handling of losses tracked by the model" in the custom-training-loop
tutorial (an activity-regularization layer inside a small digits model, and a train step
that adds ``sum(model.losses)`` to the main loss), and the ``aux_losses=model.losses``
argument of the custom ``train_step`` in Model Garden's *Customize Training Process*.

In torchgarden a layer subclasses ``layers.Layer`` and calls ``self.add_loss(value)`` in
``forward``; ``layers.model_losses(model)`` returns the losses of the latest forward pass
of every such layer inside any ``nn.Module``. The default ``Task.train_step`` and
``validation_step`` pass them as ``build_losses(..., aux_losses=...)``, so a task whose
``build_losses`` adds ``aux_losses`` (the built-in ones do) trains on them without a
custom step. A model that is itself a ``layers.Layer`` also answers the Keras spellings
``model.losses`` and ``model(x, training=True)``.

Run: ``python examples/auxiliary_losses.py``
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from torch import nn

import torchgarden as tg
from torchgarden import data, layers, losses, metrics
from torchgarden.tasks import ImageClassificationTask


class ActivityRegularization(layers.Layer):
    """Passes its input through and adds ``rate * sum(inputs)`` as an auxiliary loss."""

    def __init__(self, rate: float = 1e-2) -> None:
        super().__init__()
        self.rate = rate

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.add_loss(self.rate * inputs.sum())
        return inputs


class DigitsClassifier(layers.Layer):
    """Dense(64, relu) -> activity regularization -> Dense(64, relu) -> Dense(10)."""

    def __init__(self, rate: float = 1e-2) -> None:
        super().__init__()
        self.hidden = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU())
        self.regularization = ActivityRegularization(rate)
        self.head = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.regularization(self.hidden(x)))


def hand_written_step(
    model: DigitsClassifier, optimizer: torch.optim.Optimizer, loss_fn: losses.Loss,
    accuracy: metrics.Metric, x: torch.Tensor, y: torch.Tensor,
) -> torch.Tensor:
    """The tutorial's step: main loss plus ``sum(model.losses)``, then one update."""
    pred = model(x, training=True)
    loss = loss_fn(y, pred)
    loss = loss + sum(model.losses)  # layers.model_losses(model) for any nn.Module
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    accuracy.update_state(y, pred)
    return loss.detach()


class AuxiliaryLossTask(ImageClassificationTask):
    """Digits classification on ``DigitsClassifier``; the default steps add its aux loss."""

    rate = 1e-4

    def build_model(self) -> nn.Module:
        model = DigitsClassifier(self.rate)
        self._l2_weights = []  # The parent's L2 penalty (off by default) reads this list.
        return model


def build_params(train_steps: int = 100) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened."""
    params = tg.get_experiment("image_classification")
    params.override({
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 50, "summary_interval": 50,
            "validation_interval": train_steps, "checkpoint_interval": train_steps,
            "best_checkpoint_export_subdir": "", "progress_bar": False,
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def mean_activation(model: DigitsClassifier) -> float:
    """Mean regularized activation over the validation digits (what the aux loss shrinks)."""
    x, _ = data.load_digits_arrays("validation")
    with torch.no_grad():
        return model.hidden(x.float()).mean().item()


def main(model_dir: str | None = None, train_steps: int = 100) -> dict[str, Any]:
    """Runs the hand-written step once, then trains through the Task with and without
    the regularization.

    Args:
        model_dir: Parent of the runs' directories. Defaults to a temporary directory.
        train_steps: Steps per Task run. Defaults to 100.

    Returns:
        ``hand_written_loss`` of one step, and per rate (``0.0`` and ``1e-4``) the trained
        model.s ``mean_activation`` and eval logs.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_aux_losses_")
    torch.manual_seed(0)
    model = DigitsClassifier()
    x, y = data.load_digits_arrays("train")
    step_loss = hand_written_step(
        model, torch.optim.SGD(model.parameters(), lr=1e-3),
        losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics.SparseCategoricalAccuracy(), x[:64].float(), y[:64])

    runs: dict[float, dict[str, Any]] = {}
    for rate in (0.0, 1e-4):
        params = build_params(train_steps)
        task = AuxiliaryLossTask(params.task)
        task.rate = rate
        trained, eval_logs = tg.run_experiment(
            task=task, mode="train_and_eval", params=params,
            model_dir=f"{model_dir}/rate_{rate}")
        runs[rate] = {"mean_activation": mean_activation(trained), "eval_logs": eval_logs}
    return {"hand_written_loss": float(step_loss), "runs": runs}


if __name__ == "__main__":
    result = main()
    print("hand-written step loss (cross-entropy + activity penalty):",
          round(result["hand_written_loss"], 4))
    for rate, run in result["runs"].items():
        print(f"rate {rate}: mean activation {run['mean_activation']:.4f}, "
              f"accuracy {float(run['eval_logs']['accuracy']):.4f}")
