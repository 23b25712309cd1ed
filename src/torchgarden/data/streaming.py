"""Streaming data (an ``IterableDataset``) with exact mid-epoch resume.

The protocol is torchdata's: a loader with ``state_dict()`` / ``load_state_dict(state)``
(``torchdata.stateful_dataloader.StatefulDataLoader``, which this module builds).
``DataIterator`` stores the loader's state beside ``(epoch, batches_in_epoch)`` in every
checkpoint, one state per rank, and hands it back before the next pass, so the resumed
run reads the batch an uninterrupted one would have read next, without re-reading the
ones it had consumed. With workers, each worker's position is in the state
(``StatefulDataLoader`` asks the dataset in the worker for its ``state_dict()``).

What is exact depends on the dataset: a Hugging Face ``datasets.IterableDataset`` keeps
its position per shard (``state_dict()``), so it resumes exactly; another
``IterableDataset`` without a ``state_dict()`` is fast-forwarded by
``StatefulDataLoader`` (its examples are read again and dropped: exact only if it
repeats the same order). A shuffle buffer loses its content on resume (Hugging Face's
``IterableDataset.state_dict`` says so), so the streams here are shuffled by shard only:
every epoch ``set_epoch`` draws a new shard order.

Requires ``pip install 'torchgarden[streaming]'`` (torchdata; ``datasets`` for the
Hugging Face sources in ``data.hf``).
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import IterableDataset

from torchgarden.data.batch_pool import pooled_collate
from torchgarden.data.context import InputContext
from torchgarden.data.seeding import WorkerSeeder, mix_seed

__all__ = [
    "build_streaming_loader",
    "is_stateful_loader",
    "shard_for_replica",
    "streaming_available",
    "worker_options",
]


def _stateful_dataloader_class() -> type:
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        raise ImportError(
            "streaming data needs torchdata's StatefulDataLoader: "
            "pip install 'torchgarden[streaming]'"
        ) from None
    return StatefulDataLoader


def streaming_available() -> bool:
    """Whether torchdata (the ``streaming`` extra) is installed."""
    return importlib.util.find_spec("torchdata") is not None


def is_stateful_loader(loader: Any) -> bool:
    """Whether ``loader`` follows the protocol: ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(loader, "state_dict", None)) and callable(
        getattr(loader, "load_state_dict", None)
    )


def _is_hugging_face(dataset: Any) -> bool:
    return type(dataset).__module__.startswith("datasets.")


def shard_for_replica(dataset: IterableDataset, context: InputContext) -> IterableDataset:
    """This replica's part of a Hugging Face ``IterableDataset`` (others as they are).

    ``datasets.distributed.split_dataset_by_node``: whole shards per replica when their
    number divides evenly, else every ``num_replicas``-th example. Either way each
    example is read by one replica. Any other ``IterableDataset`` must shard itself
    (read ``torch.distributed.get_rank()``).
    """
    own = getattr(dataset, "shard_for_replica", None)
    if callable(own):  # A stream that shards itself (data.tfrecord_stream.TFRecordStream).
        return own(context.replica_id, context.num_replicas)
    if context.num_replicas == 1 or not _is_hugging_face(dataset):
        return dataset
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(dataset, rank=context.replica_id,
                                 world_size=context.num_replicas)


def worker_options(params: Any, num_workers: int, pin_memory: bool,
                   collate_fn: Callable[[list[Any]], Any] | None = None) -> dict[str, Any]:
    """The `DataLoader` keyword arguments about workers, pinned memory and batching:
    ``collate_fn`` as it is, or workers' batching into reused shared memory in place of
    torch's (`pooled_collate`)."""
    options: dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory,
                               "collate_fn": collate_fn}
    if num_workers > 0:
        options["persistent_workers"] = bool(getattr(params, "persistent_workers", False))
        prefetch_factor = getattr(params, "prefetch_factor", None)
        buffer = getattr(params, "prefetch_buffer_size", None)
        if prefetch_factor is None and buffer:  # Model Garden's depth, in batches in total.
            prefetch_factor = -(-int(buffer) // num_workers)
        if prefetch_factor is not None:
            options["prefetch_factor"] = prefetch_factor
        # Out-of-order delivery is faster but makes resume inexact.
        options["in_order"] = getattr(params, "deterministic", None) is not False
        options["collate_fn"] = pooled_collate(collate_fn, num_workers=num_workers,
                                               prefetch_factor=prefetch_factor)
    return options


@functools.cache
def _loader_class() -> type:
    """``StatefulDataLoader`` with ``set_epoch``, made once torchdata is imported."""

    class StreamingLoader(_stateful_dataloader_class()):  # type: ignore[misc]
        """A ``StatefulDataLoader`` whose ``set_epoch`` reaches the dataset (a new shard
        order) and reseeds the loader, so worker seeds depend on ``(seed, epoch)`` only,
        not on how many passes this loader object has run (a resumed run has run fewer)."""

        def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
            with warnings.catch_warnings():
                # torchdata's constructor calls torch.set_vital, which torch deprecated: a
                # warning on every run that is not the user's to fix.
                warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
                super().__init__(*args, generator=torch.Generator().manual_seed(seed),
                                 **kwargs)
            self.seed = seed

        def set_epoch(self, epoch: int) -> None:
            self.generator.manual_seed(mix_seed(self.seed, epoch))
            set_epoch = getattr(self.dataset, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)

    StreamingLoader.__module__ = __name__
    return StreamingLoader


def build_streaming_loader(
    dataset: IterableDataset,
    params: Any,
    *,
    input_context: InputContext | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    drop_last: bool | None = None,
) -> Any:
    """This replica's resumable loader of per-replica batches from a stream.

    Reads ``params`` (a ``DataConfig``) by attribute: ``global_batch_size``,
    ``is_training`` and ``drop_remainder`` (training drops a short last batch of each
    worker), ``seed``, ``sharding`` (False: every replica reads the whole stream),
    ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``.

    Args:
        dataset: An ``IterableDataset`` (a Hugging Face one is split across replicas).
        params: The data config.
        input_context: This replica's place; None reads ``torch.distributed``.
        collate_fn: Batches a list of examples; None means torch's ``default_collate``.
        drop_last: Drop each worker's short last batch; None: when training with
            ``drop_remainder``.

    Returns:
        A ``torchdata`` ``StatefulDataLoader`` with ``set_epoch`` (``DataIterator`` calls
        it before each pass).
    """
    context = input_context if input_context is not None else InputContext.from_environment()
    batch_size = context.get_per_replica_batch_size(params.global_batch_size)
    if getattr(params, "sharding", True):
        dataset = shard_for_replica(dataset, context)
    num_workers = getattr(params, "num_workers", 0) or 0
    seed = getattr(params, "seed", None) or 0
    options = worker_options(params, num_workers, bool(getattr(params, "pin_memory", False)),
                             collate_fn)
    if drop_last is None:
        drop_last = bool(getattr(params, "is_training", False)) and bool(
            getattr(params, "drop_remainder", True))
    return _loader_class()(
        dataset,
        batch_size=batch_size,
        drop_last=drop_last,
        worker_init_fn=WorkerSeeder(seed),
        seed=seed,
        **options,
    )
