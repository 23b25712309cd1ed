"""Shared by the benchmark scripts: one thread, interleaved repeats, medians, tables.

Import this module before ``torch`` in every script: it sets ``OMP_WAIT_POLICY=PASSIVE``
(idle OpenMP threads do not spin) before torch reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import random
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
    "Timing",
    "interleave",
    "machine_load",
    "paired_chunks",
    "median",
    "primary_clock",
    "print_header",
    "print_table",
    "quartiles",
    "quiet",
    "reproduce_command",
    "setup_threads",
    "sgemm_peak",
    "spread",
    "step_flops",
    "timed",
    "use_clock",
]

Contender = Callable[[int], "Timing"]
"""``run(num_steps) -> Timing`` (CPU and wall seconds) of the timed part of one fresh
training run."""


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
    print(f"reproduce: {reproduce_command(script, argv)}")
    print(f"machine: {machine_load()} at the start", flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Sends stdout and stderr (log lines, progress bars) to /dev/null."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        yield


_PRIMARY = "cpu"


class Timing(tuple):
    """``(cpu, wall)`` seconds; ``float(t)`` is the clock chosen with :func:`use_clock`."""

    def __new__(cls, cpu: float, wall: float) -> Timing:
        return super().__new__(cls, (cpu, wall))

    @property
    def cpu(self) -> float:
        return self[0]

    @property
    def wall(self) -> float:
        return self[1]

    def __float__(self) -> float:
        return self.cpu if _PRIMARY == "cpu" else self.wall

    def __sub__(self, other: Timing) -> Timing:  # type: ignore[override]
        return Timing(self.cpu - other.cpu, self.wall - other.wall)


def use_clock(name: str) -> None:
    """Makes ``"cpu"`` (process_time) or ``"wall"`` (perf_counter) the primary clock.

    Both are always recorded and printed. On a shared machine the CPU time of this
    process is the steadier measure of single-threaded work: it leaves out time the
    process waited for a core. It still counts every thread of the process (summary
    writers, async checkpoints, TensorFlow's prefetch thread). GPU runs use wall time
    (the host may sleep while the device works).
    """
    global _PRIMARY
    if name not in ("cpu", "wall"):
        raise ValueError(f"unknown clock {name!r}; expected 'wall' or 'cpu'.")
    _PRIMARY = name


def primary_clock() -> str:
    return _PRIMARY


def timed(function: Callable[[], object], device: str = "cpu") -> Timing:
    """CPU and wall seconds that ``function()`` took, its GPU work included."""
    cuda = device != "cpu"
    if cuda:
        torch.cuda.synchronize()
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    if cuda:
        torch.cuda.synchronize()
    return Timing(time.process_time() - cpu, time.perf_counter() - wall)


def interleave(
    contenders: dict[str, Contender],
    *,
    short: int,
    long: int,
    repeats: int,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, list[float]]]:
    """Per-step seconds ``(T(long) - T(short)) / (long - short)`` of every contender.

    Every repeat runs each contender once, in a fresh random order (seeded), each run
    on fresh objects, so drift in machine load and position effects spread over all of
    them; the difference of a long and a short run cancels set-up and first-step costs.

    Returns:
        ``{name: {"cpu": [per-step seconds of each repeat], "wall": [...]}}``.
    """
    results: dict[str, dict[str, list[float]]] = {
        name: {"cpu": [], "wall": []} for name in contenders
    }
    failed: set[str] = set()
    rng = random.Random(seed)
    for repeat in range(repeats):
        order = rng.sample(list(contenders), len(contenders))
        log(f"  repeat {repeat + 1}/{repeats} order: "
            + " ".join(name.split()[0] for name in order))
        for name in order:
            if name in failed:
                continue
            try:
                t_short = contenders[name](short)
                t_long = contenders[name](long)
            except Exception as error:  # Report and go on with the other contenders.
                failed.add(name)
                del results[name]
                first_line = (str(error).strip().splitlines() or [""])[0]
                log(f"  {name} FAILED, left out: {type(error).__name__}: {first_line}")
                continue
            per_step = (t_long - t_short)
            for clock in ("cpu", "wall"):
                results[name][clock].append(getattr(per_step, clock) / (long - short))
            log(f"    {name:<44} cpu {per_step.cpu / (long - short) * 1e6:8.1f} us/step, "
                f"wall {per_step.wall / (long - short) * 1e6:8.1f} us/step")
    return results


def paired_chunks(
    runners: dict[str, Callable[[int], object]],
    *,
    chunk: int,
    rounds: int,
    seed: int = 0,
) -> dict[str, dict[str, list[float]]]:
    """Per-step seconds of long-lived contenders trained on in alternating chunks.

    Every round runs each ``runners[name](chunk)`` once, in a fresh random order; a
    first round is run untimed (warm-up). The per-step difference of two contenders is
    then paired round by round, with no long-minus-short subtraction: on a shared
    machine it is several times tighter than :func:`interleave`'s.

    Returns:
        ``{name: {"cpu": [per-step seconds of each round], "wall": [...]}}``.
    """
    for runner in runners.values():
        runner(chunk)
    results = {name: {"cpu": [], "wall": []} for name in runners}
    rng = random.Random(seed)
    for _ in range(rounds):
        for name in rng.sample(list(runners), len(runners)):
            timing = timed(functools.partial(runners[name], chunk))
            results[name]["cpu"].append(timing.cpu / chunk)
            results[name]["wall"].append(timing.wall / chunk)
    return results


def quartiles(values: Sequence[float], scale: float = 1e6) -> str:
    """``"q1..q3"`` of ``values`` times ``scale``, signed, one decimal."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1 * scale:+.1f}..{q3 * scale:+.1f}"


def sgemm_peak(size: int = 512, calls: int = 40, repeats: int = 5) -> float:
    """Single-thread float32 matmul GFLOP/s of this process (median of ``repeats``),
    the yardstick of the "% of peak" columns."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    rates = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            torch.mm(a, b)
        rates.append(2 * size**3 * calls / (time.process_time() - start) / 1e9)
    return statistics.median(rates)


def step_flops(model: torch.nn.Module, loss: Callable[..., torch.Tensor],
               features: torch.Tensor, labels: torch.Tensor) -> int:
    """Floating-point operations of one forward + backward pass (torch's flop counter:
    matmuls and convolutions), the numerator of "% of peak"."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss(model(features), labels).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def spread(values: Sequence[float], scale: float = 1e6, digits: int = 1) -> str:
    """``min-max`` of ``values`` times ``scale`` (µs by default)."""
    return f"{min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f}"


def machine_load() -> str:
    """``uptime``'s load averages (1, 5, 15 minutes) and the core count."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


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
    build_contenders: Callable[[argparse.Namespace], dict[str, Contender]],
    lightning_available: Callable[[], bool],
    reproduce_argv: Sequence[str] | None = None,
) -> tuple[argparse.Namespace, str, dict[str, dict[str, list[float]]]]:
    """The shared command line and randomized interleaving of the contender benchmarks.

    Parses ``--repeats --short --long --no-lightning --no-compile --device --only
    --clock --seed --json``, prints the header, builds the contenders and interleaves
    them. ``reproduce_argv``: the arguments printed in the reproduce line (default:
    ``argv``).

    Returns:
        ``(args, primary clock, {contender: {"cpu": [seconds per step, one per
        repeat], "wall": [...]}})``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--short", type=int, default=1000)
    parser.add_argument("--long", type=int, default=4000)
    parser.add_argument("--no-lightning", action="store_true", help="skip (d)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--only", default="",
                        help="comma-separated contender labels to run, e.g. 'a*,e'")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="the clock of the tables' main columns (both are printed); "
                             "default: cpu on a CPU device, wall on a GPU")
    parser.add_argument("--seed", type=int, default=0, help="seeds the contenders' order")
    parser.add_argument("--paired-rounds", type=int, default=0,
                        help="also time (a*) and (b) built once, in alternating chunks, "
                             "this many rounds (0: skip)")
    parser.add_argument("--chunk", type=int, default=500,
                        help="steps per chunk of --paired-rounds (a multiple of 100)")
    parser.add_argument("--json", default="",
                        help="also write {contender: [seconds per step, ...]} (main clock)")
    args = parser.parse_args(argv)
    setup_threads()
    clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    use_clock(clock)
    print_header(title, script, argv if reproduce_argv is None else reproduce_argv)
    if not args.no_lightning and not lightning_available():
        print("lightning is not importable: (d) skipped (pip install lightning to add it)")
    contenders = build_contenders(args)
    if args.only:
        wanted = {f"({label.strip()})" for label in args.only.split(",")}
        contenders = {k: v for k, v in contenders.items() if k.split()[0] in wanted}
    per_step = interleave(contenders, short=args.short, long=args.long,
                          repeats=args.repeats, seed=args.seed)
    print(f"machine: {machine_load()} at the end")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({name: times[clock] for name, times in per_step.items()}, f)
    return args, clock, per_step


