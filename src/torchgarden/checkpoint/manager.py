"""``CheckpointManager``: numbered, atomic, verified checkpoints with retention.

The save rules are here; the directory layout is ``layout``'s, the writing its format's
(``_formats``), the choice of a resume point ``selection``'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from torchgarden.checkpoint import _formats, layout, selection
from torchgarden.checkpoint.checkpoint import Checkpoint
from torchgarden.checkpoint.errors import CheckpointMismatchError
from torchgarden.distribute.collectives import broadcast_object, is_chief

__all__ = ["CheckpointManager"]

logger = logging.getLogger("torchgarden")


class CheckpointManager:
    """Saves, retains, verifies and restores numbered checkpoints of a :class:`Checkpoint`.

    Save rules (``save(number)``), as in TensorFlow's manager: a number that already has
    a checkpoint is skipped; with interval checking, a save happens only when ``number``
    has reached the next multiple of ``checkpoint_interval`` after the last saved (or
    restored) number, so checkpoints land on 1000, 2000, ...; ``checkpoint_interval=None``
    saves always. Once a checkpoint is durable, the oldest beyond ``max_to_keep`` are
    deleted (a reader sees all of one or nothing).

    Under ``torch.distributed`` rank 0 alone writes a ``"single"`` checkpoint (``save``
    returns None elsewhere) unless an item's ``state_dict()`` is a collective
    (``collective_state_dict = True``); then, and always with ``"dcp"``, every rank calls
    ``save`` together and rank 0 decides whether it is due. Every rank restores.

    Example:
        >>> ckpt = Checkpoint(model=model, optimizer=optimizer)
        >>> manager = CheckpointManager(ckpt, "/tmp/run", checkpoint_interval=1000)
        >>> manager.restore_or_initialize()  # None on a fresh directory
        >>> manager.save(step)               # "/tmp/run/ckpt-<step>" or None if skipped

    Args:
        checkpoint: The objects to save and restore.
        directory: Where checkpoints live (created on first save).
        max_to_keep: How many checkpoints to keep; -1 (or None) keeps all. Defaults to 5.
        checkpoint_interval: The least number of steps between interval-checked saves;
            None saves always. Defaults to None.
        checkpoint_name: The directory-name prefix. Defaults to ``"ckpt"``.
        init_fn: Called by :meth:`restore_or_initialize` when there is nothing to restore.
        enable_async: Write on a background thread; ``save`` only copies the state to host
            memory. Defaults to False.
        version: The torchgarden version in meta.json. Defaults to the installed one.
        config: The resolved experiment config recorded in every meta.json unless
            ``save(config=...)`` gives another.
        checkpoint_format: ``"single"`` (one ``state.pt``) or ``"dcp"`` (each rank's shards,
            ``torch.distributed.checkpoint``); both are read whatever this says. Defaults
            to ``"single"``.

    Raises:
        ValueError: An argument is out of range or ``checkpoint_format`` is unknown.
    """

    def __init__(
        self, checkpoint: Checkpoint, directory: str | os.PathLike[str], *,
        max_to_keep: int | None = 5, checkpoint_interval: int | None = None,
        checkpoint_name: str = "ckpt", init_fn: Callable[[], None] | None = None,
        enable_async: bool = False, version: str | None = None,
        config: dict[str, Any] | None = None, checkpoint_format: str = "single",
    ) -> None:
        format_class = _formats.format_class(checkpoint_format)
        _check_arguments(max_to_keep, checkpoint_interval, checkpoint_name)
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = -1 if max_to_keep is None else max_to_keep
        self._checkpoint_interval = checkpoint_interval
        self._checkpoint_name = checkpoint_name
        self._init_fn = init_fn
        self._config = config
        self._last_saved_number: int | None = None
        # Entries found unusable (corrupt, incomplete, misnamed, non-finite): never resumed,
        # never counted or deleted by retention, set aside when their step is saved again.
        self._unusable: set[str] = set()
        self._prepared: tuple[str, dict[str, Any]] | None = None
        self._format = format_class(
            self._directory, checkpoint_name, on_written=self._on_written,
            resume_from=lambda: self.latest_checkpoint, enable_async=enable_async,
            version=version)

    @property
    def checkpoint(self) -> Checkpoint:
        """The :class:`Checkpoint` this manager saves and restores."""
        return self._checkpoint

    @property
    def directory(self) -> str:
        """The checkpoint directory."""
        return self._directory

    @property
    def checkpoint_interval(self) -> int | None:
        """The least steps between interval-checked saves, or None (interval checking off)."""
        return self._checkpoint_interval

    @property
    def checkpoint_format(self) -> str:
        """``"single"`` or ``"dcp"``: how this manager writes checkpoints."""
        return self._format.name

    @property
    def checkpoint_name(self) -> str:
        """The checkpoint directory-name prefix."""
        return self._checkpoint_name

    @property
    def max_to_keep(self) -> int:
        """How many checkpoints are kept; -1 keeps all."""
        return self._max_to_keep

    @property
    def last_saved_number(self) -> int | None:
        """The number of the last save (or restore), or None before either."""
        return self._last_saved_number

    @property
    def checkpoints(self) -> list[str]:
        """Paths of complete checkpoints, oldest (lowest number) first."""
        found = layout.list_checkpoints(self._directory, self._checkpoint_name)
        return [path for _, path in found if path not in self._unusable]

    @property
    def latest_checkpoint(self) -> str | None:
        """Path of the highest-numbered complete checkpoint, or None."""
        found = self.checkpoints
        return found[-1] if found else None

    @staticmethod
    def verify(path: str | os.PathLike[str]) -> None:
        """Checks a checkpoint's files against the sizes and checksums in its meta.json.

        Raises:
            CorruptCheckpointError: meta.json is missing, malformed or records another step
                than the name's, or a file is missing, truncated or altered.
            CheckpointFormatError: The checkpoint was written in a newer format.
        """
        layout.verify(path)

    def save(
        self, checkpoint_number: int, *, check_interval: bool = True,
        config: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
    ) -> str | None:
        """Saves a checkpoint numbered ``checkpoint_number`` unless the save rules skip it.

        With ``enable_async`` this waits for the previous save, copies the state to host
        memory, starts the write on a background thread, and returns.

        Args:
            checkpoint_number: The number (the global step) in the directory name.
            check_interval: Apply interval gating. Defaults to True.
            config: The config recorded in meta.json. Defaults to the constructor's.
            extra: Any JSON-serialisable dict recorded in meta.json. Defaults to None.

        Returns:
            The checkpoint path, or None when the save was skipped.

        Raises:
            TypeError: The state holds a value ``torch.load(weights_only=True)``
                could not read back (raised before anything is written).
            CheckpointWriteError: The disk is full or the write failed; nothing is left
                half-written and older checkpoints are untouched (with ``enable_async``,
                raised by the next ``save``, ``sync`` or ``close``).
            NonFiniteCheckpointError: A model parameter holds NaN or inf; nothing is
                written (with ``enable_async``, raised like a failed write).
        """
        number = int(checkpoint_number)
        if number < 0:
            raise ValueError(f"checkpoint_number must be >= 0, got {number}.")
        self.sync()
        due = is_chief() and self._save_due(number, check_interval)
        if self._format.every_rank_saves(self._checkpoint.items):
            due = broadcast_object(due)  # Rank 0 decides; then every rank takes part.
        if not due:
            return None  # Skipped, or replicated state that rank 0 alone writes.
        path = self._format.write(number, self._checkpoint, extra=extra,
                                  config=self._config if config is None else config)
        # Like TF, the interval counts from the submitted save (an async one included).
        self._last_saved_number = number
        return path

    def _save_due(self, number: int, check_interval: bool) -> bool:  # On rank 0.
        path = layout.checkpoint_path(self._directory, self._checkpoint_name, number)
        if os.path.lexists(path):
            unusable = path in self._unusable
            problem = None if unusable else layout.problem(path)
            if not unusable and problem is None:
                # A checkpoint for this number is already durable: it counts as the last save.
                self._last_saved_number = max(self._last_saved_number or 0, number)
                return False
            aside = layout.set_aside(path)
            log = logger.info if problem is None else logger.warning  # None: a warning named it.
            log("set %s aside as %s (%s); saving this step afresh.", path, aside,
                problem or "see above")
            self._unusable.discard(path)
        interval = self._checkpoint_interval
        if not check_interval or interval is None:
            return True
        # Aligned intervals: saves land on 1000, 2000, ... even when loops end at other steps
        # (Orbit instead saves the first loop of a fresh start, then every interval after it).
        return number // interval > (self._last_saved_number or 0) // interval

    def _on_written(self, path: str) -> None:
        """Retention, once ``path`` is durable."""
        if self._max_to_keep >= 0:
            found = self.checkpoints
            excess = max(0, len(found) - self._max_to_keep)
            for old in [p for p in found if p != path][:excess]:  # The one just written stays.
                layout.remove_checkpoint(old)
        self.remove_leftovers()

    def remove_leftovers(self) -> None:
        """Deletes the hidden temp directories of saves and deletes whose process died."""
        layout.clean_stale_temp_dirs(self._directory, self._checkpoint_name)

    def sync(self) -> None:
        """Waits for the pending async save; re-raises its error, if any."""
        self._format.sync()

    def restore(
        self, path: str | os.PathLike[str] | None = None, *, verify: bool = True,
        strict: bool = True,
    ) -> str | None:
        """Restores the checkpoint at ``path``, or the newest one that is a resume point.

        With no path, entries are tried newest first; one that is not a resume point
        (``selection``) is named in one warning and skipped. A ``path`` given explicitly
        is loaded even with non-finite parameters.

        Args:
            path: A checkpoint directory. Defaults to None (the newest resume point).
            verify: Check sizes and checksums before loading. Defaults to True.
            strict: Passed to :meth:`Checkpoint.load_state_dict`. Defaults to True.

        Returns:
            The path restored, or None when the directory has no checkpoint.

        Raises:
            CorruptCheckpointError: ``path`` fails verification, or every checkpoint does
                (or holds non-finite parameters).
            UnsafeCheckpointError: The file holds pickled objects weights_only refuses.
            CheckpointFormatError: The checkpoint was written by a newer torchgarden.
            CheckpointMismatchError: The file does not fit the checkpoint's items.
            FileNotFoundError: ``path`` does not exist.
        """
        self.sync()
        if path is not None:
            path = os.fspath(path)
            if not os.path.isdir(path):
                available = [os.path.basename(p) for p in self.checkpoints]
                raise FileNotFoundError(
                    f"no checkpoint at {path!r}; available in {self._directory!r}: "
                    f"{available or 'none'}.")
            state = selection.read_state(path, self._checkpoint.items, hashes=verify, finite=False)
            self._apply(path, state, strict=strict)
            return path
        prepared = self._prepared or self._select(verify)
        self._prepared = None
        if prepared is None:
            return None
        self._apply(*prepared, strict=strict)
        return prepared[0]

    def prepare_restore(self, *, verify: bool = True) -> tuple[str, dict[str, Any]] | None:
        """Finds, verifies and reads (once) what :meth:`restore` with no path loads next.

        Returns ``(path, meta)``, or None without a checkpoint, so a caller can check the
        recorded config first; the next ``restore()`` applies the state read. Raises the
        errors of :meth:`restore` about files.
        """
        self.sync()
        self._prepared = self._select(verify)
        if self._prepared is None:
            return None
        path = self._prepared[0]
        return path, layout.read_meta(path)

    def _select(self, verify: bool) -> tuple[str, dict[str, Any]] | None:
        return selection.select(self._directory, self._checkpoint_name, self._checkpoint.items,
                                self._unusable, hashes=verify)

    def _apply(self, path: str, state: dict[str, Any], *, strict: bool) -> None:
        try:
            self._checkpoint.load_state_dict(state, strict=strict)
        except CheckpointMismatchError as e:
            raise CheckpointMismatchError(f"{path}: {e}") from e
        self._last_saved_number = layout.checkpoint_number(path)

    def restore_or_initialize(self) -> str | None:
        """Restores the latest checkpoint if any; otherwise calls ``init_fn`` and returns None."""
        restored = self.restore()
        if restored is None and self._init_fn is not None:
            self._init_fn()
        return restored

    def close(self) -> None:
        """Waits for a pending async save and stops the writer thread."""
        self._format.close()

    def __repr__(self) -> str:
        return (f"CheckpointManager(directory={self._directory!r}, "
                f"checkpoint_name={self._checkpoint_name!r}, max_to_keep={self._max_to_keep}, "
                f"checkpoint_interval={self._checkpoint_interval})")


def _check_arguments(
    max_to_keep: int | None, checkpoint_interval: int | None, checkpoint_name: str
) -> None:
    if max_to_keep is not None and (
            not isinstance(max_to_keep, int) or max_to_keep == 0 or max_to_keep < -1):
        raise ValueError(
            f"max_to_keep must be a positive int or -1 (keep all), got {max_to_keep!r}.")
    if checkpoint_interval is not None and (
            not isinstance(checkpoint_interval, int) or checkpoint_interval < 1):
        raise ValueError(f"checkpoint_interval must be a positive int or None (no interval "
                         f"checking), got {checkpoint_interval!r}.")
    if not checkpoint_name or os.sep in checkpoint_name or checkpoint_name.startswith("."):
        raise ValueError(f"checkpoint_name must be a plain file name not starting with '.', "
                         f"got {checkpoint_name!r}.")
