"""How a checkpoint reaches the disk: one object per format, looked up once by its name.

``CheckpointManager`` applies the save rules, then hands the write to its format, which
knows which ranks take part and how they write, inline or on a background thread."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

import torch.distributed as dist

from torchgarden.checkpoint import _direct, layout, selection
from torchgarden.checkpoint._host import HostStaging, to_host
from torchgarden.checkpoint.checkpoint import Checkpoint
from torchgarden.checkpoint.errors import CheckpointWriteError, NonFiniteCheckpointError
from torchgarden.distribute.collectives import (
    all_gather_object,
    get_rank,
    get_world_size,
    group_timeout,
)

__all__ = ["CheckpointFormat", "Sharded", "SingleFile", "format_class"]


class CheckpointFormat:
    """Writes the numbered checkpoints of one manager in one format: whether every rank
    takes part in a save (:meth:`every_rank_saves`, else rank 0 alone writes), and this
    rank's write (:meth:`write`: the path on rank 0, None elsewhere; it raises
    ``CheckpointWriteError`` with the checkpoints already there intact, or
    ``NonFiniteCheckpointError`` with nothing written).

    Args:
        directory, checkpoint_name, enable_async, version: As for ``CheckpointManager``.
        on_written: Called with each checkpoint's path once it is durable (on the writing
            rank and thread), e.g. to apply retention.
        resume_from: Returns the checkpoint a rerun would resume from, or None; named by
            a failed or refused write.
    """

    name: ClassVar[str]  # The ``checkpoint_format`` naming this format.

    def __init__(
        self, directory: str, checkpoint_name: str, *, on_written: Callable[[str], None],
        resume_from: Callable[[], str | None], enable_async: bool = False,
        version: str | None = None,
    ) -> None:
        self._directory = directory
        self._name = checkpoint_name
        self._on_written = on_written
        self._resume_from = resume_from
        self._enable_async = enable_async
        self._version = version
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[Any] | None = None

    def every_rank_saves(self, items: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def write(self, number: int, checkpoint: Checkpoint, *, config: Any, extra: Any) -> str | None:
        raise NotImplementedError

    def _check(self, number: int, checkpoint: Checkpoint, state: Any, collective: bool = False
               ) -> None:
        """Refuses a state with a NaN or inf model parameter (with ``collective``, every
        rank checks its shards and all raise alike)."""
        where = selection.nonfinite_parameter(checkpoint.items, state)
        if collective:
            where = next((found for found in all_gather_object(where) if found), None)
        if where is not None:
            latest = self._resume_from()
            raise NonFiniteCheckpointError(
                f"not saving {self._name}-{number}: {where} is NaN or inf, so training diverged "
                f"by then; the last finite checkpoint "
                f"{os.path.basename(latest) if latest else '(none)'} is intact.")

    def _meta_version(self) -> str:  # Looked up (slowly) only when a checkpoint is written.
        return layout.package_version() if self._version is None else self._version

    def _path(self, number: int) -> str:
        return layout.checkpoint_path(self._directory, self._name, number)

    def _later(self, function: Callable[[], Any]) -> None:
        """Runs ``function`` on the writer thread; :meth:`sync` waits for it."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-writer")
        self._pending = self._executor.submit(function)

    def sync(self) -> None:
        """Waits for the pending background write; re-raises its error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Waits for a pending write and stops the writer thread."""
        try:
            self.sync()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def _write_error(self, number: int, reason: str, fix: str) -> CheckpointWriteError:
        latest = self._resume_from()
        return CheckpointWriteError(
            f"could not write checkpoint {self._name}-{number} in {self._directory!r}: "
            f"{reason}; the checkpoints already there are intact: {fix}, then rerun to "
            f"resume from {os.path.basename(latest) if latest else 'the start'}.")


class SingleFile(CheckpointFormat):
    """``"single"``: rank 0 writes one ``state.pt``, after every rank took the state when an
    item's ``state_dict()`` is a collective (``collective_state_dict = True``: FSDP2)."""

    name = layout.SINGLE

    def __init__(self, directory: str, checkpoint_name: str, **kwargs: Any) -> None:
        super().__init__(directory, checkpoint_name, **kwargs)
        self._staging = HostStaging()

    def every_rank_saves(self, items: Mapping[str, Any]) -> bool:
        return any(getattr(item, "collective_state_dict", False) for item in items.values())

    def write(self, number: int, checkpoint: Checkpoint, *, config: Any, extra: Any) -> str | None:
        state = checkpoint.state_dict()  # A collective for FSDP2 full-state items.
        if get_rank() != 0:
            return None
        if not self._enable_async:
            self._check(number, checkpoint, state)
            return self._write(number, to_host(state, copy=False), config, extra)
        # Training goes on while the copy is written: copy into host buffers reused from
        # save to save (the write that read them last has been waited for).
        host = to_host(state, copy=True, staging=self._staging)

        def checked_write() -> None:
            self._check(number, checkpoint, host)
            self._write(number, host, config, extra)

        self._later(checked_write)
        return self._path(number)

    def _write(self, number: int, state: dict[str, Any], config: Any, extra: Any) -> str:
        os.makedirs(self._directory, exist_ok=True)  # Not a full disk when it fails: raised as is.
        try:
            path = _direct.write_checkpoint(self._directory, self._name, number, state,
                                            config=config, extra=extra, version=self._meta_version())
        except (OSError, RuntimeError) as e:
            # torch.save reports a full disk as a RuntimeError of its zip writer.
            if isinstance(e, RuntimeError) and "inline_container" not in str(e):
                raise
            reason = _reason(e) if isinstance(e, OSError) else f"torch.save failed ({_reason(e)})"
            with contextlib.suppress(OSError):
                reason += f" ({shutil.disk_usage(self._directory).free / 2**20:.1f} MiB free there)"
            raise self._write_error(number, reason, "free space") from e
        self._on_written(path)
        return path


