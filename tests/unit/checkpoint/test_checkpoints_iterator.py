"""checkpoints_iterator and the evaluator that follows it: new checkpoints are yielded
once, timeouts stop it, the last one is never missed, retention never shows half a
checkpoint, and a checkpoint deleted before it is read is skipped."""

from __future__ import annotations

import os

import pytest

from torchgarden.checkpoint import CheckpointManager, CorruptCheckpointError, checkpoints_iterator
from torchgarden.checkpoint.layout import remove_checkpoint
from torchgarden.core import GlobalStep
from torchgarden.loop import Controller, controller


def test_yields_new_checkpoints_and_stops_on_timeout_fn(tmp_path, make_checkpoint):
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    manager.save(1)
    (tmp_path / ".ckpt-5.tmp-1-ab").mkdir()  # a save in progress is never yielded
    timeouts = []

    def timeout_fn():
        timeouts.append(len(timeouts))
        return len(timeouts) >= 2  # keep waiting once, then stop

    seen = []
    for path in checkpoints_iterator(
        tmp_path, timeout=0.05, timeout_fn=timeout_fn, poll_interval=0.01
    ):
        seen.append(os.path.basename(path))
        if len(seen) == 1:
            manager.save(3)
    assert seen == ["ckpt-1", "ckpt-3"]
    assert timeouts == [0, 1]


def test_timeout_without_timeout_fn_stops(tmp_path):
    assert list(checkpoints_iterator(tmp_path / "empty", timeout=0.02, poll_interval=0.01)) == []


def test_a_checkpoint_written_just_before_the_end_signal_is_still_yielded(tmp_path, make_checkpoint):
    """The trainer saves its last checkpoint, then says it is done, between the iterator's
    last scan and its call of timeout_fn: that checkpoint is yielded, not missed."""
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    manager.save(1)

    def timeout_fn():  # The last save lands after the scan that found nothing new.
        if manager.latest_checkpoint.endswith("ckpt-1"):
            manager.save(2)
        return True

    seen = [os.path.basename(p) for p in checkpoints_iterator(
        tmp_path, timeout=0.02, timeout_fn=timeout_fn, poll_interval=0.01)]
    assert seen == ["ckpt-1", "ckpt-2"]


def test_retention_deletes_atomically(tmp_path, make_checkpoint, monkeypatch):
    """A checkpoint deleted by max_to_keep is renamed away first: a reader sees all of it or
    nothing, and a leftover of a crash mid-delete is a stale temp dir, cleaned later."""
    manager = CheckpointManager(make_checkpoint(), tmp_path, max_to_keep=1)
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((a, b)), real_rename(a, b)))
    manager.save(1)
    manager.save(2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-2"]
    deleted = [(os.path.basename(a), os.path.basename(b)) for a, b in renames
               if os.path.basename(a) == "ckpt-1"]
    assert len(deleted) == 1 and deleted[0][1].startswith(f".ckpt-1.tmp-{os.getpid()}-")


class _Evaluator:
    def __init__(self, manager):
        self.manager, self.evaluated = manager, []

    def evaluate(self, num_steps):
        self.evaluated.append(num_steps)
        return {"loss": 1.0}


def test_evaluate_continuously_skips_a_checkpoint_deleted_before_it_is_read(
        tmp_path, make_checkpoint, monkeypatch, capsys):
    """The trainer's max_to_keep may delete a checkpoint between the scan that found it and
    the evaluator's read: it is skipped with one line, and the next one is evaluated."""
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    for number in (1, 2, 3):
        manager.save(number)
    paths = [str(tmp_path / f"ckpt-{n}") for n in (1, 2, 3)]

    def scans(directory, **kwargs):
        yield paths[0]
        remove_checkpoint(paths[1])  # Deleted after the scan that found it.
        yield paths[1]
        yield paths[2]

    monkeypatch.setattr(controller, "checkpoints_iterator", scans)
    evaluator = _Evaluator(manager)
    Controller(global_step=GlobalStep(), evaluator=evaluator,
               checkpoint_manager=manager).evaluate_continuously()
    assert len(evaluator.evaluated) == 2
    assert f"{paths[1]} was deleted (max_to_keep) before it was read; skipped." \
        in capsys.readouterr().out


def test_evaluate_continuously_still_fails_on_a_damaged_checkpoint(
        tmp_path, make_checkpoint, monkeypatch):
    manager = CheckpointManager(make_checkpoint(), tmp_path)
    manager.save(1)
    loop = Controller(global_step=GlobalStep(), evaluator=_Evaluator(manager),
                      checkpoint_manager=manager, print_logs=False)
    (tmp_path / "ckpt-1" / "state.pt").write_bytes(b"garbage")  # Damaged, still there.
    monkeypatch.setattr(controller, "checkpoints_iterator",
                        lambda directory, **kwargs: iter([str(tmp_path / "ckpt-1")]))
    with pytest.raises(CorruptCheckpointError):
        loop.evaluate_continuously()
