"""A study directory (``torchgarden tune --study_dir``) in a report: its trials table and
the objective against each parameter, drawn as inline SVG (no script, no network).

The table is the study's ``trials.json``, which ``torchgarden tune`` keeps; neither
Optuna nor the study's database is needed to read it.
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any

__all__ = ["TRIALS_FILE", "expand_studies", "read_trials", "render_study", "short_names"]

#: The trials table a study directory keeps (written by ``torchgarden.tune``).
TRIALS_FILE = "trials.json"

_W, _H, _PAD = 320, 200, 36


def expand_studies(directories: list[str]) -> tuple[list[str], list[tuple[str, dict]]]:
    """Replaces each study directory by its trials' run directories; returns the run
    directories and the ``(study_dir, table)`` of each study."""
    runs: list[str] = []
    studies: list[tuple[str, dict[str, Any]]] = []
    for directory in directories:
        table = read_trials(directory)
        if table is None:
            runs.append(directory)
            continue
        studies.append((directory, table))
        names = dict.fromkeys(row["dir"] for row in table["trials"])
        runs += [path for path in (os.path.join(directory, name) for name in names)
                 if os.path.isfile(os.path.join(path, "metrics.jsonl"))]
    return runs, studies


def read_trials(study_dir: str) -> dict[str, Any] | None:
    """The table of ``study_dir/trials.json``; None when it holds no study."""
    path = os.path.join(study_dir, TRIALS_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def short_names(keys: list[str]) -> dict[str, str]:
    """The shortest dotted suffix of each key that no other key shares."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            if not any(other != key and other.endswith("." + name) or other == name
                       for other in keys if other != key):
                break
        names[key] = name
    return names


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else html.escape(str(value))


def _table(table: dict[str, Any], keys: list[str], names: dict[str, str]) -> str:
    head = "".join(f"<th>{html.escape(names[k])}</th>" for k in keys)
    rows = []
    for row in table["trials"]:
        best = " ★" if row["number"] == table.get("best") else ""
        rows.append(
            f"<tr><td class=num>{row['number']}{best}</td><td>{html.escape(row['dir'])}</td>"
            f"<td>{html.escape(row['state'])}</td><td class=num>{_number(row['objective'])}</td>"
            f"<td class=num>{_number(row['steps'])}</td>"
            + "".join(f"<td class=num>{_number(row['params'].get(k))}</td>" for k in keys)
            + "</tr>")
    metric = html.escape(str(table.get("metric") or "objective"))
    return (f"<table><tr><th>trial</th><th>run</th><th>state</th><th>{metric}</th>"
            f"<th>steps</th>{head}</tr>{''.join(rows)}</table>")


def _scatter(name: str, points: list[tuple[Any, float]]) -> str:
    """An SVG scatter of (parameter value, objective); categories are spread evenly."""
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x, _ in points)
    labels = sorted({str(x) for x, _ in points}) if not numeric else []
    xs = [float(x) if numeric else float(labels.index(str(x))) for x, _ in points]
    log_x = numeric and min(xs) > 0 and max(xs) > 20 * min(xs)
    xs = [math.log10(x) for x in xs] if log_x else xs
    ys = [y for _, y in points]

    def scale(values: list[float], size: int) -> list[float]:
        low, high = min(values), max(values)
        span = (high - low) or 1.0
        return [_PAD + (v - low) / span * (size - 2 * _PAD) for v in values]

    px, py = scale(xs, _W), [_H - y for y in scale(ys, _H)]
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#4e79a7"><title>'
                   f"{html.escape(str(v))}: {o:.4g}</title></circle>"
                   for x, y, (v, o) in zip(px, py, points))
    axis = (f'<text x="{_W / 2}" y="{_H - 6}" text-anchor="middle" font-size="11">'
            f"{html.escape(name)}{' (log)' if log_x else ''}</text>"
            f'<text x="4" y="14" font-size="10">{max(ys):.4g}</text>'
            f'<text x="4" y="{_H - _PAD}" font-size="10">{min(ys):.4g}</text>')
    return (f'<div class=card><h3>{html.escape(name)}</h3><svg width="{_W}" height="{_H}" '
            f'role="img"><rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" '
            f'height="{_H - 2 * _PAD}" fill="none" stroke="#ccc"/>{dots}{axis}</svg></div>')


def render_study(study_dir: str, table: dict[str, Any]) -> str:
    """The HTML section of one study: its trials, then the objective vs each parameter
    (complete trials only: a pruned trial's value is from an earlier step)."""
    keys = list(dict.fromkeys(k for row in table["trials"] for k in row["params"]))
    names = short_names(keys)
    complete = [row for row in table["trials"] if row["state"] == "complete"]
    charts = []
    for key in keys:
        points = [(row["params"][key], float(row["objective"])) for row in complete
                  if key in row["params"] and row["objective"] is not None]
        if points:
            charts.append(_scatter(names[key], points))
    direction = html.escape(f"{table.get('direction', '')} {table.get('metric', '')}")
    return (f"<h2>Study {html.escape(str(table.get('study_name', '')))}</h2><div class=meta>"
            f"{html.escape(study_dir)} · experiment {html.escape(str(table.get('experiment')))}"
            f" · {direction} · ★ best</div>{_table(table, keys, names)}"
            f"<h3>Objective vs each parameter</h3><div class=grid>{''.join(charts)}</div>")
