"""Keeping the best checkpoint: the exporter of ``trainer.best_checkpoint_*`` and actions.

Mirrors the checkpoint-exporter lines of ``eval_end`` in Model Garden's *Customize
Training Launcher* guide (``maybe_export_checkpoint(checkpoint, logs, global_step)`` after
every evaluation) and the "save the best model" side of the course notes' built-in
callbacks.

* Config only: ``trainer.best_checkpoint_export_subdir`` and
  ``trainer.best_checkpoint_eval_metric`` (``|`` addresses nested logs, e.g. ``coco|AP``)
  with ``best_checkpoint_metric_comp`` export the checkpoint of the best evaluation to
  ``model_dir/<subdir>/best_ckpt-<global_step>/``, write its logs to ``info.json`` and add
  ``best_<metric>`` to every eval log. The comparison is strict, and ``info.json`` is read
  back on restart, so "best so far" survives a resume.
* Code: Orbit's ``ConditionalAction(condition=NewBestMetric(...), action=...)`` runs any
  action when a metric improves; ``NewBestMetric(filename=...)`` persists the best value.

The learning rate drops to 0 after step 59 (a piecewise-constant schedule). The first run
stops at 60; the second resumes it to step 100: its evaluations tie the best value, a
tie is not an improvement, and nothing is exported or saved again.

Run: ``python examples/best_checkpoint.py``
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import torch

import torchgarden as tg
from torchgarden import callbacks


def build_params(train_steps: int) -> tg.ExperimentConfig:
    """The toy regression evaluated every 20 steps, exporting the lowest validation loss."""
    params = tg.get_experiment("toy_regression")
    params.override({
        "trainer": {
            "train_steps": train_steps, "validation_interval": 20, "checkpoint_interval": 20,
            "progress_bar": False,
            "best_checkpoint_export_subdir": "best_ckpt",
            "best_checkpoint_eval_metric": "validation_loss",
            "best_checkpoint_metric_comp": "lower",
            "optimizer_config": {"learning_rate": {
                "type": "stepwise", "stepwise": {"boundaries": [59], "values": [0.05, 0.0]}}},
        },
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def run(model_dir: str, train_steps: int) -> dict[str, Any]:
    """One ``train_and_eval`` run (resuming when ``model_dir`` has a checkpoint).

    Returns:
        Every ``(step, eval_logs)``, and the steps at which the action saved weights.
    """
    params = build_params(train_steps)
    task = tg.get_task(params.task, logging_dir=model_dir)
    trainer = tg.create_trainer(params, task, train=True, evaluate=True, model_dir=model_dir)
    saved_at: list[int] = []

    def save_best_weights(logs: dict[str, Any]) -> None:
        torch.save(trainer.unwrapped_model.state_dict(),
                   os.path.join(model_dir, "best_weights.pt"))
        saved_at.append(int(trainer.global_step))

    on_new_best = callbacks.ConditionalAction(
        condition=callbacks.NewBestMetric(
            "validation_loss", higher_is_better=False,
            filename=os.path.join(model_dir, "best_validation_loss.json")),
        action=save_best_weights)
    evaluations: list[tuple[int, dict[str, Any]]] = []
    recorder = callbacks.LambdaCallback(
        on_eval_end=lambda step, logs: evaluations.append((step, dict(logs))))
    tg.run_experiment(task=task, mode="train_and_eval", params=params, model_dir=model_dir,
                      trainer=trainer, callbacks=[recorder], eval_actions=[on_new_best])
    return {"evaluations": evaluations, "weights_saved_at": saved_at}


def main(model_dir: str | None = None) -> dict[str, Any]:
    """Trains 60 steps, then resumes to step 100 (where the learning rate is 0).

    Args:
        model_dir: Output directory. Defaults to a new temporary directory.

    Returns:
        ``model_dir``, the ``first`` and ``resumed`` runs, and the final ``info.json``.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_best_checkpoint_")
    first = run(model_dir, train_steps=60)
    resumed = run(model_dir, train_steps=100)
    with open(os.path.join(model_dir, "best_ckpt", "info.json"), encoding="utf-8") as f:
        info = json.load(f)
    return {"model_dir": model_dir, "first": first, "resumed": resumed, "info": info}


if __name__ == "__main__":
    result = main()
    print("info.json:", result["info"])
    print("exported:", sorted(os.listdir(os.path.join(result["model_dir"], "best_ckpt"))))
