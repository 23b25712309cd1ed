"""The adversarial table's machinery: a row, how it runs, and what every row must show.

Each row runs the real CLI in process (``torchgarden.cli.main.main``) against a model_dir
that is fresh (it must still not exist afterwards), holds an unrelated file, or holds a
short trained run (copied from a session fixture). Every row asserts:

* the exit status (2 for bad input, 0 for faults torchgarden recovers from);
* stderr: exactly one ``torchgarden: error:`` line naming the key or file (no traceback),
  or, for a recovered fault, exactly one warning naming it;
* the model_dir afterwards: absent (fresh), byte-identical, or lawfully extended (every
  file that was there is still there with the same bytes, or was set aside under a
  hidden ``.<name>.corrupt-*`` name with the same bytes; new files only added).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable

import numpy as np
import pytest
from resilience_tools import process_state_restored

from torchgarden.cli.main import main

TOY = ["train", "--experiment", "toy_regression", "--mode", "train"]
DIGITS = ["train", "--experiment", "image_classification", "--mode", "train"]
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5"
EVERY_5 = ",trainer.checkpoint_interval=5"
#: Resume the trained runs (checkpoints 5 and 10) and train on to step 20.
TO_20 = f"{SHORT},trainer.train_steps=20"


@dataclasses.dataclass
class Case:
    """One row of the table.

    Attributes:
        name: The row id.
        argv: ``(model_dir, tmp dir) -> argv``.
        says: Substrings of the one stderr line (after ``torchgarden: error: ``), or of
            the one warning when ``code`` is 0.
        model_dir: ``"fresh"`` (must stay absent), ``"existing"`` (holds an unrelated
            file), ``"trained"`` / ``"trained_digits"`` (10 steps trained), or ``"trains"``
            (fresh; fails after training began and must hold a resumable run).
        code: The expected exit status.
        setup: ``(model_dir, tmp dir) -> None`` run before.
        patch: Applied to ``monkeypatch`` before the run.
        check: ``(model_dir, tmp dir) -> None`` run after, for row-specific facts.
        warnings: How many warnings a row with exit 0 logs (each fault: exactly one).
    """

    name: str
    argv: Callable[[str, str], list[str]]
    says: tuple[str, ...]
    model_dir: str = "fresh"
    code: int = 2
    setup: Callable[[str, str], None] | None = None
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    check: Callable[[str, str], None] | None = None
    warnings: int = 1


def write(path: str, text: str | bytes) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    return path


def npz(path: str, **arrays) -> str:
    np.savez(path, **arrays)
    return path


def digits_npz(tmp: str, *, x_shape=(20, 1, 8, 8), labels=None, n=20, name="data.npz") -> str:
    rng = np.random.default_rng(0)
    y = np.asarray(labels if labels is not None else rng.integers(0, 10, size=n))
    return npz(os.path.join(tmp, name), x=rng.random(x_shape, dtype=np.float32), y=y)


def digits_source(path: str, extra: str = "") -> list[str]:
    return ["--params_override",
            f"{SHORT},task.train_data.source=npz,task.train_data.input_path={path}"
            f",task.train_data.global_batch_size=4{extra}"]


def tree(path: str) -> dict[str, str]:
    """relative path -> sha256 of every file (and "dir" for every directory) under path."""
    if not os.path.exists(path):
        return {}
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), path)] = "dir"
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            relative = os.path.relpath(os.path.join(root, name), path)
            # metrics.jsonl is kept as its rows: a resume may drop the rows past the step
            # it restored, then append (issue 12); tree() compares them row by row.
            out[relative] = data.decode() if name == "metrics.jsonl" else (
                hashlib.sha256(data).hexdigest())
    return out


def _rows_lawfully_resumed(before: str, after: str) -> bool:
    """``after`` keeps a prefix of ``before``'s rows, dropping only rows of later steps
    than the last row it kept, then appends."""
    old, new = before.splitlines(), after.splitlines()
    kept = 0
    while kept < min(len(old), len(new)) and old[kept] == new[kept]:
        kept += 1
    last = json.loads(old[kept - 1])["step"] if kept else -1
    return all(json.loads(row)["step"] > last for row in old[kept:])


#: Files a run that trains may replace: the config it trains under, and a dead run's lock.
REPLACEABLE = ("params.yaml", ".torchgarden.lock")


def lawfully_extended(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What breaks "every old file kept byte for byte, or set aside with the same bytes"
    (``params.yaml`` may be rewritten by a run that trains on, a stale lock removed)."""
    problems = []
    for path, digest in before.items():
        if after.get(path) == digest or path in REPLACEABLE:
            continue
        if path.endswith("metrics.jsonl") and path in after and _rows_lawfully_resumed(
                digest, after[path]):
            continue
        top, _, rest = path.partition(os.sep)
        moved = [p for p in after if p.startswith(f".{top}.corrupt-")
                 and p.partition(os.sep)[2] == rest and after[p] == digest]
        if not moved:
            problems.append(f"{path} changed or vanished")
    return problems


def run_quietly(argv: list[str]) -> int:
    with process_state_restored():
        return main(argv)


def run_case(case: Case, tmp: str, trained: dict[str, str], capsys, caplog, monkeypatch) -> str:
    """Runs one row and asserts what every row must show; returns the line it printed."""
    model_dir = os.path.join(tmp, "run")
    if case.model_dir == "existing":
        write(os.path.join(model_dir, "notes.txt"), "my notes\n")
    elif case.model_dir in trained:
        import shutil

        shutil.copytree(trained[case.model_dir], model_dir, symlinks=True)
    if case.setup is not None:
        case.setup(model_dir, tmp)
    argv = case.argv(model_dir, tmp)
    existed = os.path.lexists(model_dir)
    before = tree(model_dir)
    capsys.readouterr()
    if case.patch is not None:
        case.patch(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        code = run_quietly(argv)
    err = capsys.readouterr().err.strip()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert code == case.code, err
    if case.code:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("torchgarden: error: "), err
        assert "Traceback" not in err
        line = lines[0]
    else:
        assert len(warnings) == case.warnings, warnings
        line = warnings[0] if warnings else ""
    for expected in case.says:
        assert expected in line, f"{expected!r} not in {line!r}"
    after = tree(model_dir)
    if case.model_dir == "fresh" and not existed:
        assert not os.path.lexists(model_dir), os.listdir(model_dir)
    elif case.model_dir == "trains" or case.code == 0:
        assert lawfully_extended(before, after) == [], lawfully_extended(before, after)
    else:
        assert after == before
    if case.check is not None:
        case.check(model_dir, tmp)
    return line
