"""``MlflowTracker``: a run's summaries in MLflow (``runtime.trackers: [..., mlflow]``).

Uses ``mlflow.tracking.MlflowClient`` (from ``mlflow`` or ``mlflow-skinny``: ``pip install
'torchgarden[mlflow]'``), imported on the first write. Metrics are logged as
``<split>/<tag>`` (``train/training_loss``, ``validation/accuracy``) at the global step;
the resolved config is logged once, as the new run's params.

The MLflow run id is part of the checkpoint, so a resumed run logs into the same MLflow
run. MLflow cannot delete a logged point, so a resumed run skips every ``(key, step)``
the run already holds (logged by the interrupted process after its last checkpoint):
each step appears once, with the value first logged for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from torchgarden.summary.tracker import RemoteTracker
from torchgarden.utils.logs import flatten

__all__ = ["MlflowTracker", "flatten_params"]

_logger = logging.getLogger("torchgarden")
_MAX_METRICS_PER_BATCH = 1000  # MLflow's limits per log_batch call.
_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000


def flatten_params(params: Mapping[str, Any]) -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}`` (values as strings, as MLflow takes them)."""
    return {key: str(value) for key, value in flatten(params, sep=".").items()}


def _client(tracking_uri: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as error:
        raise ImportError(
            "runtime.trackers includes 'mlflow', but MLflow is not installed; "
            "pip install 'torchgarden[mlflow]' (or mlflow)."
        ) from error
    return MlflowClient(tracking_uri=tracking_uri or None)


class MlflowTracker(RemoteTracker):
    """Logs scalars to one MLflow run, created on the first write (or resumed).

    Sent from a background thread: an unreachable or vanished server costs training
    nothing; the rows are kept and sent when it answers again (see ``RemoteTracker``).
    MLflow's own retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) apply to each try.

    Example:
        >>> tracker = MlflowTracker(tracking_uri="sqlite:///mlflow.db", run_name="ic")
        >>> manager = SummaryManager("runs/ic/train", trackers=[tracker], split="train")

    Args:
        tracking_uri: MLflow tracking URI; "" uses MLflow's default
            (``$MLFLOW_TRACKING_URI``, else ``./mlruns``).
        experiment_name: The MLflow experiment (created if missing).
        run_name: The new run's name.
        tags: Tags set on a new run.
    """

    name = "mlflow"
    service = "MLflow"

    def __init__(
        self, *, tracking_uri: str = "", experiment_name: str = "torchgarden",
        run_name: str = "", tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tags = dict(tags or {})
        self._client: Any = None
        self._params: dict[str, str] = {}
        self._held: dict[str, int] = {}  # key -> last step the (resumed) run already holds
        self._open = False

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Keeps ``params`` (flattened to ``a.b`` keys) for the run this tracker creates;
        a resumed run keeps the params it was created with."""
        self._params = {k: v[:_MAX_PARAM_LENGTH] for k, v in flatten_params(params).items()}

    def _start(self) -> None:
        self._client = self._client or _client(self.tracking_uri)
        client = self._client
        if self.run_id is None:
            experiment = client.get_experiment_by_name(self.experiment_name)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else client.create_experiment(self.experiment_name))
            run = client.create_run(experiment_id, run_name=self.run_name or None,
                                    tags=self.tags)
            self.run_id = run.info.run_id
            from mlflow.entities import Param

            items = [Param(k, v) for k, v in self._params.items()]
            for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
                client.log_batch(self.run_id, params=items[i:i + _MAX_PARAMS_PER_BATCH])
        else:
            client.update_run(self.run_id, status="RUNNING")
            self._held = self._steps_held()
        self._open = True
        _logger.info("MLflow run %s (%s)", self.run_id, client.tracking_uri)

    def _steps_held(self) -> dict[str, int]:
        """The last step of each metric the run already holds."""
        client = self._client
        keys = client.get_run(self.run_id).data.metrics
        return {key: max(m.step for m in client.get_metric_history(self.run_id, key))
                for key in keys}

    def _send(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Logs ``scalars`` as ``<split>/<key>`` at ``step`` (one ``log_batch`` call)."""
        if not self._open:
            self._start()
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(f"{split}/{key}", float(value), now, int(step))
                   for key, value in scalars.items()
                   if step > self._held.get(f"{split}/{key}", -1)]
        for i in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i:i + _MAX_METRICS_PER_BATCH])
        for metric in metrics:  # A retried row never logs a point twice.
            self._held[metric.key] = max(self._held.get(metric.key, -1), metric.step)

    def _finish(self) -> None:
        """Marks the MLflow run finished (a resumed run marks it running again)."""
        if self._open:
            self._client.set_terminated(self.run_id, status="FINISHED")
            self._open = False

    def _where(self) -> str:
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "./mlruns")

    def __repr__(self) -> str:
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "default")
        return f"MlflowTracker(run_id={self.run_id!r}, tracking_uri={uri!r})"
