"""Summary managers: write nested dicts of logs as TensorBoard event files.

A summary manager turns the log dict that a train or eval loop returns into
TensorBoard events. Nested dicts become sub-directories, so
``{"coco": {"AP": 0.3}}`` written by a manager rooted at ``model_dir/validation``
lands in ``model_dir/validation/coco`` under the tag ``AP``, exactly as in Orbit.
The same write hands its scalars (``coco/AP``) to the manager's trackers: the run's
``metrics.jsonl``, MLflow, Weights & Biases (``summary.tracker.Tracker``).

``torch.utils.tensorboard`` is imported on the first write, so importing this
module (and a manager that never writes) costs nothing.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torchgarden.summary.tracker import Tracker

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "SummaryFn",
    "SummaryManager",
    "SummaryManagerInterface",
    "scalar_summary",
]

SummaryFn = Callable[[Any, str, Any, "int | None"], None]
"""``summary_fn(writer, name, value, step)`` writes one leaf of a summary dict."""


class SummaryManagerInterface(abc.ABC):
    """What the Controller needs from a summary manager.

    Subclass this to write logs somewhere other than TensorBoard (or to add a
    new kind of summary); subclass :class:`SummaryManager` to reuse its
    writer bookkeeping and recursion.
    """

    @abc.abstractmethod
    def summary_writer(self, relative_path: str = "") -> Any:
        """Returns the writer for ``relative_path`` under the summary directory.

        Args:
            relative_path: Sub-directory relative to the summary directory.
                Defaults to ``""``, the directory itself.
        """

    @abc.abstractmethod
    def write_summaries(self, summary_dict: Mapping[str, Any]) -> None:
        """Writes every leaf of ``summary_dict``; nested dicts become sub-directories."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Pushes buffered events to disk."""

    def resume_at(self, step: int) -> None:
        """The run (re)starts at ``step``: forget what was written past it.

        A training Controller calls it once it has restored (or initialised) the model,
        and again when blow-up recovery sends the run back. Default: nothing.
        """
        del step


class _NullWriter:
    """A writer that accepts every ``add_*`` call and writes nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)
        return _ignore

    def __bool__(self) -> bool:
        return False


def _ignore(*args: Any, **kwargs: Any) -> None:
    del args, kwargs


_NULL_WRITER = _NullWriter()


def _to_float(name: str, value: Any) -> float:
    """Converts a scalar-like leaf to a Python float.

    Host sync for device tensors; called once per loop, never per step.
    """
    number = _scalar_or_none(value)
    if number is not None:
        return number
    if isinstance(value, torch.Tensor | np.ndarray):
        raise ValueError(
            f"summary '{name}' must be a scalar (a number or a 1-element array), got an "
            f"array of shape {tuple(value.shape)}; reduce it first or write it with a "
            f"custom summary_fn."
        )
    raise TypeError(
        f"summary '{name}' must be a number, a numpy scalar or a 1-element tensor, got "
        f"{type(value).__name__}; reduce it first or write it with a custom summary_fn."
    )


def _scalar_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a number or a 1-element array, else None."""
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return float(value)
    if isinstance(value, torch.Tensor | np.ndarray):
        numel = value.size if isinstance(value, np.ndarray) else value.numel()
        if numel == 1:
            return float(value.reshape(()).item())  # sync point: once per summary write
    return None


