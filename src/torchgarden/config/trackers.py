"""Settings of the MLflow and Weights & Biases back-ends (`runtime.mlflow`, `runtime.wandb`)."""

from __future__ import annotations

import dataclasses

from torchgarden.config.base import Config
from torchgarden.config.errors import choose

__all__ = ["MlflowConfig", "WandbConfig"]


@dataclasses.dataclass
class MlflowConfig(Config):
    """Where `runtime.trackers: [..., mlflow]` logs (docs/observability.md)."""

    tracking_uri: str = ""
    """MLflow tracking URI (`http://host:5000`, `sqlite:///mlflow.db`, `file:./mlruns`);
    "" uses MLflow's own default (`$MLFLOW_TRACKING_URI`, else `./mlruns`). Defaults to ""."""
    experiment_name: str = "torchgarden"
    """MLflow experiment the run belongs to (created if missing). Defaults to "torchgarden"."""
    run_name: str = ""
    """Name of the MLflow run; "" uses the model_dir's name. Defaults to ""."""


@dataclasses.dataclass
class WandbConfig(Config):
    """Where `runtime.trackers: [..., wandb]` logs (docs/observability.md)."""

    project: str = "torchgarden"
    """W&B project. Defaults to "torchgarden"."""
    entity: str = ""
    """W&B entity (user or team); "" uses your default entity. Defaults to ""."""
    mode: str = ""
    """"online", "offline" (files under `model_dir/wandb/`, upload later with `wandb sync`)
    or "disabled"; "" follows `$WANDB_MODE` (W&B's default: online). Defaults to ""."""
    run_name: str = ""
    """Name of the W&B run; "" uses the model_dir's name. Defaults to ""."""

    def check(self) -> None:
        """Checks the mode."""
        if self.mode:  # "" follows $WANDB_MODE
            choose(self, "mode", ("online", "offline", "disabled"))
