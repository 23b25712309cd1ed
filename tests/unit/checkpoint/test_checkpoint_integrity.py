"""Tests for crash safety and integrity: temp dirs, corruption fallback, unsafe and newer files."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import pytest
import torch

from torchgarden.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointManager,
    CheckpointMismatchError,
    CorruptCheckpointError,
    NonFiniteCheckpointError,
    UnsafeCheckpointError,
    latest_checkpoint,
)


class Payload:
    """A custom class: torch.load(weights_only=True) must refuse to unpickle it."""


def _rewrite_meta(path, **changes):
    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta.update(changes)
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def _saved(tmp_path, make_checkpoint, steps=(1, 2)):
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    paths = [manager.save(s) for s in steps]
    return manager, paths


def test_crash_leftovers_are_ignored_and_cleaned(tmp_path, make_checkpoint):
    manager, paths = _saved(tmp_path, make_checkpoint, steps=(1,))
    stale = tmp_path / ".ckpt-7.tmp-999999999-abcd1234"  # a dead writer's temp dir
    stale.mkdir()
    (stale / "state.pt").write_bytes(b"partial")
    (tmp_path / "ckpt-9").mkdir()  # renamed without meta.json (never produced by us)
    (tmp_path / "ckpt-9" / "state.pt").write_bytes(b"partial")
    assert manager.checkpoints == paths
    assert latest_checkpoint(tmp_path) == paths[0]
    assert manager.restore() == paths[0]
    manager.save(2)
    assert not stale.exists()  # cleaned by the next successful save
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-1", "ckpt-2"]


def test_truncated_latest_falls_back_with_one_warning(tmp_path, make_checkpoint, caplog):
    manager, (older, newest) = _saved(tmp_path, make_checkpoint)
    state_file = os.path.join(newest, "state.pt")
    with open(state_file, "r+b") as f:
        f.truncate(os.path.getsize(state_file) // 2)
    fresh = CheckpointManager(make_checkpoint(), tmp_path)
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert fresh.restore() == older
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ckpt-2" in warnings[0].getMessage()
    assert "truncated" in warnings[0].getMessage()
    assert fresh.last_saved_number == 1
    assert fresh.latest_checkpoint == older  # the known-corrupt one is no longer listed
    assert fresh.save(2) == newest  # re-saving its number replaces it
    CheckpointManager.verify(newest)


def test_flipped_byte_is_a_checksum_mismatch(tmp_path, make_checkpoint):
    _, (_, newest) = _saved(tmp_path, make_checkpoint)
    state_file = os.path.join(newest, "state.pt")
    with open(state_file, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptCheckpointError, match=r"state\.pt' xxh3_128 .* does not match"):
        CheckpointManager.verify(newest)
    with pytest.raises(CorruptCheckpointError):
        CheckpointManager(make_checkpoint(), tmp_path).restore(newest)


def test_missing_meta_is_reported(tmp_path, make_checkpoint):
    _, (_, newest) = _saved(tmp_path, make_checkpoint)
    os.remove(os.path.join(newest, "meta.json"))
    with pytest.raises(CorruptCheckpointError, match="incomplete: meta.json is missing"):
        CheckpointManager.verify(newest)


def test_all_corrupt_is_an_error_not_a_fresh_start(tmp_path, make_checkpoint):
    manager, paths = _saved(tmp_path, make_checkpoint)
    for path in paths:
        with open(os.path.join(path, "state.pt"), "ab") as f:
            f.write(b"x")
    with pytest.raises(CorruptCheckpointError, match="all 2 checkpoints"):
        CheckpointManager(make_checkpoint(), tmp_path).restore_or_initialize()


def test_pickled_payload_is_refused(tmp_path, make_checkpoint):
    _, (_, newest) = _saved(tmp_path, make_checkpoint)
    state_file = os.path.join(newest, "state.pt")
    torch.save({"model": {}, "evil": Payload()}, state_file)
    with open(state_file, "rb") as f:
        data = f.read()
    # A checkpoint written before the xxh3_128 checksums: its sha256 is still checked.
    files = {"state.pt": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}
    _rewrite_meta(newest, files=files)
    CheckpointManager.verify(newest)  # checksums are consistent ...
    with pytest.raises(UnsafeCheckpointError, match="weights_only=True"):
        CheckpointManager(make_checkpoint(), tmp_path).restore()  # ... but never unpickled


def test_newer_format_is_refused(tmp_path, make_checkpoint):
    _, (_, newest) = _saved(tmp_path, make_checkpoint)
    _rewrite_meta(newest, format_version=2)
    with pytest.raises(
        CheckpointFormatError, match=r"newer torchgarden \(format 2 > 1\); upgrade torchgarden"
    ):
        CheckpointManager(make_checkpoint(), tmp_path).restore()


def test_restore_into_wrong_shape_names_keys(tmp_path, model_factory):
    CheckpointManager(Checkpoint(model=model_factory(out_features=10)), tmp_path).save(1)
    manager = CheckpointManager(Checkpoint(model=model_factory(out_features=5)), tmp_path)
    with pytest.raises(
        CheckpointMismatchError, match=r"'2\.weight': checkpoint \(10, 8\) vs model \(5, 8\)"
    ):
        manager.restore()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nonfinite_parameter_names_nan_and_inf_but_not_a_sum_that_overflows(dtype):
    from torchgarden.checkpoint.selection import nonfinite_parameter

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    items = {"model": model}
    big = torch.finfo(dtype).max
    state = {"model": {k: v.detach().clone().to(dtype) for k, v in model.state_dict().items()}}
    state["model"]["0.weight"].fill_(big)  # Finite; its sum overflows to inf.
    assert nonfinite_parameter(items, state) is None
    for bad in (float("nan"), float("inf"), float("-inf")):
        state["model"]["1.bias"][1] = bad
        assert nonfinite_parameter(items, state) == "model['1.bias']"
    state["model"]["0.bias"][0] = float("nan")  # The first one in parameter order is named.
    assert nonfinite_parameter(items, state) == "model['0.bias']"


@pytest.mark.parametrize("enable_async", [False, True])
def test_a_state_with_nan_weights_is_never_written(tmp_path, model_factory, enable_async):
    model = model_factory()
    manager = CheckpointManager(Checkpoint(model=model), tmp_path, enable_async=enable_async)
    first = manager.save(1)
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")
    expected = r"not saving ckpt-2: model\['2\.weight'\] is NaN or inf.*ckpt-1 is intact"
    with pytest.raises(NonFiniteCheckpointError, match=expected):
        manager.save(2)  # Async: the writer thread refuses; the next sync reports it.
        manager.sync()
    manager.sync()  # Reported once.
    assert manager.checkpoints == [first]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1"]
    manager.close()
