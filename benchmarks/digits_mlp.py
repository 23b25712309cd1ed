"""Steps/s on the digits MLP (8×8 digits, MLP 64-128-10, Adam, batch 64, one thread).

Contenders are interleaved in one process; steps/s = 4000 / (T(6000) − T(2000)), the
median of ``--repeats`` repeats. Targets from the issue: torchgarden defaults (b) at
least 0.97× the hand-written loop (a), with summaries + progress bar + checkpoints (c)
at least 0.92× (a), both at least 1.35× Lightning minimal, and with compilation on (e)
at least Model Garden's 1820 steps/s (its in-graph loop on the machine of the issue).

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/digits_mlp.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys

import _common
import _contenders as c
from _workloads import digits_mlp

MODEL_GARDEN_STEPS_PER_SEC = 1820.0  # Issue 6: Model Garden, steps_per_loop in one graph.
A = "(a) hand-written DataLoader loop"
B = "(b) torchgarden defaults"
C = "(c) torchgarden summaries+bar+ckpt"
LM = "(d) Lightning minimal"
E = "(e) torchgarden enable_xla"


def build_contenders(args: argparse.Namespace) -> dict[str, _common.Contender]:
    workload, device = digits_mlp(), args.device
    contenders = {
        A: c.hand_written(workload, device),
        "(a*) hand-written, tuned": c.hand_written_tuned(workload, device),
        B: c.torchgarden_defaults(workload, device),
        "(b+) torchgarden, fused optimizer": c.torchgarden_defaults(workload, device, fused=True),
        C: c.torchgarden_full(workload, device),
    }
    if not args.no_lightning and c.lightning_available():
        contenders[LM] = c.lightning_contender(workload, minimal=True, device=device)
        contenders["(d) Lightning defaults"] = c.lightning_contender(workload, minimal=False, device=device)
    if not args.no_compile:
        contenders[E] = c.torchgarden_compiled(workload, device)
        if device != "cpu":
            contenders[E + " reduce-overhead"] = c.torchgarden_compiled(
                workload, device, mode="reduce-overhead"
            )
    return contenders


def _ratio_lines(rate: dict[str, float]) -> list[tuple[str, float, str]]:
    """(description, value, target) for each ratio the issue asks for (of those run)."""
    wanted = [
        (B, A, "(b) / (a)", ">= 0.97"),
        (C, A, "(c) / (a)", ">= 0.92"),
        (B, LM, "(b) / Lightning minimal", ">= 1.35"),
        (C, LM, "(c) / Lightning minimal", ">= 1.35"),
        (E, A, "(e) / (a)", "-"),
        (E, B, "(e) / (b)", "-"),
    ]
    lines = [(what, rate[top] / rate[bottom], target)
             for top, bottom, what, target in wanted if top in rate and bottom in rate]
    if E in rate:
        lines.append(
            ("(e) / Model Garden 1820 steps/s", rate[E] / MODEL_GARDEN_STEPS_PER_SEC, ">= 1.00")
        )
    return lines


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs the benchmark, prints tables; returns ``{contender: median steps/s}``."""
    args, clock, per_step = _common.run_contenders(
        argv,
        description=__doc__.splitlines()[0],
        title="digits MLP: 64-128-10, Adam, batch 64",
        script="digits_mlp.py",
        build_contenders=build_contenders,
        lightning_available=c.lightning_available,
    )
    rate = {name: 1.0 / _common.median(values) for name, values in per_step.items()}
    print()
    print(f"steps/s ({clock} clock), median of {args.repeats} ({args.long - args.short} / "
          f"(T({args.long}) - T({args.short}))):")
    _common.print_table(
        ["loop", "steps/s", "ms/step", "× (a)"],
        [
            (name, f"{value:.0f}", f"{1e3 / value:.3f}",
             f"{value / rate[A]:.2f}" if A in rate else "-")
            for name, value in rate.items()
        ],
    )
    print()
    _common.print_table(
        ["ratio", "measured", "target"],
        [(what, f"{value:.2f}", target) for what, value, target in _ratio_lines(rate)],
    )
    return rate


if __name__ == "__main__":
    main(sys.argv[1:])
