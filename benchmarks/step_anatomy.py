"""Where the eager per-step time goes: torchgarden's layers, one at a time.

On the tiny workload (Linear 64→64, MSE, SGD, batch 32), with the same model, optimizer
and batches, it times (CPU time of this process, median of ``--repeats``):

* ``hand-written step``: ``next(batches)``, forward, loss, ``zero_grad``, backward, step;
* ``Task.train_step``: the same through the default task step;
* ``Trainer.train_step``: plus the loss meter, the global step and the data iterator;
* ``Trainer.train``: plus the loop hooks; ``Controller.train``: plus the per-loop
  logging, with ``steps_per_loop=100``;
* the two pieces torchgarden adds to every step: ``next(DataIterator)`` (one
  ``index_select`` per tensor) and ``LossMean.update_state`` (one in-place add).

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/step_anatomy.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import _common
import _contenders as c
import torch
from _workloads import tiny_linear


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    _common.setup_threads()
    _common.use_clock("cpu")
    _common.print_header("step anatomy: tiny Linear(64,64), MSE, SGD, batch 32",
                         "step_anatomy.py", argv)
    workload = tiny_linear()
    trainer, controller = c._trainer_and_controller(workload, args.steps, "cpu")
    task, model, optimizer = trainer.task, trainer.model, trainer.optimizer
    batches = trainer._train_iterator  # The Trainer's own DataIterator.
    loss_fn = workload.loss
    loss = torch.zeros(())

    def hand_written(n: int) -> None:
        for _ in range(n):
            x, y = next(batches)
            step_loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            step_loss.backward()
            optimizer.step()

    def task_step(n: int) -> None:
        for _ in range(n):
            task.train_step(next(batches), model, optimizer, [])

    def trainer_step(n: int) -> None:
        for _ in range(n):
            trainer.train_step(batches)

    def controller_train(n: int) -> None:
        with _common.quiet():
            controller.train(steps=int(trainer.global_step) + n)

    def next_batch(n: int) -> None:
        for _ in range(n):
            next(batches)

    def loss_meter(n: int) -> None:
        for _ in range(n):
            trainer.train_loss.update_state(loss)

    layers: dict[str, Callable[[int], None]] = {
        "hand-written step": hand_written,
        "Task.train_step": task_step,
        "Trainer.train_step": trainer_step,
        "Trainer.train": trainer.train,
        "Controller.train": controller_train,
        "next(DataIterator) alone": next_batch,
        "LossMean.update_state alone": loss_meter,
    }
    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(args.repeats):
        for name, run in layers.items():
            times[name].append(float(_common.timed(lambda run=run: run(args.steps))) / args.steps)
    us = {name: _common.median(values) * 1e6 for name, values in times.items()}
    base = us["hand-written step"]
    print()
    print(f"µs per step (cpu clock), median of {args.repeats} runs of {args.steps} steps:")
    _common.print_table(
        ["layer", "µs/step", "over hand-written µs"],
        [(name, f"{value:.1f}", f"{value - base:+.1f}" if "alone" not in name else "")
         for name, value in us.items()],
    )
    return us


if __name__ == "__main__":
    main(sys.argv[1:])
