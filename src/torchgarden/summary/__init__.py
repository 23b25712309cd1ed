"""Summary managers (Orbit's ``SummaryManager`` family) and the trackers they feed.

TensorBoard event files, ``model_dir/metrics.jsonl`` (``MetricsFile``), and optional
MLflow / Weights & Biases back-ends (``summary.mlflow_tracker``, ``summary.wandb_tracker``,
imported only when used).
"""

from torchgarden.summary.images import ImageScalarSummaryManager
from torchgarden.summary.manager import (
    SummaryFn,
    SummaryManager,
    SummaryManagerInterface,
    scalar_summary,
)
from torchgarden.summary.metrics_file import METRICS_FILE, MetricsFile, read_metrics
from torchgarden.summary.tracker import RemoteTracker, Tracker

__all__ = [
    "METRICS_FILE",
    "ImageScalarSummaryManager",
    "MetricsFile",
    "SummaryFn",
    "SummaryManager",
    "SummaryManagerInterface",
    "RemoteTracker",
    "Tracker",
    "read_metrics",
    "scalar_summary",
]
