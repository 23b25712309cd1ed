"""``torchgarden report``: one self-contained HTML page (and PNG charts) of one or more runs.

Example:
    >>> from torchgarden.report import write_report
    >>> write_report(["runs/a", "runs/b"], "report.html", png_dir="figures")
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from torchgarden.report.charts import Chart, build_charts
from torchgarden.report.html import render_html
from torchgarden.report.png import write_pngs
from torchgarden.report.runs import Run, load_run

__all__ = ["Chart", "Run", "build_charts", "load_runs", "render_html", "write_pngs",
           "write_report"]


def load_runs(model_dirs: Sequence[str | os.PathLike[str]]) -> list[Run]:
    """Reads each model_dir; runs with the same directory name get their parent's name too."""
    names = [os.path.basename(os.path.abspath(d)) for d in model_dirs]
    runs = []
    for directory, name in zip(model_dirs, names):
        if names.count(name) > 1:
            parent = os.path.basename(os.path.dirname(os.path.abspath(directory)))
            name = f"{parent}/{name}"
        runs.append(load_run(directory, name))
    return runs


def write_report(
    model_dirs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str],
    png_dir: str | os.PathLike[str] | None = None, title: str = "torchgarden report",
) -> list[Run]:
    """Writes the HTML report of ``model_dirs`` to ``output`` (and the PNG charts to
    ``png_dir``); returns the runs read. A study directory (``torchgarden tune``) adds its
    trials table and objective-vs-parameter charts, and its trials' runs.

    Raises:
        FileNotFoundError: A model_dir is missing or holds nothing to report.
        ImportError: ``png_dir`` is given and matplotlib is not installed.
    """
    from torchgarden.report.study import expand_studies, render_study
    from torchgarden.utils.files import atomic_write_text

    # A study directory (torchgarden tune) stands for its trials' runs, plus its table.
    run_dirs, studies = expand_studies([os.fspath(d) for d in model_dirs])
    runs = load_runs(run_dirs)
    if png_dir is not None:
        write_pngs(runs, png_dir)
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    extra = "".join(render_study(directory, table) for directory, table in studies)
    atomic_write_text(output, render_html(runs, title=title, extra=extra))
    return runs
