"""``ExportOnBest``: one export per new best checkpoint, retention, never a stall mid-loop."""

from __future__ import annotations

import logging
import os

import pytest
import torch

import torchgarden as tg
from torchgarden.callbacks import ExportOnBest
from torchgarden.checkpoint import BestCheckpointExporter, Checkpoint
from torchgarden.config import ConfigError


class FakeExport:
    """Stands in for a background ``torchgarden export``: writes the directory on wait."""

    def __init__(self, log: list, checkpoint: str, output_dir: str, error: str | None) -> None:
        self.log, self.checkpoint, self.output_dir, self.error = log, checkpoint, output_dir, error
        log.append(("start", os.path.basename(checkpoint), os.path.basename(output_dir)))

    def wait(self) -> str | None:
        self.log.append(("wait", os.path.basename(self.output_dir)))
        if self.error is None:
            os.makedirs(self.output_dir)
        return self.error


def _evaluate(best, callback, checkpoint, step, accuracy):
    """What the Evaluator and the Controller do around one evaluation."""
    callback.on_eval_begin(step)
    logs = {"accuracy": accuracy}
    best.maybe_export_checkpoint(checkpoint, logs, step)
    callback.on_eval_end(step, logs)


def test_exports_each_new_best_and_keeps_max_to_keep(tmp_path):
    log: list = []
    best = BestCheckpointExporter(tmp_path / "best_ckpt", "accuracy", "higher")
    checkpoint = Checkpoint(model=torch.nn.Linear(2, 1))
    callback = ExportOnBest(best_exporter=best, max_to_keep=2,
                            start=lambda c, o: FakeExport(log, c, o, None))
    for step, accuracy in [(10, 0.5), (20, 0.4), (30, 0.6), (40, 0.7)]:
        _evaluate(best, callback, checkpoint, step, accuracy)
    callback.on_experiment_end({})
    assert log == [
        ("start", "best_ckpt-10", "export-10"),
        ("wait", "export-10"),  # at the next evaluation, before the checkpoint can change
        ("start", "best_ckpt-30", "export-30"),
        ("wait", "export-30"),
        ("start", "best_ckpt-40", "export-40"),
        ("wait", "export-40"),  # at the end of the run
    ]
    assert [step for step, _ in callback.exports()] == [30, 40]  # export-10 removed


def test_a_failed_export_is_a_warning_and_training_goes_on(tmp_path, caplog):
    best = BestCheckpointExporter(tmp_path / "best", "accuracy", "higher")
    callback = ExportOnBest(best_exporter=best,
                            start=lambda c, o: FakeExport([], c, o, "ONNX exploded"))
    _evaluate(best, callback, Checkpoint(model=torch.nn.Linear(2, 1)), 5, 0.1)
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        callback.wait()
    assert "export of the best checkpoint" in caplog.text and "ONNX exploded" in caplog.text
    assert callback.exports() == []


def test_export_on_best_needs_the_best_checkpoint_settings():
    params = tg.get_experiment("toy_regression")
    params.override({"trainer": {"export_on_best": True}})
    with pytest.raises(ConfigError, match="trainer.export_on_best .* needs "
                                          "trainer.best_checkpoint_export_subdir"):
        params.validate()
