"""Tests for CheckpointManager: layout, round trip, retention, interval rules, async."""

from __future__ import annotations

import os

import pytest
import torch
import xxhash

from torchgarden.checkpoint import (
    Checkpoint,
    CheckpointManager,
    checkpoint_number,
    latest_checkpoint,
    read_meta,
)


def _names(manager):
    return [os.path.basename(p) for p in manager.checkpoints]


def test_layout_and_meta(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path, version="9.9")
    path = manager.save(5, config={"task": {"lr": 0.1}}, extra={"note": "x"})
    assert path == str(tmp_path / "ckpt-5")
    assert sorted(os.listdir(path)) == ["meta.json", "state.pt"]
    meta = read_meta(path)
    assert meta["format_version"] == 1 and meta["step"] == 5
    assert meta["files"]["state.pt"]["bytes"] == os.path.getsize(os.path.join(path, "state.pt"))
    with open(os.path.join(path, "state.pt"), "rb") as f:  # Hashed while written.
        assert meta["files"]["state.pt"]["xxh3_128"] == xxhash.xxh3_128(f.read()).hexdigest()
    assert meta["config"] == {"task": {"lr": 0.1}} and meta["extra"] == {"note": "x"}
    assert meta["torchgarden"] == "9.9" and meta["created"].startswith("20")
    assert checkpoint_number(path) == 5
    state = torch.load(os.path.join(path, "state.pt"), weights_only=True)
    assert set(state) == {"model", "optimizer", "extras"}


def test_save_restore_round_trip(tmp_path, trained, model_factory):
    model, optimizer, extras = trained
    CheckpointManager(Checkpoint(model=model, optimizer=optimizer, extras=extras), tmp_path).save(3)

    model2 = model_factory()
    optimizer2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    extras2: dict = {}
    manager = CheckpointManager(
        Checkpoint(model=model2, optimizer=optimizer2, extras=extras2), tmp_path
    )
    assert manager.restore() == str(tmp_path / "ckpt-3")
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert optimizer2.param_groups[0]["lr"] == 0.01
    assert torch.equal(
        optimizer2.state_dict()["state"][1]["exp_avg_sq"],
        optimizer.state_dict()["state"][1]["exp_avg_sq"],
    )
    assert extras2 == extras
    assert manager.last_saved_number == 3


def test_retention_keeps_newest(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path, max_to_keep=2)
    for step in (1, 2, 3, 4):
        manager.save(step)
    assert _names(manager) == ["ckpt-3", "ckpt-4"]
    keep_all = CheckpointManager(make_checkpoint(), tmp_path / "all", max_to_keep=-1)
    for step in range(1, 8):
        keep_all.save(step)
    assert len(keep_all.checkpoints) == 7
    assert keep_all.latest_checkpoint == str(tmp_path / "all" / "ckpt-7")


def test_interval_rules(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path, checkpoint_interval=10)
    assert manager.save(3) is None  # before the first multiple of 10
    assert manager.save(12) is not None  # crossed 10
    assert manager.save(12, check_interval=False) is None  # exists: skipped
    assert manager.save(19) is None  # still in the same interval
    assert manager.save(15, check_interval=False) is not None  # forced save
    assert manager.save(20) is not None  # crossed 20
    assert _names(manager) == ["ckpt-12", "ckpt-15", "ckpt-20"]

    resumed = CheckpointManager(make_checkpoint(), tmp_path, checkpoint_interval=10)
    assert resumed.last_saved_number is None
    resumed.restore(str(tmp_path / "ckpt-15"))
    assert resumed.last_saved_number == 15
    assert resumed.save(19) is None  # same interval as the restored step
    assert resumed.save(20) is None  # exists
    assert resumed.save(23) is None  # 23 // 10 == 20 // 10 (last save)
    assert resumed.save(31) is not None
    assert resumed.save(39) is None
    assert resumed.save(40) is not None


