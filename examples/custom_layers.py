"""Variables and constants, a ``Lambda`` layer and a custom layer with deferred weights.

Mirrors three snippets of the custom-and-distributed-training course notes:

* "Tensors": a ``tf.Variable`` (state that training changes) next to a ``tf.constant``.
  PyTorch has ``nn.Parameter`` (trained), a registered buffer (state, not trained) and a
  plain tensor (a constant).
* "Lambda Layers": ``Lambda(lambda x: abs(x))`` as a one-line layer; here
  ``layers.Lambda(torch.abs)``, which has no parameters of its own.
* "Custom Layers": ``SimpleDense(units, activation)`` whose ``build(input_shape)`` creates
  the kernel and bias on the first call. PyTorch's twin is a lazy module: parameters
  start uninitialised and ``initialize_parameters(inputs)`` materialises them from the
  first input. A task runs one dummy forward in ``build_model`` (as Model Garden's
  image-classification task does), so the optimizer and checkpoints see real weights.

The model (``SimpleDense(64, relu)`` -> ``Lambda(abs)`` -> ``Linear(64, 10)``) trains on
the 8x8 digits through a Task.

Run: ``python examples/custom_layers.py``
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import torchgarden as tg
from torchgarden import layers
from torchgarden.tasks import ImageClassificationTask


def variables_and_constants() -> dict[str, Any]:
    """A parameter, a buffer and a constant after one optimizer step.

    Returns:
        Which of the three the step changed, and whether each requires gradients.
    """
    holder = nn.Module()
    holder.variable = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))  # tf.Variable(trainable)
    holder.register_buffer("count", torch.zeros(()))  # tf.Variable(trainable=False)
    constant = torch.tensor([1.0, 2.0, 3.0])  # tf.constant
    optimizer = torch.optim.SGD(holder.parameters(), lr=0.5)
    (holder.variable * constant).sum().backward()
    optimizer.step()
    holder.count += 1  # assign_add on non-trained state
    return {
        "variable": holder.variable.detach().tolist(),
        "count": float(holder.count),
        "constant": constant.tolist(),
        "requires_grad": {"variable": holder.variable.requires_grad,
                          "count": holder.count.requires_grad,
                          "constant": constant.requires_grad},
    }


class SimpleDense(nn.modules.lazy.LazyModuleMixin, nn.Module):
    """A dense layer whose kernel and bias are created from the first input's width.

    Args:
        units: Output width. Defaults to 32.
        activation: Applied to the output; None is the identity. Defaults to None.
    """

    cls_to_become = None  # stay a SimpleDense after the weights are materialised

    def __init__(self, units: int = 32,
                 activation: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.units = units
        self.activation = activation or (lambda x: x)
        self.kernel = nn.UninitializedParameter()
        self.bias = nn.UninitializedParameter()

    def initialize_parameters(self, inputs: torch.Tensor) -> None:  # Keras' build()
        if self.has_uninitialized_params():
            with torch.no_grad():
                self.kernel.materialize((inputs.shape[-1], self.units))
                self.bias.materialize((self.units,))
                nn.init.normal_(self.kernel, std=0.05)
                nn.init.zeros_(self.bias)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.activation(inputs @ self.kernel + self.bias)


def build_model() -> nn.Module:
    """Flatten -> SimpleDense(64, relu) -> Lambda(abs) -> Linear(64, 10)."""
    return nn.Sequential(
        nn.Flatten(),
        SimpleDense(64, activation=torch.relu),
        layers.Lambda(torch.abs),  # a no-op after relu; it shows the one-line layer
        nn.Linear(64, 10),
    )


class CustomLayersTask(ImageClassificationTask):
    """Digits classification on ``build_model()``."""

    def build_model(self) -> nn.Module:
        model = build_model()
        model(torch.zeros(1, 1, 8, 8))  # creates SimpleDense's weights (Keras: build)
        self._l2_weights = [p for p in model.parameters() if p.ndim > 1]
        return model


def build_params(train_steps: int = 150) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened."""
    params = tg.get_experiment("image_classification")
    params.override({
        "trainer": {"train_steps": train_steps, "steps_per_loop": 50, "summary_interval": 50,
                    "validation_interval": train_steps, "checkpoint_interval": train_steps,
                    "best_checkpoint_export_subdir": "", "progress_bar": False},
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 150) -> dict[str, Any]:
    """Shows variables and constants, then trains the custom-layer model.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 150.

    Returns:
        ``variables`` (from ``variables_and_constants``), the trained ``model`` and the
        ``eval_logs``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_layers_")
    params = build_params(train_steps)
    task = CustomLayersTask(params.task, logging_dir=model_dir)
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir)
    return {"variables": variables_and_constants(), "model": model, "eval_logs": eval_logs}


if __name__ == "__main__":
    result = main()
    print("after one step:", result["variables"])
    print("eval:", {k: round(float(v), 4) for k, v in result["eval_logs"].items()})
