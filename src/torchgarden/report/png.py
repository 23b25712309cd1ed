"""The report's charts as PNG files (matplotlib: ``pip install 'torchgarden[report]'``)."""

from __future__ import annotations

import os
import re

from torchgarden.report.charts import PALETTE, build_charts
from torchgarden.report.runs import Run

__all__ = ["write_pngs"]


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "--png draws with matplotlib, which is not installed; pip install "
            "'torchgarden[report]' (or matplotlib)."
        ) from error
    matplotlib.use("Agg")  # Files only: no window, no display needed.
    import matplotlib.pyplot as plt

    return plt


def _file_name(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", title).strip("_") + ".png"


def write_pngs(runs: list[Run], directory: str | os.PathLike[str], dpi: int = 150) -> list[str]:
    """Writes one PNG per chart of the HTML report (``<split>_<tag>.png``) into
    ``directory`` and returns their paths."""
    plt = _pyplot()
    os.makedirs(directory, exist_ok=True)
    paths = []
    for chart in build_charts(runs):
        figure, axes = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
        for index, values in chart.series:
            points = [(s, v) for s, v in zip(chart.steps, values) if v is not None]
            axes.plot([s for s, _ in points], [v for _, v in points],
                      marker="o" if len(points) <= 60 else None, markersize=3, linewidth=1.5,
                      color=PALETTE[index % len(PALETTE)], label=runs[index].name)
        if chart.log_y:
            axes.set_yscale("log")
        axes.set_title(chart.title, fontsize=11)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        if len(runs) > 1:
            axes.legend(fontsize=8)
        path = os.path.join(os.fspath(directory), _file_name(chart.title))
        figure.savefig(path, dpi=dpi)
        plt.close(figure)
        paths.append(path)
    return paths
