from __future__ import annotations

import pytest
import torch

from torchgarden.data import ResumableSampler


def test_shuffled_order_is_randperm_of_seed_plus_epoch():
    sampler = ResumableSampler(10, shuffle=True, seed=5)
    sampler.set_epoch(2)
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(7)).tolist()
    assert list(sampler) == expected
    sampler.set_epoch(3)
    assert list(sampler) != expected


def test_unshuffled_order_is_sequential():
    assert list(ResumableSampler(5, shuffle=False, seed=0)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_examples", [10, 11])
def test_two_ranks_cover_dataset_once_without_overlap(num_examples, drop_last):
    ranks = [
        ResumableSampler(
            num_examples, shuffle=True, seed=1, num_replicas=2, rank=r, drop_last=drop_last
        )
        for r in range(2)
    ]
    for epoch in range(2):
        for sampler in ranks:
            sampler.set_epoch(epoch)
        orders = [list(s) for s in ranks]
        assert len(orders[0]) == len(orders[1]) == len(ranks[0])
        seen = orders[0] + orders[1]
        if num_examples % 2 == 0:
            assert sorted(seen) == list(range(num_examples))
        elif drop_last:
            assert len(set(seen)) == len(seen) == num_examples - 1
        else:
            # One padded sample wraps around to the start of the permutation.
            assert set(seen) == set(range(num_examples)) and len(seen) == num_examples + 1


def test_set_start_skips_for_one_iteration_only():
    sampler = ResumableSampler(8, shuffle=True, seed=3)
    full = list(sampler)
    sampler.set_start(5)
    assert list(sampler) == full[5:]
    assert list(sampler) == full


def test_state_dict_round_trip_restores_epoch_and_start():
    sampler = ResumableSampler(8, shuffle=True, seed=3)
    sampler.set_epoch(4)
    sampler.set_start(2)
    state = sampler.state_dict()
    restored = ResumableSampler(8, shuffle=True, seed=3)
    restored.load_state_dict(state)
    assert list(restored) == list(sampler)
    assert state == {"epoch": 4, "start": 2, "seed": 3, "num_examples": 8}


def test_state_from_other_seed_is_rejected():
    with pytest.raises(ValueError, match="seed=1, but this sampler has seed=2"):
        ResumableSampler(4, shuffle=True, seed=2).load_state_dict({"epoch": 0, "seed": 1})


def test_set_start_out_of_range_is_rejected():
    with pytest.raises(ValueError, match=r"in \[0, 4\].*got 5"):
        ResumableSampler(4, shuffle=False, seed=0).set_start(5)
