"""Steps/s of an MLP on the 8×8 digits (Adam, batch 64, one thread), every contender.

Contenders run in a fresh random order in every repeat, in one process; per step =
(T(long) − T(short)) / (long − short), medians and ranges over ``--repeats``, CPU and
wall clock both. "% peak" is the step's matmul FLOPs (torch's flop counter, forward +
backward) per second against this process' single-thread sgemm rate, measured first.

``--hidden 128`` (default) is torchgarden's ``image_classification`` model,
64-128-10; ``--hidden 256,256`` is Model Garden's benchmark model, 64-256-256-10.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/digits_mlp.py [--hidden 256,256]
"""

from __future__ import annotations

import argparse
import sys

import _common
import _contenders as c
from _workloads import Workload, digits_mlp

A, A_STAR, B, E = ("(a) hand-written DataLoader loop", "(a*) hand-written, tuned",
                   "(b) torchgarden defaults", "(e) torchgarden enable_xla")


def build_contenders(args: argparse.Namespace) -> dict[str, _common.Contender]:
    workload, device = _workload(args), args.device
    contenders = {
        A: c.hand_written(workload, device),
        A_STAR: c.hand_written_tuned(workload, device),
        B: c.torchgarden_defaults(workload, device),
        "(a*+) hand-written, tuned, fused Adam": c.hand_written_tuned(workload, device, fused=True),
        "(b+) torchgarden, fused Adam": c.torchgarden_defaults(workload, device, fused=True),
        "(c) torchgarden summaries+bar+ckpt": c.torchgarden_full(workload, device),
    }
    if not args.no_lightning and c.lightning_available():
        contenders["(d) Lightning, matched"] = c.lightning_contender(
            workload, matched=True, device=device)
        contenders["(d0) Lightning defaults"] = c.lightning_contender(
            workload, matched=False, device=device)
    if not args.no_compile:
        contenders[E] = c.torchgarden_compiled(workload, device)
        contenders["(e1) torchgarden enable_xla, 1 step/call"] = c.torchgarden_compiled(
            workload, device, steps_per_graph=1)
        contenders["(h1) hand-written compiled step"] = c.hand_written_compiled(
            workload, device, steps_per_call=1)
        contenders["(h10) hand-written compiled, 10 steps/call"] = c.hand_written_compiled(
            workload, device, steps_per_call=10)
        if device != "cpu":
            contenders[E + " reduce-overhead"] = c.torchgarden_compiled(
                workload, device, mode="reduce-overhead")
    return contenders


def _workload(args: argparse.Namespace) -> Workload:
    return digits_mlp(tuple(int(h) for h in args.hidden.split(",")))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs the benchmark, prints the table; returns ``{contender: median steps/s}``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hidden = argparse.ArgumentParser(add_help=False)
    hidden.add_argument("--hidden", default="128")
    known, rest = hidden.parse_known_args(argv)
    peak = _common.sgemm_peak()
    args, clock, per_step = _common.run_contenders(
        rest,
        description=__doc__.splitlines()[0],
        title=f"digits MLP 64-{known.hidden.replace(',', '-')}-10, Adam, batch 64",
        script="digits_mlp.py",
        build_contenders=lambda a: build_contenders(argparse.Namespace(**vars(a), **vars(known))),
        lightning_available=c.lightning_available,
        reproduce_argv=argv,
    )
    workload = _workload(known)
    flops = _common.step_flops(workload.build_model(), workload.loss,
                               workload.features[:workload.batch_size],
                               workload.labels[:workload.batch_size])
    print(f"\nsingle-thread sgemm: {peak:.1f} GFLOP/s; one step: {flops / 1e6:.2f} MFLOP "
          "(forward + backward matmuls)")
    rates = _common.report_rates(per_step, clock, args.repeats, reference=A_STAR,
                                 flops=flops, peak=peak)
    if args.paired_rounds:
        rates["(b) - (a*) built once, µs"] = _common.report_paired(
            c.continued_pair(workload, args.device), args, clock)
    return rates


if __name__ == "__main__":
    main()
