"""Checkpoint integrity on disk: damaged checkpoints are found, named and skipped; readers
never see half-written ones; retention deletes only after a newer one is durable."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import shutil
import threading
import time

import pytest
import torch
from resilience_tools import (
    CASES,
    checkpoint_dirs,
    cli_args,
    run_cli,
    run_differences,
    run_in_process,
)

from torchgarden.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointWriteError,
    CorruptCheckpointError,
    _direct,
    layout,
    selection,
)
from torchgarden.core import GlobalStep
from torchgarden.loop import Controller


def truncate(path: str) -> None:
    state = os.path.join(path, "state.pt")
    with open(state, "r+b") as f:
        f.truncate(os.path.getsize(state) // 2)


def flip_a_byte(path: str) -> None:
    state = os.path.join(path, "state.pt")
    with open(state, "r+b") as f:
        f.seek(os.path.getsize(state) - 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


def garble_meta(path: str) -> None:
    with open(os.path.join(path, "meta.json"), "w") as f:
        f.write('{"format_version": 1, "files": ')


DAMAGE = {"truncated": truncate, "one_bit_flipped": flip_a_byte, "garbled_meta": garble_meta}
REASONS = {"truncated": "truncated or altered", "one_bit_flipped": "altered on disk",
           "garbled_meta": "is unreadable"}


@pytest.fixture(scope="module")
def toy_to_30(tmp_path_factory) -> str:
    """The toy case trained to step 30 (checkpoints 25 and 30)."""
    experiment, override, mode = CASES["toy"]
    model_dir = str(tmp_path_factory.mktemp("toy_to_30") / "run")
    args = cli_args(experiment, model_dir, override + ",trainer.train_steps=30", mode)
    assert run_in_process(args) == 0
    assert checkpoint_dirs(model_dir) == ["ckpt-25", "ckpt-30"]
    return model_dir


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_latest_checkpoint_is_named_once_and_the_previous_one_resumes_exactly(
    damage, toy_to_30, reference, tmp_path, caplog, capsys
):
    model_dir = str(tmp_path / "run")
    shutil.copytree(toy_to_30, model_dir)
    damaged = os.path.join(model_dir, "ckpt-30")
    DAMAGE[damage](damaged)
    experiment, override, mode = CASES["toy"]

    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(cli_args(experiment, model_dir, override, mode)) == 0

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"skipping corrupt checkpoint {damaged}: ")
    assert REASONS[damage] in warnings[0] and "\n" not in warnings[0]
    restored = os.path.join(model_dir, "ckpt-25")
    assert f"restored model from {restored} at step 25." in capsys.readouterr().out
    # The damaged one was set aside (kept as evidence) when step 30 was saved again.
    assert [n for n in os.listdir(model_dir) if n.startswith(".ckpt-30.corrupt-")]
    assert run_differences(reference("toy"), model_dir) == []


@pytest.mark.slow
def test_the_cli_reports_a_damaged_checkpoint_in_one_stderr_line(toy_to_30, tmp_path):
    model_dir = str(tmp_path / "run")
    shutil.copytree(toy_to_30, model_dir)
    truncate(os.path.join(model_dir, "ckpt-30"))
    experiment, override, mode = CASES["toy"]

    result = run_cli(cli_args(experiment, model_dir, override + ",trainer.train_steps=35", mode),
                     plain=True)

    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"WARNING torchgarden: skipping corrupt checkpoint {model_dir}/ckpt-30: "
        f"'{model_dir}/ckpt-30/state.pt' has "
        f"{os.path.getsize(os.path.join(toy_to_30, 'ckpt-30', 'state.pt')) // 2} bytes but "
        f"meta.json records {os.path.getsize(os.path.join(toy_to_30, 'ckpt-30', 'state.pt'))} "
        "(truncated or altered)."
    ]


class _Weights(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(256, 256))  # 256 KiB of state.pt


def slow_torch_save(monkeypatch, pause: float = 0.004) -> None:
    """Makes state.pt writes take a while (four chunks with pauses), widening the race."""
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        # torchgarden saves through a file object (hashing, direct I/O) named state.pt.
        if not str(getattr(f, "name", f)).endswith("state.pt"):
            return real_save(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        for start in range(0, len(data), len(data) // 4 + 1):
            f.write(data[start:start + len(data) // 4 + 1])
            time.sleep(pause)

    monkeypatch.setattr(torch, "save", save)


def test_evaluate_continuously_never_reads_a_half_written_checkpoint(tmp_path, monkeypatch):
    slow_torch_save(monkeypatch)
    directory = str(tmp_path / "run")
    writer_model, writer_step = _Weights(), GlobalStep()
    writer = CheckpointManager(Checkpoint(model=writer_model, global_step=writer_step),
                               directory, max_to_keep=3)
    done = threading.Event()
    temp_dirs_seen = []

    def train():
        for step in range(1, 31):
            with torch.no_grad():
                writer_model.w.fill_(float(step))
            writer_step.value = step
            writer.save(step)
        done.set()

    class Evaluator:
        def __init__(self):
            self.seen: list[tuple[int, float, float]] = []

        def evaluate(self, num_steps):
            temp_dirs_seen.extend(n for n in os.listdir(directory) if ".tmp-" in n)
            w = reader_model.w.detach()
            self.seen.append((int(reader_step), float(w.min()), float(w.max())))
            return {"step": float(reader_step.value)}

    reader_model, reader_step = _Weights(), GlobalStep()
    reader = CheckpointManager(Checkpoint(model=reader_model, global_step=reader_step), directory)
    evaluator = Evaluator()
    controller = Controller(global_step=reader_step, evaluator=evaluator,
                            checkpoint_manager=reader, print_logs=False)
    thread = threading.Thread(target=train)
    thread.start()
    real_iterator = selection.checkpoints_iterator
    monkeypatch.setattr(
        "torchgarden.checkpoint.checkpoints_iterator",
        lambda d, **kw: real_iterator(d, **{**kw, "poll_interval": 0.002}),
    )
    try:
        controller.evaluate_continuously(timeout=0.5, timeout_fn=done.is_set)
    finally:
        thread.join()

    assert len(evaluator.seen) >= 3
    for step, low, high in evaluator.seen:  # Every restore was a whole, matching checkpoint.
        assert low == high == float(step)
    steps = [s for s, _, _ in evaluator.seen]
    assert steps == sorted(set(steps)) and steps[-1] == 30
    print(f"evaluated {len(steps)} checkpoints while 30 were written; temp dirs present during "
          f"evaluations: {len(temp_dirs_seen)}")


def test_old_checkpoints_are_deleted_only_after_a_newer_one_is_durable(tmp_path, monkeypatch):
    directory = str(tmp_path / "run")
    step = GlobalStep()
    manager = CheckpointManager(Checkpoint(model=torch.nn.Linear(2, 2), global_step=step),
                                directory, max_to_keep=2)
    events: list[tuple[str, str]] = []
    real_fsync_dir, real_remove = layout.fsync_dir, layout.remove_checkpoint

    def fsync_dir(path):
        real_fsync_dir(path)
        if os.path.normpath(path) == os.path.normpath(directory):
            events.append(("durable", ",".join(checkpoint_dirs(directory))))

    def remove_checkpoint(path):
        events.append(("delete", os.path.basename(path)))
        return real_remove(path)

    monkeypatch.setattr(layout, "fsync_dir", fsync_dir)
    monkeypatch.setattr(layout, "remove_checkpoint", remove_checkpoint)
    for number in (1, 2, 3, 4):
        manager.save(number)

    assert events == [
        ("durable", "ckpt-1"), ("durable", "ckpt-1,ckpt-2"),
        ("durable", "ckpt-1,ckpt-2,ckpt-3"), ("delete", "ckpt-1"),
        ("durable", "ckpt-2,ckpt-3,ckpt-4"), ("delete", "ckpt-2"),
    ]

    def disk_full(state, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    events.clear()
    monkeypatch.setattr(_direct, "save_hashed", disk_full)
    with pytest.raises(CheckpointWriteError, match="ckpt-5 .*No space left on device.*ckpt-4"):
        manager.save(5)
    assert sorted(os.listdir(directory)) == ["ckpt-3", "ckpt-4"]  # Nothing deleted or left.
    assert [e for e in events if e[0] == "delete" and e[1].startswith("ckpt-")] == []


def test_the_newest_verified_checkpoint_is_never_deleted(tmp_path, caplog):
    directory = str(tmp_path / "run")
    model, step = torch.nn.Linear(2, 2), GlobalStep()
    first = CheckpointManager(Checkpoint(model=model, global_step=step), directory, max_to_keep=3)
    for number in (10, 20, 30):
        step.value = number
        first.save(number)
    truncate(os.path.join(directory, "ckpt-20"))
    flip_a_byte(os.path.join(directory, "ckpt-30"))

    manager = CheckpointManager(Checkpoint(model=model, global_step=step), directory,
                                max_to_keep=1)
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert manager.restore() == os.path.join(directory, "ckpt-10")
    assert len(caplog.records) == 2 and step.value == 10
    # With max_to_keep=1 the only verified checkpoint stays until a newer one is durable;
    # the damaged ones neither count against max_to_keep nor get deleted.
    assert checkpoint_dirs(directory) == ["ckpt-10", "ckpt-20", "ckpt-30"]
    step.value = 15
    manager.save(15)
    assert checkpoint_dirs(directory) == ["ckpt-15", "ckpt-20", "ckpt-30"]
    CheckpointManager.verify(os.path.join(directory, "ckpt-15"))
    for damaged in ("ckpt-20", "ckpt-30"):
        with pytest.raises(CorruptCheckpointError):
            CheckpointManager.verify(os.path.join(directory, damaged))


def test_a_restart_cleans_up_temp_dirs_of_a_killed_save(tmp_path):
    directory = str(tmp_path / "run")
    manager = CheckpointManager(Checkpoint(model=torch.nn.Linear(2, 2)), directory)
    manager.save(1)
    stale = os.path.join(directory, ".ckpt-2.tmp-999999999-deadbeef")  # No such pid.
    os.makedirs(stale)
    with open(os.path.join(stale, "state.pt"), "wb") as f:
        f.write(b"half")
    assert manager.latest_checkpoint == os.path.join(directory, "ckpt-1")  # Never listed.
    manager.save(2)
    assert sorted(os.listdir(directory)) == ["ckpt-1", "ckpt-2"]
    with open(os.path.join(directory, "ckpt-2", "meta.json")) as f:
        assert json.load(f)["step"] == 2


def test_a_delete_cut_short_at_the_last_save_is_cleaned_by_the_rerun(toy_to_30, tmp_path):
    """Retention renames a checkpoint away, then deletes it. A kill in between at the last
    save leaves the hidden directory, and the rerun has nothing to train (so no save to
    clean up after): the rerun's trainer removes it once it holds the run lock; an
    evaluator (which never writes there) leaves it alone."""
    model_dir = str(tmp_path / "run")
    shutil.copytree(toy_to_30, model_dir)
    leftover = os.path.join(model_dir, ".ckpt-20.tmp-999999999-deadbeef")  # A dead pid.
    os.makedirs(leftover)
    with open(os.path.join(leftover, "state.pt"), "wb") as f:
        f.write(b"half deleted")
    experiment, override, mode = CASES["toy"]
    evaluation = ["eval", "--model_dir", model_dir]
    assert run_in_process(evaluation) == 0
    assert os.path.isdir(leftover)
    assert run_in_process(cli_args(experiment, model_dir, override + ",trainer.train_steps=30",
                                   mode)) == 0
    assert not os.path.exists(leftover)
    assert checkpoint_dirs(model_dir) == ["ckpt-25", "ckpt-30"]
