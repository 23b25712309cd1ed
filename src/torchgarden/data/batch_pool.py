"""Loader workers that batch into reused shared memory.

A ``DataLoader`` worker stacks every batch into new shared memory, which the kernel must
allocate, zero and map page by page; for 64 float images of 224x224 (38 MB) that is
~30 ms here, against ~1.5 ms to stack into memory already mapped (benchmarks/
tfrecord_input.py). `pooled_collate` wraps ``default_collate``-like batching so that each
worker keeps a few shared batches and stacks into one the main process has let go of.

A batch is let go of when its memory is freed in the main process: the worker tags the
batch with its slot; unpickling it in the main process hangs a ``weakref.finalize`` on
each of its tensors' storages, and the last one to be freed marks the slot free in a
shared flag table. A batch (or any view of it) that the consumer keeps is therefore never
written over; while every slot is held, the worker batches into new memory as torch
does. In the main process (no workers) batching is torch's.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map

__all__ = ["PooledCollate", "pooled_collate", "tuple_collate"]

_POOLS: weakref.WeakValueDictionary[str, PooledCollate] = weakref.WeakValueDictionary()
_IDS = itertools.count()


def tuple_collate(samples: Sequence[Any]) -> Any:
    """`default_collate`, except that tuple examples give a tuple batch (not a list).

    A `(features, labels)` example thus batches to a `(features, labels)` tuple,
    exactly what `ArrayLoader` yields.
    """
    return _tuplify(default_collate(samples), samples)


class PooledCollate:
    """`tuple_collate` into reused shared
    batches in loader workers (see the module docstring).

    Args:
        num_workers: The loader's workers.
        slots: Batches each worker keeps (more than its prefetched batches, so the ones
            the consumer has finished with come back).
    """

    def __init__(self, *, num_workers: int, slots: int) -> None:
        self.pool_id = f"{os.getpid()}-{next(_IDS)}"
        self.free = torch.ones(num_workers, slots, dtype=torch.uint8).share_memory_()
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}  # per worker process
        _POOLS[self.pool_id] = self

    def __getstate__(self) -> dict[str, Any]:
        return {"pool_id": self.pool_id, "free": self.free, "_buffers": {}}

    def __call__(self, samples: Sequence[Any]) -> Any:
        worker = get_worker_info()
        slot = -1 if worker is None else _first_free(self.free[worker.id])
        if slot < 0:  # In the main process, or every slot is held: torch's batching.
            return tuple_collate(samples)
        self.free[worker.id, slot] = 0
        fields = itertools.count()

        def stack(batch: Sequence[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
            elem = batch[0]
            if elem.layout != torch.strided or elem.is_nested or elem.device.type != "cpu":
                return default_collate_fn_map[torch.Tensor](batch, collate_fn_map=collate_fn_map)
            out = self._buffer((slot, next(fields)), (len(batch), *elem.shape), elem.dtype)
            return torch.stack(list(batch), 0, out=out)

        batch = collate(samples, collate_fn_map={**default_collate_fn_map, torch.Tensor: stack})
        return _Tagged(_tuplify(batch, samples), self.pool_id, worker.id, slot)

    def _buffer(self, key: tuple[int, int], shape: tuple[int, ...],
                dtype: torch.dtype) -> torch.Tensor:
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != shape or buffer.dtype != dtype:
            buffer = torch.empty(0, dtype=dtype)
            storage = buffer._typed_storage()._new_shared(int(torch.Size(shape).numel()))
            buffer = buffer.new(storage).resize_(shape)
            self._buffers[key] = buffer
        return buffer


def pooled_collate(collate_fn: Callable[[list[Any]], Any] | None, *, num_workers: int,
                   prefetch_factor: int | None) -> Callable[[list[Any]], Any] | None:
    """`PooledCollate` in place of torch's batching (``None``, ``default_collate`` or
    `tuple_collate`) when there are workers; any other ``collate_fn`` as it is."""
    if num_workers <= 0 or collate_fn not in (None, default_collate, tuple_collate):
        return collate_fn
    return PooledCollate(num_workers=num_workers, slots=(prefetch_factor or 2) + 3)


class _Tagged:
    """A batch and its slot, on its way from a worker; unpickled as the plain batch."""

    def __init__(self, batch: Any, pool_id: str, worker: int, slot: int) -> None:
        self.batch, self.pool_id, self.worker, self.slot = batch, pool_id, worker, slot

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _received, (self.batch, self.pool_id, self.worker, self.slot)


def _received(batch: Any, pool_id: str, worker: int, slot: int) -> Any:
    """The batch, with the slot freed once every storage of it is freed here."""
    pool = _POOLS.get(pool_id)
    if pool is None:  # Not this loader's process: the slot stays taken (safe).
        return batch
    storages = {s._cdata: s for s in (t.untyped_storage() for t in _tensors(batch))}
    left = [len(storages)]
    free = pool.free
    if not storages:
        free[worker, slot] = 1

    def release() -> None:
        left[0] -= 1
        if left[0] == 0:
            free[worker, slot] = 1

    for storage in storages.values():
        weakref.finalize(storage, release)
    return batch


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for item in batch for t in _tensors(item)]
    return []


def _first_free(flags: torch.Tensor) -> int:
    """The first free slot of a worker's row of flags, read once (the main process writes
    them meanwhile: no torch op that reads the row twice, such as ``nonzero``)."""
    row = flags.tolist()
    return row.index(1) if 1 in row else -1


def _tuplify(batch: Any, samples: Sequence[Any]) -> Any:
    if isinstance(batch, list) and samples and type(samples[0]) is tuple:
        return tuple(batch)
    return batch
