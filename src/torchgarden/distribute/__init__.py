"""Distribution under ``torchrun``: FSDP2 sharding, sharded-state checkpoints, gathers.

What the run's ``runtime.Strategy`` and user code call (``docs/distributed.md``). Names
load on first access (the checkpoint helpers import ``torch.distributed.checkpoint``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

if TYPE_CHECKING:
    from torchgarden.distribute.collectives import (
        all_gather_list,
        all_gather_object,
        barrier,
        broadcast_object,
        get_rank,
        get_world_size,
        group_timeout,
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

__getattr__, __all__ = lazy_names(__name__, __file__)
