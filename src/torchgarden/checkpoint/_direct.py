"""The single-file format: ``state.pt`` written at the disk's speed, hashed on the way
(no second read), and read back with ``torch.load(weights_only=True)``.

Buffered writes of a few hundred MB and an ``fsync`` ran at a third of the disk's speed
here (the page cache writes back in small pieces), hence :class:`DirectFile`.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import pickle
import queue
import re
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import xxhash

from torchgarden.checkpoint import layout
from torchgarden.checkpoint.errors import CorruptCheckpointError, UnsafeCheckpointError
from torchgarden.checkpoint.layout import STATE_FILE

__all__ = [
    "DirectFile", "load_dict", "load_state", "safe_load", "save_hashed", "write_checkpoint",
]

BLOCK = 16 << 20
_ALIGN = 4096
_WRITEBACK = 64 << 20  # Buffered writes: start the disk writing after this many new bytes.

# Blocks kept between saves: a fresh 16 MiB mapping page-faults in on first use.
_FREE_BLOCKS: queue.LifoQueue[mmap.mmap] = queue.LifoQueue(maxsize=4)


def _take_block() -> mmap.mmap:
    try:
        return _FREE_BLOCKS.get_nowait()
    except queue.Empty:
        return mmap.mmap(-1, BLOCK)  # Anonymous mappings are page-aligned, as O_DIRECT needs.


def _give_back(block: mmap.mmap) -> None:
    try:
        _FREE_BLOCKS.put_nowait(block)
    except queue.Full:
        block.close()


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


class _HashedFile:
    """A file object for ``torch.save`` that hashes (XXH3-128) and counts what it writes;
    :meth:`close` makes the file durable, :meth:`abort` releases it (a no-op after close)."""

    def __init__(self, path: str) -> None:
        self.name = path
        self.size = 0
        self._digest = xxhash.xxh3_128()

    def _count(self, data: Any) -> memoryview:
        view = memoryview(data).cast("B")
        self._digest.update(view)
        self.size += len(view)
        return view

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


class DirectFile(_HashedFile):
    """``O_DIRECT`` writes of two alternating page-aligned 16 MiB blocks, one written on a
    thread while the next fills; the last block is padded to 4 KiB, the file truncated.

    Raises:
        OSError: The file system refuses ``O_DIRECT`` (``EINVAL``) or the open fails.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        self._blocks = [_take_block(), _take_block()]
        self._current, self._fill = 0, 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-direct")
        self._pending: Future[None] | None = None

    def write(self, data: Any) -> int:
        view = self._count(data)
        position = 0
        while position < len(view):
            block = self._blocks[self._current]
            take = min(BLOCK - self._fill, len(view) - position)
            block[self._fill:self._fill + take] = view[position:position + take]
            self._fill += take
            position += take
            if self._fill == BLOCK:  # Written on the thread while the other block fills.
                self._wait()
                self._pending = self._pool.submit(_write_all, self._fd, memoryview(block))
                self._current ^= 1
                self._fill = 0
        return len(view)

    def flush(self) -> None:  # Full blocks are written as they fill, the rest by close().
        pass

    def close(self) -> None:
        try:
            self._wait()
            if self._fill:
                padded = -(-self._fill // _ALIGN) * _ALIGN
                block = self._blocks[self._current]
                block[self._fill:padded] = bytes(padded - self._fill)
                _write_all(self._fd, memoryview(block)[:padded])
                os.ftruncate(self._fd, self.size)
            os.fsync(self._fd)
        finally:
            self.abort()

    def abort(self) -> None:
        if self._fd < 0:
            return
        try:
            if self._pending is not None:
                self._pending.exception()  # Let the block's write finish before unmapping.
        finally:
            self._pool.shutdown(wait=True)
            os.close(self._fd)
            self._fd = -1
            for block in self._blocks:
                _give_back(block)
            self._blocks = []

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


class _BufferedFile(_HashedFile):
    """Buffered writes that start the writeback of the pages so far every 64 MiB
    (``posix_fadvise(DONTNEED)`` does not wait): the disk works while ``torch.save``
    serialises the rest."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._file = open(path, "wb", buffering=BLOCK)  # noqa: SIM115 (closed by close/abort)
        self._started = 0  # Bytes whose writeback has been started.

    def write(self, data: Any) -> int:
        written = self._file.write(self._count(data))
        if self.size - self._started >= _WRITEBACK and hasattr(os, "posix_fadvise"):
            self._file.flush()
            os.posix_fadvise(self._file.fileno(), self._started, self.size - self._started,
                             os.POSIX_FADV_DONTNEED)
            self._started = self.size
        return written

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def abort(self) -> None:
        self._file.close()


def save_hashed(state: dict[str, Any], path: str) -> dict[str, Any]:
    """``torch.save(state, path)`` hashed on the way and fsynced once (``O_DIRECT``, or
    buffered where the file system refuses it); returns the file's manifest entry."""
    try:
        file: _HashedFile = DirectFile(path) if hasattr(os, "O_DIRECT") else _BufferedFile(path)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        file = _BufferedFile(path)
    try:
        torch.save(state, file)
        file.close()
    finally:
        file.abort()
    return layout.file_entry(file.hexdigest(), file.size)


def write_checkpoint(
    directory: str, name: str, number: int, state: dict[str, Any], *,
    config: dict[str, Any] | None, extra: dict[str, Any] | None, version: str,
) -> str:
    """Writes ``state`` (on the host) as a single-file checkpoint atomically; returns its
    path. Raises ``FileExistsError`` when the checkpoint appeared meanwhile."""
    final = layout.checkpoint_path(directory, name, number)
    temp = layout.new_temp_dir(final)
    published = False
    try:
        files = {STATE_FILE: save_hashed(state, os.path.join(temp, STATE_FILE))}
        layout.publish(temp, final, files, config=config, extra=extra, version=version)
        published = True
    finally:
        layout.release_temp_dir(temp, remove=not published)
    return final


def safe_load(source: Any, where: str) -> Any:
    """``torch.load(source, map_location="cpu", weights_only=True)``; a refusal raises
    ``UnsafeCheckpointError`` starting with ``where``."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"WeightsUnpickler error: ([^\n]*?)(?:\.\s|\n|$)", str(e))
        lines = str(e).strip().splitlines() or [type(e).__name__]
        reason = found.group(1) if found else lines[-1]
        raise UnsafeCheckpointError(
            f"{where} holds pickled Python objects that torch.load(weights_only=True) refuses "
            f"({reason}); load only checkpoints you trust, and keep state_dict() to tensors, "
            f"numbers, strings, lists, tuples and dicts.") from e


def load_state(path: str | os.PathLike[str], *, verify_files: bool = False) -> dict[str, Any]:
    """Loads the ``state.pt`` of checkpoint directory ``path`` with ``torch.load(
    map_location="cpu", weights_only=True)``.

    Args:
        verify_files: Also check every file's size and checksum, on a second thread while
            ``torch.load`` reads the same pages; the state is returned only if all match.

    Raises:
        UnsafeCheckpointError: The file holds pickled objects weights_only refuses.
        CorruptCheckpointError: The file is missing, cannot be read, or (with
            ``verify_files``) does not match meta.json.
        CheckpointFormatError: (With ``verify_files``) written in a newer format.
    """
    file_path = os.path.join(os.fspath(path), STATE_FILE)
    if not verify_files:
        return load_dict(file_path, repr(file_path))
    if hasattr(os, "posix_fadvise"):  # Read into the page cache once for checksum and load.
        with contextlib.suppress(OSError):  # Missing or unreadable: load and verify say so.
            fd = os.open(file_path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-verify") as pool:
        check = pool.submit(layout.verify, path, check_step=False)
        try:
            return load_dict(file_path, repr(file_path))
        finally:
            check.result()  # Raised first: a mismatch explains an unreadable file better.


def load_dict(source: Any, where: str, fix: str = "") -> dict[str, Any]:
    """:func:`safe_load` of a dict of item states; raises ``CorruptCheckpointError`` (its
    message ending in ``fix``) for an unreadable ``source`` or another value."""
    try:
        state = safe_load(source, where)
    except UnsafeCheckpointError:
        raise
    except Exception as e:
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise CorruptCheckpointError(f"{where} is not a readable torch checkpoint "
                                     f"({type(e).__name__}: {first_line}){fix}") from e
    if not isinstance(state, dict):
        raise CorruptCheckpointError(
            f"{where} holds a {type(state).__name__}, expected a dict of item states{fix}.")
    return state
