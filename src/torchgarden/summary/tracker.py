"""``Tracker``: where a summary manager also sends its scalars (metrics file, MLflow, W&B).

A summary manager writes TensorBoard events and then hands the same scalars, flattened
to ``a/b`` keys, to each of its trackers with the split (``train``, ``validation``) and
the step. One tracker object is shared by the train and the eval manager of a run.
"""

from __future__ import annotations

import abc
import collections
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["RemoteTracker", "Tracker"]

_logger = logging.getLogger("torchgarden")


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


class RemoteTracker(Tracker):
    """A tracker whose service may be slow, unreachable or gone mid-run (MLflow, W&B).

    Rows are handed to one background thread that sends them in order, so training never
    waits on the network. While the service answers, :meth:`flush` (after each summary
    write) waits for the rows to be sent, so a checkpoint is never ahead of the service.
    When a send fails, training goes on: one warning names the service and the error,
    the rows are kept (the oldest beyond ``max_pending`` are dropped and counted) and
    sent again every ``retry_seconds`` (doubling to 5 minutes); when the service answers
    again they are all sent, in order, and an info line says so. :meth:`close` waits up
    to ``close_seconds`` and then names, in one warning, what the service never got
    (``metrics.jsonl`` and TensorBoard hold every value).

    Subclasses implement :meth:`_send` (open the run if needed, send one row) and
    :meth:`_finish` (end the run); both run on the background thread.
    """

    #: The service's name in messages ("MLflow").
    service = "the tracker"
    retry_seconds = 30.0
    close_seconds = 30.0
    max_pending = 100_000

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[str, int, dict[str, float]]] = (
            collections.deque())
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._close_deadline = 0.0
        self._outage: str | None = None  # The error while the service does not answer.
        self._dropped = 0
        self._retry = self.retry_seconds
        self._gave_up = False  # close() stopped waiting: the run stays open (rows missing)

    @abc.abstractmethod
    def _send(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Sends one row (opening the run first if needed); raises if it could not."""

    def _finish(self) -> None:
        """Ends the service's run once every row was sent. Default: nothing."""

    def _where(self) -> str:
        """Where the rows go, for messages (a URI). Default: the service's name."""
        return self.service

    def log_scalars(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Queues ``scalars`` for the background thread (started on the first row)."""
        with self._wake:
            self._pending.append((split, int(step), dict(scalars)))
            if len(self._pending) > self.max_pending:
                self._pending.popleft()
                self._dropped += 1
            self._closing = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._deliver, daemon=True,
                                                name=f"torchgarden-{self.name}")
                self._thread.start()
            self._wake.notify_all()

    def flush(self) -> None:
        """Waits (up to ``close_seconds``) for the queued rows, unless the service is out."""
        with self._wake:
            self._wake.wait_for(lambda: not self._pending or self._outage is not None,
                                timeout=self.close_seconds)

    def close(self) -> None:
        """Sends what is queued (waiting up to ``close_seconds``), ends the run, and says
        in one warning what the service never got."""
        with self._wake:
            if self._thread is None:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + self.close_seconds
            self._wake.notify_all()
        self._thread.join(self.close_seconds)
        with self._wake:
            missed, dropped = list(self._pending), self._dropped
            self._pending.clear()
            self._dropped = 0
            # A thread still retrying must not end the run as if every row had arrived.
            self._gave_up = self._thread.is_alive()
        if missed or dropped:
            steps = sorted({step for _, step, _ in missed})
            where = f" (steps {steps[0]}-{steps[-1]})" if steps else ""
            _logger.warning(
                "%s (%s) never got %d summary writes%s%s: %s. metrics.jsonl and TensorBoard "
                "hold every value.", self.service, self._where(), len(missed) + dropped,
                where, f", {dropped} of them dropped from a full queue" if dropped else "",
                self._outage or "it did not answer in time")

    def _deliver(self) -> None:
        """The background thread: sends rows in order, retrying while the service is out."""
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._pending or self._closing)
                if not self._pending:
                    if self._gave_up:
                        return
                    break
                row = self._pending[0]
            try:
                self._send(*row)
            except Exception as error:  # The service's own errors: any type.
                if not self._failed(error):
                    return
                continue
            with self._wake:
                if self._pending and self._pending[0] is row:
                    self._pending.popleft()
                if self._outage is not None:
                    _logger.info("%s answers again; sending the %d summary writes kept "
                                 "meanwhile.", self.service, len(self._pending) + 1)
                    self._outage, self._retry = None, self.retry_seconds
                self._wake.notify_all()
        try:
            self._finish()
        except Exception as error:
            _logger.warning("%s (%s): could not end the run: %s", self.service, self._where(),
                            " ".join(str(error).split())[:300])

    def _failed(self, error: Exception) -> bool:
        """Notes a failed send; waits before the next try. False: stop (closing)."""
        text = " ".join(str(error).split())[:300] or type(error).__name__
        with self._wake:
            if self._outage is None:
                _logger.warning(
                    "%s (%s) failed: %s. Training goes on; metrics.jsonl and TensorBoard keep "
                    "every value, and %s gets them when it answers again.", self.service,
                    self._where(), text, self.service)
            self._outage = text
            self._wake.notify_all()
            if self._closing:  # Retry until close() stops waiting; it names what is left.
                left = self._close_deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(min(self._retry, left))
            else:
                self._wake.wait_for(lambda: self._closing, timeout=self._retry)
            self._retry = min(self._retry * 2, 300.0)
            return True
