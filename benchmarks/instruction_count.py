"""Instructions per training step, (b) torchgarden defaults vs (a*) the hand-written loop.

A count, not a time: each contender runs in its own process under valgrind's callgrind
(which counts every instruction the CPU would execute), once for ``--short`` and once
for ``--long`` steps after the same set-up, and per step = (I(long) − I(short)) /
(long − short). Other processes on a shared machine change how long an instruction
takes, never how many run, so this difference holds still where the timed benchmarks'
medians move by tens of µs from run to run. The children run with a fixed hash seed and
one OpenBLAS thread (dict layouts and NumPy's spinning BLAS threads moved the count by
up to 20k instructions per step between runs); (a*) then repeats within 0.2k. It does
not price cache misses or the GIL waits of other threads; read it beside
``loop_overhead.py``'s times.

Needs ``valgrind`` on the PATH; about 2 minutes per process (four processes, two at a
time).

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/instruction_count.py [--workload tiny]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
LABELS = {"a": "(a*) hand-written, tuned", "b": "(b) torchgarden defaults"}
#: What would move the count between runs of the same code: dict layouts (hash seed) and
#: NumPy's OpenBLAS threads, which spin after a NumPy call and count as work.
_STEADY = {"OMP_WAIT_POLICY": "PASSIVE", "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}


def _child(workload: str, label: str, steps: int) -> None:
    """Runs in the measured process: builds both contenders, trains one ``steps`` steps."""
    sys.path.insert(0, HERE)
    import _common  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
    import _contenders as c
    from _workloads import digits_mlp, tiny_linear

    _common.setup_threads()
    pair = c.continued_pair(tiny_linear() if workload == "tiny" else digits_mlp())
    run = pair[LABELS[label]]
    run(200)  # Warm-up: lazy state, first-call paths.
    run(steps)


def _count(workload: str, label: str, steps: int) -> int:
    """Instructions executed by a child process training ``label`` for ``steps`` steps."""
    with tempfile.TemporaryDirectory(prefix="tg-bench-icount-") as tmp:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
                   sys.executable, os.path.abspath(__file__), "--child", workload, label,
                   str(steps)]
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              env={**os.environ, **_STEADY})
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind run failed ({done.returncode}): {done.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Prints instructions per step of (a*) and (b); returns them by label."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("tiny", "digits"), default="tiny")
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--long", type=int, default=2200)
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("instruction_count.py: valgrind is not installed (apt install valgrind).")
    print(f"== instructions per step, {args.workload}: (b) vs (a*), callgrind")
    print(f"reproduce: OMP_WAIT_POLICY=PASSIVE {os.path.relpath(sys.executable)} "
          f"benchmarks/instruction_count.py --workload {args.workload} "
          f"--short {args.short} --long {args.long}")
    jobs = [(label, steps) for label in LABELS for steps in (args.short, args.long)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(args.workload, *job), jobs)))
    per_step = {LABELS[label]: (counts[label, args.long] - counts[label, args.short])
                / (args.long - args.short) for label in LABELS}
    a, b = per_step[LABELS["a"]], per_step[LABELS["b"]]
    for name, value in per_step.items():
        print(f"| {name:<26} | {value:>12,.0f} instructions/step |")
    print(f"(b) - (a*): {b - a:+,.0f} instructions/step ({b / a - 1:+.1%})")
    return per_step


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
