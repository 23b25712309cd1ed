"""Tests for checkpoints_iterator: new checkpoints are yielded once, timeouts stop it."""

from __future__ import annotations

import os

from torchgarden.checkpoint import CheckpointManager, checkpoints_iterator


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
