"""``torchgarden report MODEL_DIR [MODEL_DIR ...]``: one HTML page of one or more runs.

The page is self-contained (open it from disk; no server, no network): a chart per
tag with the runs overlaid, final and best values, the config differences, image
summaries. ``--png DIR`` also writes the charts as PNG files (matplotlib). Torch is not
imported.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["COMMANDS", "add_parser", "command_report"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds the ``report`` subcommand to ``sub``."""
    report = sub.add_parser(
        "report", help="write a self-contained HTML report of one or more model_dirs.")
    report.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR",
                        help="run directories (--model_dir of torchgarden train) or study "
                             "directories (--study_dir of torchgarden tune).")
    report.add_argument("--output", default="report.html", metavar="FILE",
                        help="the HTML file to write (default: report.html).")
    report.add_argument("--png", default=None, metavar="DIR",
                        help="also write each chart as DIR/<split>_<tag>.png "
                             "(needs matplotlib: pip install 'torchgarden[report]').")
    report.add_argument("--title", default="torchgarden report", help="the page's title.")


def command_report(args: argparse.Namespace) -> int:
    """Writes the report; prints where it is."""
    from torchgarden.report import write_report

    for directory in args.model_dirs:
        if not os.path.isdir(directory):
            raise FileNotFoundError(
                f"MODEL_DIR {directory} is not a directory; pass the --model_dir of a run.")
    if os.path.isdir(args.output):
        raise IsADirectoryError(f"--output {args.output} is a directory; name an .html file.")
    runs = write_report(args.model_dirs, args.output, png_dir=args.png, title=args.title)
    charts = len({key for run in runs for key in run.scalars})
    print(f"torchgarden: report of {len(runs)} run(s), {charts} charts: "
          f"{os.path.abspath(args.output)}", flush=True)
    if args.png:
        print(f"torchgarden: PNG charts in {os.path.abspath(args.png)}", flush=True)
    return 0


COMMANDS = {"report": command_report}
