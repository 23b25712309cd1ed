"""Distribution under ``torchrun``: FSDP2 sharding, sharded-state checkpoints, gathers.

The process group is set up by ``runtime.setup_runtime`` and models are wrapped by the
run's ``runtime.Strategy`` (DDP, or FSDP2 via :func:`shard_model`); this package holds
what those and user code call. See ``docs/distributed.md``. Names are loaded on first
access (the checkpoint helpers import ``torch.distributed.checkpoint``, about 0.5 s).
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
