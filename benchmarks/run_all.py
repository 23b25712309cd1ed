"""Runs every CPU benchmark and prints the summary against issues 12 and 16's targets.

This is what ``make bench`` runs. Nothing here is a test: timings on a shared machine
are noisy, so read the medians, the ranges and the load averages the scripts print.
The TensorFlow comparisons (``model_garden_tf.py``, ``tfrecord_input.py``) need their own
environment and
``instruction_count.py`` needs valgrind; both are run separately.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/run_all.py [--quick]
"""

from __future__ import annotations

import argparse
import sys

import _common
import checkpoint_io
import digits_mlp
import loop_overhead
import observability_overhead
import startup


def _check(ok: bool) -> str:
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 repeat of 300/900 steps (a smoke run, not a measurement)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--no-lightning", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    args = parser.parse_args(argv)
    _common.setup_threads()
    _common.print_header("all benchmarks", "run_all.py", argv)
    loop_args = ["--repeats", "1" if args.quick else str(args.repeats), "--device", args.device]
    loop_args += ["--short", "300", "--long", "900"] if args.quick else []
    loop_args += ["--no-lightning"] * args.no_lightning
    print()
    tiny = loop_overhead.main(loop_args)
    print()
    digits = digits_mlp.main(loop_args)
    print()
    checkpoints = checkpoint_io.main(["--repeats", "1" if args.quick else "5"])
    print()
    observe = observability_overhead.main(
        ["--rounds", "4", "--chunk", "300"] if args.quick else ["--rounds", "30"])
    starts: dict[str, float] = {}
    if not args.skip_startup:
        print()
        starts = startup.main(["--repeats", "3" if args.quick else "7"])

    a_star, b, e = digits_mlp.A_STAR, digits_mlp.B, digits_mlp.E
    h10 = "(h10) hand-written compiled, 10 steps/call"
    rows = []
    if "(b) - (a*) paired" in tiny:
        over = tiny["(b) - (a*) paired"]
        rows.append(("tiny: (b) - (a*) µs/step", f"{over:+.1f}", "<= +5", _check(over <= 5)))
    if b in digits and a_star in digits:
        ratio = digits[b] / digits[a_star]
        rows.append(("digits: (b) / (a*)", f"{ratio:.2f}", ">= 0.99", _check(ratio >= 0.99)))
    if e in digits:
        rows.append(("digits: (e) steps/s", f"{digits[e]:.0f}", ">= 11000",
                     _check(digits[e] >= 11000)))
        if h10 in digits:
            ratio = digits[e] / digits[h10]
            rows.append(("digits: (e) / (h10)", f"{ratio:.2f}", ">= 1.00", _check(ratio >= 1)))
    one, h1 = "(e1) torchgarden enable_xla, 1 step/call", "(h1) hand-written compiled step"
    if one in digits and h1 in digits:
        ratio = digits[one] / digits[h1]
        rows.append(("digits: (e1) / (h1)", f"{ratio:.2f}", ">= 1.00", _check(ratio >= 1)))
    raw, save = checkpoints["raw write (O_DIRECT) + fsync"], checkpoints["CheckpointManager.save (sync)"]
    restore = checkpoints["verified restore"] / checkpoints["torch.load"]
    stall = checkpoints["async save: training stall"] / save
    rows += [
        ("checkpoint save / raw write bandwidth", f"{raw / save:.0%}", ">= 50%", _check(raw / save >= 0.5)),
        ("verified restore / torch.load", f"{restore:.2f}", "<= 1.2", _check(restore <= 1.2)),
        ("async stall / sync save", f"{stall:.0%}", "<= 10%", _check(stall <= 0.1)),
    ]
    rows.append(("metrics.jsonl + throughput cost (issue 12)", f"{observe['cpu']:+.1%}",
                 "<= +2%", _check(observe["cpu"] <= 0.02)))
    if starts:
        rows.append(("torchgarden --help s", f"{starts['torchgarden --help']:.3f}", "<= 0.3",
                     _check(starts["torchgarden --help"] <= 0.3)))
    print("\n== summary")
    _common.print_table(["measure", "value", "target", "met"], rows)
    print(f"machine: {_common.machine_load()} at the end")


if __name__ == "__main__":
    main(sys.argv[1:])
