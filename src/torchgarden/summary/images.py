"""``ImageScalarSummaryManager``: ``image/*`` leaves as TensorBoard images, the rest scalars."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from torchgarden.summary.manager import SummaryManager, scalar_summary
from torchgarden.summary.tracker import Tracker

__all__ = ["ImageScalarSummaryManager"]

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
        trackers: As in :class:`SummaryManager` (images stay in TensorBoard).
        split: As in :class:`SummaryManager`.
    """

    def __init__(
        self,
        summary_dir: str | os.PathLike[str] | None,
        max_outputs: int = 20,
        global_step: int | Callable[[], int] | None = None,
        *,
        trackers: Sequence[Tracker] = (),
        split: str | None = None,
    ) -> None:
        if not isinstance(max_outputs, int) or isinstance(max_outputs, bool) or max_outputs < 1:
            raise ValueError(f"max_outputs must be a positive int, got {max_outputs!r}.")
        super().__init__(summary_dir, scalar_summary, global_step, trackers=trackers,
                         split=split)
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
