"""Hugging Face ``datasets`` sources: Arrow datasets on disk and WebDataset tar shards.

* :func:`load_arrow` — a dataset saved with ``Dataset.save_to_disk`` (Arrow files), read
  by index: ``build_dataloader`` gives it the ``ResumableSampler`` path, which resumes
  exactly at any world size.
* :func:`stream_arrow` — the same files read as a stream (``IterableDataset``), one shard
  per Arrow file: no random access, position kept per shard.
* :func:`stream_webdataset` — WebDataset ``.tar`` shards (``<key>.<field>`` members, e.g.
  ``000001.npy`` + ``000001.cls``) through ``datasets``' own webdataset reader. Streams
  resume through ``IterableDataset.state_dict()`` (shard and example within it), so a
  resumed run re-reads at most the rest of one shard and never decodes a batch twice;
  the ``webdataset`` package has no such state, and torchdata would have to replay the
  worker's whole stream from the start of the epoch.

:class:`ColumnBatch` turns a list of rows (dicts) into ``(features, labels)`` tensors.
Everything here is local files; nothing is downloaded. Requires
``pip install 'torchgarden[streaming]'``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["ArrowColumns", "ColumnBatch", "load_arrow", "stream_arrow", "stream_webdataset"]


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ImportError(
            "reading Hugging Face datasets needs the datasets package: "
            "pip install 'torchgarden[streaming]'"
        ) from None
    return datasets


def load_arrow(path: str | os.PathLike[str]) -> Any:
    """A ``datasets.Dataset`` saved with ``save_to_disk`` (map-style: read by index).

    Raises:
        FileNotFoundError: ``path`` is not a directory written by ``save_to_disk``.
    """
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "state.json")):
        raise FileNotFoundError(
            f"{path!r} is no dataset saved with datasets.Dataset.save_to_disk (no state.json)."
        )
    return _datasets().load_from_disk(path)


def stream_arrow(path: str | os.PathLike[str]) -> Any:
    """The ``save_to_disk`` dataset at ``path`` as an ``IterableDataset``, one shard per
    Arrow file (``save_to_disk(num_shards=...)`` decides how many: at least the number
    of replicas times the workers each, for every worker to get its own)."""
    dataset = load_arrow(path)
    return dataset.to_iterable_dataset(num_shards=max(1, len(dataset.cache_files)))


def stream_webdataset(paths: Sequence[str]) -> Any:
    """WebDataset ``.tar`` shards as an ``IterableDataset`` (one shard per file).

    Members are decoded by extension (``npy``, ``cls``, ``json``, ``png``, ...).

    Raises:
        FileNotFoundError: A path is not an existing ``.tar`` file.
    """
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"WebDataset shard {path!r} does not exist.")
    return _datasets().load_dataset("webdataset", data_files={"train": list(paths)},
                                    split="train", streaming=True)


def _image(value: Any, shape: Sequence[int]) -> torch.Tensor:
    """A float tensor of ``shape`` from an array, a nested list or a PIL image (0..255
    pixels, HWC, become 0..1 CHW)."""
    if hasattr(value, "getbands"):  # PIL image
        array = np.asarray(value, dtype=np.float32) / 255.0
        array = array.transpose(2, 0, 1) if array.ndim == 3 else array[None]
    else:
        array = np.asarray(value, dtype=np.float32)
    if array.size != int(np.prod(shape)):
        raise ValueError(f"an example holds {array.size} values (shape {tuple(array.shape)}), but "
                         f"task.model.input_size asks for [channels, height, width] "
                         f"{list(shape)}; set it to the images' [height, width, channels].")
    return torch.from_numpy(np.ascontiguousarray(array.reshape(tuple(shape))))


class ColumnBatch:
    """Collates rows (dicts) into ``(features [B, *shape] float32, labels [B] int64)``.

    Picklable, so DataLoader workers can run it.

    Args:
        x_key: The column (or WebDataset field, e.g. ``npy``) holding the image.
        y_key: The column holding the integer label (e.g. ``cls``).
        shape: The shape of one image, e.g. ``(1, 8, 8)``.
    """

    def __init__(self, x_key: str, y_key: str, shape: Sequence[int]) -> None:
        self.x_key, self.y_key, self.shape = x_key, y_key, tuple(shape)

    def row(self, row: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """One example as ``(image tensor, label)``.

        Raises:
            KeyError: A column is missing; the message lists the row's columns.
        """
        for key in (self.x_key, self.y_key):
            if key not in row:
                columns = sorted(k for k in row if not k.startswith("__"))
                raise KeyError(f"no column {key!r} in the data; its columns: {columns} (set "
                               "x_key / y_key).")
        return _image(row[self.x_key], self.shape), int(row[self.y_key])

    def __call__(self, rows: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        examples = [self.row(row) for row in rows]
        return (torch.stack([x for x, _ in examples]),
                torch.tensor([y for _, y in examples], dtype=torch.int64))


class ArrowColumns(Dataset):
    """A map-style ``datasets.Dataset`` whose rows come out as ``(image, label)`` tensors.

    Args:
        dataset: The ``datasets.Dataset``.
        columns: Turns a row into ``(image, label)``.
    """

    def __init__(self, dataset: Any, columns: ColumnBatch) -> None:
        self.dataset = dataset.with_format("numpy")
        self.columns = columns

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.columns.row(self.dataset[int(index)])
        return image, torch.tensor(label, dtype=torch.int64)
