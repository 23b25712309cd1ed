"""Loader workers batching into reused shared memory: a batch the consumer still holds (or
a view of it) is never written over; a freed one is reused."""

from __future__ import annotations

import gc
import pickle
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from torchgarden.data import batch_pool
from torchgarden.data.batch_pool import PooledCollate, pooled_collate, tuple_collate


class _Numbers(Dataset):
    def __len__(self) -> int:
        return 120

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 32, 32), float(index)), index


def _expected(step: int, batch: int = 4) -> torch.Tensor:
    return torch.arange(batch * step, batch * (step + 1))


def test_a_slot_is_reused_only_once_every_view_of_its_batch_is_freed(monkeypatch):
    monkeypatch.setattr(batch_pool, "get_worker_info", lambda: SimpleNamespace(id=0))
    pool = PooledCollate(num_workers=1, slots=2)
    first = pool([(torch.full((2,), 1.0), 1), (torch.full((2,), 2.0), 2)])
    assert pool.free.tolist() == [[0, 1]]
    received = pickle.loads(pickle.dumps(first))  # as the main process unpickles it
    assert type(received) is tuple and received[0].tolist() == [[1.0, 1.0], [2.0, 2.0]]
    view = received[0][1]
    del received
    gc.collect()
    assert pool.free.tolist() == [[0, 1]]  # the view still holds the images
    second = pool([(torch.zeros(2), 0), (torch.zeros(2), 0)])  # into slot 1
    assert second.slot == 1 and pool.free.tolist() == [[0, 0]]
    third = pool([(torch.zeros(2), 0), (torch.zeros(2), 0)])  # every slot held: new memory
    assert not isinstance(third, batch_pool._Tagged) and view.tolist() == [2.0, 2.0]
    del view
    gc.collect()
    assert pool.free.tolist() == [[1, 0]]
    fourth = pool([(torch.full((2,), 7.0), 7), (torch.full((2,), 8.0), 8)])
    assert fourth.slot == 0
    assert fourth.batch[0].data_ptr() == first.batch[0].data_ptr()  # the same memory
    assert fourth.batch[0].tolist() == [[7.0, 7.0], [8.0, 8.0]]


def test_workers_never_write_over_held_batches_and_reuse_freed_ones():
    def loader() -> DataLoader:
        collate = pooled_collate(tuple_collate, num_workers=2, prefetch_factor=2)
        assert isinstance(collate, PooledCollate)
        return DataLoader(_Numbers(), batch_size=4, num_workers=2, collate_fn=collate)

    dropped = loader()
    for step, (images, labels) in enumerate(dropped):  # each batch freed by the next
        assert torch.equal(labels, _expected(step))
        assert torch.equal(images.amin((1, 2, 3)), _expected(step).float())
        assert torch.equal(images.amax((1, 2, 3)), _expected(step).float())
    held_loader = loader()
    held = list(held_loader)  # 30 batches held at once: more than the 2 x 5 slots
    assert held_loader.collate_fn.free.sum() == 0
    for step, (images, labels) in enumerate(held):
        assert torch.equal(labels, _expected(step))
        assert torch.equal(images.amin((1, 2, 3)), _expected(step).float())
        assert torch.equal(images.amax((1, 2, 3)), _expected(step).float())
    del held, images, labels
    gc.collect()
    assert held_loader.collate_fn.free.sum() == 10


def test_only_torchs_batching_with_workers_is_pooled():
    def custom(samples):
        return samples

    assert pooled_collate(custom, num_workers=2, prefetch_factor=2) is custom
    assert pooled_collate(tuple_collate, num_workers=0, prefetch_factor=None) is tuple_collate
    for collate in (None, default_collate, tuple_collate):
        pool = pooled_collate(collate, num_workers=3, prefetch_factor=4)
        assert pool.free.shape == (3, 7)
    # In the main process (no worker) batching is torch's, tuples kept.
    batch = PooledCollate(num_workers=1, slots=1)([(torch.ones(2), 1)])
    assert type(batch) is tuple and batch[1].tolist() == [1]
