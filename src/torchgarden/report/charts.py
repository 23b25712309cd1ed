"""The report's charts and tables, computed once for the HTML page and the PNG files."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from torchgarden.report.runs import Run

__all__ = ["PALETTE", "Chart", "Summary", "build_charts", "config_differences", "summarize"]

#: Run colours, in order (Tableau 10: distinct, print-safe).
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
_LOWER_IS_BETTER = re.compile(r"loss|error|mae|mse|perplexity|bits_per|wait|seconds|memory|gib")
_NO_BEST = ("learning_rate", "steps_per_second")
_SPLIT_ORDER = {"train": 0, "validation": 1}


@dataclasses.dataclass
class Chart:
    """One tag of one split, every run that has it overlaid on a common step axis.

    Attributes:
        split: ``train``, ``validation``, ...
        tag: The scalar's name (``accuracy``, ``coco/AP``).
        steps: The union of the runs' steps, sorted.
        series: ``(run index, values aligned to steps; None where the run has no point)``.
    """

    split: str
    tag: str
    steps: list[int]
    series: list[tuple[int, list[float | None]]]

    @property
    def title(self) -> str:
        return f"{self.split}/{self.tag}"

    @property
    def log_y(self) -> bool:
        """Whether a log scale shows it better: all values positive, spanning > 100x."""
        values = [v for _, vs in self.series for v in vs if v is not None and math.isfinite(v)]
        return bool(values) and min(values) > 0 and max(values) > 100 * min(values)


def _sort_key(key: tuple[str, str]) -> tuple[int, str, str]:
    return _SPLIT_ORDER.get(key[0], 2), key[0], key[1]


def build_charts(runs: list[Run]) -> list[Chart]:
    """One chart per ``(split, tag)`` found in any run; train first, then validation."""
    keys = sorted({key for run in runs for key in run.scalars}, key=_sort_key)
    charts = []
    for split, tag in keys:
        present = [(i, dict(run.scalars[(split, tag)])) for i, run in enumerate(runs)
                   if (split, tag) in run.scalars]
        steps = sorted({step for _, points in present for step in points})
        series = [(i, [points.get(step) for step in steps]) for i, points in present]
        charts.append(Chart(split, tag, steps, series))
    return charts


@dataclasses.dataclass
class Summary:
    """A row of the final/best table: a tag and, per run, ``(final, best)`` points."""

    title: str
    lower_is_better: bool | None  # None: no "best" (learning rate, speed).
    is_best_metric: bool
    cells: list[tuple[tuple[int, float], tuple[int, float] | None] | None]


def _direction(run_best: tuple[str, str] | None, split: str, tag: str) -> bool | None:
    if run_best is not None and split != "train" and run_best[0] == tag:
        return run_best[1] == "lower"
    if tag.split("/")[-1] in _NO_BEST:
        return None
    return bool(_LOWER_IS_BETTER.search(tag.lower()))


def summarize(runs: list[Run], charts: list[Chart]) -> list[Summary]:
    """The final value of every chart's tag per run, and its best (min or max) value."""
    rows = []
    best_metric = next((run.best_metric for run in runs if run.best_metric), None)
    for chart in charts:
        lower = _direction(best_metric, chart.split, chart.tag)
        cells: list[Any] = [None] * len(runs)
        for index, values in chart.series:
            points = [(s, v) for s, v in zip(chart.steps, values) if v is not None]
            finite = [(s, v) for s, v in points if math.isfinite(v)]
            if not points:
                continue
            best = None
            if lower is not None and finite:
                best = (min if lower else max)(finite, key=lambda p: p[1])
            cells[index] = (points[-1], best)
        is_best = bool(best_metric and chart.split != "train" and chart.tag == best_metric[0])
        rows.append(Summary(chart.title, lower, is_best, cells))
    return rows


def config_differences(runs: list[Run]) -> tuple[list[tuple[str, list[Any]]], int]:
    """``([(dotted key, value per run)], number of keys equal in all runs)``; a run
    without the key shows ``None``."""
    keys = sorted({key for run in runs for key in run.config})
    differing, same = [], 0
    for key in keys:
        values = [run.config.get(key) for run in runs]
        if all(v == values[0] for v in values[1:]) and all(key in run.config for run in runs):
            same += 1
        else:
            differing.append((key, values))
    return differing, same
