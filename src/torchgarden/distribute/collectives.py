"""Cross-rank helpers for host-side (Python) values: rank queries, gathers, broadcasts.

Every function works unchanged in a single process (no ``torch.distributed`` process
group, or one of size 1): gathers return a one-element list and broadcasts return their
argument. Under ``torchrun`` they are collectives, so *every* rank must call them, in the
same order; calling one on rank 0 only hangs the job.

The typical user is a task's Python evaluator (COCO AP, a median, anything that is not a
sum of per-batch numbers). ``aggregate_logs`` collects this rank's raw outputs, and
``reduce_aggregated_logs``, which the Trainer calls on every rank, gathers them:

    >>> def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
    ...     outputs = distribute.all_gather_list(aggregated_logs)  # all ranks, rank order
    ...     return {"median_error": float(np.median(np.concatenate(outputs)))}

Compute the result on every rank (or on rank 0 and ``broadcast_object`` it): the logs
decide the best-checkpoint export, which must be decided alike on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "all_gather_list",
    "all_gather_object",
    "barrier",
    "broadcast_object",
    "get_rank",
    "get_world_size",
    "is_chief",
    "is_distributed",
    "max_over_ranks",
]

T = TypeVar("T")


def is_distributed() -> bool:
    """True inside an initialised ``torch.distributed`` process group of size > 1."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def get_rank() -> int:
    """This process' global rank; 0 without a process group."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    """The number of processes; 1 without a process group."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_chief() -> bool:
    """True on rank 0, the process that writes checkpoints, summaries and logs."""
    return get_rank() == 0


def barrier() -> None:
    """Waits until every rank has reached this call (a no-op in one process)."""
    if is_distributed():
        dist.barrier()


def max_over_ranks(value: int) -> int:
    """The largest of every rank's ``value`` (one all-reduce; ``value`` in one process).

    Example: the number of eval steps every rank runs when their shards differ in size.
    """
    if not is_distributed():
        return int(value)
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    packed = torch.tensor([int(value)], dtype=torch.int64, device=device)
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    return int(packed.item())  # Host sync: once per call.


def all_gather_object(obj: T) -> list[T]:
    """Returns ``[obj of rank 0, obj of rank 1, ...]`` on every rank.

    ``obj`` is pickled, so it may be any picklable value: NumPy arrays, dicts of lists,
    CPU tensors. Under NCCL the pickles travel through this rank's current CUDA device.

    Args:
        obj: This rank's value.

    Returns:
        One value per rank, in rank order; ``[obj]`` in a single process.
    """
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_gather_list(items: Iterable[T] | None) -> list[T]:
    """Concatenates every rank's ``items`` in rank order and returns it on every rank.

    The usual last step of a Python evaluator: each rank holds the outputs of its shard
    of the validation set; afterwards every rank holds all of them. ``None`` counts as
    an empty list, so a rank that saw no batch still takes part.

    Args:
        items: This rank's items (any iterable of picklable values), or None.

    Returns:
        ``rank 0's items + rank 1's items + ...``; ``list(items)`` in a single process.

    Example:
        >>> all_gather_list([1, 2])  # one process
        [1, 2]
    """
    local = [] if items is None else list(items)
    merged: list[T] = []
    for part in all_gather_object(local):
        merged.extend(part)
    return merged


def broadcast_object(obj: T, src: int = 0) -> T:
    """Returns rank ``src``'s ``obj`` on every rank (other ranks' ``obj`` is ignored).

    Args:
        obj: The value; only read on rank ``src``.
        src: The sending rank. Defaults to 0.

    Raises:
        ValueError: ``src`` is not a rank of the process group.
    """
    if not is_distributed():
        return obj
    world_size = dist.get_world_size()
    if not 0 <= src < world_size:
        raise ValueError(f"broadcast_object src must be in [0, {world_size}), got {src}.")
    box: list[Any] = [obj]
    device = None
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    dist.broadcast_object_list(box, src=src, device=device)
    return box[0]
