"""Distribution under ``torchrun``: FSDP2 sharding, sharded-state checkpoints, gathers.

The process group itself is set up by ``runtime.setup_runtime`` and models are wrapped
by ``Trainer._wrap_model`` (DDP, or FSDP2 via :func:`shard_model`); this package holds
what those and user code call. See ``docs/distributed.md``.
"""

from torchgarden.distribute.collectives import (
    all_gather_list,
    all_gather_object,
    barrier,
    broadcast_object,
    get_rank,
    get_world_size,
    is_chief,
    is_distributed,
    max_over_ranks,
)
from torchgarden.distribute.exit import exit_worker
from torchgarden.distribute.full_state import (
    FullModelState,
    FullOptimizerState,
    FullTensorState,
    full_state_items,
)
from torchgarden.distribute.sharding import (
    rebind_optimizer,
    reshard,
    set_gradient_sync,
    shard_model,
)

__all__ = [
    "FullModelState",
    "FullOptimizerState",
    "FullTensorState",
    "all_gather_list",
    "all_gather_object",
    "barrier",
    "broadcast_object",
    "exit_worker",
    "full_state_items",
    "get_rank",
    "get_world_size",
    "is_chief",
    "is_distributed",
    "max_over_ranks",
    "rebind_optimizer",
    "reshard",
    "set_gradient_sync",
    "shard_model",
]
