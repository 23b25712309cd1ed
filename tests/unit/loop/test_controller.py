"""Controller cadence pinned with fakes: absolute train targets, loops, summaries,
checkpoints, evaluation intervals, callbacks and the errors Orbit only warns about."""

from __future__ import annotations

import pytest

from torchgarden.callbacks import Callback
from torchgarden.core import GlobalStep
from torchgarden.loop import Controller
from torchgarden.summary import SummaryManagerInterface


class FakeTrainer:
    def __init__(self, step: GlobalStep, advance: int | None = None):
        self.step = step
        self.calls: list[int] = []
        self.advance = advance

    def train(self, num_steps: int):
        self.calls.append(num_steps)
        self.step.assign_add(self.advance if self.advance is not None else num_steps)
        return {"training_loss": 1.0 / self.step.value}


class FakeEvaluator:
    def __init__(self, step: GlobalStep):
        self.step = step
        self.at: list[int] = []

    def evaluate(self, num_steps: int):
        self.at.append(self.step.value)
        return {"validation_loss": 0.5, "nested": {"AP": 0.25}}


class RecordingSummaries(SummaryManagerInterface):
    def __init__(self, step: GlobalStep):
        self.step = step
        self.written: list[tuple[int, dict]] = []

    def summary_writer(self, relative_path: str = ""):
        return None

    def write_summaries(self, summary_dict, step=None):
        self.written.append((self.step.value, dict(summary_dict)))

    def flush(self):
        pass


class FakeCheckpointManager:
    directory = "unused"

    def __init__(self):
        self.saves: list[tuple[int, bool]] = []
        self.restored = 0

    def save(self, checkpoint_number: int, check_interval: bool = True):
        self.saves.append((checkpoint_number, check_interval))
        return f"ckpt-{checkpoint_number}"

    def restore_or_initialize(self):
        self.restored += 1
        return None


def make(steps_per_loop=10, summary_interval=None, **kwargs):
    step = GlobalStep()
    trainer = FakeTrainer(step)
    evaluator = FakeEvaluator(step)
    summaries = RecordingSummaries(step)
    eval_summaries = RecordingSummaries(step)
    controller = Controller(
        global_step=step,
        trainer=trainer,
        evaluator=evaluator,
        steps_per_loop=steps_per_loop,
        summary_interval=summary_interval,
        summary_manager=summaries,
        eval_summary_manager=eval_summaries,
        print_logs=False,
        **kwargs,
    )
    return controller, step, trainer, evaluator, summaries, eval_summaries


def test_train_runs_to_an_absolute_step_in_loops():
    controller, step, trainer, *_ = make(steps_per_loop=10)
    controller.train(25)
    assert trainer.calls == [10, 10, 5]
    assert step.value == 25
    controller.train(25)  # Already there: nothing runs.
    assert trainer.calls == [10, 10, 5]


def test_summary_interval_really_sets_the_write_cadence():
    controller, step, _, _, summaries, _ = make(steps_per_loop=10, summary_interval=30)
    controller.train(100)
    # Written when a loop crosses a multiple of 30, and at the last step.
    assert [s for s, _ in summaries.written] == [30, 60, 90, 100]
    assert "steps_per_second" in summaries.written[0][1]
    assert summaries.written[0][1]["training_loss"] == pytest.approx(1 / 30)


def test_summary_interval_must_be_a_multiple_of_steps_per_loop():
    with pytest.raises(ValueError, match="multiple of `steps_per_loop` \\(10\\); set it to 20"):
        make(steps_per_loop=10, summary_interval=25)


def test_a_loop_that_does_not_advance_the_step_raises():
    step = GlobalStep()
    controller = Controller(
        global_step=step, trainer=FakeTrainer(step, advance=3), steps_per_loop=5, print_logs=False
    )
    with pytest.raises(RuntimeError, match="moved the global step from 0 to 3"):
        controller.train(10)


def test_train_and_evaluate_counts_intervals_from_the_start_step():
    controller, step, _, evaluator, _, eval_summaries = make(steps_per_loop=10)
    step.assign(15)  # As after a resume.
    out = controller.train_and_evaluate(train_steps=55, eval_steps=-1, eval_interval=20)
    assert evaluator.at == [35, 55]
    assert out["nested"]["AP"] == 0.25
    assert [s for s, _ in eval_summaries.written] == [35, 55]


def test_checkpoints_at_loop_ends_and_forced_at_completion():
    manager = FakeCheckpointManager()
    controller, *_ = make(steps_per_loop=10, checkpoint_manager=manager)
    assert manager.restored == 1  # Restored (or initialised) at construction.
    controller.train(30)
    assert manager.saves == [(10, True), (20, True), (30, True), (30, False)]


def test_evaluate_rejects_zero_steps_and_needs_an_evaluator():
    controller, *_ = make()
    with pytest.raises(ValueError, match="positive or exactly -1"):
        controller.evaluate(0)
    step = GlobalStep()
    trainer_only = Controller(
        global_step=step, trainer=FakeTrainer(step), steps_per_loop=1, print_logs=False
    )
    with pytest.raises(ValueError, match="`evaluator` is not set"):
        trainer_only.evaluate(1)


def test_callbacks_see_every_hook_and_can_stop_training():
    events: list[tuple[str, int]] = []

    class Stopper(Callback):
        def on_train_loop_end(self, step, logs):
            events.append(("loop_end", step))
            if step >= 20:
                self.controller.stop_training = True

        def on_eval_end(self, step, logs):
            events.append(("eval_end", step))

    controller, step, trainer, *_ = make(steps_per_loop=10, callbacks=[Stopper()])
    controller.train_and_evaluate(train_steps=100, eval_interval=50)
    assert step.value == 20
    assert events == [("loop_end", 10), ("loop_end", 20), ("eval_end", 20)]


def test_orbit_log_lines(capsys):
    step = GlobalStep()
    controller = Controller(
        global_step=step, trainer=FakeTrainer(step), evaluator=FakeEvaluator(step),
        steps_per_loop=5,
    )
    controller.train(5)
    controller.evaluate(-1)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "train | step:      0 | training until step 5..."
    assert out[1].startswith("train | step:      5 | steps/sec: ")
    assert "| output: {'training_loss': 0.2}" in out[1]
    assert out[2] == " eval | step:      5 | running complete evaluation..."
    assert out[3].startswith(" eval | step:      5 | eval time: ")


def test_progress_bar_shows_steps_and_eta(capsys):
    step = GlobalStep()
    controller = Controller(
        global_step=step, trainer=FakeTrainer(step), steps_per_loop=10, progress_bar=True,
        print_logs=False,
    )
    controller.train(30)
    err = capsys.readouterr().err
    assert "/30 [" in err and "step/s" in err and "<" in err  # tqdm: n/total [elapsed<eta, rate]
