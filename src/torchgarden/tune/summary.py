"""The trials table as text: what ``torchgarden tune --summary`` prints (from the table
``write_results`` keeps, ``trials.json``; read by ``torchgarden.report.study``)."""

from __future__ import annotations

import math
from typing import Any

from torchgarden.report.study import read_trials, short_names

__all__ = ["format_summary", "read_trials", "short_names"]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def format_summary(table: dict[str, Any]) -> str:
    """The trials (number, state, objective, steps, parameters), the best one, and the
    objective against each parameter (trials sorted by the parameter's value)."""
    rows = table["trials"]
    keys = list(dict.fromkeys(k for row in rows for k in row["params"]))
    names = short_names(keys)
    header = ["trial", "state", table.get("metric") or "objective", "steps",
              *(names[k] for k in keys)]
    lines = [[str(row["number"]), row["state"], _text(row["objective"]), _text(row["steps"]),
              *(_text(row["params"].get(k)) for k in keys)] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
           for line in [header, *lines]]
    finished = sum(row["state"] in ("complete", "pruned") for row in rows)
    out.append(f"{finished} finished ({sum(r['state'] == 'pruned' for r in rows)} pruned) of "
               f"{len(rows)} trials; {table.get('direction', '')} {table.get('metric', '')}.")
    if table.get("best") is not None:
        best = next(row for row in rows if row["number"] == table["best"])
        out.append(f"best: trial {best['number']} ({best['dir']}), {_text(best['objective'])};"
                   " its config: best/params.yaml")
    # Pruned trials' values are from earlier steps: only complete trials are compared.
    scored = [row for row in rows if row["state"] == "complete"]
    for key in keys:
        points = sorted(((row["params"][key], row["objective"]) for row in scored
                         if key in row["params"]), key=lambda p: (str(type(p[0])), p[0]))
        if points:
            out.append(f"{table.get('metric') or 'objective'} vs {names[key]}: " + ", ".join(
                f"{_text(v)} -> {_text(o)}" for v, o in points))
    return "\n".join(out)
