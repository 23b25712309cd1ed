from __future__ import annotations

import logging

import pytest
import torch
from torch.utils.data import Dataset

from torchgarden.data import ArrayDataset, ArrayLoader, DataIterator, build_dataloader


class _AugmentedDataset(Dataset):
    """Ten examples with random augmentation, counting the fetches it serves."""

    def __init__(self) -> None:
        self.x = torch.arange(30, dtype=torch.float32).reshape(10, 3)
        self.fetched: list[int] = []

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        self.fetched.append(i)
        return self.x[i] + torch.rand(3), torch.tensor(i)


def _take(iterator: DataIterator, n: int) -> list:
    return [next(iterator) for _ in range(n)]


def _assert_same(expected: list, actual: list) -> None:
    assert len(expected) == len(actual)
    for a, b in zip(expected, actual):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def _run_resume(make_dataset, params, *, total: int, stop: int) -> None:
    torch.manual_seed(123)
    reference = _take(DataIterator(build_dataloader(make_dataset(), params), repeat=True), total)

    torch.manual_seed(123)
    first = DataIterator(build_dataloader(make_dataset(), params), repeat=True)
    head = _take(first, stop)
    state = first.state_dict()
    rng = torch.get_rng_state()  # what a checkpoint saves beside the data position
    del first

    torch.manual_seed(999)  # the restarted process starts from other RNG state
    resumed = DataIterator(build_dataloader(make_dataset(), params), repeat=True)
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    _assert_same(reference, head + _take(resumed, total - stop))


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("stop", [2, 3, 5])
def test_resume_is_bit_exact_without_workers(drop_remainder, stop, make_params):
    params = make_params(global_batch_size=4, shuffle=True, drop_remainder=drop_remainder, seed=7)
    _run_resume(_AugmentedDataset, params, total=8, stop=stop)


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_resume_is_bit_exact_for_array_loader(drop_remainder, make_params):
    params = make_params(global_batch_size=3, drop_remainder=drop_remainder, seed=3)

    def make_dataset():
        return ArrayDataset(
            torch.randn(10, 2, generator=torch.Generator().manual_seed(0)), torch.arange(10)
        )

    assert isinstance(build_dataloader(make_dataset(), params), ArrayLoader)
    _run_resume(make_dataset, params, total=9, stop=4)


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_resume_is_bit_exact_with_two_workers(drop_remainder, make_params):
    # Per-batch worker seeding makes the augmentation independent of which worker
    # fetched a batch, so it survives a restart mid-epoch.
    params = make_params(
        global_batch_size=4,
        drop_remainder=drop_remainder,
        seed=11,
        num_workers=2,
        persistent_workers=True,
    )
    _run_resume(_AugmentedDataset, params, total=5, stop=3)


def test_resume_skips_consumed_batches_without_loading_them(make_params):
    dataset = _AugmentedDataset()
    loader = build_dataloader(dataset, make_params(global_batch_size=4, drop_remainder=False))
    iterator = DataIterator(loader, repeat=True)
    iterator.load_state_dict({"epoch": 1, "batches_in_epoch": 2})
    _, labels = next(iterator)
    assert len(dataset.fetched) == 2  # only the last short batch of epoch 1 was loaded
    loader.sampler.set_epoch(1)
    assert labels.tolist() == list(loader.sampler)[8:]
    assert iterator.state_dict() == {"epoch": 1, "batches_in_epoch": 3}
    next(iterator)
    assert iterator.state_dict() == {"epoch": 2, "batches_in_epoch": 1}


def test_repeat_advances_epochs_and_reshuffles(make_params):
    loader = build_dataloader(ArrayDataset(torch.arange(4)), make_params(global_batch_size=4))
    iterator = DataIterator(loader, repeat=True)
    epochs = [next(iterator)[0].tolist() for _ in range(3)]
    assert all(sorted(e) == [0, 1, 2, 3] for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1
    assert iterator.state_dict() == {"epoch": 2, "batches_in_epoch": 1}
    assert loader.sampler.epoch == 2


def test_no_repeat_stops_and_reset_starts_a_new_pass(make_params):
    loader = build_dataloader(
        ArrayDataset(torch.arange(5)), make_params(global_batch_size=2, is_training=False)
    )
    iterator = DataIterator(loader, repeat=False)
    assert [b[0].tolist() for b in iterator] == [[0, 1], [2, 3], [4]]
    with pytest.raises(StopIteration):
        next(iterator)
    iterator.reset()
    assert next(iterator)[0].tolist() == [0, 1]


def test_repeat_over_empty_pass_raises_instead_of_spinning(make_params):
    params = make_params(global_batch_size=8, drop_remainder=True)
    iterator = DataIterator(build_dataloader(ArrayDataset(torch.arange(5)), params), repeat=True)
    with pytest.raises(RuntimeError, match="yielded no batch"):
        next(iterator)


class _EpochList:
    """A plain iterable (no ResumableSampler) whose order depends on `set_epoch`."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter([10 * self.epoch + i for i in range(3)])


def test_plain_iterable_resume_replays_and_warns(caplog):
    iterator = DataIterator(_EpochList(), repeat=True)
    assert [next(iterator) for _ in range(5)] == [0, 1, 2, 10, 11]
    resumed = DataIterator(_EpochList(), repeat=True)
    with caplog.at_level(logging.WARNING, logger="torchgarden.data.iterator"):
        resumed.load_state_dict(iterator.state_dict())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "replaying 2 batches of epoch 1" in warnings[0]
    assert [next(resumed) for _ in range(2)] == [12, 20]
    assert not resumed.resumes_exactly


def test_load_state_dict_missing_key_is_named():
    iterator = DataIterator([1, 2], repeat=False)
    with pytest.raises(KeyError, match="missing 'batches_in_epoch'"):
        iterator.load_state_dict({"epoch": 0})


def test_skipped_positions_are_never_delivered_and_resume_with_the_state():
    batches = [[i] for i in range(4)]  # A plain list: 4 batches per epoch.
    iterator = DataIterator(batches, repeat=True)
    seen = [next(iterator)[0] for _ in range(3)]
    assert iterator.last_positions(2) == [(0, 1), (0, 2)]
    iterator.skip([(0, 3), (1, 0)])
    seen += [next(iterator)[0] for _ in range(3)]
    assert seen == [0, 1, 2, 1, 2, 3]  # Epoch 0's batch 3 and epoch 1's batch 0 skipped.
    assert iterator.last_positions(3) == [(1, 1), (1, 2), (1, 3)]
    state = iterator.state_dict()
    assert state == {"epoch": 1, "batches_in_epoch": 4, "skipped": [[0, 3], [1, 0]]}
    resumed = DataIterator(batches, repeat=True)
    resumed.load_state_dict(state)
    assert resumed.skipped == {(0, 3), (1, 0)}
    resumed.load_state_dict({"epoch": 0, "batches_in_epoch": 0})  # An older checkpoint.
    assert resumed.skipped == frozenset()


def test_last_positions_reach_back_into_the_previous_epoch():
    iterator = DataIterator([[0], [1], [2]], repeat=True)
    for _ in range(4):
        next(iterator)
    assert iterator.last_positions(2) == [(0, 2), (1, 0)]
