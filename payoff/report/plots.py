"""Learning curves (mean and spread over seeds) and the Q-table picture, as PNG."""

from __future__ import annotations

import io
import os
import textwrap
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from payoff.core.errors import RunError  # noqa: E402
from payoff.core.io import atomic_write_bytes  # noqa: E402
from payoff.envs.hacking import info_label  # noqa: E402
from payoff.track.run import Run  # noqa: E402

PREFERRED_METRICS = (
    "eval/success_rate",
    "eval/mean_return",
    "train/return",
    "train/accuracy",
    "train/reward",
)


FIGURE_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg")


def figure_format(path: str | Path) -> str:
    """The image format a figure path names by its extension (png, svg, pdf, jpg), or one
    RunError naming what is valid: writing PNG bytes into 'curves.svg' would mislead."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FIGURE_FORMATS:
        raise RunError(
            f"cannot tell the image format of {str(path)!r} from its extension; end it in "
            f"{', '.join('.' + f for f in FIGURE_FORMATS)}"
        )
    return suffix


def save_figure(fig: Any, path: str | Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format=figure_format(path), dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)


def series(run: Run, metric: str, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """(x, y) arrays of one metric from a run's metrics.jsonl."""
    xs, ys = [], []
    for record in run.records():
        value = record.get(metric)
        if is_number(value) and x in record:
            xs.append(record[x])
            ys.append(value)
    return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


def final_point(run: Run, metric: str, x: str = "step") -> tuple[float, float] | None:
    """Where the final evaluation puts an `eval/...` metric: (x, value), or None.

    The final evaluation (more episodes than a periodic one) is logged as `final/<name>` at
    the last step; runs that only wrote it to summary.json (language models) are read there.
    """
    if not metric.startswith("eval/"):
        return None
    name = metric.removeprefix("eval/")
    for record in reversed(run.records()):
        value = record.get(f"final/{name}")
        if is_number(value) and x in record:
            return float(record[x]), float(value)
    try:
        summary = run.summary()
    except RunError:  # (the page says why it is not shown)
        return None
    final = summary.get("final_eval") or {}
    value = final.get(name, final.get(metric))  # agents keep the eval/ prefix there
    if is_number(value) and x == "step" and is_number(summary.get("finished_step")):
        return float(summary["finished_step"]), float(value)
    return None


def point_count(run: Run, metric: str, x: str = "step") -> int:
    """How many points a curve of `metric` has (the final evaluation's included)."""
    return len(series(run, metric, x)[0]) + (final_point(run, metric, x) is not None)


def is_number(value: object) -> TypeGuard[int | float]:
    """A metric value that can be drawn (True/False and None are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def default_metrics(runs: Sequence[Run]) -> list[str]:
    """The headline metric: the preferred metric that most of the runs log (the first of
    PREFERRED_METRICS among equals), else the metric most of them log. Runs without it, such
    as one stopped before its first evaluation, are left out of the plot, not the others."""
    counts: Counter[str] = Counter()
    for run in runs:
        counts.update({k for r in run.records() for k in r if "/" in k})
    preferred = [m for m in PREFERRED_METRICS if counts[m]]
    if preferred:
        return [max(preferred, key=lambda m: counts[m])]  # max keeps the first among equals
    return [max(sorted(counts), key=lambda m: counts[m])] if counts else []


TRUE_OBJECTIVE = "train/episode_true_reward"  # a hackable env's truth (episode_info)


def metric_label(runs: Sequence[Run], metric: str) -> str:
    """The axis label of `metric`: its name, and what an env's info key summed per episode
    counts where the runs' env says (`train/episode_true_reward` of BoatRace: laps finished
    per episode, the true objective); beside a true objective, the return is the env's reward."""
    if metric == "train/return" and any(TRUE_OBJECTIVE in r for run in runs for r in run.records()):
        return f"{metric} (the reward the env pays)"
    key = metric.removeprefix("train/episode_")
    if key == metric:
        return metric
    envs = {
        str(env.get("id"))
        for env in (run.config.get("env") for run in runs)
        if isinstance(env, dict)
    }
    counts = {info_label(env, key) for env in envs}
    if len(counts) != 1 or None in counts:  # unknown, or the runs' envs count different things
        return metric
    role = {"true_reward": ", the true objective", "proxy_reward": ", the proxy"}.get(key, "")
    return f"{counts.pop()} per episode{role}\n({metric})"


