"""Building a resumable, per-replica batched loader from a dataset and a `DataConfig`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from torchgarden.data.batch_pool import tuple_collate
from torchgarden.data.context import InputContext
from torchgarden.data.datasets import ArrayDataset
from torchgarden.data.iterator import DataIterator
from torchgarden.data.sampler import ResumableSampler
from torchgarden.data.seeding import BatchSeededDataset, SeededBatchSampler, WorkerSeeder
from torchgarden.data.streaming import (
    build_streaming_loader,
    streaming_available,
    worker_options,
)
from torchgarden.data.transfer import make_batch_mover, move_to_device

__all__ = [
    "ArrayLoader",
    "DataIterator",
    "ResumableDataLoader",
    "build_dataloader",
    "make_batch_mover",
    "move_to_device",
]


class ArrayLoader:
    """Batches an `ArrayDataset` by one indexing gather per tensor (no per-example work).

    Yields exactly the batches a `DataLoader` over the same dataset, sampler and
    batch size yields with `tuple_collate`, in the same order, but without
    per-example `__getitem__` and collate. If the tensors live on an
    accelerator, batches are gathered there.

    Args:
        dataset: The in-memory dataset.
        sampler: Supplies the order of each epoch (and a pending start offset).
        batch_size: Examples per batch (>= 1).
        drop_last: Drop a final batch smaller than `batch_size`. Defaults to False.
        pin_memory: Pin CPU batches when CUDA is available. Defaults to False.

    Example:
        >>> ds = ArrayDataset(torch.arange(10.0), torch.arange(10))
        >>> loader = ArrayLoader(ds, sampler=ResumableSampler(10, shuffle=False, seed=0),
        ...                      batch_size=4)
        >>> [len(b[0]) for b in loader]
        [4, 4, 2]
    """

    def __init__(
        self,
        dataset: ArrayDataset,
        *,
        sampler: ResumableSampler,
        batch_size: int,
        drop_last: bool = False,
        pin_memory: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"ArrayLoader batch_size must be >= 1, got {batch_size}.")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._pin = pin_memory and torch.cuda.is_available()

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        tensors = self.dataset.tensors
        start = self.sampler.take_start()
        # Built once per epoch; the index tensor moves to the data's device once, on CUDA
        # from pinned memory without blocking (a pageable copy would sync with the host).
        order = self.sampler.epoch_indices()[start:]
        if tensors[0].device.type == "cuda":
            order = order.pin_memory().to(tensors[0].device, non_blocking=True)
        size = self.batch_size
        total = order.shape[0]
        stop = total - total % size if self.drop_last else total
        pin = self._pin and tensors[0].device.type == "cpu"
        if stop == 0:
            return
        # One split per epoch gives every batch's index view; index_select gathers the
        # same values as t[index] at half the dispatch cost.
        pair = tensors if len(tensors) == 2 else None  # (features, labels): no inner loop.
        for index in order[:stop].split(size):
            if pair is not None:
                batch = (pair[0].index_select(0, index), pair[1].index_select(0, index))
            else:
                batch = tuple([t.index_select(0, index) for t in tensors])
            if pin:
                batch = tuple(t.pin_memory() for t in batch)
            yield batch


class ResumableDataLoader:
    """A `torch.utils.data.DataLoader` driven by a `ResumableSampler`.

    Batches are grouped by a `SeededBatchSampler` and fetched through
    `BatchSeededDataset`, so worker-side randomness is a function of the batch
    (see `torchgarden.data.seeding`). `sampler`, `batch_size`, `dataset` and
    `len()` read like a DataLoader's; the wrapped loader is `.loader`.

    Args:
        dataset: Map-style dataset.
        sampler: Supplies each epoch's order.
        batch_size: Examples per batch (>= 1).
        drop_last: Drop a final short batch. Defaults to False.
        seed: Base seed for worker and per-batch seeds. Defaults to 0.
        collate_fn: Batches a list of examples; None means `tuple_collate`.
        **loader_kwargs: Passed to `DataLoader` (`num_workers`, `pin_memory`, ...).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        sampler: ResumableSampler,
        batch_size: int,
        drop_last: bool = False,
        seed: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        **loader_kwargs: Any,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"ResumableDataLoader batch_size must be >= 1, got {batch_size}.")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.loader = DataLoader(
            BatchSeededDataset(dataset),
            batch_sampler=SeededBatchSampler(
                sampler, batch_size=batch_size, drop_last=drop_last, seed=seed
            ),
            collate_fn=collate_fn or tuple_collate,
            worker_init_fn=WorkerSeeder(seed, sampler),
            generator=torch.Generator().manual_seed(seed),
            **loader_kwargs,
        )

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


def _materialize(dataset: Dataset, input_path: str) -> ArrayDataset:
    """Loads every example once into an `ArrayDataset` (`DataConfig.cache`)."""
    examples = [dataset[i] for i in range(len(dataset))]  # type: ignore[arg-type]
    batch = tuple_collate(examples)
    if isinstance(batch, torch.Tensor):
        batch = (batch,)
    if not isinstance(batch, tuple) or not all(isinstance(t, torch.Tensor) for t in batch):
        raise ValueError(
            f"DataConfig.cache=True needs examples that are tensors or tuples of tensors "
            f"(input_path={input_path!r}), got {type(examples[0]).__name__}; set cache=False."
        )
    return ArrayDataset(*batch)


def _input_path_text(params: Any) -> str:
    path = getattr(params, "input_path", "")
    if isinstance(path, (list, tuple)):
        return ",".join(str(p) for p in path)
    return str(path or "")


