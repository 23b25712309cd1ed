from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from torchgarden.data import (
    ArrayDataset,
    ArrayLoader,
    InputContext,
    ResumableDataLoader,
    ResumableSampler,
    build_dataloader,
    tuple_collate,
)


def _arrays(n: int = 10) -> ArrayDataset:
    return ArrayDataset(torch.arange(n * 3, dtype=torch.float32).reshape(n, 3), torch.arange(n))


def _epoch(loader, epoch: int) -> list:
    loader.sampler.set_epoch(epoch)
    return list(loader)


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_array_loader_matches_dataloader_batches(shuffle, drop_remainder, make_params):
    params = make_params(global_batch_size=4, shuffle=shuffle, drop_remainder=drop_remainder)
    fast = build_dataloader(_arrays(), params)
    slow = build_dataloader(_arrays(), params, collate_fn=tuple_collate)
    assert isinstance(fast, ArrayLoader) and isinstance(slow, ResumableDataLoader)
    assert len(fast) == len(slow) == (2 if drop_remainder else 3)
    for epoch in range(2):
        fast_batches, slow_batches = _epoch(fast, epoch), _epoch(slow, epoch)
        assert len(fast_batches) == len(slow_batches) == len(fast)
        for a, b in zip(fast_batches, slow_batches):
            assert type(a) is tuple and type(b) is tuple
            assert all(torch.equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b))


def test_unshuffled_eval_loader_yields_every_example_in_order(make_params):
    loader = build_dataloader(_arrays(), make_params(global_batch_size=4, is_training=False))
    labels = torch.cat([y for _, y in loader])
    assert labels.tolist() == list(range(10))  # eval keeps the short last batch


def test_two_replicas_read_disjoint_halves_with_per_replica_batches(make_params):
    params = make_params(global_batch_size=4, drop_remainder=False)
    seen = []
    for rank in range(2):
        loader = build_dataloader(
            _arrays(12), params, input_context=InputContext(num_replicas=2, replica_id=rank)
        )
        assert loader.batch_size == 2 and loader.sampler.rank == rank
        seen.append(torch.cat([y for _, y in loader]).tolist())
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(12))


def test_sharding_off_gives_each_replica_all_examples_in_its_own_order(make_params):
    params = make_params(global_batch_size=2, sharding=False, drop_remainder=False)
    orders = [
        torch.cat(
            [y for _, y in build_dataloader(_arrays(6), params, input_context=InputContext(2, r))]
        ).tolist()
        for r in range(2)
    ]
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(6))
    assert orders[0] != orders[1]


@pytest.mark.parametrize("size", [0, -2])
def test_non_positive_global_batch_size_is_rejected(size, make_params):
    with pytest.raises(ValueError, match=f"global_batch_size must be a positive int, got {size}"):
        build_dataloader(_arrays(), make_params(global_batch_size=size))


def test_indivisible_global_batch_size_is_rejected(make_params):
    with pytest.raises(ValueError, match=r"global_batch_size \(5\).*set it to 6"):
        build_dataloader(_arrays(), make_params(global_batch_size=5), input_context=InputContext(2))


def test_empty_dataset_error_names_input_path(make_params):
    empty = ArrayDataset(torch.zeros(0, 2))
    with pytest.raises(ValueError, match=r"input_path='/data/train\.npz' is empty"):
        build_dataloader(empty, make_params(input_path="/data/train.npz"))


class _Squares(Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int):
        return torch.tensor([float(i * i)]), torch.tensor(i)


def test_cache_materializes_map_dataset_into_fast_array_loader(make_params):
    loader = build_dataloader(
        _Squares(), make_params(cache=True, shuffle=False, global_batch_size=3)
    )
    assert isinstance(loader, ArrayLoader)
    x, y = next(iter(loader))
    assert x.squeeze(1).tolist() == [0.0, 1.0, 4.0] and y.tolist() == [0, 1, 2]


def test_seed_changes_training_order(make_params):
    first = [y for _, y in build_dataloader(_arrays(), make_params(seed=1))]
    again = [y for _, y in build_dataloader(_arrays(), make_params(seed=1))]
    other = [y for _, y in build_dataloader(_arrays(), make_params(seed=2))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(5))


def test_iterable_dataset_gets_plain_batching(make_params):
    batches = list(build_dataloader(_Stream(), make_params(global_batch_size=2)))
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3]]


def test_array_loader_honours_pending_start():
    sampler = ResumableSampler(10, shuffle=False, seed=0)
    loader = ArrayLoader(_arrays(), sampler=sampler, batch_size=4)
    sampler.set_start(6)
    assert [y.tolist() for _, y in loader] == [[6, 7, 8, 9]]
    assert [len(y) for _, y in loader] == [4, 4, 2]
