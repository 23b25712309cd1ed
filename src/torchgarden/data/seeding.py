"""Deterministic RNG seeding of DataLoader workers, per worker and per batch.

Two layers make random augmentation inside workers reproducible:

* `WorkerSeeder` is the `worker_init_fn`: it seeds `random`, NumPy and torch
  in each worker from `(seed, epoch, worker_id)`, so anything a worker draws
  before its first batch is reproducible.
* `SeededBatchSampler` tags every batch of indices with a seed derived from
  `(seed, epoch, position of the batch's first sample in the epoch)`, and
  `BatchSeededDataset` reseeds the worker's RNGs with it before fetching the
  batch. A batch's augmentation therefore depends only on which batch it is,
  not on which worker fetched it or on how many batches that worker fetched
  before, which is what makes a mid-epoch resume bit-exact with workers.

Without workers nothing is reseeded: fetching then draws from the main
process RNGs, which the checkpoint already saves and restores.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from torchgarden.data.sampler import ResumableSampler

_UINT64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """Combines integers into one well-spread 63-bit seed (stable across runs)."""
    state = np.random.SeedSequence([p & _UINT64 for p in parts]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def seed_all(seed: int) -> None:
    """Seeds `random`, NumPy's global RNG and torch's CPU RNG of this process."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def _shield_from_job_signals() -> None:
    """Keeps this DataLoader worker alive through signals meant for the whole job.

    Schedulers and terminals signal every process of a job (SIGTERM, SIGINT, SLURM's
    SIGUSR1); the main process turns them into a preemption checkpoint and then shuts
    its workers down. A worker that died of one would crash the run first. SIGINT,
    SIGUSR1 and SIGUSR2 are ignored; SIGTERM still ends the worker when the main
    process sends it (its shutdown path), and is ignored from anyone else. Where
    ``sigwaitinfo`` is missing (macOS) SIGTERM keeps torch's handling.
    """
    for name in ("SIGINT", "SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):
        return
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def exit_on_sigterm_from_parent() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(0)  # What torch's worker SIGTERM handler does for its parent.

    threading.Thread(target=exit_on_sigterm_from_parent, daemon=True).start()


class WorkerSeeder:
    """A picklable `worker_init_fn` seeding each worker from `(seed, epoch, worker_id)`.

    It also keeps the worker alive through the stop signals a scheduler sends to
    every process of a job, so the main process can save its preemption checkpoint.

    Args:
        seed: The loader's base seed.
        sampler: The sampler whose `epoch` is read when the worker starts, or
            None for epoch 0.
    """

    def __init__(self, seed: int, sampler: ResumableSampler | None = None) -> None:
        self.seed = seed
        self.sampler = sampler

    def __call__(self, worker_id: int) -> None:
        _shield_from_job_signals()
        epoch = self.sampler.epoch if self.sampler is not None else 0
        seed_all(mix_seed(self.seed, epoch, worker_id))


class SeededBatch(list):
    """A list of dataset indices that carries the seed its batch is fetched with."""

    seed: int


class SeededBatchSampler(Sampler[list[int]]):
    """Groups a `ResumableSampler`'s order into batches tagged with per-batch seeds.

    Honours the sampler's pending `set_start` offset, so a resumed epoch yields
    the same remaining batches (and seeds) as the uninterrupted one.

    Args:
        sampler: Supplies this rank's order for the current epoch.
        batch_size: Indices per batch (>= 1).
        drop_last: Drop a final batch smaller than `batch_size`.
        seed: Base seed for the per-batch seeds.
    """

    def __init__(
        self, sampler: ResumableSampler, *, batch_size: int, drop_last: bool, seed: int
    ) -> None:
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.sampler.epoch
        start = self.sampler.take_start()
        order = self.sampler.epoch_indices()[start:].tolist()
        size = self.batch_size
        stop = len(order) - len(order) % size if self.drop_last else len(order)
        for offset in range(0, stop, size):
            batch = SeededBatch(order[offset : offset + size])
            batch.seed = mix_seed(self.seed, epoch, start + offset)
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)


class BatchSeededDataset(Dataset):
    """Wraps a map-style dataset; inside a worker, reseeds RNGs before each batch.

    Args:
        dataset: The map-style dataset to fetch from.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        seed = getattr(indices, "seed", None)
        if seed is not None and get_worker_info() is not None:
            seed_all(seed)
        fetch_many = getattr(self.dataset, "__getitems__", None)
        if fetch_many is not None:
            return fetch_many(list(indices))
        dataset = self.dataset
        return [dataset[i] for i in indices]
