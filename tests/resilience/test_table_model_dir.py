"""Adversarial table, model_dir group: what a model_dir (or a path to one) can be.

Rows with exit 2 leave the model_dir as it was; rows with exit 0 are faults torchgarden
works around with one warning (a stale lock needs none) and leave it lawfully extended.
"""

from __future__ import annotations

import errno
import json
import os

import pytest
from table import DIGITS, SHORT, TO_20, TOY, Case, run_case, write

from torchgarden.train_lib.run_lock import LOCK_FILE


def toy(model_dir: str, override: str = SHORT) -> list[str]:
    return [*TOY, "--model_dir", model_dir, "--params_override", override]


def evaluate(model_dir: str, *extra: str) -> list[str]:
    return ["eval", "--experiment", "toy_regression", "--model_dir", model_dir, *extra]


def stale_lock(model_dir: str, _tmp: str) -> None:
    write(os.path.join(model_dir, LOCK_FILE),
          json.dumps({"pid": 999999999, "host": "gone", "started": "yesterday"}))


def no_lock_left(model_dir: str, _tmp: str) -> None:
    assert not os.path.exists(os.path.join(model_dir, LOCK_FILE))
    assert "ckpt-20" in os.listdir(model_dir)


def enospc_writing_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", pwrite)


def enospc_in_the_event_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorBoard's writer thread fails its first write, as on a full disk."""
    from tensorboard.summary.writer import record_writer

    def write_record(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_writer.RecordWriter, "write", write_record)


def eval_wrote_only_under_eval(model_dir: str, _tmp: str) -> None:
    events = [n for n in os.listdir(os.path.join(model_dir, "eval")) if "tfevents" in n]
    assert events and not os.path.exists(os.path.join(model_dir, "validation"))


CASES = [
    Case("model_dir_is_a_file", lambda d, t: toy(write(f"{t}/a_file", "x")),
         ("a_file", "not a directory")),
    Case("model_dir_under_a_file", lambda d, t: toy(os.path.join(write(f"{t}/a_file", "x"), "run")),
         ("a_file", "not a directory")),
    Case("model_dir_symlink_loop", lambda d, t: toy(d), ("loop of symbolic links",),
         setup=lambda d, t: (os.symlink(f"{t}/run2", d), os.symlink(d, f"{t}/run2"))),
    Case("model_dir_dangling_symlink", lambda d, t: toy(d), ("symbolic link to nothing",),
         setup=lambda d, t: os.symlink(f"{t}/nowhere", d)),
    Case("params_yaml_is_a_directory", lambda d, t: toy(d), ("params.yaml", "not a file"),
         "existing", setup=lambda d, t: os.makedirs(f"{d}/params.yaml")),
    Case("train_is_a_file", lambda d, t: toy(d), ("/train", "not a directory"), "existing",
         setup=lambda d, t: write(f"{d}/train", "not a folder")),
    Case("validation_is_a_file",
         lambda d, t: [*TOY[:-1], "train_and_eval", "--model_dir", d, "--params_override", SHORT],
         ("/validation", "not a directory"), "existing",
         setup=lambda d, t: write(f"{d}/validation", "")),
    Case("best_ckpt_is_a_file",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override", SHORT],
         ("/best_ckpt", "not a directory"), "existing",
         setup=lambda d, t: write(f"{d}/best_ckpt", "")),
    Case("lock_file_is_a_directory", lambda d, t: toy(d), (LOCK_FILE, "Is a directory"),
         "existing", setup=lambda d, t: os.makedirs(f"{d}/{LOCK_FILE}")),
    Case("disk_full_writing_the_lock", lambda d, t: toy(d), (LOCK_FILE, "No space left"),
         patch=enospc_writing_the_lock),
    Case("disk_full_at_the_first_event", lambda d, t: toy(d),
         ("writing to", "No space left on device", "MiB free", "starts over"), "existing",
         patch=enospc_in_the_event_writer),
    Case("eval_of_an_empty_model_dir", lambda d, t: evaluate(d),
         ("holds no checkpoint", "train first"), "existing"),
    Case("eval_of_a_missing_model_dir", lambda d, t: evaluate(d), ("holds no checkpoint",)),
    Case("eval_with_eval_a_file", lambda d, t: evaluate(d), ("/eval", "not a directory"),
         "trained", setup=lambda d, t: write(f"{d}/eval", "")),
    Case("eval_with_garbled_params_yaml", lambda d, t: evaluate(d), ("params.yaml", "line"),
         "trained", setup=lambda d, t: write(f"{d}/params.yaml", "task: [\n")),
    Case("eval_with_params_yaml_of_an_unimported_class",
         lambda d, t: ["eval", "--model_dir", d], ("params.yaml", "unimported_project.MyTaskConfig",
                                                   "--import unimported_project"),
         "trained", setup=lambda d, t: write(f"{d}/params.yaml",
                                             "task:\n  _type: unimported_project.MyTaskConfig\n")),
    Case("eval_without_experiment_or_params_yaml", lambda d, t: ["eval", "--model_dir", d],
         ("holds no params.yaml", "trained run's directory", "--experiment"), "existing"),
    Case("eval_without_experiment_of_a_missing_model_dir", lambda d, t: ["eval", "--model_dir", d],
         ("does not exist", "trained run's directory", "--experiment")),
    # Faults worked around (exit 0).
    Case("stale_lock_of_a_killed_run", lambda d, t: toy(d, TO_20), (), "trained", code=0,
         setup=stale_lock, check=no_lock_left, warnings=0),
    Case("eval_writes_only_under_eval", lambda d, t: evaluate(d), (), "trained", code=0,
         check=eval_wrote_only_under_eval, warnings=0),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_model_dir_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))
