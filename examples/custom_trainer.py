"""A ``Trainer`` subclass overriding every loop hook, built by ``create_trainer``.

Mirrors "Customize trainer" in Model Garden's *Customize Training Launcher* guide: a
subclass of the base Trainer that overrides ``train_step(iterator)`` and
``eval_step(iterator)`` (fetching inputs through ``next_train_inputs`` /
``next_eval_inputs``, whose passthrough logs are merged into the step outputs),
``train_loop_end`` (window results plus ``learning_rate`` and the optimizer's step count)
and ``eval_end(aggregated_logs)`` (metrics and ``reduce_aggregated_logs``, here
inherited; ``evaluate`` then exports the best checkpoint with these logs).

The Trainer's contract with the Controller is ``train(num_steps)`` advancing
``global_step`` by exactly ``num_steps`` and ``evaluate(num_steps)``; everything else is
free. ``create_trainer(..., trainer_cls=CustomTrainer)`` builds it with the task's model
and optimizer, and ``run_experiment(trainer=...)`` runs it (so can a custom launch
script; see ``custom_launch_script.py``).

Run: ``python examples/custom_trainer.py``
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import torchgarden as tg
from torchgarden import optim
from torchgarden.tasks import ToyRegressionTask


class CustomTrainer(tg.Trainer):
    """Counts optimizer updates and examples; passes each eval batch size to the task.

    The counters are a checkpoint item (a dict is restored in place), so a resumed run
    continues counting where the checkpoint left off.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counters = {"optimizer_iterations": 0, "examples_seen": 0}
        self.checkpoint.add(custom_counters=self.counters)

    def next_train_inputs(self, iterator: Iterator[Any]) -> Any:
        inputs = super().next_train_inputs(iterator)  # next batch, on the model's device
        self.counters["examples_seen"] += inputs[0].shape[0]
        return inputs

    def train_step(self, iterator: Iterator[Any]) -> None:
        # The learning rate is a function of the global step; set it before the update.
        optim.set_learning_rate(self.optimizer, self.learning_rate())
        inputs = self.next_train_inputs(iterator)
        logs = self.task.train_step(inputs, model=self.model, optimizer=self.optimizer,
                                    metrics=self.train_metrics)
        self.train_loss.update_state(logs[self.task.loss])
        self.counters["optimizer_iterations"] += 1
        self.global_step.assign_add(1)  # exactly one per step: the Controller checks it

    def train_loop_end(self) -> dict[str, Any]:
        logs = super().train_loop_end()  # metrics, training_loss, learning_rate; resets
        logs.update(self.counters)
        return logs

    def next_eval_inputs(self, iterator: Iterator[Any]) -> tuple[Any, dict[str, Any]]:
        inputs, passthrough = super().next_eval_inputs(iterator)
        passthrough["batch_size"] = inputs[0].shape[0]  # host-side, reaches aggregate_logs
        return inputs, passthrough

    def eval_step(self, iterator: Iterator[Any]) -> dict[str, Any]:
        inputs, passthrough = self.next_eval_inputs(iterator)
        logs = self.task.validation_step(inputs, model=self.model,
                                         metrics=self.validation_metrics)
        self.validation_loss.update_state(logs[self.task.loss])
        return passthrough | logs

    def eval_end(self, aggregated_logs: Any = None) -> dict[str, Any]:
        logs = super().eval_end(aggregated_logs)  # metrics, loss, reduced logs
        logs["eval_at_optimizer_iteration"] = self.counters["optimizer_iterations"]
        return logs


class CountingRegressionTask(ToyRegressionTask):
    """The toy regression; its aggregate/reduce count the evaluated examples."""

    def aggregate_logs(self, state: Any = None, step_logs: Any = None) -> Any:
        return (state or 0) + step_logs["batch_size"]

    def reduce_aggregated_logs(self, aggregated_logs: Any,
                               global_step: int | None = None) -> dict[str, Any]:
        return {"num_eval_examples": aggregated_logs}


def build_params(train_steps: int = 60) -> tg.ExperimentConfig:
    """The toy regression with a cosine learning rate, so ``learning_rate`` moves."""
    params = tg.get_experiment("toy_regression")
    params.override({
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 20, "summary_interval": 20,
            "validation_interval": 30, "checkpoint_interval": 30, "progress_bar": False,
            "optimizer_config": {"learning_rate": {
                "type": "cosine", "cosine": {"initial_learning_rate": 0.05,
                                             "decay_steps": train_steps}}},
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def main(model_dir: str | None = None, train_steps: int = 60) -> dict[str, Any]:
    """Trains the toy regression with ``CustomTrainer``.

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.
        train_steps: Steps to train. Defaults to 60.

    Returns:
        ``model_dir``, the ``trainer``, every ``(step, train_logs)`` and
        ``(step, eval_logs)`` pair.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_custom_trainer_")
    params = build_params(train_steps)
    task = CountingRegressionTask(params.task, logging_dir=model_dir)
    trainer = tg.create_trainer(params, task, train=True, evaluate=True, model_dir=model_dir,
                                trainer_cls=CustomTrainer)
    train_logs: list[tuple[int, dict[str, Any]]] = []
    eval_logs: list[tuple[int, dict[str, Any]]] = []
    recorder = tg.callbacks.LambdaCallback(
        on_train_loop_end=lambda step, logs: train_logs.append((step, dict(logs))),
        on_eval_end=lambda step, logs: eval_logs.append((step, dict(logs))))
    tg.run_experiment(task=task, mode="train_and_eval", params=params, model_dir=model_dir,
                      trainer=trainer, callbacks=[recorder])
    return {"model_dir": model_dir, "trainer": trainer, "train_logs": train_logs,
            "eval_logs": eval_logs}


if __name__ == "__main__":
    result = main()
    for step, logs in result["train_logs"]:
        print(step, {k: round(float(v), 5) for k, v in logs.items()})
    step, logs = result["eval_logs"][-1]
    print(f"eval at step {step}:", {k: round(float(v), 5) for k, v in logs.items()})
