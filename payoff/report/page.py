"""One HTML page per run: config, learning curves, final evaluation, pictures, GIFs, events."""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

from payoff.core.io import atomic_write_text
from payoff.report.plots import default_metrics, plot_curves
from payoff.track.run import Run

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: .85em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
img { max-width: 100%; margin: .5em 0; }
.sev-critical { color: #b00; font-weight: bold; } .sev-warning { color: #b60; }
"""


def write_report(run: Run) -> Path:
    """Write media/report.html for `run` (drawing the learning curves first)."""
    media = run.media
    media.mkdir(exist_ok=True)
    records = run.records()
    curve_metrics = [
        m
        for m in ("eval/success_rate", "eval/mean_return", "train/return")
        if any(m in r for r in records)
    ]
    curve_metrics = curve_metrics[:2] or default_metrics([run])
    if records and curve_metrics:
        plot_curves([run], media / "curves.png", metrics=curve_metrics, title=run.name)
    config = run.config
    summary = run.summary()
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>payoff run {html.escape(run.name)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(run.name)}</h1>",
        f"<p>{html.escape(str(config.get('description', '')))}</p>",
    ]
    if summary:
        parts.append("<h2>Final evaluation</h2>")
        parts.append(_summary_table(summary))
    pictures = sorted(p for p in media.glob("*.png"))
    if pictures:
        parts.append("<h2>Curves and pictures</h2>")
        parts.extend(
            f"<div><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></div>"
            for p in pictures
        )
    gifs = sorted(media.glob("*.gif"))
    if gifs:
        parts.append("<h2>Episodes</h2>")
        parts.extend(
            f"<div><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></div>"
            for p in gifs
        )
    for extra in ("trajectories.md",):  # per-algorithm text artifacts (agent episodes)
        if (run.path / extra).is_file():
            parts.append(
                f"<p><a href='../{extra}'>{extra}</a>: episodes rendered as conversations</p>"
            )
    events = run.events()
    if events:
        parts.append(
            "<h2>Events</h2><table><tr><th>step</th><th>kind</th><th>severity</th><th>message</th></tr>"
        )
        for record in events:
            event = record["event"]
            severity = html.escape(str(event.get("severity", "")))
            parts.append(
                f"<tr><td>{record['step']}</td><td>{html.escape(str(event.get('kind')))}</td>"
                f"<td class='sev-{severity}'>{severity}</td><td>{html.escape(str(event.get('message')))}</td></tr>"
            )
        parts.append("</table>")
    parts.append("<h2>Config</h2>")
    parts.append(f"<pre>{html.escape(yaml.safe_dump(config, sort_keys=False))}</pre>")
    parts.append(f"<p>Run directory: <code>{html.escape(str(run.path))}</code></p></body></html>")
    path = media / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


def _summary_table(summary: dict) -> str:
    rows = []
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
        elif isinstance(value, list):
            value = json.dumps(value)[:300]
        rows.append(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(_fmt(value))}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
