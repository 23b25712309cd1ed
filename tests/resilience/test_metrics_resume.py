"""metrics.jsonl and the MLflow run after SIGKILLs: each step once, equal to TensorBoard.

The real CLI trains the toy task with TensorBoard, the metrics file and MLflow (a local
file store), is killed twice (while checkpoint 30 is written, after the summaries and the
evaluation of step 30; and in the middle of the evaluation at step 50) and rerun until
done. Then TensorBoard's own
reader (which hides what a killed run wrote past the step it resumed from), the metrics
file and MLflow's own client must hold the same series, each step once.
"""

from __future__ import annotations

import os
import struct

import pytest
from resilience_tools import TIMING_TAGS, TOY, cli_args, run_until_done
from tensorboard.backend.event_processing import event_accumulator

from torchgarden.summary import read_metrics

pytestmark = pytest.mark.slow


def tensorboard_scalars(directory: str) -> dict[str, dict[int, float]]:
    acc = event_accumulator.EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def float32(value: float) -> bytes:
    return struct.pack("<f", value)


def test_metrics_file_and_mlflow_equal_tensorboard_after_two_kills(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's local file store.
    store = f"file:{tmp_path / 'mlruns'}"
    # Eval points count from where a run starts (Orbit): on the checkpoint grid here.
    override = (TOY + ",trainer.checkpoint_interval=10,trainer.validation_interval=10,"
                "runtime.trackers=[tensorboard,mlflow],"
                f"runtime.mlflow.tracking_uri={store}")
    model_dir = str(tmp_path / "run")
    args = cli_args("toy_regression", model_dir, override, "train_and_eval")

    outcome = run_until_done(args, ["save:30:state", "eval:50"])

    assert outcome.kills == ["save:30:state", "eval:50"]
    rows = read_metrics(os.path.join(model_dir, "metrics.jsonl"))
    keys = [(r["split"], r["step"]) for r in rows]
    assert len(keys) == len(set(keys))  # No step twice.
    assert sorted(s for split, s in keys if split == "train") == list(range(5, 61, 5))
    assert sorted(s for split, s in keys if split == "validation") == list(range(10, 61, 10))

    for split in ("train", "validation"):
        events = tensorboard_scalars(os.path.join(model_dir, split))
        recorded = [r for r in rows if r["split"] == split]
        assert set(events) == set(recorded[0]) - {"step", "split", "wall_time"}
        for tag, points in events.items():
            # (startup/* are in the first summary each process writes, on both sides.)
            assert {r["step"]: float32(r[tag]) for r in recorded if tag in r} == {
                step: float32(value) for step, value in points.items()}, (split, tag)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("torchgarden")
    (run,) = client.search_runs([experiment.experiment_id])  # One MLflow run for all four.
    assert run.info.status == "FINISHED" and run.data.params["trainer.train_steps"] == "60"
    for key in run.data.metrics:
        split, _, tag = key.partition("/")
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert len(history) == len(client.get_metric_history(run.info.run_id, key))
        recorded = {r["step"]: r[tag] for r in rows if r["split"] == split and tag in r}
        assert sorted(history) == sorted(recorded), key
        if not tag.startswith(TIMING_TAGS):  # Timing differs between the killed and rerun.
            assert history == recorded, key