def _flat_scalars(summary_dict: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The scalar leaves of ``summary_dict`` as ``{"a/b": float}`` (images and arrays left out)."""
    out: dict[str, float] = {}
    for name, value in summary_dict.items():
        key = f"{prefix}/{name}" if prefix else str(name)
        if isinstance(value, Mapping):
            out.update(_flat_scalars(value, key))
        elif not str(name).startswith("image/"):
            number = _scalar_or_none(value)
            if number is not None:
                out[key] = number
    return out


def scalar_summary(writer: Any, name: str, value: Any, step: int | None) -> None:
    """Default ``summary_fn``: writes ``value`` as a TensorBoard scalar.

    Args:
        writer: A ``torch.utils.tensorboard.SummaryWriter``.
        name: The tag.
        value: A Python number, a numpy scalar or a 0-d / 1-element tensor.
        step: The global step recorded with the value.

    Raises:
        ValueError: ``value`` has more than one element.
        TypeError: ``value`` is not number-like.
    """
    writer.add_scalar(name, _to_float(name, value), global_step=step)


class SummaryManager(SummaryManagerInterface):
    """Writes nested log dicts as TensorBoard event files, one writer per sub-directory.

    Writers (and their directories) are created on first use, so a manager that
    never writes leaves no trace. A ``summary_dir`` of None makes a null manager:
    every call is a cheap no-op and no files are created.

    Example:
        >>> manager = SummaryManager("/tmp/run/train", global_step=lambda: trainer.step)
        >>> manager.write_summaries({"loss": 0.25, "coco": {"AP": 0.31}})
        >>> manager.flush()  # events in /tmp/run/train and /tmp/run/train/coco

    Args:
        summary_dir: Root directory of the event files, or None to disable writing.
        summary_fn: ``summary_fn(writer, name, value, step)`` called for every leaf.
            Defaults to :func:`scalar_summary` (``writer.add_scalar``).
        global_step: The step recorded with each write: an int, a zero-argument
            callable returning the current step (what the Trainer passes), or None
            (step 0 unless ``write_summaries(..., step=)`` gives one). Defaults to None.
        trackers: Also send every write's scalars (nested keys joined with ``/``) to
            these: a ``MetricsFile``, an MLflow or W&B tracker. Defaults to none. With
            trackers and no ``summary_dir`` the manager writes no event files.
        split: What the trackers record the scalars under (``train``, ``validation``).
            Defaults to the last part of ``summary_dir``.
    """

    def __init__(
        self,
        summary_dir: str | os.PathLike[str] | None,
        summary_fn: SummaryFn | None = None,
        global_step: int | Callable[[], int] | None = None,
        *,
        trackers: Sequence[Tracker] = (),
        split: str | None = None,
    ) -> None:
        self._summary_dir = None if summary_dir is None else os.fspath(summary_dir)
        self._summary_fn = scalar_summary if summary_fn is None else summary_fn
        self._global_step = global_step
        self._writers: dict[str, SummaryWriter] = {}
        self._trackers = tuple(trackers)
        self._split = split or os.path.basename(os.path.normpath(self._summary_dir or "summary"))
        self._purge_step: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether this manager writes anything (False for a null manager)."""
        return self._summary_dir is not None or bool(self._trackers)

    @property
    def trackers(self) -> tuple[Tracker, ...]:
        """Where each write's scalars also go."""
        return self._trackers

    @property
    def split(self) -> str:
        """The name trackers record this manager's scalars under."""
        return self._split

    @property
    def summary_dir(self) -> str | None:
        """The root directory of the event files, or None for a null manager."""
        return self._summary_dir

    def summary_writer(self, relative_path: str = "") -> Any:
        """Returns the writer for ``relative_path``, creating it on first use.

        Args:
            relative_path: Sub-directory relative to ``summary_dir``. Defaults to
                ``""``, the directory itself.

        Returns:
            A ``torch.utils.tensorboard.SummaryWriter``, or a no-op writer (falsy)
            when the manager is disabled.
        """
        if self._summary_dir is None:
            return _NULL_WRITER
        key = os.path.normpath(relative_path) if relative_path else ""
        writer = self._writers.get(key)
        if writer is None:
            # Lazy import keeps `import torchgarden.summary` cheap.
            from torch.utils.tensorboard import SummaryWriter

            log_dir = os.path.join(self._summary_dir, key) if key else self._summary_dir
            # After a resume, TensorBoard's reader hides what the interrupted run wrote
            # at or past purge_step (SessionLog.START), so each step shows once.
            writer = SummaryWriter(log_dir=log_dir, purge_step=self._purge_step)
            self._writers[key] = writer
        return writer

    def current_step(self) -> int | None:
        """Returns the step the next write records (resolving a callable ``global_step``)."""
        step = self._global_step
        if callable(step):
            step = step()
        return None if step is None else int(step)  # sync point if a device tensor

    def write_summaries(self, summary_dict: Mapping[str, Any], step: int | None = None) -> None:
        """Writes every leaf of ``summary_dict``; a nested dict key becomes a sub-directory.

        Args:
            summary_dict: Maps tags to values, or to nested dicts of the same shape.
            step: Overrides the manager's ``global_step`` for this write.
                Defaults to None (use ``global_step``).
        """
        if not self.enabled:
            return
        if step is None:
            step = self.current_step()
        step = int(step) if step is not None else None
        self._write(summary_dict, "", step)
        if self._trackers and step is not None:
            scalars = _flat_scalars(summary_dict)
            for tracker in self._trackers:
                tracker.log_scalars(self._split, step, scalars)

    def _write(self, summary_dict: Mapping[str, Any], relative_path: str, step: int | None) -> None:
        for name, value in summary_dict.items():
            if isinstance(value, Mapping):
                self._write(value, os.path.join(relative_path, str(name)), step)
            else:
                self._write_leaf(self.summary_writer(relative_path), str(name), value, step)

    def _write_leaf(self, writer: Any, name: str, value: Any, step: int | None) -> None:
        self._summary_fn(writer, name, value, step)

    def flush(self) -> None:
        """Flushes every writer created so far, and the trackers."""
        for writer in self._writers.values():
            writer.flush()
        for tracker in self._trackers:
            tracker.flush()

    def close(self) -> None:
        """Flushes and closes every writer; a later write opens new ones."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def resume_at(self, step: int) -> None:
        """Hides what was written past ``step`` from TensorBoard's reader (event files
        opened from now on start with a ``purge_step`` of ``step + 1``) and has the
        trackers drop or skip it, so a resumed run records each step once."""
        self.close()
        self._purge_step = int(step) + 1
        for tracker in self._trackers:
            tracker.resume_at(int(step))

    def recorded(self, step: int) -> dict[str, Any] | None:
        """The scalars a tracker that keeps them (the metrics file) holds for this
        manager's split at ``step``, with ``a/b`` keys nested again; None if none does."""
        for tracker in self._trackers:
            read = getattr(tracker, "read", None)
            row = read(self._split, step) if read is not None else None
            if row is not None:
                return _nest(row)
        return None

    def __enter__(self) -> SummaryManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(summary_dir={self._summary_dir!r})"


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a/b": 1}`` -> ``{"a": {"b": 1}}`` (the inverse of the trackers' keys)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = out
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # "a" and "a/b" both present: keep "a/b" flat.
                node, leaf = out, key
                break
            node = child
        node[leaf] = value
    return out