def report_paired(
    runners: dict[str, Callable[[int], object]], args: argparse.Namespace, clock: str,
) -> float:
    """Runs :func:`paired_chunks` on two contenders (reference first), prints their
    per-step times and the paired difference; returns its median in µs/step."""
    (reference, reference_times), (other, other_times) = paired_chunks(
        runners, chunk=args.chunk, rounds=args.paired_rounds, seed=args.seed).items()
    print(f"\nbuilt once, {args.paired_rounds} rounds of {args.chunk}-step chunks in random "
          f"order (one process); µs/step, median (range); main clock: {clock}")
    print_table(
        ["loop", f"µs/step ({clock})", "range", "µs/step (cpu)", "µs/step (wall)"],
        [(name, f"{median(times[clock]) * 1e6:.1f}", spread(times[clock]),
          f"{median(times['cpu']) * 1e6:.1f}", f"{median(times['wall']) * 1e6:.1f}")
         for name, times in ((reference, reference_times), (other, other_times))],
    )
    paired = [b - a for b, a in zip(other_times[clock], reference_times[clock])]
    ratio = median([a / b for a, b in zip(reference_times[clock], other_times[clock])])
    print(f"{other.split()[0]} - {reference.split()[0]}, paired per round: median "
          f"{median(paired) * 1e6:+.1f} µs/step (quartiles {quartiles(paired)}); "
          f"{other.split()[0]} runs at {ratio:.3f}x the speed of {reference.split()[0]} "
          "(median of the rounds' ratios)")
    print(f"machine: {machine_load()} at the end")
    return median(paired) * 1e6


def report_rates(
    per_step: dict[str, dict[str, list[float]]], clock: str, repeats: int, *,
    reference: str, flops: int, peak: float,
) -> dict[str, float]:
    """Prints steps/s on both clocks, ranges, ratios to ``reference`` and % of peak.

    Returns:
        ``{contender: median steps/s on the main clock}``.
    """
    rate = {name: 1.0 / median(times[clock]) for name, times in per_step.items()}
    other = "wall" if clock == "cpu" else "cpu"
    print(f"\nsteps/s, median of {repeats} (range in µs/step); main clock: {clock}")
    rows = []
    for name, times in per_step.items():
        main = rate[name]
        rows.append((
            name, f"{main:.0f}", spread(times[clock]), f"{1.0 / median(times[other]):.0f}",
            f"{main / rate[reference]:.2f}" if reference in rate else "-",
            f"{100 * flops * main / (peak * 1e9):.0f}%",
        ))
    print_table(["loop", f"steps/s ({clock})", "µs/step range", f"steps/s ({other})",
                 f"× {reference.split()[0]}", "% peak"], rows)
    return rate
