"""Streams with exact resume (``data.streaming``), unpadded evaluation shards, HF sources.

Two workers, torchrun ranks and the real Hugging Face / WebDataset sources are in
``tests/distributed/test_scale_torchrun.py``; here one process and no workers.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils.data import IterableDataset

from torchgarden.data import DataIterator, ResumableSampler, build_dataloader
from torchgarden.data.hf import ColumnBatch


class _Counting(IterableDataset):
    """0..n-1 in shards of 4, resumable like a Hugging Face stream (``state_dict``)."""

    def __init__(self, n: int = 10) -> None:
        self.n, self.position, self.epoch, self.start = n, 0, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.start = state["position"]

    def __iter__(self):
        self.position, self.start = self.start, 0
        while self.position < self.n:
            self.position += 1
            yield torch.tensor(100 * self.epoch + self.position - 1)


def test_stream_resumes_from_the_loaders_state_without_replaying(make_params):
    params = make_params(global_batch_size=3, is_training=True)
    uninterrupted = DataIterator(build_dataloader(_Counting(), params), repeat=True)
    expected = [next(uninterrupted).tolist() for _ in range(7)]
    assert expected[3] == [100, 101, 102]  # The second epoch (dropping the short tail).

    first = DataIterator(build_dataloader(_Counting(), params), repeat=True)
    seen = [next(first).tolist() for _ in range(4)]
    state = first.state_dict()
    assert state["epoch"] == 1 and state["batches_in_epoch"] == 1 and "loader" in state
    resumed_dataset = _Counting()
    resumed = DataIterator(build_dataloader(resumed_dataset, params), repeat=True)
    resumed.load_state_dict(state)
    assert seen + [next(resumed).tolist() for _ in range(3)] == expected
    assert resumed.resumes_exactly and not resumed.collective_state_dict


def test_closing_a_stream_keeps_its_position(make_params):
    iterator = DataIterator(build_dataloader(_Counting(), make_params(global_batch_size=2)),
                            repeat=True)
    assert next(iterator).tolist() == [0, 1]
    iterator.close()
    assert next(iterator).tolist() == [2, 3]


def test_a_stream_saved_by_other_ranks_restarts_its_epoch(make_params, caplog):
    iterator = DataIterator(build_dataloader(_Counting(), make_params(global_batch_size=2)),
                            repeat=True)
    saved = {"world_size": 2, "ranks": [
        {"epoch": 3, "batches_in_epoch": 2, "loader": {}},
        {"epoch": 2, "batches_in_epoch": 4, "loader": {}}]}
    with caplog.at_level(logging.WARNING):
        iterator.load_state_dict(saved)
    assert "saved by 2 ranks and cannot be split across 1" in caplog.text
    assert (iterator.epoch, iterator.batches_in_epoch) == (2, 0)
    assert next(iterator).tolist() == [200, 201]


def test_evaluation_shards_hold_every_example_once():
    shards = [list(ResumableSampler(7, shuffle=True, seed=3, num_replicas=3, rank=r, pad=False))
              for r in range(3)]
    assert [len(s) for s in shards] == [3, 2, 2]
    assert sorted(sum(shards, [])) == list(range(7))
    padded = [list(ResumableSampler(7, shuffle=True, seed=3, num_replicas=3, rank=r))
              for r in range(3)]
    assert [len(s) for s in padded] == [3, 3, 3]  # Training keeps equal shards.


def test_validation_loader_is_not_padded(make_params):
    from torchgarden.data import ArrayDataset, InputContext

    data = ArrayDataset(torch.arange(7.0), torch.arange(7))
    seen = [torch.cat([y for _, y in build_dataloader(
        data, make_params(global_batch_size=2, is_training=False),
        input_context=InputContext(num_replicas=2, replica_id=r))]).tolist() for r in (0, 1)]
    assert seen == [[0, 2, 4, 6], [1, 3, 5]]


def test_column_batch_shapes_rows_and_names_missing_columns():
    collate = ColumnBatch("npy", "cls", (1, 2, 2))
    x, y = collate([{"npy": [[0, 1], [2, 3]], "cls": 4}, {"npy": [4, 5, 6, 7], "cls": 1}])
    assert x.shape == (2, 1, 2, 2) and x.dtype == torch.float32 and y.tolist() == [4, 1]
    with pytest.raises(KeyError, match=r"no column 'npy' .* columns: \['image', 'label'\]"):
        collate([{"image": [0], "label": 1, "__key__": "a"}])
    with pytest.raises(ValueError, match=r"holds 3 values \(shape \(3,\)\), but task.model.input_size asks for \[channels, height, width\] \[1, 2, 2\]"):
        collate([{"npy": [1, 2, 3], "cls": 0}])


def test_building_a_stream_loader_warns_nothing(make_params):
    """torchdata's constructor calls the deprecated ``torch.set_vital``; its warning reads
    like a failure on every streaming run and is silenced where the loader is built."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.set_vital("Dataloader", "enabled", "True")  # The warning exists in this torch...
        build_dataloader(_Counting(), make_params(global_batch_size=2))  # ...but not here.
    messages = [str(w.message) for w in caught]
    assert any("set_vital" in m for m in messages[:1]), messages
    assert not any("set_vital" in m for m in messages[1:]), messages
