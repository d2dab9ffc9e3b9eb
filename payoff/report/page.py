"""One HTML page per run: what was run (the recipe and the overrides), results, learning
curves, pictures, sample completions or trajectories, GIFs, events and the config."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from payoff.core.errors import RunError
from payoff.core.io import atomic_write_text, read_prefix
from payoff.report.figures import CURVES_IN_FIGURES
from payoff.report.plots import (
    TRUE_OBJECTIVE,
    default_metrics,
    final_point,
    is_number,
    plot_curves,
    point_count,
    series,
)
from payoff.track.run import Run, read_jsonl

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h3 { font-size: 1em; margin-bottom: .3em; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: .85em; }
table { border-collapse: collapse; margin-bottom: .8em; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #fafafa; font-weight: 600; }
code { background: #f2f2f2; padding: 0 .25em; } td pre { margin: 0; padding: .2em; }
img { max-width: 100%; margin: .5em 0; }
.note { color: #555; } .ok { color: #070; } .bad { color: #b00; }
.sev-critical { color: #b00; font-weight: bold; } .sev-warning { color: #b60; }
"""

# The curves a reader looks at first, best first; the page draws up to two of them.
CURVE_METRICS = (
    "eval/success_rate",
    "eval/mean_return",
    "eval/accuracy",
    "train/return",
    "train/success_rate",
    "train/accuracy",
    "train/reward",
)
MAX_PANELS = 2
# summary.json keys shown as sentences above the tables, not as rows
NOTE_KEYS = ("headline", "final_line", "plateau_note")
# `finished` is always true here; prompt_format has a section of its own
HIDDEN_KEYS = ("finished", "final_eval", "prompt_format", *NOTE_KEYS)
SHOWN_EXAMPLES = 5  # sample completions
SHOWN_LINES = 20  # of a summary value that is a list of lines (an experiment's member results)
SHOWN_TRAJECTORIES = 3  # agent episodes from trajectories.md
TRAJECTORY_BYTES = 2**20  # read of trajectories.md (three episodes are a few KB; 300 MB: 1 GB)


def write_report(run: Run) -> Path:
    """Write media/report.html for `run` (drawing its learning curves first)."""
    media = run.media
    media.mkdir(exist_ok=True)
    config = run.config
    try:
        summary, unread = run.summary(), ""
    except RunError as err:  # a copied run's summary.json, too large or not JSON: the rest
        summary, unread = {}, f"<p class='note'>Its summary is not shown: {_esc(err)}.</p>"
    records = run.records()
    panels = curve_panels(run)
    curves = media / "curves.png"
    if panels:
        plot_curves([run], curves, metrics=panels, title=_curves_title(run.name, config))
    else:
        curves.unlink(missing_ok=True)  # left by an earlier report of this run
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>payoff run {_esc(run.name)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_esc(run.name)}</h1>",
        *_what_ran(config),
        *(f"<p>{_esc(summary[key])}</p>" for key in NOTE_KEYS if summary.get(key)),
        unread,
    ]
    trainer = run.trainer_pid()
    if trainer is not None:  # a report of a run still training: say what it shows
        last = max((int(r.get("step", 0)) for r in records), default=0)
        who = f" (pid {trainer})" if trainer else ""
        parts.append(
            f"<p class='note'>This run is still training{who}: this page shows what it had "
            f"logged by step {last:,}; its final evaluation and pictures come at its end.</p>"
        )
    parts += _results(summary, records)
    pictures = sorted(media.glob("*.png"))
    if pictures:
        parts.append("<h2>Curves and pictures</h2>")
        if any(final_point(run, metric) for metric in panels):
            parts.append(
                "<p class='note'>The star on an evaluation curve is the final evaluation "
                "(more episodes than the periodic ones).</p>"
            )
        parts.extend(_image(p) for p in pictures)
    parts += _prompt_format(summary)
    parts += _examples(summary)
    parts += _training_samples(run.path / "samples.jsonl")
    parts += _trajectories(run.path / "trajectories.md")
    gifs = sorted(media.glob("*.gif"))
    if gifs:
        parts.append("<h2>Episodes</h2>")
        parts.extend(_image(p) for p in gifs)
    parts += _events(run.events())
    parts.append("<h2>Config</h2>")
    parts.append(f"<pre>{_esc(yaml.safe_dump(config, sort_keys=False))}</pre>")
    parts.append(f"<p>Run directory: <code>{_esc(run.path)}</code></p></body></html>")
    path = media / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


