"""The loader of a ``source: tfrecord`` split: shards or a prepared TFDS dataset, batched.

`tfrecord_files` resolves a data config to files: Model Garden's ``input_path`` (globs and
comma lists) or ``tfds_name`` / ``tfds_split`` / ``tfds_data_dir``: a TensorFlow Datasets
dataset already prepared on disk (``<data_dir>/<name>/<version>/<name>-<split>.tfrecord-*``;
``name:version`` picks a version, else the newest there). Nothing is downloaded; a dataset
that is not there, or prepared as ArrayRecord, is refused in one line.

`build_tfrecord_loader` batches a `TFRecordStream` with torchdata's ``StatefulDataLoader``
(exact resume) and Model Garden's ``drop_remainder`` (training and evaluation alike).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

from torchgarden.data.context import InputContext
from torchgarden.data.tfrecord import TFRecordError, expand_input_paths, read_records
from torchgarden.data.tfrecord_stream import TFRecordStream

__all__ = ["build_tfrecord_loader", "check_first_records", "tfds_files", "tfrecord_files"]


def _key(params: Any, name: str) -> str:
    field_path = getattr(params, "field_path", None)
    return field_path(name) if callable(field_path) else name


def tfrecord_files(params: Any) -> list[str]:
    """The TFRecord files a data config names (``input_path`` or ``tfds_name``)."""
    if getattr(params, "tfds_name", ""):
        return tfds_files(params.tfds_name, params.tfds_split, params.tfds_data_dir,
                          key=_key(params, "tfds_name"))
    return expand_input_paths(params.input_path, _key(params, "input_path"))


def tfds_files(name: str, split: str, data_dir: str = "", *, key: str = "tfds_name") -> list[str]:
    """The TFRecord files of split ``split`` of the prepared TFDS dataset ``name``.

    Raises:
        FileNotFoundError: The dataset, version or split is not prepared under the folder
            (nothing is downloaded), or is prepared as ArrayRecord.
    """
    root = os.path.expanduser(data_dir or os.environ.get("TFDS_DATA_DIR", "")
                              or "~/tensorflow_datasets")
    name, _, version = name.partition(":")
    folder = os.path.join(root, name)
    if "[" in split:
        raise ValueError(f"{key}: split slices ({split!r}) are not read; use a whole split "
                         "such as 'train'")
    versions = sorted((v for v in _listdir(folder) if v[:1].isdigit()),
                      key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
    if version:
        versions = [v for v in versions if v == version]
    if not versions:
        raise FileNotFoundError(
            f"{key}: {name!r}{':' + version if version else ''} is not prepared under {root} "
            "(nothing is downloaded); prepare it with TFDS (`tfds build`) or set tfds_data_dir")
    base = os.path.join(folder, versions[-1])
    stem = f"{os.path.basename(name)}-{split}."
    files = sorted(glob.glob(os.path.join(base, glob.escape(stem) + "tfrecord-*")))
    if not files:
        formats = {f.split(".", 1)[1].split("-")[0] for f in _listdir(base) if f.startswith(stem)}
        if formats:
            raise FileNotFoundError(
                f"{key}: split {split!r} of {base} is prepared as {', '.join(sorted(formats))}; "
                "only TFRecord files are read (prepare with file_format=tfrecord)")
        splits = sorted({f.split("-")[1].split(".")[0] for f in _listdir(base) if "-" in f})
        raise FileNotFoundError(f"{key}: {base} has no split {split!r} (it has {splits})")
    return files


def check_first_records(files: list[str], parse: Callable[[bytes, int], Any]) -> None:
    """Reads the first record of every file and parses the first one, before training: a
    file that is no TFRecord file, or records of another schema, fail in one line here.

    Raises:
        TFRecordError: Naming the file and offset.
    """
    first = None
    for path in files:
        record = next(read_records(path), None)
        if first is None and record is not None:
            first = path, record[1]
    if first is None:
        raise TFRecordError(f"{files[0]}: no records in {len(files)} TFRecord file(s)")
    try:
        parse(first[1], 0)
    except Exception as error:
        raise TFRecordError(f"{first[0]}: record at byte offset 0: {error}") from error


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def build_tfrecord_loader(
    params: Any,
    parse: Callable[[bytes, int], Any],
    *,
    input_context: InputContext | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> Any:
    """This replica's resumable loader of batches of ``parse``d records.

    Args:
        params: The split's data config (``input_path`` or ``tfds_*``, ``is_training``,
            ``seed``, ``shuffle_buffer_size``, ``cycle_length``, ``block_length``,
            ``drop_remainder``, ``skip_bad_records``, the worker settings).
        parse: ``(record bytes, seed) -> example``; picklable (runs in loader workers).
        input_context: This replica's place; None reads ``torch.distributed``.
        collate_fn: Batches examples; None: `tuple_collate` (``(features, labels)``).
    """
    from torchgarden.data.batch_pool import tuple_collate
    from torchgarden.data.streaming import build_streaming_loader

    files = tfrecord_files(params)
    if not getattr(params, "skip_bad_records", False):
        check_first_records(files, parse)
    stream = TFRecordStream(
        files, parse, is_training=bool(params.is_training),
        seed=int(params.seed or 0), shuffle_buffer_size=params.shuffle_buffer_size,
        cycle_length=params.cycle_length, block_length=params.block_length,
        skip_bad=bool(getattr(params, "skip_bad_records", False)))
    return build_streaming_loader(stream, params, input_context=input_context,
                                  collate_fn=collate_fn or tuple_collate, drop_last=bool(params.drop_remainder))
