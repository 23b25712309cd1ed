"""Checkpoints: ``Checkpoint`` items, an atomic verified ``CheckpointManager``, best export.

Two formats: one ``state.pt`` written by rank 0 (``"single"``) or each rank's shards
written with ``torch.distributed.checkpoint`` (``"dcp"``, see ``checkpoint.dcp``).
"""

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
from torchgarden.checkpoint.iterator import checkpoints_iterator
from torchgarden.checkpoint.layout import checkpoint_number, latest_checkpoint, read_meta
from torchgarden.checkpoint.manager import CheckpointManager
from torchgarden.checkpoint.weights import load_model_weights

__all__ = [
    "BestCheckpointExporter",
    "Checkpoint",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointManager",
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "CorruptCheckpointError",
    "NonFiniteCheckpointError",
    "UnsafeCheckpointError",
    "Value",
    "checkpoint_number",
    "checkpoints_iterator",
    "convert_to_single",
    "latest_checkpoint",
    "load_model_weights",
    "load_state",
    "read_full_state",
    "read_meta",
]