def test_no_interval_saves_every_call(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    assert [manager.save(s) is not None for s in (1, 2, 2, 3)] == [True, True, False, True]


def test_restore_or_initialize(tmp_path, make_checkpoint):
    calls = []
    manager = CheckpointManager(make_checkpoint(), tmp_path, init_fn=lambda: calls.append(1))
    assert manager.restore_or_initialize() is None and calls == [1]
    manager.save(4)
    assert manager.restore_or_initialize() == str(tmp_path / "ckpt-4") and calls == [1]
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-4")
    assert latest_checkpoint(tmp_path / "missing") is None


def test_async_save_equals_sync_save(tmp_path, trained):
    model, optimizer, extras = trained
    ckpt = Checkpoint(model=model, optimizer=optimizer, extras=extras)
    sync_path = CheckpointManager(ckpt, tmp_path / "sync").save(1)
    manager = CheckpointManager(ckpt, tmp_path / "async", enable_async=True)
    async_path = manager.save(1)
    with torch.no_grad():  # training goes on while the writer runs; the copy is unaffected
        for p in model.parameters():
            p.add_(1.0)
    manager.sync()
    assert manager.checkpoints == [async_path]
    a = torch.load(os.path.join(sync_path, "state.pt"), weights_only=True)
    b = torch.load(os.path.join(async_path, "state.pt"), weights_only=True)
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key])
    assert a["extras"] == b["extras"]
    manager.close()


def test_async_sync_reraises_writer_error(tmp_path, make_checkpoint):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    manager = CheckpointManager(make_checkpoint(), blocker, enable_async=True)
    manager.save(1)
    with pytest.raises(OSError):
        manager.sync()
    manager.sync()  # the error is reported once
    manager.close()


def test_unsafe_state_is_refused_before_writing(tmp_path):
    class Opaque:
        pass

    manager = CheckpointManager(Checkpoint(rng={"numpy": [1, Opaque()]}), tmp_path)
    with pytest.raises(TypeError, match=r"state\['rng'\]\['numpy'\]\[1\].*Opaque"):
        manager.save(1)
    assert os.listdir(tmp_path) == []


def test_views_are_saved_compactly(tmp_path):
    base = torch.zeros(10_000)
    manager = CheckpointManager(Checkpoint(part=base[:4]), tmp_path)
    path = manager.save(1)
    assert os.path.getsize(os.path.join(path, "state.pt")) < 10_000


def test_invalid_arguments(tmp_path, make_checkpoint):
    with pytest.raises(ValueError, match="max_to_keep must be a positive int or -1"):
        CheckpointManager(make_checkpoint(), tmp_path, max_to_keep=0)
    with pytest.raises(ValueError, match="checkpoint_interval must be a positive int or None"):
        CheckpointManager(make_checkpoint(), tmp_path, checkpoint_interval=0)
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        manager.restore(str(tmp_path / "ckpt-99"))


def test_constructor_config_is_the_default_for_every_save(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path, config={"trainer": {"steps": 9}})
    assert read_meta(manager.save(1))["config"] == {"trainer": {"steps": 9}}
    assert read_meta(manager.save(2, config={"other": 1}))["config"] == {"other": 1}


def test_async_saves_reuse_host_buffers_without_mixing_states(tmp_path):
    # 5M elements: the staging copy is split into pieces done on several threads.
    model = torch.nn.Linear(2500, 2000)
    manager = CheckpointManager(Checkpoint(model=model), tmp_path, enable_async=True,
                                max_to_keep=3)
    expected = []
    for number in (1, 2, 3):
        with torch.no_grad():
            model.weight.fill_(float(number))
        expected.append(model.weight.clone())
        manager.save(number)  # The next save waits for this write before restaging.
    with torch.no_grad():
        model.weight.fill_(-1.0)
    manager.sync()
    for number, weight in zip((1, 2, 3), expected):
        state = torch.load(tmp_path / f"ckpt-{number}" / "state.pt", weights_only=True)
        assert torch.equal(state["model"]["weight"], weight)
    manager.close()
