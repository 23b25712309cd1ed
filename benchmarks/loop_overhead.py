"""Per-step loop overhead on the peers' tiny workload (Linear 64→64, MSE, SGD, batch 32).

Per step = (T(6000 steps) − T(2000 steps)) / 4000, which cancels set-up; contenders are
interleaved in one process on one thread; medians of ``--repeats`` repeats. The issue's
target: torchgarden defaults at most +30 µs/step over the hand-written loop; (c) against
(c-): ``metrics.jsonl`` and the throughput figures cost at most 2% (issue 12).

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/loop_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import sys

import _common
import _contenders as c
from _workloads import tiny_linear

TARGET_OVERHEAD_US = 30.0
A = "(a) hand-written DataLoader loop"
A_STAR = "(a*) hand-written, tuned"
B = "(b) torchgarden defaults"


def build_contenders(args: argparse.Namespace) -> dict[str, _common.Contender]:
    workload, device = tiny_linear(), args.device
    contenders = {
        A: c.hand_written(workload, device),
        A_STAR: c.hand_written_tuned(workload, device),
        B: c.torchgarden_defaults(workload, device),
        "(b+) torchgarden, fused optimizer": c.torchgarden_defaults(workload, device, fused=True),
        "(c) torchgarden summaries+bar+ckpt": c.torchgarden_full(workload, device),
        "(c-) (c) without metrics.jsonl and throughput": c.torchgarden_full(
            workload, device, observe=False),
    }
    if not args.no_lightning and c.lightning_available():
        contenders["(d) Lightning minimal"] = c.lightning_contender(workload, minimal=True, device=device)
        contenders["(d) Lightning defaults"] = c.lightning_contender(workload, minimal=False, device=device)
    if not args.no_compile:
        contenders["(e) torchgarden enable_xla"] = c.torchgarden_compiled(workload, device)
        if device != "cpu":
            contenders["(e) torchgarden enable_xla reduce-overhead"] = c.torchgarden_compiled(
                workload, device, mode="reduce-overhead"
            )
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
    us = {name: _common.median(values) * 1e6 for name, values in per_step.items()}
    raw = us.get(A, math.nan)
    floor = us.get(A_STAR, math.nan)
    rows = [
        (
            name,
            f"{value:.1f}",
            f"{min(per_step[name]) * 1e6:.1f}-{max(per_step[name]) * 1e6:.1f}",
            f"{value - raw:+.1f}",
            f"{value / raw:.2f}",
            f"{value - floor:+.1f}",
        )
        for name, value in us.items()
    ]
    print()
    print(f"per-step time ({clock} clock), median of {args.repeats} (T({args.long}) - "
          f"T({args.short})) / {args.long - args.short}:")
    _common.print_table(
        ["loop", "µs/step", "range", "over (a) µs", "× (a)", "over (a*) µs"], rows
    )
    observed, unobserved = "(c) torchgarden summaries+bar+ckpt", "(c-) (c) without metrics.jsonl and throughput"
    if observed in us and unobserved in us:
        change = us[observed] / us[unobserved] - 1
        verdict = "meets" if abs(change) <= 0.02 else "misses"
        print(f"\n(c) / (c-) - 1 = {change:+.2%}: metrics.jsonl and throughput {verdict} the "
              "target of <= 2% of the loop's time.")
    if B in us and A in us:
        overhead = us[B] - raw
        verdict = "meets" if overhead <= TARGET_OVERHEAD_US else "misses"
        print(f"\n(b) - (a) = {overhead:+.1f} µs/step: {verdict} the target of "
              f"<= +{TARGET_OVERHEAD_US:.0f} µs/step; (b) - (a*) = {us[B] - floor:+.1f} "
              "µs/step (framework cost alone).")
    return us


if __name__ == "__main__":
    main(sys.argv[1:])
