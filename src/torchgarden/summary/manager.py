"""Summary managers: write nested dicts of logs as TensorBoard event files.

A summary manager turns the log dict that a train or eval loop returns into
TensorBoard events. Nested dicts become sub-directories, so
``{"coco": {"AP": 0.3}}`` written by a manager rooted at ``model_dir/validation``
lands in ``model_dir/validation/coco`` under the tag ``AP``, exactly as in Orbit.

``torch.utils.tensorboard`` is imported on the first write, so importing this
module (and a manager that never writes) costs nothing.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "ImageScalarSummaryManager",
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
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return float(value)
    if isinstance(value, torch.Tensor | np.ndarray):
        numel = value.size if isinstance(value, np.ndarray) else value.numel()
        if numel == 1:
            return float(value.reshape(()).item())  # sync point: once per summary write
        raise ValueError(
            f"summary '{name}' must be a scalar (a number or a 1-element array), got an "
            f"array of shape {tuple(value.shape)}; reduce it first or write it with a "
            f"custom summary_fn."
        )
    raise TypeError(
        f"summary '{name}' must be a number, a numpy scalar or a 1-element tensor, got "
        f"{type(value).__name__}; reduce it first or write it with a custom summary_fn."
    )


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
    """

    def __init__(
        self,
        summary_dir: str | os.PathLike[str] | None,
        summary_fn: SummaryFn | None = None,
        global_step: int | Callable[[], int] | None = None,
    ) -> None:
        self._summary_dir = None if summary_dir is None else os.fspath(summary_dir)
        self._summary_fn = scalar_summary if summary_fn is None else summary_fn
        self._global_step = global_step
        self._writers: dict[str, SummaryWriter] = {}

    @property
    def enabled(self) -> bool:
        """Whether this manager writes anything (False for a null manager)."""
        return self._summary_dir is not None

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
            writer = SummaryWriter(log_dir=log_dir)
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
        if self._summary_dir is None:
            return
        if step is None:
            step = self.current_step()
        self._write(summary_dict, "", int(step) if step is not None else None)

    def _write(self, summary_dict: Mapping[str, Any], relative_path: str, step: int | None) -> None:
        for name, value in summary_dict.items():
            if isinstance(value, Mapping):
                self._write(value, os.path.join(relative_path, str(name)), step)
            else:
                self._write_leaf(self.summary_writer(relative_path), str(name), value, step)

    def _write_leaf(self, writer: Any, name: str, value: Any, step: int | None) -> None:
        self._summary_fn(writer, name, value, step)

    def flush(self) -> None:
        """Flushes every writer created so far."""
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        """Flushes and closes every writer; a later write opens new ones."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def __enter__(self) -> SummaryManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(summary_dir={self._summary_dir!r})"


_CHANNEL_SIZES = (1, 3, 4)


def _to_nchw_images(name: str, value: Any, max_outputs: int) -> np.ndarray:
    """Converts an image leaf to a uint8/float32 NCHW numpy batch of at most ``max_outputs``.

    Host sync for device tensors; image summaries are written once per eval.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16, torch.bool):
            value = value.float()
        array = value.cpu().numpy()  # sync point: once per image summary
    else:
        array = np.asarray(value)
    if array.dtype == np.bool_:
        array = array.astype(np.float32)
    shape = tuple(array.shape)
    if array.ndim == 2:
        array = array[None, None]
    elif array.ndim == 3 and shape[-1] in _CHANNEL_SIZES:
        array = array.transpose(2, 0, 1)[None]
    elif array.ndim == 4 and shape[-1] in _CHANNEL_SIZES:
        array = array.transpose(0, 3, 1, 2)
    elif array.ndim == 4 and shape[1] in _CHANNEL_SIZES:
        pass
    else:
        raise ValueError(
            f"image summary '{name}' must be shaped [N,H,W,C], [N,C,H,W], [H,W,C] or [H,W] "
            f"with C in {_CHANNEL_SIZES}, got shape {shape}."
        )
    if array.shape[1] == 4:
        array = array[:, :3]  # TensorBoard's grid writer takes gray or RGB; drop alpha.
    if array.dtype != np.uint8:
        array = array.astype(np.float32, copy=False)
    return array[:max_outputs]


class ImageScalarSummaryManager(SummaryManager):
    """A :class:`SummaryManager` that writes ``image/*`` leaves as TensorBoard images.

    Leaves whose key starts with ``image/`` are written with ``add_images``: the
    first ``max_outputs`` images of the batch are tiled into one grid image per
    step. Everything else is written as a scalar.

    Images may be numpy arrays or tensors, uint8 in [0, 255] or float in [0, 1],
    shaped ``[N,H,W,C]``, ``[N,C,H,W]``, ``[H,W,C]`` or ``[H,W]``; the layout is
    channels-last when the last dimension is 1, 3 or 4. An alpha channel is dropped.

    Example:
        >>> manager = ImageScalarSummaryManager("/tmp/run/validation", max_outputs=4)
        >>> manager.write_summaries({"AP": 0.31, "image/detections": images}, step=100)

    Args:
        summary_dir: Root directory of the event files, or None to disable writing.
        max_outputs: The most images of one batch written per step. Defaults to 20.
        global_step: As in :class:`SummaryManager`. Defaults to None.
    """

    def __init__(
        self,
        summary_dir: str | os.PathLike[str] | None,
        max_outputs: int = 20,
        global_step: int | Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(max_outputs, int) or isinstance(max_outputs, bool) or max_outputs < 1:
            raise ValueError(f"max_outputs must be a positive int, got {max_outputs!r}.")
        super().__init__(summary_dir, scalar_summary, global_step)
        self._max_outputs = max_outputs

    @property
    def max_outputs(self) -> int:
        """The most images of one batch written per step."""
        return self._max_outputs

    def _write_leaf(self, writer: Any, name: str, value: Any, step: int | None) -> None:
        if name.startswith("image/"):
            images = _to_nchw_images(name, value, self._max_outputs)
            writer.add_images(name, images, global_step=step, dataformats="NCHW")
        else:
            self._summary_fn(writer, name, value, step)
