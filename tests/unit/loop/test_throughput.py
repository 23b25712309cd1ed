"""Throughput figures against a stopwatch, FLOPs against a hand count, the profiler window."""

from __future__ import annotations

import glob
import json
import pathlib
import time

import pytest
import torch
from torch import nn

from torchgarden.core import Task, Trainer
from torchgarden.loop import Controller, LoopMonitor, ProfilerWindow, ThroughputMeter
from torchgarden.loop.flops import FirstBatchFlops, count_training_flops

BATCH, COMPUTE_S, WAIT_S = 8, 0.012, 0.004


class SlowLoader:
    """Batches of 8 examples; each one takes WAIT_S to arrive."""

    def __iter__(self):
        for _ in range(1000):
            time.sleep(WAIT_S)
            x = torch.randn(BATCH, 4)
            yield x, x.sum(1, keepdim=True)


class SlowLinear(nn.Linear):
    def forward(self, x):
        time.sleep(COMPUTE_S)  # The known workload: 12 ms of "compute" per step.
        return super().forward(x)


class Regression(Task):
    def build_model(self):
        return SlowLinear(4, 1)

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return nn.functional.mse_loss(model_outputs, labels)


def make_trainer() -> Trainer:
    task = Regression(None)
    model = task.build_model()
    return Trainer(task=task, model=model, optimizer=torch.optim.SGD(model.parameters(), 0.01),
                   train_data=SlowLoader())


def test_throughput_matches_a_stopwatch_on_a_known_workload():
    trainer = make_trainer()
    meter = ThroughputMeter(examples_per_step=BATCH, tokens_per_example=16,
                            flops_per_example=1e6, peak_flops=1e9,
                            data_wait=lambda: trainer.data_wait_seconds)
    written = []
    controller = Controller(global_step=trainer.global_step, trainer=trainer, steps_per_loop=10,
                            monitor=LoopMonitor(meter), print_logs=False)
    controller.summary_manager.write_summaries = lambda logs, step=None: written.append(logs)
    trainer.train(10)  # Warm-up outside the stopwatch (first batch, allocator).
    start = time.perf_counter()
    controller.train(40)
    stopwatch = time.perf_counter() - start

    assert len(written) == 3  # Loops of 10 steps.
    loop_seconds = sum(10 * BATCH / logs["throughput/examples_per_second"] for logs in written)
    assert 30 * BATCH / loop_seconds == pytest.approx(30 * BATCH / stopwatch, rel=0.10)
    expected_wait = WAIT_S / (WAIT_S + COMPUTE_S)
    waits = [logs["throughput/data_wait_fraction"] for logs in written]
    assert sum(waits) / len(waits) == pytest.approx(expected_wait, rel=0.10)
    for logs in written:  # Derived figures follow from examples/s exactly.
        eps = logs["throughput/examples_per_second"]
        assert logs["throughput/tokens_per_second"] == pytest.approx(16 * eps)
        assert logs["throughput/mfu"] == pytest.approx(eps * 1e6 / 1e9)
        assert logs["steps_per_second"] == pytest.approx(eps / BATCH)
        assert logs["memory/rss_peak_gib"] > 0.01


def test_flops_are_counted_on_meta_tensors_as_a_hand_count_says():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(5, 8)
    # Forward 2*B*(8*16 + 16*2); backward: weight gradients of both layers, plus the
    # input gradient of the second layer (the first layer's input needs none).
    expected = 2 * 5 * (8 * 16 + 16 * 2) + 2 * 5 * (8 * 16 + 16 * 2) + 2 * 5 * 16 * 2
    assert count_training_flops(model, (x,), {}) == expected
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())

    counter = FirstBatchFlops(model, examples_per_batch=5)
    model.eval()
    model(x)  # Evaluation forwards are not what is counted.
    model.train()
    model(x)
    model(torch.randn(3, 8))
    assert counter() == pytest.approx(expected / 5)


def test_profiler_window_records_exactly_the_requested_steps(tmp_path):
    trainer = make_trainer()
    steps = []
    original = trainer.optimizer.step

    def step(*args, **kwargs):
        steps.append(int(trainer.global_step) + 1)
        return original(*args, **kwargs)

    trainer.optimizer.step = step
    window = ProfilerWindow(first_step=4, last_step=7, trace_dir=str(tmp_path / "profile"))
    controller = Controller(global_step=trainer.global_step, trainer=trainer, steps_per_loop=5,
                            monitor=LoopMonitor(profiler=window), print_logs=False)
    controller.train(10)

    (trace,) = glob.glob(str(tmp_path / "profile" / "*.pt.trace.json"))
    events = json.loads(pathlib.Path(trace).read_text())["traceEvents"]
    names = [e.get("name", "") for e in events if e.get("ph") == "X"]
    assert sorted(n for n in names if n.startswith("train_steps")) == [
        "train_steps 4-5", "train_steps 6-7"]
    # One optimizer step per train step, and only the steps asked for.
    assert sum(n.startswith("Optimizer.step#") for n in names) == 4
    assert steps == list(range(1, 11))  # Loops split at the window; every step ran once.


def test_an_unset_profiler_and_meter_cost_nothing(tmp_path):
    trainer = make_trainer()
    controller = Controller(global_step=trainer.global_step, trainer=trainer, steps_per_loop=5,
                            print_logs=False, summary_dir=str(tmp_path / "train"))
    assert controller.monitor.profiler is None and controller.monitor.throughput is None
    assert controller._loop_length(0) == 5
