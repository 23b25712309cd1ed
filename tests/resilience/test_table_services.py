"""Adversarial table, services group: MLflow and W&B unreachable, or gone mid-run.

Training goes on (exit 0), one warning names the service and the error, metrics.jsonl and
TensorBoard hold every value; when the service comes back it gets every row it missed,
in order, each step once; when it never does, one more warning at the end says what it
never got.
"""

from __future__ import annotations

import os

import pytest
from table import TOY, Case, run_case

from torchgarden.summary import RemoteTracker, read_metrics

pytest.importorskip("mlflow")

TRAIN_STEPS = list(range(5, 31, 5))
OVERRIDE = "trainer.train_steps=30,trainer.steps_per_loop=5,trainer.summary_interval=5"


def toy(model_dir: str, trackers: str) -> list[str]:
    return [*TOY, "--model_dir", model_dir, "--params_override",
            f"{OVERRIDE},runtime.trackers=[tensorboard,{trackers}]"]


def mlflow_at(uri):
    """argv of a run logging to MLflow at ``uri(tmp dir)``."""
    def argv(model_dir: str, tmp: str) -> list[str]:
        *head, override = toy(model_dir, "mlflow")
        return [*head, f"{override},runtime.mlflow.tracking_uri={uri(tmp)}"]
    return argv


def file_store(tmp: str) -> str:
    return f"file:{tmp}/mlruns"


def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries every 50 ms; close waits 5 s; MLflow tries each request once."""
    monkeypatch.setattr(RemoteTracker, "retry_seconds", 0.05)
    monkeypatch.setattr(RemoteTracker, "close_seconds", 5.0)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("WANDB_SILENT", "true")


def log_batch_fails(calls: range):
    """MLflow's log_batch raises for the metric calls numbered in ``calls`` (0-based)."""
    def patch(monkeypatch: pytest.MonkeyPatch) -> None:
        from mlflow.tracking import MlflowClient

        quick(monkeypatch)
        real, count = MlflowClient.log_batch, [0]

        def log_batch(self, run_id, metrics=(), params=(), **kwargs):
            if metrics:
                count[0] += 1
                if count[0] - 1 in calls:
                    raise ConnectionError("Connection refused (the server went away)")
            return real(self, run_id, metrics=metrics, params=params, **kwargs)

        monkeypatch.setattr(MlflowClient, "log_batch", log_batch)
    return patch


def wandb_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    quick(monkeypatch)

    def init(**kwargs):
        raise wandb.errors.CommError("Run initialization has timed out after 90.0 sec.")

    monkeypatch.setattr(wandb, "init", init)


def every_value_kept(model_dir: str, _tmp: str) -> None:
    rows = read_metrics(os.path.join(model_dir, "metrics.jsonl"))
    assert [r["step"] for r in rows if r["split"] == "train"] == TRAIN_STEPS
    assert os.listdir(os.path.join(model_dir, "train"))


def mlflow_history(tmp: str) -> tuple[str, dict[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=file_store(tmp))
    (run,) = client.search_runs([client.get_experiment_by_name("torchgarden").experiment_id])
    points = client.get_metric_history(run.info.run_id, "train/training_loss")
    assert len(points) == len({p.step for p in points})  # Each step once.
    return run.info.status, {p.step: p.value for p in points}


def mlflow_caught_up(model_dir: str, tmp: str) -> None:
    every_value_kept(model_dir, tmp)
    status, history = mlflow_history(tmp)
    rows = read_metrics(os.path.join(model_dir, "metrics.jsonl"))
    assert status == "FINISHED"
    assert history == pytest.approx({r["step"]: r["training_loss"] for r in rows
                                     if r["split"] == "train"})


def mlflow_holds_the_first_two(model_dir: str, tmp: str) -> None:
    every_value_kept(model_dir, tmp)
    status, history = mlflow_history(tmp)
    assert status == "RUNNING" and sorted(history) == [5, 10]


CASES = [
    Case("mlflow_unreachable_from_the_start", mlflow_at(lambda t: "http://127.0.0.1:9"),
         ("MLflow (http://127.0.0.1:9) failed", "Training goes on", "metrics.jsonl"),
         "existing", code=0, warnings=2, patch=quick, check=every_value_kept),
    Case("mlflow_gone_for_two_writes_then_back", mlflow_at(file_store),
         ("MLflow", "failed", "server went away", "gets them when it answers again"),
         "existing", code=0, patch=log_batch_fails(range(2, 4)), check=mlflow_caught_up),
    Case("mlflow_gone_mid_run_for_good", mlflow_at(file_store),
         ("MLflow", "failed", "server went away"), "existing", code=0, warnings=2,
         patch=log_batch_fails(range(2, 10**6)), check=mlflow_holds_the_first_two),
    Case("wandb_unreachable", lambda d, t: toy(d, "wandb"),
         ("W&B", "failed", "timed out", "Training goes on"), "existing", code=0, warnings=2,
         patch=wandb_unreachable, check=every_value_kept),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_services_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))


def test_the_last_warning_names_what_the_service_never_got(tmp_path, trained, capsys, caplog,
                                                           monkeypatch):
    case = CASES[2]
    run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch)
    last = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"][-1]
    assert "never got" in last and "steps 15-30" in last and "hold every value" in last
