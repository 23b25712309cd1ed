"""One benchmark script, two revisions of torchgarden, in one interleaved run.

The benchmark script and its contenders come from this checkout; only the torchgarden
package differs: ``--base REV`` is exported with ``git archive`` and put first on
``PYTHONPATH`` for its runs. Each round runs the script once per revision (one repeat
of every contender), in a random order, so load drift and position effects spread over
both; the table gives medians and ranges over the rounds, per contender.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/compare_revisions.py \\
        --base e2131ed --script loop_overhead.py --rounds 5 [-- --only a,b --no-lightning]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import _common


def _export(revision: str, directory: str) -> str:
    archive = subprocess.run(["git", "-C", _common.REPO, "archive", revision, "src"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    return os.path.join(directory, "src")


def _run(script: str, source: str, extra: list[str], out: str) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": source, "OMP_WAIT_POLICY": "PASSIVE"}
    command = [sys.executable, os.path.join(_common.REPO, "benchmarks", script),
               "--repeats", "1", "--json", out, *extra]
    subprocess.run(command, check=True, env=env, cwd=os.path.join(_common.REPO, "benchmarks"),
                   stdout=subprocess.DEVNULL)
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--head", default="",
                        help="git revision compared (default: this checkout's working tree)")
    parser.add_argument("--script", default="loop_overhead.py")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the runs")
    parser.add_argument("extra", nargs="*", help="arguments for the script (after --)")
    args = parser.parse_args(argv)
    _common.print_header(f"{args.script}: {args.base} vs {args.head or 'this checkout'}",
                         "compare_revisions.py", argv)
    rng = random.Random(args.seed)
    results: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "base"))
        os.makedirs(os.path.join(tmp, "head"))
        sources = {"base": _export(args.base, os.path.join(tmp, "base")),
                   "head": _export(args.head, os.path.join(tmp, "head")) if args.head
                   else os.path.join(_common.REPO, "src")}
        for round_index in range(args.rounds):
            order = rng.sample(sorted(sources), 2)
            for name in order:
                out = os.path.join(tmp, f"{name}.json")
                for contender, values in _run(args.script, sources[name], args.extra,
                                              out).items():
                    results[name].setdefault(contender, []).extend(values)
            print(f"round {round_index + 1}/{args.rounds}: order {' '.join(order)}", flush=True)
    rows = []
    for contender in results["head"]:
        base = results["base"].get(contender, [])
        head = results["head"][contender]
        if not base:
            continue
        b, h = _common.median(base) * 1e6, _common.median(head) * 1e6
        rows.append((contender, f"{b:.1f}", f"{min(base) * 1e6:.1f}-{max(base) * 1e6:.1f}",
                     f"{h:.1f}", f"{min(head) * 1e6:.1f}-{max(head) * 1e6:.1f}", f"{h / b:.3f}"))
    print(f"\nµs/step, median over {args.rounds} rounds (script's own clock):")
    _common.print_table(["contender", f"base {args.base}", "range", "head", "range",
                         "head / base"], rows)


if __name__ == "__main__":
    main(sys.argv[1:])
