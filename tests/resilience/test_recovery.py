"""Loss blow-up recovery: Model Garden's ``loss_upper_bound`` / ``recovery_*`` semantics, plus
what torchgarden adds so that recovery really recovers.

* A trip rolls back to the last finite checkpoint (or, with none yet, the initial state)
  and replays those steps checking the loss after every step: a transient blow-up ends
  bit-identical to a run without it.
* A second trip within the replayed steps is deterministic: the batches of that exact
  step are skipped from then on, so the run goes on along another trajectory.
* Past ``recovery_max_trials`` the CLI stops with one line (exit 3) naming the step and,
  where known, the batch and the data file; a state with NaN weights is never saved.

Two kinds of fault: the toy task's weights are poisoned at a chosen call of its
``train_step`` (a transient fault), and the digits task reads an ``.npz`` with one huge
(finite) pixel that makes the loss blow up at the batch holding it (a bad batch).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re

import numpy as np
import pytest
import torch
from resilience_tools import (
    CASES,
    checkpoint_dirs,
    cli_args,
    final_state,
    load_state,
    run_differences,
    run_in_process,
)

from torchgarden.checkpoint import _direct
from torchgarden.tasks.toy import ToyRegressionTask


def poison(monkeypatch, *, at: int, value: float = math.nan, persistent: bool = False) -> list[int]:
    """Poisons the weights before train step call ``at`` (and every later one if persistent).

    Returns the list of calls made so far (it grows as training runs).
    """
    steps_run: list[int] = []
    real_train_step = ToyRegressionTask.train_step

    def train_step(self, inputs, model, optimizer, metrics=None):
        steps_run.append(len(steps_run) + 1)
        if len(steps_run) == at or (persistent and len(steps_run) >= at):
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.mul_(value) if not math.isnan(value) else parameter.fill_(value)
        return real_train_step(self, inputs, model, optimizer, metrics)

    monkeypatch.setattr(ToyRegressionTask, "train_step", train_step)
    return steps_run


def toy_args(model_dir: str, recovery: str) -> list[str]:
    experiment, override, mode = CASES["toy"]
    return cli_args(experiment, model_dir, f"{override},{recovery}", mode)


def diverged(capsys) -> str:
    """The one stderr line of a run that stopped with exit 3."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("torchgarden: training diverged: "), lines[0]
    return lines[0]


def test_max_trials_0_fails_with_model_gardens_message(tmp_path, monkeypatch, capsys):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    assert run_in_process(toy_args(model_dir, "trainer.recovery_max_trials=0")) == 3
    line = diverged(capsys)
    assert "The loss value is NaN after training loop and it happens 1 times. At step 15" in line
    assert f"the last finite checkpoint {model_dir}/ckpt-10 is intact" in line
    assert len(steps_run) == 15  # Checked once per loop: the loop of steps 11-15 finished.
    assert checkpoint_dirs(model_dir) == ["ckpt-5", "ckpt-10"]  # No NaN checkpoint.


def test_a_transient_blow_up_rolls_back_and_continues_exactly(
    tmp_path, monkeypatch, caplog, reference
):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(toy_args(model_dir, "trainer.recovery_max_trials=2")) == 0

    [warning] = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert warning == (f"recovering from a loss blow-up (loss=nan at step 15, trial 1 of 2): "
                       f"restored {model_dir}/ckpt-10; replaying, checking every step.")
    assert len(steps_run) == 65  # Steps 11-15 ran twice; the replay did not blow up.
    # Rolling back restores weights, optimizer, RNG and data position: the run ends with
    # the same bits (and the same logged losses, NaN rewritten) as one that never blew up.
    assert run_differences(reference("toy"), model_dir) == []