def curve_panels(run: Run) -> list[str]:
    """The metrics the page draws as curves: the headline metrics with at least two points
    (a one-point metric is a row of the results table instead), none that the algorithm's own
    figures already draw, and none that repeats another curve point for point (FrozenLake's
    success rate is its mean return)."""
    records = run.records()
    logged = {key for record in records for key in record}
    shown = list(CURVES_IN_FIGURES.get(str(run.config.get("algo")), ()))
    candidates = [m for m in CURVE_METRICS if m in logged] or default_metrics([run])
    panels: list[str] = []
    for metric in candidates:
        if len(panels) == MAX_PANELS:
            break
        if metric in shown or point_count(run, metric) < 2:
            continue
        if any(_same_curve(run, metric, other) for other in shown):
            continue
        panels.append(metric)
        shown.append(metric)
    # A hackable env's true objective (BoatRace's laps) beside the reward paid: the page is
    # where a reader sees the proxy rise while the truth stays flat.
    truth = TRUE_OBJECTIVE in logged and TRUE_OBJECTIVE not in shown
    if truth and point_count(run, TRUE_OBJECTIVE) >= 2:
        panels = [*panels[: MAX_PANELS - 1], TRUE_OBJECTIVE]
    return panels


def _same_curve(run: Run, metric: str, other: str) -> bool:
    (xs, ys), (other_xs, other_ys) = series(run, metric), series(run, other)
    return (
        np.array_equal(xs, other_xs)
        and np.array_equal(ys, other_ys)
        and final_point(run, metric) == final_point(run, other)
    )


def _curves_title(name: str, config: dict[str, Any]) -> str:
    """'cartpole-ppo: ppo on CartPole-v1, seed 1' (what ran, not the directory's name);
    'ppo on Acrobot-v1, seed 1' for a run of an algorithm's defaults (`payoff train ppo`)."""
    recipe, algo = config.get("recipe"), config.get("algo")
    seed = f", seed {config['seed']}" if "seed" in config else ""
    if config.get("from_defaults") and config.get("description"):
        return f"{config['description']}{seed}"
    if not recipe or not algo:
        return name
    env = config.get("env")
    title = f"{recipe}: {algo}" + (f" on {env['id']}" if isinstance(env, dict) else "")
    return title + seed


def _what_ran(config: dict[str, Any]) -> list[str]:
    """The recipe with its own description, and the overrides this run was started with: the
    description is the recipe's (its "solves within 100k steps"), not a claim about this run."""
    recipe = config.get("recipe")
    description = config.get("description", "")
    if config.get("from_defaults"):  # `payoff train ppo env.id=...`: no recipe to describe
        keys = " ".join(f"<code>{_esc(o)}</code>" for o in config.get("overrides") or [])
        lines = [
            f"<p><b>{_esc(description)}</b>: {_esc(config.get('algo'))}'s defaults, no recipe"
            + (f", with {keys}" if keys else "")
            + "</p>"
        ]
        if config.get("recipe_note"):  # which env or task the defaults chose
            lines.append(f"<p class='note'><b>Note:</b> {_esc(config['recipe_note'])}</p>")
        return lines
    if not recipe:
        return [f"<p>{_esc(description)}</p>"] if description else []
    lines = [
        f"<p><b>Recipe <code>{_esc(recipe)}</code></b>"
        + (f": {_esc(description)}" if description else "")
        + "</p>"
    ]
    if "overrides" in config:  # absent in runs from before config.yaml kept them
        overrides = [str(o) for o in config["overrides"] or []]
        codes = " ".join(f"<code>{_esc(o)}</code>" for o in overrides)
        lines.append(
            f"<p><b>Overrides:</b> {codes} <span class='note'>(this run differs from the recipe "
            "as shipped; its description is about the recipe)</span></p>"
            if overrides
            else "<p><b>Overrides:</b> none (the recipe as shipped)</p>"
        )
    if config.get("recipe_note"):  # e.g. the recipe's env-specific settings were left out
        lines.append(f"<p class='note'><b>Note:</b> {_esc(config['recipe_note'])}</p>")
    return lines


