"""A Task that overrides ``train_step`` and ``validation_step`` with plain PyTorch.

Mirrors "Customize train and validation step" in Model Garden's *Customize Training
Process* guide: the ``train_step(inputs, model, optimizer, metrics)`` and
``validation_step(inputs, model, metrics)`` signatures, and the guide's recipe (unpack
the batch, forward, ``build_losses`` with the model's auxiliary losses, gradients,
optimizer update, metric updates, a logs dict keyed by ``self.loss``). Like the guide's
starter task, the task subclasses the built-in image-classification task and trains on
the 8x8 digits.

What the custom step adds over the default one: it clips the gradient norm and reports
the norm through a ``metrics.Mean`` that appears in the train logs and summaries as
``gradient_norm``. Under ``runtime.mixed_precision_dtype=float16`` the optimizer is an
``optim.LossScaleOptimizer``; the step then scales the loss and unscales the gradients
before clipping (``examples/mixed_precision.py`` shows that path on its own).

Run: ``python examples/custom_steps.py``
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

import torch

import torchgarden as tg
from torchgarden import callbacks, layers, metrics, optim
from torchgarden.tasks import ImageClassificationTask

MAX_GRADIENT_NORM = 5.0


class CustomStepTask(ImageClassificationTask):
    """Digits classification whose steps are written out by hand."""

    def build_metrics(self, training: bool = True) -> list[Any]:
        built = super().build_metrics(training)  # accuracy (+ top-5 accuracy for eval)
        if training:
            built.append(metrics.Mean(name="gradient_norm"))
        return built

    def train_step(
        self,
        inputs: tuple[torch.Tensor, torch.Tensor],
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        metrics: Sequence[Any] | None = None,
    ) -> dict[str, torch.Tensor]:
        features, labels = inputs  # 1. unpack the batch
        outputs = model(features)  # 2. forward (the Trainer has put the model in train mode)
        # 3. loss, with what layers added through add_loss (Keras: aux_losses=model.losses)
        loss = self.build_losses(labels, outputs, aux_losses=layers.model_losses(model))
        # 4. gradients and update; float16 runs get a LossScaleOptimizer
        optimizer.zero_grad(set_to_none=True)
        if isinstance(optimizer, optim.LossScaleOptimizer):
            optimizer.scale(loss).backward()
            optimizer.unscale_()  # true gradients before clipping
        else:
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRADIENT_NORM)
        optimizer.step()
        # 5. metrics, updated on device; the Trainer reads them once per loop
        for metric in metrics or []:
            if metric.name == "gradient_norm":
                metric.update_state(norm)
            else:
                metric.update_state(labels, outputs)
        return {self.loss: loss.detach()}

    def validation_step(
        self,
        inputs: tuple[torch.Tensor, torch.Tensor],
        model: torch.nn.Module,
        metrics: Sequence[Any] | None = None,
    ) -> dict[str, torch.Tensor]:
        features, labels = inputs
        # The Trainer runs evaluation in eval mode under torch.no_grad(): nothing here
        # can change a weight or a batch-norm statistic.
        outputs = self.inference_step(features, model)
        loss = self.build_losses(labels, outputs, aux_losses=layers.model_losses(model))
        for metric in metrics or []:
            metric.update_state(labels, outputs)
        return {self.loss: loss}


def build_params(train_steps: int = 100) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened, with a small CNN (it has batch norm)."""
    params = tg.get_experiment("image_classification")
    params.override({
        "task": {
            "model": {"backbone": {"type": "cnn"}, "hidden_sizes": [8]},
            # One validation batch holds the whole split (360 images).
            "validation_data": {"global_batch_size": 360},
        },
        "trainer": {
            "train_steps": train_steps,
            "steps_per_loop": 25,
            "summary_interval": 25,
            "validation_interval": 50,
            "checkpoint_interval": 50,
            "best_checkpoint_export_subdir": "",
            "progress_bar": False,
            "optimizer_config": {
                "learning_rate": {"cosine": {"initial_learning_rate": 0.02,
                                             "decay_steps": train_steps}},
                "warmup": {"linear": {"warmup_steps": 10}},
            },
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 100) -> dict[str, Any]:
    """Trains the custom-step task, then evaluates once more to show weights stay put.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 100.

    Returns:
        ``model_dir``, the ``trainer``, the trained ``model``, the per-loop ``train_logs`` as
        ``(step, logs)`` pairs, the final ``eval_logs``, and ``weights_unchanged``
        (whether an extra evaluation left every parameter and buffer bit-identical).
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_steps_")
    params = build_params(train_steps)
    task = CustomStepTask(params.task, logging_dir=model_dir)
    trainer = tg.create_trainer(params, task, train=True, evaluate=True, model_dir=model_dir)
    train_logs: list[tuple[int, dict[str, Any]]] = []
    recorder = callbacks.LambdaCallback(
        on_train_loop_end=lambda step, logs: train_logs.append((step, dict(logs)))
    )
    _, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                     model_dir=model_dir, trainer=trainer, callbacks=[recorder])

    before = {k: v.clone() for k, v in trainer.unwrapped_model.state_dict().items()}
    trainer.evaluate(-1)  # The Trainer's own evaluation: eval_begin -> steps -> eval_end.
    after = trainer.unwrapped_model.state_dict()
    unchanged = all(torch.equal(before[k], after[k]) for k in before)
    return {"model_dir": model_dir, "trainer": trainer, "model": trainer.unwrapped_model, "train_logs": train_logs,
            "eval_logs": eval_logs, "weights_unchanged": unchanged}


if __name__ == "__main__":
    result = main()
    print("final eval:", {k: round(float(v), 4) for k, v in result["eval_logs"].items()})
    print("validation left the weights unchanged:", result["weights_unchanged"])
