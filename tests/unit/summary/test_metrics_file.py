"""metrics.jsonl: one line per write, the values TensorBoard's reader returns, and resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from torchgarden.summary import (
    ImageScalarSummaryManager,
    MetricsFile,
    SummaryManager,
    read_metrics,
)


def tensorboard_scalars(directory: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` as TensorBoard's own reader returns them."""
    acc = event_accumulator.EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_each_write_is_one_line_with_nested_keys_joined_by_a_slash(tmp_path):
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    train = SummaryManager(tmp_path / "train", trackers=[metrics], split="train")
    evaluation = ImageScalarSummaryManager(tmp_path / "validation", trackers=[metrics])
    train.write_summaries({"loss": np.float32(0.5), "lr": 0.1}, step=10)
    evaluation.write_summaries(
        {"AP": 0.25, "coco": {"AP50": 0.5}, "image/pred": np.zeros((2, 4, 4, 3))}, step=10)

    rows = read_metrics(tmp_path / "metrics.jsonl")

    assert [(r["step"], r["split"]) for r in rows] == [(10, "train"), (10, "validation")]
    assert {k: v for k, v in rows[1].items() if k != "wall_time"} == {
        "step": 10, "split": "validation", "AP": 0.25, "coco/AP50": 0.5}
    assert rows[0]["wall_time"] <= rows[1]["wall_time"]
    assert evaluation.recorded(10) == {"AP": 0.25, "coco": {"AP50": 0.5}}


def test_values_equal_what_tensorboards_reader_returns(tmp_path):
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    manager = SummaryManager(tmp_path / "train", trackers=[metrics])
    rng = np.random.default_rng(0)
    for step in range(1, 6):
        manager.write_summaries({"loss": float(rng.random()), "nested": {"x": step / 3}}, step=step)
    manager.close()

    events = tensorboard_scalars(str(tmp_path / "train"))
    events.update({f"nested/{k}": v for k, v in
                   tensorboard_scalars(str(tmp_path / "train" / "nested")).items()})
    rows = read_metrics(tmp_path / "metrics.jsonl")

    assert sorted(events) == ["loss", "nested/x"]
    for tag, points in events.items():
        # TensorBoard keeps float32; the file keeps the float64 it was given.
        assert {r["step"]: np.float32(r[tag]) for r in rows} == points


def test_resume_drops_lines_past_the_step_and_tensorboard_hides_them(tmp_path):
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    manager = SummaryManager(tmp_path / "train", trackers=[metrics])
    for step in (5, 10, 15):
        manager.write_summaries({"loss": step * 1.0}, step=step)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 20, "split": "tr')  # Torn by a SIGKILL.

    manager.resume_at(10)  # A restart from the checkpoint at step 10.
    manager.write_summaries({"loss": -15.0}, step=15)
    manager.close()

    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["loss"]) for r in rows] == [(5, 5.0), (10, 10.0), (15, -15.0)]
    assert tensorboard_scalars(str(tmp_path / "train"))["loss"] == {5: 5.0, 10: 10.0, 15: -15.0}


def test_a_metric_named_like_a_column_is_refused(tmp_path):
    manager = SummaryManager(None, trackers=[MetricsFile(tmp_path / "m.jsonl")], split="train")
    with pytest.raises(ValueError, match="'step' clashes"):
        manager.write_summaries({"step": 1.0}, step=1)


def test_non_finite_values_read_back(tmp_path):
    metrics = MetricsFile(tmp_path / "m.jsonl")
    metrics.log_scalars("train", 1, {"loss": float("nan"), "x": float("inf")})
    row = json.loads((tmp_path / "m.jsonl").read_text())
    assert np.isnan(row["loss"]) and row["x"] == float("inf")
