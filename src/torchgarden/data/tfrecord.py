"""TFRecord files without TensorFlow: framing, CRC checks, shard lists, a writer.

A TFRecord file is a sequence of records, each::

    uint64 length (little-endian) | uint32 masked crc32c(length bytes) | data | uint32 masked crc32c(data)

(the mask: ``((crc >> 15) | (crc << 17)) + 0xa282ead8`` modulo 2**32, as TensorFlow's
``tsl/lib/hash/crc32c.h``). Both CRCs are verified on every read, with the ``crc32c``
package (hardware CRC where the CPU has it). A bad record raises `TFRecordError` naming
the file and the record's byte offset, or, with ``skip_bad=True``, is skipped and counted:
a bad data CRC skips that record; a bad length CRC or a truncated record loses the framing,
so the rest of that file is skipped.

`expand_input_paths` reads Model Garden's ``input_path``: a string or a list of strings,
each a comma-separated list of paths or glob patterns, matched in order, each pattern's
matches sorted.

Requires ``pip install 'torchgarden[tfrecord]'`` (``crc32c``; ``tf.train.Example`` messages
come from the ``tfrecord`` package's compiled protobuf, see `data.tf_example`).
"""

from __future__ import annotations

import glob
import os
import struct
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

__all__ = [
    "TFRecordError",
    "expand_input_paths",
    "masked_crc32c",
    "read_record_at",
    "read_records",
    "write_tfrecord",
]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


class TFRecordError(ValueError):
    """A TFRecord file that cannot be read: the file and the byte offset of the record.

    Raised in a DataLoader worker, torch re-raises it in the main process as
    ``TFRecordError("Caught TFRecordError in DataLoader worker ...<traceback>")``; the
    message is then cut back to the original one line.
    """

    def __init__(self, message: str) -> None:
        marker = f"{type(self).__name__}: "
        if "Traceback" in message and marker in message:
            message = message.rsplit(marker, 1)[1].strip()
        super().__init__(message)


def _crc32c() -> Any:
    try:
        import crc32c
    except ImportError:
        raise ImportError(
            "reading TFRecord files needs the crc32c package: pip install 'torchgarden[tfrecord]'"
        ) from None
    return crc32c.crc32c


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = _crc32c()(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def expand_input_paths(input_path: str | Iterable[str], key: str = "input_path") -> list[str]:
    """The files ``input_path`` names, in order: comma lists and globs expanded.

    Raises:
        FileNotFoundError: A pattern matches nothing or a path does not exist (names ``key``).
    """
    parts = [input_path] if isinstance(input_path, str) else list(input_path)
    files: list[str] = []
    for part in parts:
        for pattern in (p.strip() for p in str(part).split(",")):
            if not pattern:
                continue
            if glob.has_magic(pattern):
                matched = sorted(glob.glob(os.path.expanduser(pattern)))
            else:
                matched = [os.path.expanduser(pattern)] if os.path.isfile(
                    os.path.expanduser(pattern)) else []
            if not matched:
                what = "matches no file" if glob.has_magic(pattern) else "is no file"
                raise FileNotFoundError(f"{key}: {pattern!r} {what}; point it at TFRecord "
                                        "shards (a path, a glob or a comma-separated list)")
            files.extend(matched)
    if not files:
        raise FileNotFoundError(f"{key} is empty; set it to TFRecord shards")
    return files


def _bad(path: str, offset: int, what: str) -> TFRecordError:
    return TFRecordError(f"{path}: bad TFRecord record at byte offset {offset}: {what} "
                         "(set skip_bad_records=true in the data config to skip and count "
                         "bad records)")


def _read_one(file: BinaryIO, path: str, offset: int, crc: Any) -> bytes | None:
    """The record at ``offset`` (``file`` positioned there), None at a clean end of file."""
    header = file.read(12)
    if not header:
        return None
    if len(header) < 12:
        raise _bad(path, offset, f"truncated header ({len(header)} of 12 bytes)")
    length, length_crc = _HEADER.unpack(header)
    if _mask(crc(header[:8])) != length_crc:
        raise _bad(path, offset, "length CRC mismatch (not a TFRecord file, or corrupt)")
    data = file.read(length)
    footer = file.read(4)
    if len(data) < length or len(footer) < 4:
        raise _bad(path, offset, f"truncated record (length {length})")
    if _mask(crc(data)) != _FOOTER.unpack(footer)[0]:
        raise _DataCRCError(path, offset, length)
    return data


class _DataCRCError(Exception):
    """A record whose framing is intact but whose data CRC does not match."""

    def __init__(self, path: str, offset: int, length: int) -> None:
        super().__init__(path, offset, length)
        self.error = _bad(path, offset, "data CRC mismatch")
        self.next_offset = offset + 16 + length


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def read_records(
    path: str, offset: int = 0, *, skip_bad: bool = False, skipped: list[int] | None = None,
) -> Iterator[tuple[int, bytes]]:
    """Yields ``(byte offset, data)`` of each record of ``path`` from ``offset`` on.

    Args:
        path: The TFRecord file.
        offset: Where to start (a record's offset, as yielded before).
        skip_bad: Skip bad records (a bad data CRC: that record; broken framing: the rest
            of the file) instead of raising.
        skipped: With ``skip_bad``, the offset of each skipped record is appended here.

    Raises:
        TFRecordError: A bad record (file and offset in the message), unless ``skip_bad``.
    """
    crc = _crc32c()
    with open(path, "rb", buffering=1 << 20) as file:
        file.seek(offset)
        while True:
            try:
                data = _read_one(file, path, offset, crc)
            except _DataCRCError as bad:
                if not skip_bad:
                    raise bad.error from None
                _note_skip(skipped, offset, bad.error)
                offset = bad.next_offset
                file.seek(offset)
                continue
            except TFRecordError as error:
                if not skip_bad:
                    raise
                _note_skip(skipped, offset, error)
                return
            if data is None:
                return
            yield offset, data
            offset += 16 + len(data)


def _note_skip(skipped: list[int] | None, offset: int, error: TFRecordError) -> None:
    import logging

    logging.getLogger(__name__).warning("skipping: %s", error)
    if skipped is not None:
        skipped.append(offset)


def read_record_at(path: str, offset: int) -> bytes:
    """The data of the one record at ``offset`` of ``path`` (CRCs verified).

    Raises:
        TFRecordError: No intact record there.
    """
    with open(path, "rb") as file:
        file.seek(offset)
        try:
            data = _read_one(file, path, offset, _crc32c())
        except _DataCRCError as bad:
            raise bad.error from None
    if data is None:
        raise _bad(path, offset, "end of file")
    return data


def write_tfrecord(path: str | os.PathLike[str], records: Iterable[bytes]) -> list[int]:
    """Writes ``records`` (serialized protos, or any bytes) as a TFRecord file.

    Returns:
        The byte offset of each record.
    """
    offsets, offset = [], 0
    with open(path, "wb") as file:
        for data in records:
            header = struct.pack("<Q", len(data))
            file.write(header + struct.pack("<I", masked_crc32c(header)))
            file.write(data)
            file.write(struct.pack("<I", masked_crc32c(data)))
            offsets.append(offset)
            offset += 16 + len(data)
    return offsets
