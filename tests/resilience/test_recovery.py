"""Loss blow-up recovery (Model Garden's ``loss_upper_bound`` / ``recovery_*`` semantics).

The toy task is poisoned at a chosen step: its weights become NaN (or 1e4 times too
large) right before that step's forward pass, as after a bad batch. The real CLI runs
in process with checkpoints every 5 steps.
"""

from __future__ import annotations

import logging
import math
import re

import pytest
import torch
from resilience_tools import CASES, cli_args, final_state, run_differences, run_in_process

from torchgarden.tasks.toy import ToyRegressionTask


def poison(monkeypatch, *, at: int, value: float = math.nan, persistent: bool = False) -> list[int]:
    """Poisons the weights before train step ``at`` (and every later one if persistent).

    Returns the list of global steps each train step call ran at (it grows as training runs).
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


def test_max_trials_0_fails_with_model_gardens_message(tmp_path, monkeypatch):
    steps_run = poison(monkeypatch, at=13)
    with pytest.raises(RuntimeError) as failure:
        run_in_process(toy_args(str(tmp_path / "run"), "trainer.recovery_max_trials=0"))
    assert str(failure.value) == "The loss value is NaN after training loop and it happens 1 times."
    assert len(steps_run) == 15  # Checked once per loop: the loop of steps 11-15 finished.


def test_a_transient_blow_up_rolls_back_and_continues_exactly(
    tmp_path, monkeypatch, caplog, reference
):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert run_in_process(toy_args(model_dir, "trainer.recovery_max_trials=2")) == 0

    [warning] = [r.getMessage() for r in caplog.records if "recovering" in r.getMessage()]
    assert warning == (f"recovering from a loss blow-up (loss=nan at step 15, trial 1 of 2): "
                       f"restored {model_dir}/ckpt-10.")
    assert len(steps_run) == 65  # Steps 11-15 ran twice.
    # Rolling back restores weights, optimizer, RNG and data position: the run ends with
    # the same bits (and the same logged losses, NaN rewritten) as one that never blew up.
    assert run_differences(reference("toy"), model_dir) == []


def test_a_persistent_blow_up_fails_after_max_trials_recoveries(tmp_path, monkeypatch, caplog):
    poison(monkeypatch, at=13, persistent=True)
    with caplog.at_level(logging.WARNING, logger="torchgarden"), pytest.raises(RuntimeError) as failure:
        run_in_process(toy_args(str(tmp_path / "run"), "trainer.recovery_max_trials=2"))
    assert str(failure.value) == "The loss value is NaN after training loop and it happens 3 times."
    assert len([r for r in caplog.records if "recovering" in r.getMessage()]) == 2


def test_check_every_step_catches_the_blow_up_at_its_exact_step(tmp_path, monkeypatch):
    steps_run = poison(monkeypatch, at=13)
    with pytest.raises(RuntimeError, match="NaN after training loop and it happens 1 times"):
        run_in_process(toy_args(str(tmp_path / "run"),
                                "trainer.recovery_max_trials=0,trainer.recovery_check_every_step=true"))
    assert len(steps_run) == 13  # Stopped right after step 13, not at the loop end (15).


def test_check_every_step_rolls_back_and_continues_exactly(tmp_path, monkeypatch, reference):
    steps_run = poison(monkeypatch, at=13)
    model_dir = str(tmp_path / "run")
    assert run_in_process(toy_args(
        model_dir, "trainer.recovery_max_trials=1,trainer.recovery_check_every_step=true")) == 0
    assert len(steps_run) == 63  # Steps 11-13 ran twice.
    assert run_differences(reference("toy"), model_dir) == []


def test_a_loss_above_the_bound_trips_only_from_recovery_begin_steps(tmp_path, monkeypatch):
    common = "trainer.recovery_max_trials=0,trainer.recovery_check_every_step=true," \
             "trainer.loss_upper_bound=100"
    poison(monkeypatch, at=13, value=1e4)
    with pytest.raises(RuntimeError) as failure:
        run_in_process(toy_args(str(tmp_path / "a"), common))
    assert re.fullmatch(r"The loss value is [0-9.e+]+, which is larger than the bound 100\.0, "
                        r"happens 1 times\.", str(failure.value)), str(failure.value)

    # Before recovery_begin_steps a finite loss above the bound is not a blow-up.
    monkeypatch.undo()
    steps_run = poison(monkeypatch, at=13, value=1e4)
    model_dir = str(tmp_path / "b")
    code = run_in_process(toy_args(model_dir, common + ",trainer.recovery_begin_steps=14,"
                                   "trainer.train_steps=13"))
    assert code == 0 and len(steps_run) == 13
    assert final_state(model_dir)["global_step"]["value"] == 13
