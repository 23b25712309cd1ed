"""Per-step framework cost on the peers' tiny workload (Linear 64→64, MSE, SGD, batch 32).

Per step = (T(long) − T(short)) / (long − short), which cancels set-up; contenders run in
a fresh random order in every repeat, in one process, on one thread; medians and ranges
over ``--repeats``, CPU and wall clock both. The issue's target: torchgarden defaults (b)
at most +5 µs/step over (a*), the hand-written loop with the same data path, optimizer
kernel and denormal setting; the paired difference is printed per repeat too.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/loop_overhead.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import sys

import _common
import _contenders as c
from _workloads import tiny_linear

TARGET_OVERHEAD_US = 5.0
A_STAR, B = "(a*) hand-written, tuned", "(b) torchgarden defaults"


C = "(c) torchgarden summaries+bar+ckpt"
C_MINUS = "(c-) (c) without metrics.jsonl and throughput"


def build_contenders(args: argparse.Namespace) -> dict[str, _common.Contender]:
    workload, device = tiny_linear(), args.device
    contenders = {
        "(a) hand-written DataLoader loop": c.hand_written(workload, device),
        A_STAR: c.hand_written_tuned(workload, device),
        B: c.torchgarden_defaults(workload, device),
        C: c.torchgarden_full(workload, device),
        C_MINUS: c.torchgarden_full(workload, device, observe=False),
    }
    if not args.no_lightning and c.lightning_available():
        contenders["(d) Lightning, matched"] = c.lightning_contender(
            workload, matched=True, device=device)
        contenders["(d0) Lightning defaults"] = c.lightning_contender(
            workload, matched=False, device=device)
    if not args.no_compile:
        contenders["(e) torchgarden enable_xla"] = c.torchgarden_compiled(workload, device)
        contenders["(h1) hand-written compiled step"] = c.hand_written_compiled(
            workload, device, steps_per_call=1)
    return contenders


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs the benchmark, prints the table; returns ``{contender: median µs/step}``."""
    args, clock, per_step = _common.run_contenders(
        argv,
        description=__doc__.splitlines()[0],
        title="loop overhead: tiny Linear(64,64), MSE, SGD, batch 32",
        script="loop_overhead.py",
        build_contenders=build_contenders,
        lightning_available=c.lightning_available,
    )
    other = "wall" if clock == "cpu" else "cpu"
    us = {name: _common.median(times[clock]) * 1e6 for name, times in per_step.items()}
    floor = us.get(A_STAR)
    print(f"\nµs/step, median of {args.repeats} (range); main clock: {clock}")
    _common.print_table(
        ["loop", f"µs/step ({clock})", "range", f"µs/step ({other})", "over (a*) µs"],
        [(name, f"{value:.1f}", _common.spread(per_step[name][clock]),
          f"{_common.median(per_step[name][other]) * 1e6:.1f}",
          f"{value - floor:+.1f}" if floor is not None else "-")
         for name, value in us.items()],
    )
    if B in per_step and A_STAR in per_step:
        paired = [(b - a) * 1e6 for b, a in zip(per_step[B][clock], per_step[A_STAR][clock])]
        overhead = _common.median(paired)
        verdict = "meets" if overhead <= TARGET_OVERHEAD_US else "misses"
        print(f"\n(b) - (a*), paired per repeat: {', '.join(f'{d:+.1f}' for d in paired)} µs; "
              f"median {overhead:+.1f} µs/step: {verdict} the target of <= "
              f"+{TARGET_OVERHEAD_US:.0f} µs/step.")
        us["(b) - (a*) paired"] = overhead
    if C in per_step and C_MINUS in per_step:
        paired = [c / m - 1 for c, m in zip(per_step[C][clock], per_step[C_MINUS][clock])]
        change = _common.median(paired)
        verdict = "meets" if change <= 0.02 else "misses"
        us["(c) / (c-) - 1 paired"] = change
        print(f"\n(c) / (c-) - 1, paired per repeat: {', '.join(f'{d:+.1%}' for d in paired)}; "
              f"median {change:+.2%}: metrics.jsonl and throughput {verdict} the target of "
              "<= +2% of the loop's time (issue 12).")
    if args.paired_rounds:
        us["(b) - (a*) built once"] = _common.report_paired(
            c.continued_pair(tiny_linear(), args.device), args, clock)
    return us


if __name__ == "__main__":
    main(sys.argv[1:])
