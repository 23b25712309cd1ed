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

import io
import logging
import os
import tarfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["ArrowColumns", "BadShardError", "ColumnBatch", "load_arrow", "stream_arrow",
           "fingerprint",
           "stream_webdataset"]

_logger = logging.getLogger("torchgarden")


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
    try:
        return _datasets().load_from_disk(path)
    except FileNotFoundError:
        raise
    except Exception as e:  # pyarrow's errors name no file: find the bad one.
        raise BadShardError(f"Hugging Face dataset {path!r}: {_bad_arrow_file(path) or e}; "
                            "save it again (Dataset.save_to_disk).") from None


def _bad_arrow_file(path: str) -> str | None:
    """``"<file> is unreadable (why)"`` for the first Arrow file of a saved dataset that
    pyarrow cannot read, or None."""
    import json

    import pyarrow as pa

    with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
        files = [entry["filename"] for entry in json.load(f).get("_data_files", [])]
    for name in files:
        try:
            with pa.memory_map(os.path.join(path, name)) as source:
                pa.ipc.open_stream(source).read_all()
        except (OSError, pa.ArrowException) as e:
            return f"its data file {name} is unreadable ({e})"
    return None


def fingerprint(dataset: Any) -> str:
    """What identifies a ``datasets.Dataset``'s content on resume: ``datasets``' own
    fingerprint (recorded in ``state.json``) and its number of rows."""
    return f"{dataset._fingerprint}/{dataset.num_rows}rows"


def stream_arrow(path: str | os.PathLike[str]) -> Any:
    """The ``save_to_disk`` dataset at ``path`` as an ``IterableDataset``, one shard per
    Arrow file (``save_to_disk(num_shards=...)`` decides how many: at least the number
    of replicas times the workers each, for every worker to get its own)."""
    dataset = load_arrow(path)
    stream = dataset.to_iterable_dataset(num_shards=max(1, len(dataset.cache_files)))
    stream.data_fingerprint = fingerprint(dataset)
    return stream


def stream_webdataset(paths: Sequence[str], *, skip_bad: bool = False) -> Any:
    """WebDataset ``.tar`` shards as an ``IterableDataset`` (one shard per file).

    Members are decoded by extension as ``datasets``' WebDataset reader decodes them
    (``npy``, ``cls``, ``json``, ...; images such as ``png`` become PIL images). A shard
    that is missing, truncated or corrupt when it is reached stops the run with one
    line naming it (a ``BadShardError``), or, with ``skip_bad``, the rest of that shard
    is skipped with one warning naming it and the examples it gave.

    Raises:
        FileNotFoundError: A path is not an existing ``.tar`` file.
    """
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"WebDataset shard {path!r} does not exist.")
    return _datasets().IterableDataset.from_generator(
        _tar_examples, gen_kwargs={"paths": list(paths), "skip_bad": skip_bad})


class BadShardError(ValueError):
    """A data shard is missing, truncated or corrupt (named, with where it stopped)."""


def _tar_examples(paths: list[str], skip_bad: bool) -> Iterator[dict[str, Any]]:
    """The examples of each tar shard (``__key__``, ``__url__`` and one entry per field)."""
    for path in paths:
        count = 0
        try:
            with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
                for example in _tar_pipeline(path, tar):
                    count += 1
                    yield example
        except (OSError, tarfile.TarError, ValueError, EOFError) as e:
            why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if not skip_bad:
                raise BadShardError(
                    f"WebDataset shard {path!r} is unreadable after {count} examples ({why}); "
                    "replace it, or set skip_bad_records=true in the data config to skip the "
                    "rest of a bad shard with a warning.") from None
            _logger.warning("skipping the rest of WebDataset shard %s after %d examples (%s).",
                            path, count, why)


def _tar_pipeline(path: str, tar: tarfile.TarFile) -> Iterator[dict[str, Any]]:
    """Groups ``<key>.<field>`` members into examples, decoded as ``datasets`` does."""
    from datasets.packaged_modules.webdataset.webdataset import DECODERS, IMAGE_EXTENSIONS

    example: dict[str, Any] = {}
    for member in tar:
        if not member.isfile() or "." not in os.path.basename(member.name):
            continue
        directory, name = os.path.split(member.name)
        stem, field = name.split(".", 1)
        key = os.path.join(directory, stem)
        if example and example["__key__"] != key:
            yield example
            example = {}
        handle = tar.extractfile(member)
        data = handle.read() if handle is not None else b""
        if len(data) != member.size:
            raise EOFError(f"member {member.name} holds {len(data)} of {member.size} bytes")
        extension = field.rsplit(".", 1)[-1].lower()
        if extension in IMAGE_EXTENSIONS:
            from PIL import Image

            with Image.open(io.BytesIO(data)) as image:
                image.load()
                value: Any = image.copy()
        else:
            value = DECODERS[extension](data) if extension in DECODERS else data
        example.update({"__key__": key, "__url__": path, field: value})
    _check_end(tar)  # Before the last example, which a cut shard leaves incomplete.
    if example:
        yield example


def _check_end(tar: tarfile.TarFile) -> None:
    """A tar ends with two zero blocks: tarfile ends silently at a header it cannot read
    (corrupt) or at the end of the file (cut at a member boundary), so look."""
    f = tar.fileobj
    tail = b""
    f.seek(tar.offset)
    while chunk := f.read(1 << 16):
        tail += chunk.strip(b"\0")[:1]  # Only whether a non-zero byte follows.
        if tail:
            raise tarfile.ReadError(f"no valid tar header at byte offset {tar.offset}")
    if f.tell() - tar.offset < 2 * tarfile.BLOCKSIZE:
        raise tarfile.ReadError(f"cut short at byte offset {tar.offset} (no end-of-archive "
                                "blocks)")


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
            if row.get(key) is None:
                columns = sorted(k for k in row if not k.startswith("__"))
                where = (f"example {row['__key__']!r} of {row['__url__']!r}"
                         if "__url__" in row else "the data")
                raise KeyError(f"no column {key!r} in {where}; its columns: {columns} (set "
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
        self.data_fingerprint = fingerprint(dataset)
        self.dataset = dataset.with_format("numpy")
        self.columns = columns

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.columns.row(self.dataset[int(index)])
        return image, torch.tensor(label, dtype=torch.int64)
