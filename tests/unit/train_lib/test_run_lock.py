"""The one-writer lock: refusal naming the holder, stale files, what cleanup removes."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import threading

import pytest

from torchgarden.train_lib.run_lock import LOCK_FILE, ModelDirLockedError, RunLock


def test_a_second_lock_is_refused_naming_the_holder_and_released_cleanly(tmp_path):
    directory = tmp_path / "run"
    first = RunLock(directory).acquire()
    holder = json.loads((directory / LOCK_FILE).read_text())
    assert holder["pid"] == os.getpid() and holder["role"] == "train" and holder["host"]
    with pytest.raises(ModelDirLockedError, match=rf"pid {os.getpid()} on host .* holds"):
        RunLock(directory).acquire()  # flock conflicts even between two descriptors.
    first.release()
    assert not (directory / LOCK_FILE).exists()
    second = RunLock(directory).acquire()
    assert second.created == []  # The directory existed by then.
    second.release()


def test_a_stale_lock_file_is_taken_over(tmp_path):
    (tmp_path / LOCK_FILE).write_text("garbage from a killed run")
    lock = RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_remove_created_deletes_only_what_the_holder_added(tmp_path):
    parent, directory = tmp_path / "new", tmp_path / "new" / "run"
    lock = RunLock(directory).acquire()
    assert lock.created == [str(parent), str(directory)]
    (directory / "train").mkdir()
    (directory / "eval").mkdir()  # An evaluator's: kept, and so are the directories.
    lock.remove_created(keep=("eval",))
    assert sorted(os.listdir(directory)) == ["eval"] and not lock.held

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    lock = RunLock(existing).acquire()
    (existing / "params.yaml").write_text("theirs")
    lock.remove_created()
    assert sorted(os.listdir(existing)) == ["notes.txt"]


def test_a_full_disk_while_locking_leaves_nothing(tmp_path, monkeypatch):
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", pwrite)
    with pytest.raises(OSError, match="No space left") as error:
        RunLock(tmp_path / "run").acquire()
    assert error.value.filename == str(tmp_path / "run" / LOCK_FILE)
    assert not (tmp_path / "run").exists()


def test_a_holder_that_has_not_written_its_record_yet_is_still_named(tmp_path):
    """Two runs started together: the loser may find the lock taken and its file still
    empty; it waits for the holder's record instead of saying "another process"."""
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    record = json.dumps({"pid": 4242, "host": "h", "role": "train"}).encode()
    writer = threading.Timer(0.1, os.pwrite, (fd, record, 0))
    writer.start()
    try:
        with pytest.raises(ModelDirLockedError, match="in use: pid 4242 on host h"):
            RunLock(tmp_path).acquire()
    finally:
        writer.join()
        os.close(fd)