def _results(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """Tables: the final evaluation, the run's other headline numbers, metrics logged once."""
    parts: list[str] = []
    final = summary.get("final_eval")
    if isinstance(final, dict):
        rows = _final_rows(final)
        if rows:
            parts += ["<h3>Final evaluation</h3>", _table(rows)]
    other = [
        (key, value)
        for key, value in summary.items()
        if key not in HIDDEN_KEYS
        and not (key == "finished_step" and value == summary.get("steps"))  # said once
    ]
    if other:
        parts += ["<h3>Run</h3>", _table([(_label(k), _cell(v)) for k, v in other])]
    once = _logged_once(records)
    if once:
        rows = [
            (f"<code>{_esc(m)}</code>", f"{_cell(v)} <span class='note'>at step {_esc(s)}</span>")
            for m, v, s in once
        ]
        parts += ["<h3>Metrics logged once</h3>", _table(rows)]
    return ["<h2>Results</h2>", *parts] if parts else []


def _final_rows(final: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per final-evaluation number; mean and std of the return as `mean ± std`."""
    rows = []
    for key, value in final.items():
        if value is None or key in ("examples", "pass_at", "std_return"):  # pass_at: pass@k rows
            continue
        if key == "mean_return" and isinstance(final.get("std_return"), int | float):
            rows.append((_label(key), f"{_fmt(value)} ± {_fmt(final['std_return'])}"))
            continue
        rows.append((_label(key), _cell(value)))
    return rows


def _logged_once(records: list[dict[str, Any]]) -> list[tuple[str, Any, int]]:
    """(metric, value, step) of each metric with a single numeric point (no curve to draw);
    final/* are left out: they are the final evaluation's table."""
    seen: dict[str, list[tuple[Any, int]]] = {}
    for record in records:
        for key, value in record.items():
            if "/" in key and not key.startswith("final/") and is_number(value):
                seen.setdefault(key, []).append((value, record["step"]))
    return [(key, *points[0]) for key, points in seen.items() if len(points) == 1]


def _prompt_format(summary: dict[str, Any]) -> list[str]:
    """How prompts reached a language model (summary.json's prompt_format, written by the
    LM trainers): whose chat template rendered them, or that none did, and one prompt as the
    model was given it, special tokens written out (bounded where it was written)."""
    shown = summary.get("prompt_format")
    if not isinstance(shown, dict) or not isinstance(shown.get("chat_template"), str):
        return []
    parts = ["<h2>Prompts as the model reads them</h2>", f"<p>{_esc(shown['chat_template'])}</p>"]
    example = shown.get("example")
    if isinstance(example, str):
        split = _esc(shown.get("example_split") or "")
        tokens = shown.get("example_tokens")
        count = f"the {_fmt(tokens)} token ids" if is_number(tokens) else "the token ids"
        parts += [
            f"<p class='note'>A {split} prompt, decoded from {count} the model is given "
            f"(special tokens written out):</p>",
            f"<pre>{_esc(example)}</pre>",
        ]
        row_prompt = shown.get("row_prompt")
        if isinstance(row_prompt, str) and row_prompt != example:
            parts += [
                "<p class='note'>The row's own prompt, which the reward functions read (and "
                "the tables below show):</p>",
                f"<pre>{_esc(row_prompt)}</pre>",
            ]
    return parts


def _examples(summary: dict[str, Any]) -> list[str]:
    """A few of the final evaluation's completions (language-model runs keep them there)."""
    final = summary.get("final_eval")
    examples = final.get("examples") if isinstance(final, dict) else None
    if not isinstance(examples, list) or not examples:
        return []
    examples = [e for e in examples if isinstance(e, dict)][:SHOWN_EXAMPLES]
    templated = any("model_input" in e for e in examples)
    read = (
        " <code>model_input</code> is the prompt as the model read it (through the chat "
        "template); <code>prompt</code>, the row's own, as the verifier read it."
        if templated
        else ""
    )
    return [
        "<h2>Sample completions</h2>",
        f"<p class='note'>From the final evaluation (greedy decoding).{read}</p>",
        _rows_table(examples),
    ]


def _training_samples(path: Path) -> list[str]:
    """The completions of one prompt at the last evaluation step, with each reward function's
    score (samples.jsonl, written by GRPO every eval_every steps)."""
    if not path.is_file():
        return []
    rows = [r for r in read_jsonl(path) if isinstance(r, dict)]
    if not rows:
        return []
    last = rows[-1].get("step")
    rows = [{k: v for k, v in r.items() if k != "step"} for r in rows if r.get("step") == last][
        :SHOWN_EXAMPLES
    ]
    return [
        "<h2>Training samples and their rewards</h2>",
        f"<p class='note'>One prompt's group at step {_esc(str(last))} (sampled, as the rewards "
        f"saw them); every evaluation step's group is in "
        f"<a href='../samples.jsonl'>samples.jsonl</a>.</p>",
        _rows_table(rows),
    ]


def _rows_table(rows: list[dict[str, Any]]) -> str:
    """An HTML table of completions: one column per key, in the order the rows first use them."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(_example_cell(c, row.get(c)) for c in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _example_cell(column: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"<td class='{'ok' if value else 'bad'}'>{'yes' if value else 'no'}</td>"
    if isinstance(value, str):
        return f"<td><pre>{_esc(value)}</pre></td>"
    return f"<td>{_cell(value)}</td>"


def _trajectories(path: Path) -> list[str]:
    """The first few episodes of an agent's trajectories.md (its held-out episodes), read
    from its first TRAJECTORY_BYTES only."""
    if not path.is_file():
        return []
    text, cut = read_prefix(path, TRAJECTORY_BYTES)
    title, *episodes = text.split("\n### ")
    shown = "\n### ".join([title, *episodes[:SHOWN_TRAJECTORIES]]).strip()
    if cut and len(episodes) <= SHOWN_TRAJECTORIES:  # the last one shown goes on past the cut
        shown += f"\n\n[… cut at {TRAJECTORY_BYTES:,} bytes]"
    if cut:
        rest = f" (more in it, past the first {TRAJECTORY_BYTES:,} bytes read here)"
    else:
        more = len(episodes) - SHOWN_TRAJECTORIES
        rest = f" ({more} more in it)" if more > 0 else ""
    return [
        "<h2>Trajectories</h2>",
        f"<p class='note'>Held-out episodes as conversations, from "
        f"<a href='../trajectories.md'>trajectories.md</a>{rest}.</p>",
        f"<pre>{_esc(shown)}</pre>",
    ]


def _events(events: list[dict[str, Any]]) -> list[str]:
    if not events:
        return []
    parts = [
        "<h2>Events</h2><table><tr><th>step</th><th>kind</th><th>severity</th><th>message</th></tr>"
    ]
    for record in events:
        event = record["event"]
        severity = _esc(event.get("severity", ""))
        evidence = event.get("evidence") or {}
        samples = evidence.get("samples")
        shown = ""
        if isinstance(samples, list) and samples and all(isinstance(s, dict) for s in samples):
            shown = (
                f"<details open><summary>evidence: {len(samples)} samples behind the alarm"
                f"</summary>{_rows_table(samples)}</details>"
            )
        parts.append(
            f"<tr><td>{_esc(record['step'])}</td><td>{_esc(event.get('kind'))}</td>"
            f"<td class='sev-{severity}'>{severity}</td><td>{_esc(event.get('message'))}"
            f"{shown}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _table(rows: list[tuple[str, str]]) -> str:
    """Rows of (already escaped) header and cell HTML."""
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _cell(value: Any) -> str:
    """A summary value as HTML: numbers right-aligned, mappings and lists of records as tables."""
    if isinstance(value, dict):
        return _table([(_label(k), _cell(v)) for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        columns = list(dict.fromkeys(key for row in value for key in row))
        head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in columns) + "</tr>"
            for row in value
        )
        return f"<table><tr>{head}</tr>{body}</table>"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        # lines of text (an experiment's member results): one a line, as written (± not \u00b1)
        shown = [_esc(v if len(v) <= 300 else v[:300] + " …") for v in value[:SHOWN_LINES]]
        if len(value) > SHOWN_LINES:
            shown.append(f"<span class='note'>… {len(value) - SHOWN_LINES} more</span>")
        return "<br>".join(shown)
    if isinstance(value, list):
        text = json.dumps(value, ensure_ascii=False)
        return f"<code>{_esc(text if len(text) <= 300 else text[:300] + ' …')}</code>"
    return _fmt(value)  # escaped


def _label(key: object) -> str:
    """A summary key as written (`mean_return`, as `payoff eval --json` prints it)."""
    return _esc(key)


def _image(path: Path) -> str:
    return f"<div><img src='{_esc(path.name)}' alt='{_esc(path.stem)}'></div>"


def _esc(value: object) -> str:
    return html.escape(str(value))


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return _esc(value)  # a run's files may come from anyone: text goes into HTML escaped
