"""The mechanisms exact resume rests on, pinned in milliseconds: loop realignment after
a partial loop, the open loss window in checkpoints, checkpoints after evaluations,
float16's first skipped step, and DataLoader workers surviving job-wide signals."""

from __future__ import annotations

import copy
import subprocess
import time

import torch

from torchgarden import get_experiment, get_task
from torchgarden.core import GlobalStep
from torchgarden.data import build_dataloader
from torchgarden.data.datasets import ArrayDataset
from torchgarden.loop import Controller
from torchgarden.optim import LossScaleOptimizer
from torchgarden.train_lib import create_trainer


class PreemptedOnce:
    requested = False

    def agreed(self) -> bool:
        return False


class StoppingTrainer:
    """Advances the step; the first call stops early after ``stop_after`` steps."""

    def __init__(self, step: GlobalStep, stop_after: int) -> None:
        self.step, self.stop_after, self.calls = step, stop_after, []
        self.stopped_early = False

    def train(self, num_steps: int):
        self.calls.append(num_steps)
        advance = min(num_steps, self.stop_after) if len(self.calls) == 1 else num_steps
        self.stopped_early = advance < num_steps
        self.step.assign_add(advance)
        return {"training_loss": 1.0}


def test_a_loop_cut_short_is_followed_by_one_that_ends_on_the_steps_per_loop_grid():
    step = GlobalStep()
    trainer = StoppingTrainer(step, stop_after=3)
    controller = Controller(global_step=step, trainer=trainer, steps_per_loop=5,
                            print_logs=False, preemption=PreemptedOnce())
    controller.train(20)
    assert trainer.calls == [5, 2, 5, 5, 5]  # 0->3 (cut), 3->5, then 10, 15, 20.


def test_a_checkpoint_due_at_an_eval_point_is_saved_after_the_evaluation():
    events: list[tuple[str, int]] = []
    step = GlobalStep()

    class Trainer:
        def train(self, num_steps):
            step.assign_add(num_steps)
            return {}

    class Evaluator:
        def evaluate(self, num_steps):
            events.append(("eval", step.value))
            return {}

    class Manager:
        def save(self, checkpoint_number, check_interval=True):
            if checkpoint_number % 10 == 0 and ("save", checkpoint_number) not in events:
                events.append(("save", checkpoint_number))
                return f"ckpt-{checkpoint_number}"
            return None

        def restore_or_initialize(self):
            return None

    controller = Controller(global_step=step, trainer=Trainer(), evaluator=Evaluator(),
                            steps_per_loop=5, checkpoint_manager=Manager(), print_logs=False)
    controller.train_and_evaluate(train_steps=20, eval_interval=10)
    assert events == [("eval", 10), ("save", 10), ("eval", 20), ("save", 20)]


def test_the_open_loss_window_travels_in_the_checkpoint():
    params = get_experiment("toy_regression")
    params.override({"trainer": {"steps_per_loop": 5, "summary_interval": 5}})
    a = create_trainer(params, get_task(params.task), train=True, evaluate=False)
    b = create_trainer(params, get_task(params.task), train=True, evaluate=False)
    a.preemption = type("Requested", (), {"requested": True})()
    a.train(5)  # Stops after one step, keeping that step in the window.
    b.checkpoint.load_state_dict(copy.deepcopy(a.checkpoint.state_dict()))  # As from disk.
    a.preemption = b.preemption = None
    assert a.train_loss.count == b.train_loss.count == 1
    assert torch.equal(a.train(4)["training_loss"], b.train(4)["training_loss"])
    assert a.train_loss.count == 0  # A full loop resets the window.


def test_float16_first_skipped_step_leaves_no_uninitialised_momentum():
    """torch's fused SGD fills momentum buffers with empty_like on a skipped first step."""
    results = []
    for fused in (False, True):
        param = torch.nn.Parameter(torch.ones(3))
        optimizer = LossScaleOptimizer(torch.optim.SGD([param], lr=0.1, momentum=0.9,
                                                       fused=fused))
        for factor in (float("inf"), 1.0, 1.0):  # The first step overflows and is skipped.
            optimizer.zero_grad()
            optimizer.scale((param * factor).sum()).backward()
            optimizer.step()
        results.append(param.detach().clone())
    assert torch.equal(results[0], results[1])
    assert torch.equal(results[1], torch.full((3,), 0.71))


def test_dataloader_workers_ignore_a_sigterm_meant_for_the_whole_job():
    params = type("Data", (), {"global_batch_size": 2, "is_training": True, "num_workers": 1,
                               "persistent_workers": True})()
    loader = build_dataloader(ArrayDataset(torch.arange(8.0), torch.arange(8)), params)
    iterator = iter(loader)
    next(iterator)
    [worker] = iterator._workers
    time.sleep(0.2)  # The worker has run its init function (where the shield is set up).
    subprocess.run(["kill", "-TERM", str(worker.pid)], check=True)  # Not from the parent.
    time.sleep(0.3)
    assert worker.is_alive()
    assert len(list(iterator)) == 3  # The epoch finishes.
    worker.terminate()  # From the parent (the DataLoader's own shutdown path): it exits.
    worker.join(timeout=10)
    assert worker.exitcode == 0