def _group_label(run: Run) -> str:
    """The run's label, or its recipe and the overrides it ran with other than the seed:
    runs that differ only by seed share it (and are drawn as one mean)."""
    config = run.config
    if config.get("label"):
        return str(config["label"])
    recipe = str(config.get("recipe") or config.get("algo", "run"))
    changed = [str(o) for o in config.get("overrides") or [] if not str(o).startswith("seed=")]
    return " ".join([recipe, *changed])


def plot_curves(
    runs: Sequence[Run],
    path: str | Path,
    metrics: Sequence[str] | None = None,
    x: str = "step",
    title: str | None = None,
    labels: Sequence[str] | None = None,
    mark_alarms: bool = True,
) -> Path:
    """Overlay learning curves; runs sharing a label (same recipe, different seeds) are drawn
    as their mean with a shaded band from min to max."""
    if not runs:
        raise RunError("no runs to plot")
    metrics = list(metrics) if metrics else default_metrics(runs)
    if not metrics:
        raise RunError("the runs share no numeric metric to plot; pass --metric")
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(6.4 * len(metrics), 4.2), squeeze=False, sharex=True
    )
    groups: dict[str, list[Run]] = defaultdict(list)
    for i, run in enumerate(runs):
        groups[labels[i] if labels else _group_label(run)].append(run)
    for ax, metric in zip(axes[0], metrics, strict=True):
        final_labelled = False
        for color_index, (label, members) in enumerate(groups.items()):
            # ten colours, then the same ten dashed, dash-dotted, dotted
            color = f"C{color_index % 10}"
            style = ("-", "--", "-.", ":")[(color_index // 10) % 4]
            curves = _draw_group(ax, label, members, metric, x, color, style)
            final_labelled = _draw_finals(
                ax, label, members, curves, metric, x, color, final_labelled
            )
        if mark_alarms:
            _mark_alarms(ax, runs, x)
        _label_axes(ax, runs, metric, x)
    # many settings: the legend names them, and the title counts them
    many = f"{len(runs)} runs of {len(groups)} settings"
    fig.suptitle(
        textwrap.fill(title or (", ".join(sorted(groups)) if len(groups) <= 3 else many), 90)
    )
    return save_figure(fig, path)


def _draw_group(
    ax: Any, label: str, members: Sequence[Run], metric: str, x: str, color: str, style: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One label's curve: a single run's as logged, several runs' as their mean with a band
    from min to max. Returns the (xs, ys) of the members that logged the metric."""
    curves = [series(run, metric, x) for run in members]
    curves = [(xs, ys) for xs, ys in curves if len(xs)]
    if len(curves) == 1:
        xs, ys = curves[0]
        marker = "o" if len(xs) == 1 else None
        ax.plot(xs, ys, color=color, linestyle=style, label=label, marker=marker)
    elif curves:
        grid = np.linspace(max(c[0][0] for c in curves), min(c[0][-1] for c in curves), 200)
        stacked = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
        seeds = {run.config.get("seed") for run in members}
        what = f"{len(curves)} seeds" if len(seeds) == len(members) else f"{len(curves)} runs"
        ax.plot(
            grid,
            stacked.mean(0),
            color=color,
            linestyle=style,
            label=f"{label} (mean of {what})",
        )
        ax.fill_between(grid, stacked.min(0), stacked.max(0), color=color, alpha=0.2)
    return curves


def _draw_finals(
    ax: Any,
    label: str,
    members: Sequence[Run],
    curves: list[tuple[np.ndarray, np.ndarray]],
    metric: str,
    x: str,
    color: str,
    final_labelled: bool,
) -> bool:
    """One label's final evaluations as stars, named in the legend once per axis (or by the
    label where no curve names it). Returns whether the legend now names them."""
    finals = [p for p in (final_point(run, metric, x) for run in members) if p]
    if not finals:
        return final_labelled
    if len(members) == 1 and len(curves) == 1 and finals[0][0] > curves[0][0][-1]:
        # join the curve to a final point logged after its last periodic evaluation
        ax.plot(
            [curves[0][0][-1], finals[0][0]],
            [curves[0][1][-1], finals[0][1]],
            color=color,
            linestyle=":",
        )
    if not curves:  # no curve names this group
        final_label: str | None = f"{label} (final evaluation)"
    elif final_labelled:
        final_label = None
    else:
        final_label = "final evaluation" + (" (each seed)" if len(finals) > 1 else "")
    ax.scatter(
        [p[0] for p in finals],
        [p[1] for p in finals],
        color=color,
        marker="*",
        s=140,
        zorder=3,
        edgecolors="black",
        linewidths=0.5,
        label=final_label,
    )
    return final_labelled or bool(curves)


def _label_axes(ax: Any, runs: Sequence[Run], metric: str, x: str) -> None:
    """Axis labels, grid and a legend with its long names wrapped."""
    if metric == TRUE_OBJECTIVE:  # 0 and 1 in view: laps stuck at 0 with one early
        low, high = ax.get_ylim()  # lap would otherwise fill the axis as a spike
        ax.set_ylim(min(low, -0.05), max(high, 1.05))
    ax.set_xlabel(x)
    ax.set_ylabel(metric_label(runs, metric))
    ax.grid(alpha=0.3)
    # long labels (a recipe and its overrides) wrapped: wider than the axes, the legend
    # was placed over the axis label
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(name, 48) for name in names], fontsize=8)


def _mark_alarms(ax: Any, runs: Sequence[Run], x: str) -> None:
    """A dashed vertical line where a monitor raised a critical alarm (x = step only)."""
    if x != "step":
        return
    labelled = False
    for run in runs:
        for record in run.events():
            if record["event"].get("severity") == "critical":
                ax.axvline(
                    record["step"],
                    color="crimson",
                    linestyle="--",
                    linewidth=1.2,
                    label=None if labelled else f"alarm: {record['event'].get('kind')}",
                )
                labelled = True


ARROWS = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}  # FrozenLake: left, down, right, up


def plot_q_table(
    q: np.ndarray, path: str | Path, desc: np.ndarray | None = None, title: str = ""
) -> Path:
    """Grid of cells coloured by max Q with an arrow for the greedy action; holes and goal marked.

    Without a grid description (`desc`), draws the table itself as a states x actions heatmap.
    """
    if desc is None or desc.size != q.shape[0] or q.shape[1] != 4:
        fig, ax = plt.subplots(figsize=(1.2 + 0.8 * q.shape[1], 1 + 0.25 * q.shape[0]))
        image = ax.imshow(q, aspect="auto", cmap="viridis")
        ax.set_xlabel("action")
        ax.set_ylabel("state")
        fig.colorbar(image, ax=ax, label="Q")
        ax.set_title(title)
        return save_figure(fig, path)
    rows, cols = desc.shape
    labels = np.vectorize(lambda b: b.decode() if isinstance(b, bytes) else str(b))(desc)
    values = q.max(axis=1).reshape(rows, cols)
    fig, ax = plt.subplots(figsize=(1.1 * cols + 1.5, 1.1 * rows + 0.6))
    image = ax.imshow(
        values, cmap="viridis", vmin=min(0.0, values.min()), vmax=max(values.max(), 1e-9)
    )
    fig.colorbar(image, ax=ax, label="max Q(s, ·)")
    for r in range(rows):
        for c in range(cols):
            cell = labels[r, c]
            state = r * cols + c
            if cell in ("H", "G"):
                face = "#222222" if cell == "H" else "#f2c14e"
                ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, color=face))
                ax.text(
                    c,
                    r,
                    "hole" if cell == "H" else "goal",
                    ha="center",
                    va="center",
                    color="white" if cell == "H" else "black",
                    fontsize=9,
                    weight="bold",
                )
                continue
            dx, dy = ARROWS[int(np.argmax(q[state]))]
            ax.arrow(
                c - 0.25 * dx,
                r - 0.25 * dy,
                0.3 * dx,
                0.3 * dy,
                head_width=0.18,
                head_length=0.15,
                fc="white",
                ec="black",
                linewidth=0.8,
                length_includes_head=False,
            )
            if cell == "S":
                ax.text(c - 0.42, r - 0.3, "start", color="white", fontsize=7)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_title(title or "greedy policy")
    return save_figure(fig, path)
