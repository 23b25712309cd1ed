"""Cross-rank helpers for host-side (Python) values: rank queries, gathers, broadcasts.

Without a process group (or in one of size 1) gathers return ``[obj]`` and broadcasts
return ``obj``. Under ``torchrun`` they are collectives: *every* rank calls them, in the
same order; called on rank 0 only, they hang the job.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "all_gather_list", "all_gather_object", "barrier", "broadcast_object", "get_rank",
    "get_world_size", "group_timeout", "is_chief", "is_distributed", "max_over_ranks",
]

T = TypeVar("T")


def _has_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def _device() -> torch.device:
    """Where the backend's collectives move tensors: this rank's GPU under NCCL."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def group_timeout() -> datetime.timedelta | None:
    """The default process group's timeout (``runtime.distributed_timeout``), for the groups
    made beside it (``new_group`` would otherwise wait torch's 30 minutes); None without
    one."""
    try:  # Where torch keeps it: the backend's options.
        return dist.group.WORLD._get_backend(_device()).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None


def get_rank() -> int:
    """This process' global rank; 0 without a process group."""
    return dist.get_rank() if _has_group() else 0


def get_world_size() -> int:
    """The number of processes; 1 without a process group."""
    return dist.get_world_size() if _has_group() else 1


def is_distributed() -> bool:
    """True inside an initialised ``torch.distributed`` process group of size > 1."""
    return get_world_size() > 1


def is_chief() -> bool:
    """True on rank 0, the process that writes checkpoints, summaries and logs."""
    return get_rank() == 0


def barrier() -> None:
    """Waits until every rank has reached this call (a no-op in one process)."""
    if is_distributed():
        dist.barrier()


def max_over_ranks(value: int) -> int:
    """The largest of every rank's ``value`` (one all-reduce; ``value`` in one process),
    e.g. the number of eval steps every rank runs when their shards differ in size."""
    if not is_distributed():
        return int(value)
    packed = torch.tensor([int(value)], dtype=torch.int64, device=_device())
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    return int(packed.item())  # Host sync: once per call.


def all_gather_object(obj: T) -> list[T]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank; ``[obj]`` in one process.

    ``obj`` may be any picklable value (NumPy arrays, dicts of lists, CPU tensors).
    """
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_gather_list(items: Iterable[T] | None) -> list[T]:
    """Every rank's ``items`` concatenated in rank order, on every rank.

    The usual last step of a Python evaluator: each rank holds the outputs of its shard
    of the validation set; afterwards every rank holds all of them. ``None`` counts as
    an empty list, so a rank that saw no batch still takes part.

    Example:
        >>> all_gather_list([1, 2])  # one process
        [1, 2]
    """
    parts = all_gather_object([] if items is None else list(items))
    return [item for part in parts for item in part]


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s picklable ``obj`` on every rank (the others' ``obj`` is ignored).

    Raises:
        ValueError: ``src`` is not a rank of the process group.
    """
    if not is_distributed():
        return obj
    world_size = dist.get_world_size()
    if not 0 <= src < world_size:
        raise ValueError(f"broadcast_object src must be in [0, {world_size}), got {src}.")
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=src, device=_device())
    return box[0]
