"""Runs every benchmark in one process and prints the summary against the issue's targets.

This is what ``make bench`` runs. Nothing here is a test: timings on a shared machine
are noisy, so read the medians and the min-max ranges the scripts print.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/run_all.py [--quick] [--device cuda]
"""

from __future__ import annotations

import argparse
import sys

import _common
import digits_mlp
import loop_overhead
import startup


def _check(value: float, target: float, higher_is_better: bool) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 repeat of 500/1500 steps (a smoke run, not a measurement)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--no-lightning", action="store_true")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="default: cpu (process time) on a CPU device, wall on a GPU")
    args = parser.parse_args(argv)
    _common.setup_threads()
    _common.print_header("all benchmarks", "run_all.py", argv)

    loop_args = ["--repeats", "1" if args.quick else str(args.repeats), "--device", args.device]
    if args.quick:
        loop_args += ["--short", "500", "--long", "1500"]
    loop_args += ["--no-lightning"] * args.no_lightning + ["--no-compile"] * args.no_compile
    loop_args += ["--clock", args.clock] if args.clock else []
    print()
    tiny = loop_overhead.main(loop_args)
    print()
    digits = digits_mlp.main(loop_args)
    starts: dict[str, float] = {}
    if not args.skip_startup:
        print()
        starts = startup.main(["--repeats", "3" if args.quick else "7"])

    a, b = "(a) hand-written DataLoader loop", "(b) torchgarden defaults"
    c, lm = "(c) torchgarden summaries+bar+ckpt", "(d) Lightning minimal"
    e = "(e) torchgarden enable_xla"
    rows: list[tuple[str, str, str, str]] = []
    overhead = tiny[b] - tiny[a]
    rows.append(("tiny: (b) - (a) µs/step", f"{overhead:+.1f}", "<= +30",
                 _check(overhead, 30.0, False)))
    rows.append(("tiny: (b) - (a*) µs/step", f"{tiny[b] - tiny['(a*) hand-written, tuned']:+.1f}",
                 "-", "-"))
    for name, target in ((b, 0.97), (c, 0.92)):
        ratio = digits[name] / digits[a]
        rows.append((f"digits: {name[:3]} / (a)", f"{ratio:.2f}", f">= {target}",
                     _check(ratio, target, True)))
    if lm in digits:
        for name in (b, c):
            ratio = digits[name] / digits[lm]
            rows.append((f"digits: {name[:3]} / Lightning minimal", f"{ratio:.2f}", ">= 1.35",
                         _check(ratio, 1.35, True)))
    if e in digits:
        rows.append(("digits: (e) steps/s", f"{digits[e]:.0f}", ">= 1820",
                     _check(digits[e], digits_mlp.MODEL_GARDEN_STEPS_PER_SEC, True)))
    if starts:
        over = starts["import torchgarden + training API"] - starts["import torch"]
        rows += [
            ("torchgarden --help s", f"{starts['torchgarden --help']:.3f}", "<= 0.3",
             _check(starts["torchgarden --help"], 0.3, False)),
            ("import torchgarden (+API) - import torch s", f"{over:+.3f}", "<= +0.15",
             _check(over, 0.15, False)),
            ("checkpoint save() stall sync / async s",
             f"{starts['checkpoint sync']:.3f} / {starts['checkpoint async']:.3f}", "-", "-"),
        ]
    print("\n== summary")
    _common.print_table(["measure", "value", "target", "met"], rows)


if __name__ == "__main__":
    main(sys.argv[1:])
