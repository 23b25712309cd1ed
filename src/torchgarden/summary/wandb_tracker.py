"""``WandbTracker``: a run's summaries in Weights & Biases (``runtime.trackers: [..., wandb]``).

``wandb`` (``pip install 'torchgarden[wandb]'``) is imported on the first write. Metrics
are logged as ``<split>/<tag>`` at the global step; the resolved config becomes the new
run's config. The W&B run id is part of the checkpoint, so a resumed run continues the
same W&B run (``resume="allow"``); steps below the one W&B reports for the resumed run
(already logged by the interrupted process) are skipped, as W&B would refuse them.
Offline mode (``runtime.wandb.mode=offline``) writes under ``model_dir/wandb/``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from torchgarden.summary.tracker import RemoteTracker

__all__ = ["WandbTracker"]

_logger = logging.getLogger("torchgarden")


def _wandb() -> Any:
    try:
        import wandb
    except ImportError as error:
        raise ImportError(
            "runtime.trackers includes 'wandb', but Weights & Biases is not installed; "
            "pip install 'torchgarden[wandb]' (or wandb)."
        ) from error
    return wandb


class WandbTracker(RemoteTracker):
    """Logs scalars to one W&B run, created on the first write (or resumed).

    Sent from a background thread: a W&B that cannot be reached (``wandb.init`` waits
    for it) costs training nothing; the rows are kept and sent once it answers (see
    ``RemoteTracker``).

    Args:
        directory: Where W&B keeps its files (``<directory>/wandb/``): the model_dir.
        project: The W&B project.
        entity: The W&B entity; "" for your default.
        mode: ``online``, ``offline`` or ``disabled``; "" follows ``$WANDB_MODE``.
        run_name: The new run's name.
    """

    name = "wandb"
    service = "W&B"

    def __init__(
        self, *, directory: str, project: str = "torchgarden", entity: str = "",
        mode: str = "", run_name: str = "",
    ) -> None:
        super().__init__()
        self.directory = os.fspath(directory)
        self.project, self.entity, self.mode, self.run_name = project, entity, mode, run_name
        self._params: dict[str, Any] | None = None
        self._run: Any = None
        self._first_step = 0

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Keeps ``params`` as the config of the run this tracker creates."""
        self._params = dict(params)

    def _start(self) -> None:
        wandb = _wandb()
        resumed = self.run_id is not None
        os.makedirs(self.directory, exist_ok=True)
        self._run = wandb.init(
            project=self.project, entity=self.entity or None, name=self.run_name or None,
            dir=self.directory, mode=self.mode or None, id=self.run_id,
            resume="allow" if resumed else None,
            config=None if resumed else self._params, reinit="create_new",
        )
        self.run_id = self._run.id
        # W&B refuses steps below the resumed run's; they were logged before the restart.
        self._first_step = int(getattr(self._run, "step", 0) or 0) if resumed else 0
        _logger.info("W&B run %s (%s)", self.run_id, self.mode or "default mode")

    def _send(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Logs ``scalars`` as ``<split>/<key>`` at ``step``."""
        if self._run is None:
            self._start()
        if step < self._first_step:
            return
        self._run.log({f"{split}/{key}": value for key, value in scalars.items()}, step=step)

    def _finish(self) -> None:
        """Finishes the W&B run (a resumed run reopens it)."""
        if self._run is not None:
            self._run.finish()
            self._run = None

    def _where(self) -> str:
        return f"mode {self.mode or os.environ.get('WANDB_MODE', 'online')}"

    def __repr__(self) -> str:
        return f"WandbTracker(run_id={self.run_id!r}, mode={self.mode or 'default'!r})"
