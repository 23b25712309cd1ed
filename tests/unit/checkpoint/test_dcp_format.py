"""The sharded checkpoint format (``checkpoint_format="dcp"``) in one process.

The multi-rank behaviour (each rank's shards, resharding to 1, 2 and 4 ranks, a rank
killed mid-save) is in ``tests/distributed/test_scale_torchrun.py``.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from torchgarden.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointMismatchError,
    Value,
    convert_to_single,
    load_model_weights,
    read_full_state,
    read_meta,
)
from torchgarden.checkpoint import dcp as dcp_format


def _same(actual, expected, where="state"):
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert set(actual) == set(expected), where
        for key in expected:
            _same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, (where, actual, expected)


def _fresh(model_factory):
    torch.manual_seed(1)
    model = model_factory()
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


@pytest.mark.parametrize("enable_async", [False, True])
def test_dcp_round_trip_equals_the_single_file_format(tmp_path, make_checkpoint, trained,
                                                      model_factory, enable_async):
    single = CheckpointManager(make_checkpoint(), tmp_path / "single")
    sharded = CheckpointManager(make_checkpoint(), tmp_path / "dcp",
                                checkpoint_format="dcp", enable_async=enable_async)
    single.save(5)
    path = sharded.save(5)
    sharded.sync()
    assert sorted(os.listdir(path)) == [".metadata", "__0_0.distcp", "meta.json"]
    meta = read_meta(path)
    assert meta["format"] == "dcp" and sorted(meta["files"]) == [".metadata", "__0_0.distcp"]
    _same(read_full_state(path), read_full_state(tmp_path / "single" / "ckpt-5"))

    model, optimizer = _fresh(model_factory)
    extras: dict = {}
    restored = CheckpointManager(Checkpoint(model=model, optimizer=optimizer, extras=extras),
                                 tmp_path / "dcp").restore()
    assert restored == path
    _same(model.state_dict(), trained[0].state_dict())
    _same(optimizer.state_dict(), trained[1].state_dict())
    assert extras == trained[2]


def test_damaged_newest_dcp_checkpoint_is_skipped_and_retention_applies(
        tmp_path, make_checkpoint, caplog):
    manager = CheckpointManager(make_checkpoint(), tmp_path, checkpoint_format="dcp",
                                max_to_keep=2)
    paths = [manager.save(step) for step in (1, 2, 3)]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-2", "ckpt-3"]
    shard = os.path.join(paths[-1], "__0_0.distcp")
    with open(shard, "r+b") as f:
        f.seek(10)
        f.write(b"\x00\x01\x02")  # Same size, other bytes: only the sha256 tells.
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert CheckpointManager(make_checkpoint(), tmp_path).restore() == paths[1]
    assert "__0_0.distcp" in caplog.text and "checksum" in caplog.text


def test_dcp_item_mismatch_names_the_keys(tmp_path, make_checkpoint, model_factory):
    CheckpointManager(make_checkpoint(), tmp_path, checkpoint_format="dcp").save(1)
    other = Checkpoint(model=model_factory(out_features=5), extras={})
    with pytest.raises(CheckpointMismatchError, match=r"mis-shaped .*'model.2.weight'"):
        CheckpointManager(other, tmp_path).restore()


def test_dcp_converts_to_a_single_file_and_feeds_init_checkpoints(
        tmp_path, make_checkpoint, trained, model_factory):
    path = CheckpointManager(make_checkpoint(), tmp_path / "run",
                             checkpoint_format="dcp").save(7)
    converted = convert_to_single(path, tmp_path / "out")
    assert sorted(os.listdir(converted)) == ["meta.json", "state.pt"]
    CheckpointManager.verify(converted)
    assert json.loads((tmp_path / "out" / "ckpt-7" / "meta.json").read_text())["step"] == 7
    _same(torch.load(os.path.join(converted, "state.pt"), weights_only=True),
          read_full_state(path))
    with pytest.raises(FileExistsError, match="exists already"):
        convert_to_single(path, tmp_path / "out")
    model = model_factory()
    assert load_model_weights(model, tmp_path / "run") == path
    _same(model.state_dict(), trained[0].state_dict())


def test_optimizer_state_by_parameter_name_maps_to_torch_indices():
    by_name = {"state": {"b.weight": {"step": 1}, "a.bias": {"step": 2}},
               "param_groups": [{"lr": 0.1, "params": ["a.bias"]},
                                {"lr": 0.2, "params": ["b.weight"]}]}
    wrapped = {"scale": 4.0, "optimizer": by_name}
    assert dcp_format.index_layout(wrapped) == {
        "scale": 4.0,
        "optimizer": {"state": {1: {"step": 1}, 0: {"step": 2}},
                      "param_groups": [{"lr": 0.1, "params": [0]}, {"lr": 0.2, "params": [1]}]},
    }


def test_dcp_refuses_nonfinite_weights_before_writing(tmp_path, model_factory):
    model = model_factory()
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    manager = CheckpointManager(Checkpoint(model=model, step=Value(3)), tmp_path,
                                checkpoint_format="dcp")
    with pytest.raises(Exception, match=r"model\['0.weight'\] is NaN or inf"):
        manager.save(3)
    assert not os.path.exists(tmp_path) or not os.listdir(tmp_path)


class _ShardedOptimizerLike:
    """A sharded item whose saved keys may not fit (another optimizer type on resume)."""

    def __init__(self, keys):
        self.keys, self.loaded, self.mismatch = keys, None, None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        raise AssertionError("a sharded entry is loaded through load_sharded_state_dict")

    def sharded_state_dict(self):
        return {key: torch.zeros(2) for key in self.keys}

    def load_sharded_state_dict(self, state):
        self.loaded = state

    def sharded_mismatch(self, problem):
        self.mismatch = problem


def test_a_sharded_item_that_does_not_fit_may_start_afresh(tmp_path):
    saved = _ShardedOptimizerLike(["exp_avg"])
    saved.sharded_state_dict = lambda: {"exp_avg": torch.ones(2)}
    CheckpointManager(Checkpoint(opt=saved), tmp_path, checkpoint_format="dcp").save(1)
    same, other = _ShardedOptimizerLike(["exp_avg"]), _ShardedOptimizerLike(["momentum"])
    CheckpointManager(Checkpoint(opt=same), tmp_path).restore()
    assert torch.equal(same.loaded["exp_avg"], torch.ones(2)) and same.mismatch is None
    CheckpointManager(Checkpoint(opt=other), tmp_path).restore()
    assert other.loaded is None and "'opt.momentum'" in other.mismatch
