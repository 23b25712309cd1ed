"""What metrics.jsonl and the throughput figures cost a training loop (issue 12: <= 2%).

Two Controllers built by ``train_lib`` exactly as ``run_experiment`` builds them (summaries
written to TensorBoard every loop, checkpoints only outside the timed chunks), on the tiny
workload (Linear 64→64, MSE, SGD, batch 32: where a fixed per-loop cost weighs most), one
with ``trainer.metrics_file`` and ``trainer.log_throughput`` on (the defaults), one with
both off. They train in one process, in alternating chunks of ``--chunk`` steps, in a
fresh random order every round; the table gives medians and ranges of µs/step (CPU and
wall clock) and the paired per-round ratio.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/observability_overhead.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import _common
import _contenders as c
from _workloads import tiny_linear

TARGET = 0.02
ON, OFF = "metrics.jsonl + throughput on", "both off"


def _controller(model_dir: str, observe: bool) -> object:
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib.wiring import build_controller, build_run

    workload = tiny_linear()
    params = c._config(workload, 10**9, "cpu")
    params.override({"trainer": {
        "metrics_file": observe, "log_throughput": observe, "progress_bar": False,
        "checkpoint_interval": 10**9, "steps_per_loop": c.STEPS_PER_LOOP,
        "summary_interval": c.STEPS_PER_LOOP,
    }})
    task = c._bench_task(workload, params.task)
    run = build_run(params, mode="train", model_dir=model_dir, task=task, trainer=None,
                    evaluator=None, runtime=setup_runtime(params.runtime), run_post_eval=False)
    return build_controller(run, params, mode="train")


def _chunks(controller: Any) -> Callable[[int], None]:
    """``train(n)``: ``n`` more steps of ``controller``, no final checkpoint."""
    done = 0

    def train(num_steps: int) -> None:
        nonlocal done
        done += num_steps
        controller.train(steps=done, checkpoint_at_completion=False)

    return train


def _lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs the rounds, prints the table; returns the median paired ratio minus one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=2000, help="steps per timed chunk")
    parser.add_argument("--seed", type=int, default=0, help="seeds the order")
    args = parser.parse_args(argv)
    _common.setup_threads()
    _common.print_header("metrics.jsonl + throughput: on vs off, tiny workload",
                         "observability_overhead.py", argv)
    dirs = {name: tempfile.mkdtemp(prefix="tg-obs-") for name in (ON, OFF)}
    try:
        with _common.quiet():
            runners = {name: _chunks(_controller(d, name == ON)) for name, d in dirs.items()}
            times = _common.paired_chunks(runners, chunk=args.chunk, rounds=args.rounds,
                                          seed=args.seed)
        written = {name: _lines(os.path.join(d, "metrics.jsonl")) for name, d in dirs.items()}
    finally:
        for directory in dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    print(f"machine: {_common.machine_load()} at the end")
    print(f"metrics.jsonl lines written: {written[ON]} (on), {written[OFF]} (off)\n")
    print(f"µs/step, median of {args.rounds} chunks of {args.chunk} steps (range)")
    _common.print_table(
        ["loop", "µs/step (cpu)", "range", "µs/step (wall)", "range"],
        [(name, f"{_common.median(t['cpu']) * 1e6:.1f}", _common.spread(t["cpu"]),
          f"{_common.median(t['wall']) * 1e6:.1f}", _common.spread(t["wall"]))
         for name, t in times.items()],
    )
    out = {}
    for clock in ("cpu", "wall"):
        paired = [a / b - 1 for a, b in zip(times[ON][clock], times[OFF][clock])]
        out[clock] = change = _common.median(paired)
        verdict = "meets" if change <= TARGET else "misses"
        print(f"\n{clock}: on / off - 1, paired per round: median {change:+.2%} "
              f"(quartiles {sorted(paired)[len(paired) // 4]:+.2%} to "
              f"{sorted(paired)[3 * len(paired) // 4]:+.2%}): {verdict} the target of "
              f"<= +{TARGET:.0%}.")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
