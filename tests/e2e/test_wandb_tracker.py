"""Weights & Biases (offline mode): the run id travels in the checkpoint; config once."""

from __future__ import annotations

import glob
import json
import os
import struct

import pytest

from torchgarden.cli.main import main

pytestmark = pytest.mark.slow

_BLOCK = 32768
_HEADER = 7  # ":W&B" + magic (2 bytes) + version (1 byte) at the start of the file.


def wandb_records(path: str) -> list:
    """The protobuf records of a ``.wandb`` file (a LevelDB-style log of 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()  # noqa: SIM115
    assert data[:4] == b":W&B"
    records, offset, pending = [], _HEADER, b""
    while offset + 7 <= len(data):
        left = _BLOCK - offset % _BLOCK
        if left < 7:  # Block trailer.
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        if length == 0 and kind == 0:
            break
        pending += data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # FULL or LAST.
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def history_steps(run_dir: str) -> list[int]:
    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    steps = []
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): item.value_json
                     for item in record.history.item}
            if "train/training_loss" in items:
                steps.append(int(json.loads(items["_step"])))
    return steps


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    model_dir = tmp_path / "run"
    override = ("trainer.train_steps={},trainer.summary_interval=10,"
                "runtime.trackers=[tensorboard,wandb],runtime.wandb.mode=offline")
    for steps in (20, 40):  # The second command resumes from ckpt-20 with a higher target.
        assert main(["train", "--experiment", "toy_regression", "--model_dir", str(model_dir),
                     "--params_override", override.format(steps)]) == 0
    import wandb

    wandb.teardown()  # Waits for W&B's service process to finish writing the files.

    runs = sorted(glob.glob(str(model_dir / "wandb" / "offline-run-*")))
    assert len(runs) == 2
    # One W&B run id, kept in the checkpoint: each folder holds run-<id>.wandb (a folder's
    # name gains "-1" when both runs started within the same second).
    ids = {os.path.basename(f)[4:-6] for run in runs for f in glob.glob(f"{run}/run-*.wandb")}
    assert len(ids) == 1
    assert history_steps(runs[0]) == [10, 20]
    assert history_steps(runs[1]) == [30, 40]
    config_keys = [  # The resolved config, as the new run's config only.
        sorted(u.key for r in wandb_records(glob.glob(f"{run}/run-*.wandb")[0])
               if r.WhichOneof("record_type") == "run" for u in r.run.config.update)
        for run in runs]
    assert config_keys == [["_wandb", "runtime", "task", "trainer"], ["_wandb"]]
