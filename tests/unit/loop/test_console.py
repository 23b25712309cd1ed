"""What the Controller prints and records: ETA, a finished run's rerun, blow-up rollback."""

from __future__ import annotations

import re

from torchgarden.core import GlobalStep
from torchgarden.loop import Controller
from torchgarden.summary import MetricsFile, SummaryManager, read_metrics


class FakeTrainer:
    def __init__(self, step: GlobalStep):
        self.step = step

    def train(self, num_steps: int):
        self.step.assign_add(num_steps)
        return {"training_loss": 1.0 / self.step.value}


class FakeEvaluator:
    def __init__(self, step: GlobalStep):
        self.step = step
        self.calls = 0

    def evaluate(self, num_steps: int):
        self.calls += 1
        return {"validation_loss": 0.5, "coco": {"AP": 0.25}}


def make(tmp_path, step: GlobalStep, **kwargs):
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    evaluator = FakeEvaluator(step)
    controller = Controller(
        global_step=step, trainer=FakeTrainer(step), evaluator=evaluator, steps_per_loop=10,
        summary_manager=SummaryManager(None, trackers=[metrics], split="train"),
        eval_summary_manager=SummaryManager(None, trackers=[metrics], split="validation"),
        **kwargs)
    return controller, evaluator


def test_log_lines_carry_an_eta_to_the_last_step(tmp_path, capsys):
    controller, _ = make(tmp_path, GlobalStep())
    controller.train_and_evaluate(train_steps=30, eval_interval=20)
    lines = [line for line in capsys.readouterr().out.splitlines() if "steps/sec" in line]
    assert [bool(re.search(r"\| eta: \d+:\d\d:\d\d \|", line)) for line in lines] == [
        True, True, False]  # None once at train_steps.


def test_a_finished_run_says_so_and_reports_its_recorded_evaluation(tmp_path, capsys):
    step = GlobalStep()
    controller, evaluator = make(tmp_path, step)
    first = controller.train_and_evaluate(train_steps=20, eval_interval=20)
    assert evaluator.calls == 1

    again, evaluator = make(tmp_path, step)  # The rerun of the same command.
    capsys.readouterr()
    logs = again.train_and_evaluate(train_steps=20, eval_interval=20)

    out = capsys.readouterr().out
    assert "already at train_steps=20, nothing to train." in out
    assert evaluator.calls == 0 and logs == first  # The evaluation recorded at step 20.
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 3  # Nothing written twice.


def test_train_summaries_are_written_at_the_last_step(tmp_path):
    controller, _ = make(tmp_path, GlobalStep(), summary_interval=100)
    controller.train(30)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [30]


def test_a_blow_up_rollback_drops_what_was_written_past_the_restored_step(tmp_path):
    step = GlobalStep()

    def roll_back_once(logs, done=[]):  # noqa: B006 - state of the fake recovery.
        if int(step) == 30 and not done:
            done.append(True)
            step.assign(10)  # What RecoveryAction's restore does.

    controller, _ = make(tmp_path, step, train_actions=[roll_back_once])
    controller.train(40)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    assert rows[1]["training_loss"] == 1 / 20  # The replayed step 20, written once.
