"""Tests for Checkpoint: items, plain values, and mismatch errors."""

from __future__ import annotations

import pytest
import torch

from torchgarden.checkpoint import Checkpoint, CheckpointMismatchError, Value


def test_state_dict_round_trip_restores_module_optimizer_and_plain_items(trained, model_factory):
    model, optimizer, extras = trained
    counter = torch.tensor(7)
    state = Checkpoint(
        model=model, optimizer=optimizer, extras=extras, step=11, counter=counter
    ).state_dict()

    torch.manual_seed(1)
    model2 = model_factory()
    optimizer2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    extras2 = {"stale": True}
    counter2 = torch.tensor(0)
    ckpt2 = Checkpoint(model=model2, optimizer=optimizer2, extras=extras2, step=0, counter=counter2)
    ckpt2.load_state_dict(state)

    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    exp_avg = optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(optimizer2.state_dict()["state"][0]["exp_avg"], exp_avg)
    assert extras2 == {"epoch": 3, "history": [0.5, 0.25]}  # updated in place
    assert ckpt2.step == 11 and ckpt2["step"] == 11
    assert int(counter2) == 7  # tensors restore in place


def test_explicit_value_wrapper_is_returned_and_updated():
    epoch = Value(2)
    ckpt = Checkpoint(epoch=epoch)
    assert ckpt.epoch is epoch
    ckpt.load_state_dict({"epoch": {"value": 9}})
    assert epoch.value == 9


def test_missing_items_are_listed_and_extra_items_ignored():
    ckpt = Checkpoint(a=1, b=2)
    with pytest.raises(CheckpointMismatchError) as info:
        ckpt.load_state_dict({"a": {"value": 1}, "c": {"value": 3}})
    assert "items missing from the checkpoint (1): 'b'" in str(info.value)
    assert "checkpoint items: ['a', 'c']" in str(info.value)
    # An item the file has but this Checkpoint does not track is a partial restore.
    Checkpoint(a=1).load_state_dict({"a": {"value": 4}, "c": {"value": 3}})
    ckpt.load_state_dict({"a": {"value": 5}, "c": {"value": 3}}, strict=False)
    assert ckpt.a == 5 and ckpt.b == 2


def test_module_mismatch_is_one_readable_error_and_changes_nothing(model_factory):
    small, big = model_factory(out_features=5), model_factory(out_features=10)
    state = {"model": big.state_dict()}
    state["model"]["extra.bias"] = torch.zeros(1)
    del state["model"]["0.bias"]
    before = small.state_dict()["0.weight"].clone()
    with pytest.raises(CheckpointMismatchError) as info:
        Checkpoint(model=small).load_state_dict(state)
    message = str(info.value)
    assert "missing keys (1): '0.bias'" in message
    assert "unexpected keys (1): 'extra.bias'" in message
    assert "mis-shaped keys (2): '2.weight': checkpoint (10, 8) vs model (5, 8)" in message
    assert "'2.bias': checkpoint (10,) vs model (5,)" in message
    assert torch.equal(small.state_dict()["0.weight"], before)


def test_mismatch_list_is_truncated_with_a_count():
    model = torch.nn.ModuleList([torch.nn.Linear(1, 1) for _ in range(4)])
    with pytest.raises(CheckpointMismatchError, match=r"missing keys \(8\): .*, \.\.\. and 3 more"):
        Checkpoint(model=model).load_state_dict({"model": {}})


def test_bad_item_names_are_rejected():
    with pytest.raises(ValueError, match="reserved"):
        Checkpoint(state_dict=1)
    with pytest.raises(ValueError, match="identifiers"):
        Checkpoint(_hidden=1)
    with pytest.raises(AttributeError, match="no item 'nope'"):
        Checkpoint(a=1).nope  # noqa: B018