class Sharded(CheckpointFormat):
    """``"dcp"``: every rank writes its shards with ``torch.distributed.checkpoint`` into
    rank 0's temp directory and hashes a share of the files; rank 0 writes meta.json and
    renames. With ``enable_async`` the state is copied to host memory and the rest runs on
    a background thread whose collectives use their own gloo group."""

    name = layout.SHARDED
    _group: Any = None  # A gloo group for the publishing collectives, made at the first save.

    def every_rank_saves(self, items: Mapping[str, Any]) -> bool:
        return True

    def write(self, number: int, checkpoint: Checkpoint, *, config: Any, extra: Any) -> str | None:
        import torch.distributed.checkpoint as tdcp  # 0.4 s to import: only where used.

        from torchgarden.checkpoint import dcp

        state = dcp.save_state(checkpoint.items)
        self._check(number, checkpoint, state, collective=True)
        if self._group is None and get_world_size() > 1:
            # Collective: every rank saves. Its waits are bounded like the default group's.
            self._group = dist.new_group(backend="gloo", timeout=group_timeout())
        alone = self._group is None
        temp = layout.new_temp_dir(self._path(number)) if get_rank() == 0 else None
        temp = _gather(temp, self._group)[0]  # Rank 0's.
        writer = tdcp.FileSystemWriter(temp)
        if self._enable_async:  # Copies the state to host memory; the write goes on behind.
            future, failure = _attempt(lambda: tdcp.async_save(
                state, storage_writer=writer, process_group=self._group, no_dist=alone))
            self._later(lambda: self._publish(number, temp, failure, future, config, extra))
        else:
            with dcp.quiet_if(alone):
                _, failure = _attempt(lambda: tdcp.save(state, storage_writer=writer,
                                                        no_dist=alone))
            self._publish(number, temp, failure, None, config, extra)
        return self._path(number) if get_rank() == 0 else None

    def _publish(self, number: int, temp: str, failure: BaseException | None, future: Any,
                 config: Any, extra: Any) -> None:
        """Waits for an async write, every rank hashes a share of the files, then rank 0
        writes meta.json and renames."""
        if failure is None and future is not None:
            _, failure = _attempt(future.result)
        rank, world_size = get_rank(), get_world_size()
        files: dict[str, Any] = {}
        if failure is None:
            try:
                for name in sorted(os.listdir(temp))[rank::world_size]:
                    file_path = os.path.join(temp, name)
                    files[name] = layout.file_entry(layout.file_digest(file_path),
                                                    os.path.getsize(file_path))
            except OSError as e:
                failure = e
        reports = _gather(("" if failure is None else _reason(failure), files), self._group)
        outcome = None
        if rank == 0:
            outcome = next((text for text, _ in reports if text), None)
            if outcome is None:
                merged = {name: info for _, part in reports for name, info in part.items()}
                _, error = _attempt(lambda: self._rename(number, temp, merged, config, extra))
                outcome = None if error is None else _reason(error)
            layout.release_temp_dir(temp, remove=outcome is not None)
        outcome = _gather(outcome, self._group)[0]
        if outcome is not None:
            raise self._write_error(number, outcome, "fix the cause")

    def _rename(self, number: int, temp: str, files: dict[str, Any], config: Any,
                extra: Any) -> None:
        if layout.METADATA_FILE not in files:
            raise OSError(f"DCP wrote no {layout.METADATA_FILE}")
        layout.publish(temp, self._path(number), files, config=config, extra=extra,
                       version=self._meta_version(), format=self.name, world_size=get_world_size())
        self._on_written(self._path(number))

    def close(self) -> None:
        # The gloo group goes too: its threads end only when its last reference goes, and at
        # the interpreter's exit that aborts the process (SIGABRT after a clean preemption).
        try:
            super().close()
        finally:
            group, self._group = self._group, None
            if group is not None and dist.is_initialized():
                dist.destroy_process_group(group)  # Local for gloo: no peer waits on it.


_FORMATS: dict[str, type[CheckpointFormat]] = {SingleFile.name: SingleFile, Sharded.name: Sharded}


def format_class(name: str) -> type[CheckpointFormat]:
    """The format ``CheckpointManager(checkpoint_format=name)`` writes; raises ``ValueError``
    naming the known ones for another name."""
    if not isinstance(name, str) or name not in _FORMATS:
        known = " or ".join(map(repr, _FORMATS))
        raise ValueError(f"checkpoint_format must be {known}, got {name!r}.")
    return _FORMATS[name]


def _gather(obj: Any, group: Any) -> list[Any]:
    """Every rank's picklable ``obj`` in rank order, through ``group`` (None: one process)."""
    if group is None:
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, obj, group=group)
    return gathered


def _attempt(action: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(result, None)`` of ``action``, or ``(None, its exception)``: ranks stay in step."""
    try:
        return action(), None
    except Exception as e:
        return None, e


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__
