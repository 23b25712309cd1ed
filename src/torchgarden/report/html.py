"""The report as one self-contained HTML page: data, uPlot and styles inlined.

Nothing is fetched when the page opens (no server, no network): the charts' data is a
JSON block in the page, drawn by the inlined uPlot (``vendor/``, MIT).
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import math
from importlib import resources
from typing import Any

from torchgarden.report.charts import (
    PALETTE,
    Chart,
    Summary,
    build_charts,
    config_differences,
    summarize,
)
from torchgarden.report.runs import Run

__all__ = ["render_html"]


def _asset(name: str) -> str:
    return resources.files("torchgarden.report").joinpath(name).read_text(encoding="utf-8")


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.4e}"


def _json_value(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _chart_data(runs: list[Run], charts: list[Chart]) -> str:
    data = {
        "runs": [run.name for run in runs],
        "palette": list(PALETTE),
        "charts": [
            {"id": f"chart-{i}", "title": chart.title, "steps": chart.steps,
             "log_y": chart.log_y,
             "series": [{"run": run, "values": [_json_value(v) for v in values]}
                        for run, values in chart.series]}
            for i, chart in enumerate(charts)
        ],
    }
    # Run names, tags and splits are the runs' data: with no '<', '>' or '&' left, nothing
    # in them can end the script element or start a comment inside it ('<!--<script>').
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _runs_section(runs: list[Run]) -> str:
    rows = []
    for i, run in enumerate(runs):
        last = max((series[-1][0] for series in run.scalars.values() if series), default=0)
        colour = PALETTE[i % len(PALETTE)]
        rows.append(f'<tr><td><span class="swatch" style="background:{colour}"></span>'
                    f"{html.escape(run.name)}</td><td class=key>{html.escape(run.path)}</td>"
                    f"<td class=num>{last}</td></tr>")
    return ("<table><tr><th>run</th><th>model_dir</th><th>last step</th></tr>"
            + "".join(rows) + "</table>")


def _cell(cell: Any, row: Summary) -> str:
    if cell is None:
        return "<td class=num>—</td><td class=num>—</td>"
    (step, value), best = cell
    best_text = "—" if best is None else f"{_number(best[1])} <span class=meta>@{best[0]}</span>"
    return (f"<td class=num>{_number(value)} <span class=meta>@{step}</span></td>"
            f"<td class=num>{best_text}</td>")


def _summary_section(runs: list[Run], rows: list[Summary]) -> str:
    head = "".join(f'<th colspan=2>{html.escape(run.name)}</th>' for run in runs)
    sub = "".join("<th>final</th><th>best</th>" for _ in runs)
    body = []
    for row in rows:
        arrow = {True: " ↓", False: " ↑", None: ""}[row.lower_is_better]
        star = ' <span class=best title="best_checkpoint_eval_metric">★</span>' * row.is_best_metric
        body.append(f"<tr><td class=key>{html.escape(row.title)}{arrow}{star}</td>"
                    + "".join(_cell(cell, row) for cell in row.cells) + "</tr>")
    return (f"<table><tr><th rowspan=2>tag (↓ lower is better, ↑ higher)</th>{head}</tr>"
            f"<tr>{sub}</tr>{''.join(body)}</table>")


def _charts_section(charts: list[Chart]) -> str:
    parts, split = [], None
    for i, chart in enumerate(charts):
        if chart.split != split:
            if split is not None:
                parts.append("</div>")
            split = chart.split
            parts.append(f"<h2>{html.escape(split)}</h2><div class=grid>")
        parts.append(f'<div class=card><h3>{html.escape(chart.title)}</h3>'
                     f'<div class=chart id="chart-{i}"></div></div>')
    return "".join(parts) + ("</div>" if charts else "<p class=meta>No scalars.</p>")


def _images_section(runs: list[Run]) -> str:
    cards = []
    for run in runs:
        for image in run.images:
            data = base64.b64encode(image.png).decode("ascii")
            cards.append(f'<div class="card images"><h3>{html.escape(image.split)}/'
                         f"{html.escape(image.tag)}</h3><img alt=\"{html.escape(image.tag)}\" "
                         f'src="data:image/png;base64,{data}"><div class=meta>'
                         f"{html.escape(run.name)} · step {image.step}</div></div>")
    if not cards:
        return ""
    return "<h2>Images (last of each tag)</h2><div class=grid>" + "".join(cards) + "</div>"


def _config_section(runs: list[Run]) -> str:
    if len(runs) == 1:
        rows = "".join(f"<tr><td class=key>{html.escape(k)}</td><td class=key>"
                       f"{html.escape(repr(v))}</td></tr>" for k, v in sorted(runs[0].config.items()))
        return (f"<h2>Resolved config</h2><details><summary>{len(runs[0].config)} keys "
                f"(params.yaml)</summary><table>{rows}</table></details>")
    differing, same = config_differences(runs)
    head = "".join(f"<th>{html.escape(run.name)}</th>" for run in runs)
    rows = "".join(
        f"<tr><td class=key>{html.escape(key)}</td>"
        + "".join(f"<td class=key>{html.escape(repr(v))}</td>" for v in values) + "</tr>"
        for key, values in differing)
    return (f"<h2>Config differences</h2><p class=meta>{len(differing)} keys differ, {same} "
            f"are equal in all runs (params.yaml).</p><table><tr><th>key</th>{head}</tr>"
            f"{rows}</table>")


def render_html(runs: list[Run], *, title: str = "torchgarden report", extra: str = "") -> str:
    """The whole page for ``runs`` (one or more), as a string; ``extra`` (HTML, e.g. a
    study's trials) goes first."""
    charts = build_charts(runs)
    stamp = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_asset("vendor/uPlot.min.css")}</style><style>{_asset("report.css")}</style>
</head><body>
<h1>{html.escape(title)}</h1><div class=meta>{len(runs)} run(s) · written {stamp} by
<code>torchgarden report</code></div>
{extra}<h2>Runs</h2>{_runs_section(runs)}
<h2>Final and best values</h2>{_summary_section(runs, summarize(runs, charts))}
{_charts_section(charts)}
{_images_section(runs)}
{_config_section(runs)}
<script id="tg-data" type="application/json">{_chart_data(runs, charts)}</script>
<script>{_asset("vendor/uPlot.iife.min.js")}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
