"""Custom summary managers passed to ``run_experiment``; image and histogram summaries.

Mirrors "Customize writing summary data" in Model Garden's *Customize Training Process*
guide: a class implementing the summary-manager interface (``summary_writer(
relative_path)``, ``write_summaries(summary_dict)`` with nested dicts as sub-directories,
``flush()``), a subclass of the ready ``SummaryManager`` that reuses its writers, the
``ImageScalarSummaryManager`` that writes ``image/`` keys as images, values collected in
``validation_step`` -> ``aggregate_logs`` -> ``reduce_aggregated_logs``, the
``summary_manager`` / ``eval_summary_manager`` arguments of ``run_experiment`` and its
``save_summary`` switch.

* ``JsonLinesSummaryManager`` implements ``summary.SummaryManagerInterface``: one JSON
  line per summary dict (per sub-directory), plus ``history`` of every dict received.
* ``HistogramSummaryManager`` subclasses ``summary.SummaryManager`` with a ``summary_fn``
  that writes array leaves as TensorBoard histograms (the default writes scalars only).
* ``summary.ImageScalarSummaryManager`` writes ``image/*`` leaves as image grids of at
  most ``max_outputs`` images. (``task.allow_image_summary=true`` makes ``run_experiment``
  build one for the eval summaries by itself.)

A manager given to ``run_experiment`` needs the step to record: pass
``global_step=trainer.global_step`` (Orbit reads a process-wide default step instead).

Run: ``python examples/summary_managers.py``
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import IO, Any

import numpy as np
import torch

import torchgarden as tg
from torchgarden import summary
from torchgarden.tasks import ImageClassificationTask


class JsonLinesSummaryManager(summary.SummaryManagerInterface):
    """Writes each summary dict as JSON lines: ``<summary_dir>/<sub-dir>/summaries.jsonl``.

    Args:
        summary_dir: Root directory, or None to record ``history`` only.
        global_step: Anything ``int()`` reads as the current step (``trainer.global_step``).
    """

    def __init__(self, summary_dir: str | None, global_step: Any = None) -> None:
        self._enabled = summary_dir is not None
        self._summary_dir = summary_dir
        self._global_step = global_step
        self._summary_writers: dict[str, IO[str]] = {}
        self.history: list[dict[str, Any]] = []

    def summary_writer(self, relative_path: str = "") -> IO[str] | None:
        if relative_path in self._summary_writers:
            return self._summary_writers[relative_path]
        if not self._enabled:
            return None
        directory = os.path.join(self._summary_dir, relative_path)
        os.makedirs(directory, exist_ok=True)
        writer = open(os.path.join(directory, "summaries.jsonl"), "a", encoding="utf-8")  # noqa: SIM115
        self._summary_writers[relative_path] = writer
        return writer

    def flush(self) -> None:
        for writer in self._summary_writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._summary_writers.values():
            writer.close()
        self._summary_writers.clear()

    def write_summaries(self, summary_dict: Mapping[str, Any]) -> None:
        self.history.append(dict(summary_dict))
        if self._enabled:
            self._write(summary_dict, relative_path="")

    def _write(self, summary_dict: Mapping[str, Any], relative_path: str) -> None:
        leaves: dict[str, float] = {}
        for name, value in summary_dict.items():
            if isinstance(value, Mapping):
                self._write(value, os.path.join(relative_path, name))
            else:
                leaves[name] = float(value)
        if leaves:
            step = None if self._global_step is None else int(self._global_step)
            self.summary_writer(relative_path).write(json.dumps({"step": step, **leaves}) + "\n")


def scalar_or_histogram(writer: Any, name: str, value: Any, step: int | None) -> None:
    """A ``summary_fn``: arrays with more than one element become histograms."""
    if np.size(value) > 1:
        writer.add_histogram(name, np.asarray(value, dtype=np.float64), global_step=step)
    else:
        summary.scalar_summary(writer, name, value, step)


class HistogramSummaryManager(summary.SummaryManager):
    """A ``SummaryManager`` that also writes histograms; writers and recursion are reused."""

    def __init__(self, summary_dir: str | None, global_step: Any = None) -> None:
        super().__init__(summary_dir, summary_fn=scalar_or_histogram, global_step=global_step)


class VisualizedDigitsTask(ImageClassificationTask):
    """Digits classification whose evaluation also returns an image batch or a vector.

    Args:
        extra: ``"image"`` adds ``image/validation_digits`` (the first 8 images) to the
            eval logs; ``"histogram"`` adds ``per_class_accuracy`` (10 values).
    """

    def __init__(self, params: Any, logging_dir: str | None = None, extra: str = "image") -> None:
        super().__init__(params, logging_dir=logging_dir)
        self.extra = extra

    def validation_step(self, inputs: Any, model: torch.nn.Module,
                        metrics: Any = None) -> dict[str, Any]:
        logs = super().validation_step(inputs, model, metrics)
        features, labels = inputs
        logs["visualization"] = (features, labels, model(features).argmax(1))
        return logs

    def aggregate_logs(self, state: Any = None, step_logs: Any = None) -> Any:
        state = state or {"images": [], "correct": torch.zeros(10), "total": torch.zeros(10)}
        features, labels, predicted = step_logs["visualization"]
        state["images"].append(features[:8])
        state["correct"] += torch.bincount(labels[predicted == labels], minlength=10)
        state["total"] += torch.bincount(labels, minlength=10)
        return state

    def reduce_aggregated_logs(self, aggregated_logs: Any,
                               global_step: int | None = None) -> dict[str, Any]:
        if self.extra == "image":
            images = torch.cat(aggregated_logs["images"])[:8]
            return {"image/validation_digits": images}  # [8, 1, 8, 8] floats in [0, 1]
        return {"per_class_accuracy": (aggregated_logs["correct"]
                                       / aggregated_logs["total"]).numpy()}


def build_params(train_steps: int = 60) -> tg.ExperimentConfig:
    """The built-in digits experiment, shortened: loops of 20 steps, evaluation at 30, 60."""
    params = tg.get_experiment("image_classification")
    params.override({
        "trainer": {"train_steps": train_steps, "steps_per_loop": 10, "summary_interval": 20,
                    "validation_interval": train_steps // 2, "checkpoint_interval": train_steps,
                    "best_checkpoint_export_subdir": "", "progress_bar": False},
        "runtime": {"device": "cpu"},
    })
    return params.validate()


def run(model_dir: str, extra: str, *, save_summary: bool = True) -> dict[str, Any]:
    """One ``train_and_eval`` run with custom train and eval summary managers.

    Args:
        model_dir: Output directory.
        extra: ``"image"``: eval summaries through an ``ImageScalarSummaryManager``
            (``max_outputs=4``); ``"histogram"``: through ``HistogramSummaryManager``.
        save_summary: ``run_experiment``'s switch; False writes no summary at all.

    Returns:
        The trained ``model``, the train manager's ``history`` of received dicts, and the
        final ``eval_logs``.
    """
    params = build_params()
    task = VisualizedDigitsTask(params.task, logging_dir=model_dir, extra=extra)
    trainer = tg.create_trainer(params, task, train=True, evaluate=True, model_dir=model_dir)
    step = trainer.global_step
    train_manager = JsonLinesSummaryManager(os.path.join(model_dir, "train"), global_step=step)
    validation_dir = os.path.join(model_dir, "validation")
    eval_manager = (
        summary.ImageScalarSummaryManager(validation_dir, max_outputs=4, global_step=step)
        if extra == "image" else HistogramSummaryManager(validation_dir, global_step=step))
    model, eval_logs = tg.run_experiment(
        task=task, mode="train_and_eval", params=params, model_dir=model_dir, trainer=trainer,
        summary_manager=train_manager, eval_summary_manager=eval_manager,
        save_summary=save_summary)
    train_manager.close()
    return {"model": model, "train_history": train_manager.history, "eval_logs": eval_logs}


def main(model_dir: str | None = None) -> dict[str, Any]:
    """Runs the image, histogram and no-summary variants under ``model_dir``.

    Args:
        model_dir: Parent of the three runs. Defaults to a new temporary directory.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_summary_managers_")
    return {
        "model_dir": model_dir,
        "image": run(os.path.join(model_dir, "image"), "image"),
        "histogram": run(os.path.join(model_dir, "histogram"), "histogram"),
        "no_summary": run(os.path.join(model_dir, "no_summary"), "image", save_summary=False),
    }


if __name__ == "__main__":
    result = main()
    print("summaries under", result["model_dir"], "(tensorboard --logdir there)")
    print("train dicts received:", len(result["image"]["train_history"]))
