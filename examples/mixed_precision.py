"""Mixed precision from a custom ``train_step``: float16 loss scaling, bfloat16 without.

Mirrors the ``optimizer`` bullet and the ``LossScaleOptimizer`` lines of the custom
``train_step`` in Model Garden's *Customize Training Process* guide: with
``runtime.mixed_precision_dtype=float16`` the task's optimizer is wrapped in a loss-scale
optimizer, and the step scales the loss before computing gradients and unscales them
before applying them.

In torchgarden the same config value makes ``Task.create_optimizer`` return an
``optim.LossScaleOptimizer`` (``torch.amp.GradScaler`` underneath) and the Trainer runs the
model's forward under ``torch.autocast``. A step writes
``optimizer.scale(loss).backward()``; ``optimizer.step()`` unscales, skips the update
when a gradient is inf/NaN and adapts the scale. ``bfloat16`` needs no scaling: the
optimizer stays a plain torch optimizer.

``loss_scaling_mechanics()`` shows skip-and-halve (dynamic) and a fixed scale on a tiny
model; ``train(dtype)`` runs the toy regression under float16 or bfloat16 autocast on the
CPU (supported for the ops it uses; on a GPU set ``runtime.device=cuda``).

Run: ``python examples/mixed_precision.py``
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

import torch

import torchgarden as tg
from torchgarden import layers, optim
from torchgarden.tasks import ToyRegressionTask


class ScaledStepTask(ToyRegressionTask):
    """Toy regression with the guide's train step, loss scaling included."""

    def train_step(
        self,
        inputs: tuple[torch.Tensor, torch.Tensor],
        model: torch.nn.Module,
        optimizer: Any,
        metrics: Sequence[Any] | None = None,
    ) -> dict[str, torch.Tensor]:
        features, labels = inputs
        outputs = model(features)  # Autocast forward; outputs come back as float32.
        loss = self.build_losses(labels, outputs, aux_losses=layers.model_losses(model))
        optimizer.zero_grad(set_to_none=True)
        if isinstance(optimizer, optim.LossScaleOptimizer):
            # Keras: scaled_loss = optimizer.get_scaled_loss(loss) (that name works too).
            optimizer.scale(loss).backward()
        else:
            loss.backward()
        optimizer.step()  # LossScaleOptimizer: unscale, skip on inf/NaN, update the scale.
        for metric in metrics or []:
            metric.update_state(labels, outputs)
        return {self.loss: loss.detach()}


def loss_scaling_mechanics() -> dict[str, Any]:
    """One finite and one overflowing step under a dynamic and under a fixed scale.

    Returns:
        For ``"dynamic"`` and ``"fixed"``: the scale after the finite step and after the
        overflow, and whether each step changed the weights.
    """
    results: dict[str, Any] = {}
    for kind, dynamic, initial in (("dynamic", True, 2.0**15), ("fixed", False, 128.0)):
        model = torch.nn.Linear(2, 1)
        opt = optim.LossScaleOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), dynamic=dynamic, initial_scale=initial
        )
        record: dict[str, Any] = {}
        for name, factor in (("finite", 1.0), ("overflow", float("inf"))):
            before = model.weight.detach().clone()
            opt.zero_grad()
            loss = model(torch.ones(1, 2)).sum() * factor
            opt.get_scaled_loss(loss).backward()  # the Keras spelling of opt.scale(loss)
            opt.step()
            record[f"{name}_updated"] = not torch.equal(model.weight, before)
            record[f"{name}_scale"] = opt.loss_scale
        results[kind] = record
    return results


def build_params(dtype: str, train_steps: int = 60) -> tg.ExperimentConfig:
    """The toy regression under ``runtime.mixed_precision_dtype=dtype`` on the CPU."""
    params = tg.get_experiment("toy_regression")
    params.override({
        "runtime": {"mixed_precision_dtype": dtype, "device": "cpu"},
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 20, "summary_interval": 20,
            "validation_interval": train_steps, "checkpoint_interval": train_steps,
            "progress_bar": False,
            "optimizer_config": {"optimizer": {"type": "adam"}},
        },
    })
    return params.validate()


def train(dtype: str, model_dir: str | None = None, train_steps: int = 60) -> dict[str, Any]:
    """Trains ``ScaledStepTask`` under ``dtype`` autocast.

    Args:
        dtype: ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 60.

    Returns:
        The optimizer's class name, the loss scale (None without scaling), the first and
        last window-averaged training losses, and the final eval logs.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix=f"tg_{dtype}_")
    params = build_params(dtype, train_steps)
    task = ScaledStepTask(params.task, logging_dir=model_dir)
    trainer = tg.create_trainer(params, task, train=True, evaluate=True, model_dir=model_dir)
    losses: list[float] = []
    record = tg.callbacks.LambdaCallback(
        on_train_loop_end=lambda step, logs: losses.append(float(logs["training_loss"])))
    _, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                     model_dir=model_dir, trainer=trainer, callbacks=[record])
    optimizer = trainer.optimizer
    scaled = isinstance(optimizer, optim.LossScaleOptimizer)
    return {
        "optimizer": type(optimizer).__name__,
        "loss_scale": optimizer.loss_scale if scaled else None,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "eval_logs": eval_logs,
    }


def main(model_dir: str | None = None) -> dict[str, Any]:
    """Runs the mechanics demo and a float16 and a bfloat16 training run.

    Args:
        model_dir: Parent of the two runs' directories. Defaults to a temporary directory.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_mixed_precision_")
    return {
        "mechanics": loss_scaling_mechanics(),
        "float16": train("float16", f"{model_dir}/float16"),
        "bfloat16": train("bfloat16", f"{model_dir}/bfloat16"),
    }


if __name__ == "__main__":
    result = main()
    print("loss scaling:", result["mechanics"])
    for dtype in ("float16", "bfloat16"):
        run = result[dtype]
        print(f"{dtype}: {run['optimizer']} (scale {run['loss_scale']}), training loss "
              f"{run['first_loss']:.4f} -> {run['last_loss']:.4f}")
