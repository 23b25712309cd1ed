"""Shared by the benchmark scripts: one thread, interleaved repeats, medians, tables.

Import this module before ``torch`` in every script: it sets ``OMP_WAIT_POLICY=PASSIVE``
(idle OpenMP threads do not spin) before torch reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = [
    "REPO",
    "Contender",
    "interleave",
    "median",
    "print_header",
    "print_table",
    "quiet",
    "reproduce_command",
    "setup_threads",
    "timed",
    "use_clock",
]

Contender = Callable[[int], float]
"""``run(num_steps) -> seconds`` of the timed part of one fresh training run."""


def setup_threads(num_threads: int = 1) -> None:
    """One intra-op and one inter-op thread (the peers' numbers are one-thread numbers)."""
    torch.set_num_threads(num_threads)
    with contextlib.suppress(RuntimeError):  # Already set once in this process.
        torch.set_num_interop_threads(1)


def reproduce_command(script: str, argv: Sequence[str] | None = None) -> str:
    """The exact shell command that reruns ``script`` with the given arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    python = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO) else (
        sys.executable
    )
    parts = ["OMP_WAIT_POLICY=PASSIVE", python, f"benchmarks/{script}", *args]
    return f"cd {shlex.quote(REPO)} && " + " ".join(shlex.quote(p) for p in parts)


def print_header(title: str, script: str, argv: Sequence[str] | None = None) -> None:
    """Prints the title, the machine and the command that reproduces the run."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"== {title}")
    print(
        f"torch {torch.__version__}, Python {platform.python_version()}, {cpu}, "
        f"{os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), {device}"
    )
    print(f"reproduce: {reproduce_command(script, argv)}", flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Sends stdout and stderr (log lines, progress bars) to /dev/null."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        yield


_clock: Callable[[], float] = time.perf_counter


def use_clock(name: str) -> None:
    """Times contenders with ``"wall"`` (perf_counter) or ``"cpu"`` (process_time).

    On a shared machine the CPU time of this process is the steadier measure of
    single-threaded work: it leaves out time the process waited for a core. It still
    counts every thread of the process (summary writers, async checkpoints). GPU runs
    use wall time (the host may sleep while the device works).
    """
    global _clock
    clocks = {"wall": time.perf_counter, "cpu": time.process_time}
    if name not in clocks:
        raise ValueError(f"unknown clock {name!r}; expected 'wall' or 'cpu'.")
    _clock = clocks[name]


def timed(function: Callable[[], object], device: str = "cpu") -> float:
    """Seconds that ``function()`` took on the chosen clock, its GPU work included."""
    cuda = device != "cpu"
    if cuda:
        torch.cuda.synchronize()
    start = _clock()
    function()
    if cuda:
        torch.cuda.synchronize()
    return _clock() - start


def interleave(
    contenders: dict[str, Contender],
    *,
    short: int,
    long: int,
    repeats: int,
    log: Callable[[str], None] = print,
) -> dict[str, list[float]]:
    """Per-step seconds ``(T(long) - T(short)) / (long - short)`` of every contender.

    Contenders run interleaved (A B C A B C ...), each run on fresh objects, so drift in
    machine load spreads over all of them; the difference of a long and a short run
    cancels set-up and first-step costs.

    Returns:
        ``{name: [per-step seconds of each repeat]}``.
    """
    results: dict[str, list[float]] = {name: [] for name in contenders}
    failed: set[str] = set()
    for repeat in range(repeats):
        for name, run in contenders.items():
            if name in failed:
                continue
            try:
                t_short = run(short)
                t_long = run(long)
            except Exception as error:  # Report and go on with the other contenders.
                failed.add(name)
                del results[name]
                first_line = (str(error).strip().splitlines() or [""])[0]
                log(f"  {name} FAILED, left out: {type(error).__name__}: {first_line}")
                continue
            per_step = (t_long - t_short) / (long - short)
            results[name].append(per_step)
            log(f"  repeat {repeat + 1}/{repeats} {name:<34} T({short})={t_short:7.3f}s "
                f"T({long})={t_long:7.3f}s -> {per_step * 1e6:8.1f} us/step")
    return results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A GitHub-markdown table (pasted as is into docs/performance.md)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    sys.stdout.flush()


def run_contenders(
    argv: Sequence[str] | None,
    *,
    description: str,
    title: str,
    script: str,
    build_contenders: Callable[[argparse.Namespace], dict[str, Callable[[int], object]]],
    lightning_available: Callable[[], bool],
) -> tuple[argparse.Namespace, str, dict[str, list[float]]]:
    """The shared command line and A B A B loop of the contender benchmarks.

    Parses ``--repeats --short --long --no-lightning --no-compile --device --only
    --clock``, prints the header, builds the contenders and interleaves them.

    Returns:
        ``(args, clock name, {contender: [seconds per step, one per repeat]})``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--short", type=int, default=2000)
    parser.add_argument("--long", type=int, default=6000)
    parser.add_argument("--no-lightning", action="store_true", help="skip (d)")
    parser.add_argument("--no-compile", action="store_true", help="skip (e)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--only", default="",
                        help="comma-separated contender letters to run, e.g. 'a,e'")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="default: cpu (process time) on a CPU device, wall on a GPU")
    parser.add_argument("--json", default="",
                        help="also write {contender: [seconds per step, ...]} to this file")
    args = parser.parse_args(argv)
    setup_threads()
    clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    use_clock(clock)
    print_header(title, script, argv)
    if not args.no_lightning and not lightning_available():
        print("lightning is not importable: (d) skipped (pip install lightning to add it)")
    contenders = build_contenders(args)
    if args.only:
        wanted = {f"({letter.strip()})" for letter in args.only.split(",")}
        contenders = {k: v for k, v in contenders.items() if k.split()[0] in wanted}
    per_step = interleave(contenders, short=args.short, long=args.long, repeats=args.repeats)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(per_step, f)
    return args, clock, per_step

