"""Callbacks: a custom ``Callback``, the course notes' overfitting detector, EarlyStopping.

Mirrors "Built-in and Custom Callbacks" in the custom-and-distributed-training course
notes: ``EarlyStopping(patience, min_delta, baseline, mode, monitor,
restore_best_weights)`` next to a TensorBoard callback, and a custom
``DetectOverfittingCallback`` that stops training when the validation/training loss
ratio passes a threshold.

torchgarden counts steps, not epochs: a callback's hooks run around each train loop
(``trainer.steps_per_loop`` steps), each evaluation (``trainer.validation_interval``) and
each checkpoint, and get the global step and the logs. The Keras epoch-end pair
``logs["loss"]`` / ``logs["val_loss"]`` is ``training_loss`` from ``on_train_loop_end``
and ``validation_loss`` from ``on_eval_end``. A callback stops training with
``self.controller.stop_training = True`` (Keras' ``self.model.stop_training = True`` works
too); the Controller stops at the next loop boundary. TensorBoard needs no callback:
``run_experiment`` writes ``model_dir/train`` and ``model_dir/validation``.

The toy regression is made to overfit: 16 training examples, a 64-unit hidden layer and
noisy labels.

Run: ``python examples/custom_callbacks.py``
"""

from __future__ import annotations

import tempfile
from typing import Any

import torchgarden as tg
from torchgarden import callbacks


class TrainingHistory(callbacks.Callback):
    """Records every train loop, evaluation and checkpoint the Controller reports."""

    def __init__(self) -> None:
        super().__init__()
        self.train: list[tuple[int, dict[str, Any]]] = []
        self.eval: list[tuple[int, dict[str, Any]]] = []
        self.checkpoints: list[int] = []
        self.finished_at: int | None = None

    def on_train_loop_end(self, step: int, logs: dict[str, Any]) -> None:
        self.train.append((step, dict(logs)))

    def on_eval_end(self, step: int, logs: dict[str, Any]) -> None:
        self.eval.append((step, dict(logs)))

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        self.checkpoints.append(step)

    def on_train_end(self, step: int) -> None:
        self.finished_at = step


class DetectOverfittingCallback(callbacks.Callback):
    """Stops training when ``validation_loss / training_loss`` exceeds ``threshold``.

    Args:
        threshold: The largest acceptable ratio. Defaults to 3.0.
    """

    def __init__(self, threshold: float = 3.0) -> None:
        super().__init__()
        self.threshold = threshold
        self.training_loss: float | None = None
        self.ratios: list[tuple[int, float]] = []

    def on_train_loop_end(self, step: int, logs: dict[str, Any]) -> None:
        self.training_loss = logs["training_loss"]

    def on_eval_end(self, step: int, logs: dict[str, Any]) -> None:
        ratio = logs["validation_loss"] / self.training_loss
        self.ratios.append((step, ratio))
        print(f"step: {step}, validation/training loss ratio: {ratio:.2f}")
        if ratio > self.threshold:
            print("Stopping training...")
            self.controller.stop_training = True


def build_early_stopping(baseline: float | None = None) -> callbacks.EarlyStopping:
    """The course notes' settings: patience 3, min_delta 0.05, lower is better, restore."""
    return callbacks.EarlyStopping(monitor="validation_loss", min_delta=0.05, patience=3,
                                   mode="min", baseline=baseline, restore_best_weights=True)


def build_params(train_steps: int = 400) -> tg.ExperimentConfig:
    """A toy regression that overfits; evaluation every 20 steps."""
    params = tg.get_experiment("toy_regression")
    params.override({
        "task": {"num_examples": 16, "hidden_size": 64, "noise": 1.0,
                 "train_data": {"global_batch_size": 16},
                 "validation_data": {"global_batch_size": 16}},
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 20, "summary_interval": 20,
            "validation_interval": 20, "checkpoint_interval": 100, "progress_bar": False,
            "optimizer_config": {"optimizer": {"type": "adam"},
                                 "learning_rate": {"constant": {"learning_rate": 0.01}}},
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def train_with(callback: callbacks.Callback, model_dir: str) -> dict[str, Any]:
    """Runs ``train_and_eval`` with ``callback`` and a ``TrainingHistory``.

    Returns:
        The ``model_dir``, the trained ``model``, the ``history`` callback and the
        ``callback`` itself.
    """
    params = build_params()
    task = tg.get_task(params.task, logging_dir=model_dir)
    history = TrainingHistory()
    model, _ = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                 model_dir=model_dir, callbacks=[history, callback])
    return {"model_dir": model_dir, "model": model, "history": history, "callback": callback}


def main(model_dir: str | None = None) -> dict[str, Any]:
    """Trains once with the overfitting detector and once with early stopping.

    Args:
        model_dir: Parent of the two runs. Defaults to a new temporary directory.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_callbacks_")
    return {
        "overfitting": train_with(DetectOverfittingCallback(threshold=3.0),
                                  f"{model_dir}/overfitting"),
        "early_stopping": train_with(build_early_stopping(), f"{model_dir}/early_stopping"),
    }


if __name__ == "__main__":
    result = main()
    print("overfitting detector stopped at step",
          result["overfitting"]["history"].finished_at)
    stopper = result["early_stopping"]["callback"]
    print(f"early stopping at step {stopper.stopped_step}; best validation_loss "
          f"{stopper.best:.4f} at step {stopper.best_step} (weights restored)")
