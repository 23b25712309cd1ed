"""``Tracker``: where a summary manager also sends its scalars (metrics file, MLflow, W&B).

A summary manager writes TensorBoard events and then hands the same scalars, flattened
to ``a/b`` keys, to each of its trackers with the split (``train``, ``validation``) and
the step. One tracker object is shared by the train and the eval manager of a run.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

__all__ = ["Tracker"]


class Tracker(abc.ABC):
    """One destination of a run's scalars.

    Subclass it to send summaries somewhere new; pass instances to a
    ``SummaryManager(..., trackers=[...])``.
    """

    #: A short name (``mlflow``), used for the tracker's item in checkpoints.
    name: str = "tracker"
    #: The tracker's run (MLflow run id, W&B run id), kept in checkpoints so a resumed run
    #: continues it; None until a run is created (and for trackers without runs).
    run_id: str | None = None

    @abc.abstractmethod
    def log_scalars(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Records ``scalars`` (``{"a/b": value}``) of ``split`` at ``step``."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Records the run's resolved config once, when the run starts. Default: nothing."""
        del params

    def resume_at(self, step: int) -> None:
        """The run (re)starts at ``step``: what was recorded past it is out of date.

        Called by a training Controller once it has restored (or initialised) the
        model, before the first write. Default: nothing.
        """
        del step

    def flush(self) -> None:
        """Pushes buffered records out. Default: nothing."""
        return

    def close(self) -> None:
        """Ends the tracker's run (a later write may reopen it). Default: nothing."""
        return

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps so a resumed run continues the same tracker run."""
        return {"run_id": self.run_id or ""}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.run_id = str(state.get("run_id") or "") or None
