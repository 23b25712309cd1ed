"""Errors raised while saving, verifying or restoring checkpoints."""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "CorruptCheckpointError",
    "NonFiniteCheckpointError",
    "UnsafeCheckpointError",
]


class CheckpointError(RuntimeError):
    """Base class of every checkpoint error raised by torchgarden."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint on disk is incomplete, truncated, altered or unreadable."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file holds pickled objects that ``torch.load(weights_only=True)`` refuses."""


class CheckpointFormatError(CheckpointError):
    """A checkpoint was written in a format this torchgarden cannot read."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint's items or keys do not match the objects being restored."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed (disk full, quota, I/O error); older ones are intact."""


class NonFiniteCheckpointError(CheckpointError):
    """Model parameters hold NaN or inf: never saved, nor resumed unless restored by path."""
