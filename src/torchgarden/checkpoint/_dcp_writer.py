"""``DcpWriter``: every rank writes its own shards; the directory appears once all have.

A save (a collective: every rank calls it with its own state) goes

1. rank 0 names a hidden temp directory ``.<name>-<N>.tmp-<pid>-<hex>`` and tells the others;
2. ``torch.distributed.checkpoint.save`` (or ``async_save``): each rank writes its shards
   there, DCP's coordinator writes ``.metadata`` once every rank has written;
3. each rank hashes a share of the files; rank 0 writes ``meta.json`` (size and XXH3-128
   checksum of every file), fsyncs and renames the directory to ``<name>-<N>``, then applies retention.

A rank killed anywhere before step 3 ends leaves only the temp directory (removed by a
later save), so ``<name>-<N>`` is never a partial checkpoint. With ``enable_async``
step 2 copies the state to host memory and returns; the write and step 3 run on a
background thread whose collectives use their own gloo process group.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from torchgarden.checkpoint import _dcp_io, _ranks, _storage
from torchgarden.checkpoint._background import WriterBase, manifest
from torchgarden.utils.files import atomic_write_json, fsync_dir

__all__ = ["DcpWriter"]

#: The manifest's checksum (as the single-file format writes it).
_CHECKSUM = "xxh3_128"


class DcpWriter(WriterBase):
    """Writes ``<directory>/<checkpoint_name>-<N>/`` in DCP's sharded layout, on every rank.

    Args: as for :class:`~torchgarden.checkpoint._background.WriterBase`.
    """

    _THREAD_NAME = "dcp-writer"

    def __init__(self, directory: str, checkpoint_name: str, **kwargs: Any) -> None:
        super().__init__(directory, checkpoint_name, **kwargs)
        self._group: Any = None

    def write(self, number: int, state: dict[str, Any], *, config: Any, extra: Any) -> str:
        """Writes this rank's ``state`` as part of checkpoint ``number`` (every rank calls it).

        With ``enable_async`` only the copy to host memory happens now; the checkpoint is
        published later (:meth:`sync` waits for it).

        Returns:
            The checkpoint's path (where it will appear, when asynchronous).

        Raises:
            CheckpointWriteError: A rank could not write; nothing was published and the
                checkpoints already there are intact.
        """
        self.sync()
        group = self._process_group()
        temp = self._temp_directory(number, group)
        final = os.path.join(self._directory, f"{self._checkpoint_name}-{number}")
        alone = _ranks.process_rank()[1] == 1
        if not self._enable_async:
            with _dcp_io.single_process_quietly(alone):
                failure = _failure(lambda: dcp.save(
                    state, storage_writer=dcp.FileSystemWriter(temp), no_dist=alone))
            self._publish(number, temp, failure, config, extra, group)
            return final
        future: Any = None

        def start() -> None:
            nonlocal future
            future = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(temp),
                                    process_group=group, no_dist=alone)

        failure = _failure(start)
        self._later(self._finish, future, failure, number, temp, config, extra, group)
        return final

    def _finish(self, future: Any, failure: BaseException | None, number: int, temp: str,
                config: Any, extra: Any, group: Any) -> str:
        if failure is None:
            failure = _failure(future.result)
        return self._publish(number, temp, failure, config, extra, group)

    def close(self) -> None:
        """Waits for a pending write, stops the writer thread and releases the gloo group.

        A gloo group's threads end only when its last reference goes: left to the
        interpreter's exit, that can happen while the process is being torn down, which
        aborts it (seen as SIGABRT after a clean preemption). Every rank closes its writer.
        """
        try:
            super().close()
        finally:
            group, self._group = self._group, None
            if group is not None and dist.is_initialized():
                dist.destroy_process_group(group)  # Local for gloo: no peer waits on it.

    def _process_group(self) -> Any:
        """A gloo group for the publishing collectives (and async DCP), made once."""
        if self._group is None and _ranks.process_rank()[1] > 1:
            self._group = dist.new_group(backend="gloo")  # Collective: every rank saves.
        return self._group

    def _temp_directory(self, number: int, group: Any) -> str:
        temp = None
        if _ranks.process_rank()[0] == 0:
            os.makedirs(self._directory, exist_ok=True)
            temp = os.path.join(self._directory, f".{self._checkpoint_name}-{number}.tmp-{os.getpid()}-"
                                f"{secrets.token_hex(4)}")
            with _storage._ACTIVE_LOCK:  # Never removed as stale while this process writes.
                _storage._ACTIVE_TEMP_DIRS.add(temp)
            os.makedirs(temp)
        return _ranks.broadcast(temp, group)

    def _publish(self, number: int, temp: str, failure: BaseException | None, config: Any,
                 extra: Any, group: Any) -> str:
        """Hashes the files on every rank, then rank 0 writes meta.json and renames."""
        rank, world_size = _ranks.process_rank()
        files: dict[str, Any] = {}
        if failure is None:
            try:
                names = sorted(os.listdir(temp))
                files = {n: _digest(os.path.join(temp, n)) for n in names[rank::world_size]}
            except OSError as e:
                failure = e
        reports = _ranks.gather(("" if failure is None else _reason(failure), files), group)
        outcome = None
        if rank == 0:
            outcome = next((text for text, _ in reports if text), None)
            if outcome is None:
                merged = {name: info for _, part in reports for name, info in part.items()}
                outcome = _failure(lambda: self._rename(number, temp, merged, config, extra))
                outcome = None if outcome is None else _reason(outcome)
            with _storage._ACTIVE_LOCK:
                _storage._ACTIVE_TEMP_DIRS.discard(temp)
            if outcome is not None:
                shutil.rmtree(temp, ignore_errors=True)
        outcome = _ranks.broadcast(outcome, group)
        final = os.path.join(self._directory, f"{self._checkpoint_name}-{number}")
        if outcome is not None:
            raise self._write_error(number, outcome, "fix the cause")
        return final

    def _rename(self, number: int, temp: str, files: dict[str, Any], config: Any,
                extra: Any) -> None:
        if _dcp_io.METADATA_FILE not in files:
            raise OSError(f"DCP wrote no {_dcp_io.METADATA_FILE}")
        meta = manifest(number, files, config=config, extra=extra, version=self.version,
                        format=_dcp_io.FORMAT, world_size=_ranks.process_rank()[1])
        atomic_write_json(os.path.join(temp, _storage.META_FILE), meta)
        fsync_dir(temp)
        final = os.path.join(self._directory, f"{self._checkpoint_name}-{number}")
        if os.path.exists(final):
            raise FileExistsError(f"{final!r} was written by someone else meanwhile")
        os.rename(temp, final)
        fsync_dir(self._directory)
        self._on_written(final)


def _failure(action: Callable[[], Any]) -> BaseException | None:
    """Runs ``action``; returns its exception instead of raising (ranks must stay in step)."""
    try:
        action()
    except Exception as e:
        return e
    return None


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def _digest(path: str) -> dict[str, Any]:
    return {_CHECKSUM: _storage._file_digest(path, _CHECKSUM), "bytes": os.path.getsize(path)}