def test_a_persistent_blow_up_stops_after_max_trials_without_looping(
    tmp_path, monkeypatch, caplog, capsys
):
    steps_run = poison(monkeypatch, at=13, persistent=True)
    model_dir = str(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(toy_args(model_dir, "trainer.recovery_max_trials=2")) == 3
    line = diverged(capsys)
    assert "The loss value is NaN after training loop and it happens 3 times. At step 11" in line
    warnings = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert len(warnings) == 2
    assert warnings[1].endswith("skipping batch 2 of epoch 1 of task.train_data from now on, "
                                "as it blew up twice.")
    assert len(steps_run) == 15 + 1 + 1  # The loop, the replayed step 11, the next step 11.
    assert checkpoint_dirs(model_dir) == ["ckpt-5", "ckpt-10"]


def test_check_every_step_catches_the_blow_up_at_its_exact_step(tmp_path, monkeypatch, capsys):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    assert run_in_process(toy_args(
        model_dir, "trainer.recovery_max_trials=0,trainer.recovery_check_every_step=true")) == 3
    line = diverged(capsys)
    assert "it happens 1 times. At step 13, reading batch 4 of epoch 1 of task.train_data" in line
    assert len(steps_run) == 13  # Stopped right after step 13, not at the loop end (15).


def test_check_every_step_rolls_back_and_continues_exactly(tmp_path, monkeypatch, reference):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    assert run_in_process(toy_args(
        model_dir, "trainer.recovery_max_trials=1,trainer.recovery_check_every_step=true")) == 0
    assert len(steps_run) == 63  # Steps 11-13 ran twice.
    assert run_differences(reference("toy"), model_dir) == []


def test_a_loss_above_the_bound_trips_only_from_recovery_begin_steps(
    tmp_path, monkeypatch, capsys
):
    common = "trainer.recovery_max_trials=0,trainer.recovery_check_every_step=true," \
             "trainer.loss_upper_bound=100"
    poison(monkeypatch, at=13, value=1e4)
    assert run_in_process(toy_args(str(tmp_path / "a"), common)) == 3
    assert re.search(r"The loss value is [0-9.e+]+, which is larger than the bound 100\.0, "
                     r"happens 1 times\. At step 13", diverged(capsys))

    # Before recovery_begin_steps a finite loss above the bound is not a blow-up.
    monkeypatch.undo()
    steps_run = poison(monkeypatch, at=13, value=1e4)
    model_dir = str(tmp_path / "b")
    code = run_in_process(toy_args(model_dir, common + ",trainer.recovery_begin_steps=14,"
                                   "trainer.train_steps=13"))
    assert code == 0 and len(steps_run) == 13
    assert final_state(model_dir)["global_step"]["value"] == 13


# ------------------------------------------------------------------ a bad batch in the data

BAD_EXAMPLE = 37  # With batches of 4 in file order: batch 9, read by step 10.


def bad_batch_npz(tmp_path, bad_example: int = BAD_EXAMPLE) -> str:
    """100 random 8x8 digits-like images; one pixel of ``bad_example`` is 1e38 (finite)."""
    rng = np.random.default_rng(0)
    x = rng.random((100, 1, 8, 8), dtype=np.float32)
    x[bad_example, 0, 3, 3] = 1e38
    path = str(tmp_path / f"data_{bad_example}.npz")
    np.savez(path, x=x, y=rng.integers(0, 10, size=100))
    return path


def digits_args(model_dir: str, data: str, extra: str) -> list[str]:
    override = (
        "trainer.train_steps=20,trainer.steps_per_loop=5,trainer.summary_interval=5,"
        "trainer.checkpoint_interval=5,trainer.max_to_keep=10,runtime.seed=1,"
        "task.model.hidden_sizes=[16],task.train_data.source=npz,task.train_data.shuffle=false,"
        f"task.train_data.input_path={data},task.train_data.global_batch_size=4{extra}"
    )
    return cli_args("image_classification", model_dir, override, "train")


def test_a_bad_batch_is_skipped_after_it_blows_up_twice(tmp_path, caplog):
    data = bad_batch_npz(tmp_path)
    model_dir = str(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        code = run_in_process(digits_args(model_dir, data, ",trainer.recovery_max_trials=2"))
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "at step 10, trial 1 of 2): restored" in warnings[0] and "ckpt-5; replaying" in warnings[0]
    assert warnings[1].endswith(
        f"skipping batch 9 of epoch 0 of task.train_data.input_path={data} from now on, as "
        "it blew up twice.")
    state = final_state(model_dir)
    assert state["global_step"]["value"] == 20
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    # 20 steps read 21 batches: batch 9 was read (twice) and then stepped over for good.
    assert state["train_iterator"] == {"epoch": 0, "batches_in_epoch": 21, "skipped": [[0, 9]]}
    assert checkpoint_dirs(model_dir) == ["ckpt-5", "ckpt-10", "ckpt-15", "ckpt-20"]


def test_a_bad_batch_with_too_few_trials_names_step_batch_and_file(tmp_path, capsys):
    data = bad_batch_npz(tmp_path)
    model_dir = str(tmp_path / "run")
    assert run_in_process(digits_args(model_dir, data, ",trainer.recovery_max_trials=1")) == 3
    line = diverged(capsys)
    assert "happens 2 times. At step 10, reading batch 9 of epoch 0 of " in line
    assert f"input_path={data}" in line and "allow one more trial" in line
    assert checkpoint_dirs(model_dir) == ["ckpt-5"]


def test_without_a_checkpoint_recovery_rolls_back_to_the_initial_state(tmp_path, caplog):
    data = bad_batch_npz(tmp_path)
    model_dir = str(tmp_path / "run")
    extra = ",trainer.recovery_max_trials=2,trainer.checkpoint_interval=100"
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(digits_args(model_dir, data, extra)) == 0
    warnings = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert len(warnings) == 2 and all("restored the initial state (step 0)" in w for w in warnings)
    state = final_state(model_dir)
    assert checkpoint_dirs(model_dir) == ["ckpt-20"]
    assert all(torch.isfinite(v).all() for v in state["model"].values())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_nan_weights_are_never_saved_even_with_recovery_off(
    tmp_path, monkeypatch, capsys, asynchronous
):
    poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    recovery = "trainer.recovery_max_trials=-1"
    if asynchronous:  # Refused on the writer thread, reported by the next save.
        recovery += ",trainer.enable_async_checkpointing=true"
    assert run_in_process(toy_args(model_dir, recovery)) == 3
    line = diverged(capsys)
    assert "not saving ckpt-15: model['weight'] is NaN or inf" in line
    assert "the last finite checkpoint ckpt-10 is intact" in line
    assert checkpoint_dirs(model_dir) == ["ckpt-5", "ckpt-10"]


def test_a_checkpoint_with_nan_weights_is_skipped_with_one_warning(tmp_path, caplog, reference):
    experiment, override, mode = CASES["toy"]
    model_dir = str(tmp_path / "run")
    args = cli_args(experiment, model_dir, override.replace("train_steps=60", "train_steps=30"),
                    mode)
    assert run_in_process(args) == 0
    # What an older torchgarden could leave: ckpt-35 holding NaN weights, consistently hashed.
    state = load_state(os.path.join(model_dir, "ckpt-30"))
    state["model"]["weight"].fill_(float("nan"))
    state["global_step"]["value"] = 35
    with open(os.path.join(model_dir, "ckpt-30", "meta.json")) as f:
        config = json.load(f)["config"]
    _direct.write_checkpoint(model_dir, "ckpt", 35, state, config=config, extra=None,
                             version="old")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(cli_args(experiment, model_dir, override, mode)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"skipping checkpoint {model_dir}/ckpt-35: model['weight'] is NaN or "
                        "inf; it is not a resume point."]
    # Resumed from ckpt-30, and ckpt-35 was set aside (kept) when step 35 was saved again.
    assert [n for n in os.listdir(model_dir) if n.startswith(".ckpt-35.corrupt-")]
    assert run_differences(reference("toy"), model_dir) == []


@pytest.mark.parametrize("explicit", [True])
def test_an_explicit_restore_loads_nan_weights_with_a_warning(tmp_path, caplog, explicit):
    from torchgarden.checkpoint import Checkpoint, CheckpointManager

    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    state = {"model": model.state_dict()}
    _direct.write_checkpoint(str(tmp_path), "ckpt", 3, state, config=None, extra=None,
                             version="x")
    fresh = torch.nn.Linear(2, 1)
    manager = CheckpointManager(Checkpoint(model=fresh), tmp_path)
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        with pytest.raises(Exception, match="non-finite"):
            manager.restore()  # Never chosen as a resume point...
        assert manager.restore(str(tmp_path / "ckpt-3")) == str(tmp_path / "ckpt-3")  # ...but asked for.
    assert torch.isnan(fresh.weight).all()
    assert any("restoring" in r.getMessage() and "as asked" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_bad_batch_inside_a_multi_step_call_is_found_at_its_step(tmp_path, caplog, compiled):
    """Under ``runtime.enable_xla`` five steps run per graph call. Example 29 is in batch 7,
    read by step 8: inside the call of steps 6-10. The loop's loss trips recovery at step
    10; the replay runs under the step plan that checks every step, so the blow-up is found
    at step 8 and batch 7 skipped -- as without compile (before, the replay ran whole
    unchecked calls and blamed the last batch of the call)."""
    data = bad_batch_npz(tmp_path, bad_example=29)
    model_dir = str(tmp_path / "run")
    extra = f",trainer.recovery_max_trials=2,runtime.enable_xla={str(compiled).lower()}"
    extra += ",runtime.steps_per_graph=5" if compiled else ""
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        code = run_in_process(digits_args(model_dir, data, extra))
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "at step 10, trial 1 of 2): restored" in warnings[0] and "ckpt-5; replaying" in warnings[0]
    assert "at step 8, trial 2 of 2): restored" in warnings[1]
    assert warnings[1].endswith(
        f"skipping batch 7 of epoch 0 of task.train_data.input_path={data} from now on, as "
        "it blew up twice.")
    state = final_state(model_dir)
    assert state["global_step"]["value"] == 20
    assert state["train_iterator"] == {"epoch": 0, "batches_in_epoch": 21, "skipped": [[0, 7]]}
