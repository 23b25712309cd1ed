"""Checkpoints: ``Checkpoint`` items, an atomic verified ``CheckpointManager``, best export.

Two formats: one ``state.pt`` written by rank 0 (``"single"``) or each rank's shards
written with ``torch.distributed.checkpoint`` (``"dcp"``, see ``checkpoint.dcp``). Names
are loaded on first access (their modules import torch).
"""

# ruff: noqa: F401 (lazy re-exports: the TYPE_CHECKING imports are for type checkers and IDEs)
from __future__ import annotations

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

if TYPE_CHECKING:
    from torchgarden.checkpoint._direct import load_state
    from torchgarden.checkpoint.best import BestCheckpointExporter
    from torchgarden.checkpoint.checkpoint import Checkpoint, Value
    from torchgarden.checkpoint.dcp import convert_to_single, read_full_state
    from torchgarden.checkpoint.errors import (
        CheckpointError,
        CheckpointFormatError,
        CheckpointMismatchError,
        CheckpointWriteError,
        CorruptCheckpointError,
        NonFiniteCheckpointError,
        UnsafeCheckpointError,
    )
    from torchgarden.checkpoint.layout import checkpoint_number, latest_checkpoint, read_meta
    from torchgarden.checkpoint.manager import CheckpointManager
    from torchgarden.checkpoint.selection import checkpoints_iterator
    from torchgarden.checkpoint.weights import load_model_weights

__getattr__, __all__ = lazy_names(__name__, __file__)