def _replica_sampler(
    num_examples: int,
    params: Any,
    context: InputContext,
    *,
    shuffle: bool,
    seed: int,
    drop_last: bool,
) -> ResumableSampler:
    """This replica's sampler: a disjoint shard, or all examples when `sharding` is off.

    Without sharding every replica reads all examples in an order seeded by
    `seed + replica_id`. Evaluation shards are not padded: each example is read by one
    replica exactly once, and the shards may differ by one example.
    """
    if getattr(params, "sharding", True):
        num_replicas, rank, sampler_seed = context.num_replicas, context.replica_id, seed
    else:
        num_replicas, rank, sampler_seed = 1, 0, seed + context.replica_id
    return ResumableSampler(
        num_examples,
        shuffle=shuffle,
        seed=sampler_seed,
        num_replicas=num_replicas,
        rank=rank,
        drop_last=drop_last,
        pad=bool(getattr(params, "is_training", False)),
    )


def _global_batch_size(params: Any) -> int:
    """``params.global_batch_size``, or a ValueError naming its config key."""
    global_batch_size = params.global_batch_size
    if global_batch_size is None or global_batch_size <= 0:
        field_path = getattr(params, "field_path", None)  # The dotted key, once validated.
        key = field_path("global_batch_size") if callable(field_path) else ""
        if not key.startswith("task."):
            split = "train_data" if getattr(params, "is_training", False) else "validation_data"
            key = f"task.{split}.global_batch_size"
        raise ValueError(f"{key} must be a positive int, got {global_batch_size}; set e.g. {key}=32.")
    return int(global_batch_size)


def build_dataloader(
    dataset: Dataset,
    params: Any,
    *,
    input_context: InputContext | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> ArrayLoader | ResumableDataLoader | DataLoader:
    """Builds this replica's loader of per-replica batches from a `DataConfig`.

    Reads `params` by attribute: `global_batch_size` (required), `is_training`
    (None means False), `shuffle` (None means `is_training`), `seed` (None
    means 0), `drop_remainder` (used only when training; default True),
    `deterministic` (False lets workers return batches out of order),
    `sharding` (default True: each replica reads a disjoint shard; False: every
    replica reads all examples, in an order seeded by `seed + replica_id`),
    `num_workers` (0), `pin_memory` (False), `persistent_workers` (False),
    `prefetch_factor` (None), `cache` (False: True loads every example once
    into memory, freezing any randomness in `__getitem__`), `input_path`
    (named in errors).

    An `ArrayDataset` read without workers and without a custom `collate_fn`
    takes the fast path: an `ArrayLoader` that yields the same batches as the
    DataLoader path by one gather per tensor. An `IterableDataset` gets torchdata's
    `StatefulDataLoader` (`data.streaming`: its state is checkpointed, one per rank;
    a Hugging Face stream is split across replicas), or a plain `DataLoader` whose
    resume replays batches when torchdata is not installed.

    Args:
        dataset: A map-style dataset (or an `IterableDataset`).
        params: A `DataConfig` (or any object with the attributes above).
        input_context: This replica's place; None reads `torch.distributed`.
        collate_fn: Batches a list of examples; None means `tuple_collate`.

    Returns:
        A loader exposing `.sampler` (a `ResumableSampler`, except for
        iterable datasets), `.batch_size` and `len()` (not for streams).

    Raises:
        ValueError: On a non-positive or indivisible `global_batch_size`, an
            empty dataset or negative `num_workers`.
    """
    context = input_context if input_context is not None else InputContext.from_environment()
    batch_size = context.get_per_replica_batch_size(_global_batch_size(params))
    input_path = _input_path_text(params)
    num_workers = getattr(params, "num_workers", 0) or 0
    if num_workers < 0:
        raise ValueError(f"DataConfig.num_workers must be >= 0, got {num_workers}; try 0.")

    is_training = bool(getattr(params, "is_training", None))
    shuffle = getattr(params, "shuffle", None)
    shuffle = is_training if shuffle is None else bool(shuffle)
    seed = getattr(params, "seed", None)
    seed = 0 if seed is None else int(seed)
    drop_last = is_training and bool(getattr(params, "drop_remainder", True))
    pin_memory = bool(getattr(params, "pin_memory", False))
    loader_kwargs = worker_options(params, num_workers, pin_memory, collate_fn or tuple_collate)
    if isinstance(dataset, IterableDataset):
        if streaming_available():  # Exact resume through the loader's own state.
            return build_streaming_loader(dataset, params, input_context=context,
                                          collate_fn=collate_fn or tuple_collate)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            worker_init_fn=WorkerSeeder(seed),
            generator=torch.Generator().manual_seed(seed),
            **loader_kwargs,
        )

    num_examples = len(dataset)  # type: ignore[arg-type]
    if num_examples == 0:
        where = f" at input_path={input_path!r}" if input_path else ""
        raise ValueError(f"the dataset{where} is empty; check DataConfig.input_path.")
    if getattr(params, "cache", False) and not isinstance(dataset, ArrayDataset):
        dataset = _materialize(dataset, input_path)

    sampler = _replica_sampler(
        num_examples, params, context, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    if isinstance(dataset, ArrayDataset) and num_workers == 0 and collate_fn is None:
        return ArrayLoader(
            dataset,
            sampler=sampler,
            batch_size=batch_size,
            drop_last=drop_last,
            pin_memory=pin_memory,
        )
    return ResumableDataLoader(
        dataset,
        sampler=sampler,
        batch_size=batch_size,
        drop_last=drop_last,
        seed=sampler.seed,
        **loader_kwargs,
    )
