"""Which process writes under ``torch.distributed``, and how ranks agree on a save.

Rank 0 alone writes checkpoint files. When the state is replicated (single process,
DDP) the other ranks skip ``save`` entirely, so calling it on rank 0 only is fine.
When some item's state is sharded (FSDP2), its ``state_dict()`` is a collective that
gathers the shards, so every rank must take part in every save: rank 0 decides whether
to save and broadcasts the decision, then all ranks gather and rank 0 writes.

An item announces a collective ``state_dict`` / ``load_state_dict`` with the class
attribute ``collective_state_dict = True`` (see ``torchgarden.distribute``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def process_rank() -> tuple[int, int]:
    """Returns ``(rank, world_size)``; ``(0, 1)`` without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_collective(items: dict[str, Any]) -> bool:
    """True when some item's state dict must be taken on every rank at once."""
    return any(getattr(item, "collective_state_dict", False) for item in items.values())


def agree(decision: bool) -> bool:
    """Returns rank 0's ``decision`` on every rank (one tiny broadcast)."""
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if decision else 0], dtype=torch.int32, device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())  # Host sync: once per save call, not per step.


def gather(obj: Any, group: Any = None) -> list[Any]:
    """Every rank's picklable ``obj``, in rank order, on every rank (``[obj]`` alone)."""
    if process_rank()[1] == 1:
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj, group=group)
    return gathered


def broadcast(obj: Any, group: Any = None) -> Any:
    """Rank 0's picklable ``obj`` on every rank (``obj`` itself alone)."""
    if process_rank()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]
