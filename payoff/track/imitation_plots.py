"""Imitation-learning pictures: cross-track error over an episode, completion per track family."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from payoff.track.plots import plt, save_figure


def _hold_last(errors: np.ndarray) -> np.ndarray:
    """Forward-fill each row's NaNs (steps after its episode ended) with its last value."""
    held = errors.copy()
    for t in range(1, held.shape[1]):
        gap = np.isnan(held[:, t])
        held[gap, t] = held[gap, t - 1]
    return held


def plot_cross_track_error(
    traces: dict[str, tuple[np.ndarray | None, np.ndarray]],
    path: str | Path,
    title: str = "",
    half_width: float = 1.0,
) -> Path:
    """Left: mean |cross-track error| at each step of an episode, an episode that ended
    counting with its last error (so a kart that left the track keeps counting as off it;
    leaving it out would hide the drift by only averaging the survivors).
    Right: the fraction of episodes still on the track at each step.

    traces: label -> (errors [episodes, steps] in metres, NaN once an episode ended;
                      success [episodes] bool, True where the lap was completed).
    """
    fig, (ax_err, ax_alive) = plt.subplots(1, 2, figsize=(11, 4.0))
    for index, (label, (errors, success)) in enumerate(traces.items()):
        if errors is None or errors.size == 0:
            continue
        color = f"C{index % 10}"
        steps = np.arange(1, errors.shape[1] + 1)
        held = np.abs(_hold_last(errors))
        mean = held.mean(0)
        ax_err.plot(steps, mean, color=color, label=label)
        ax_err.fill_between(
            steps, np.percentile(held, 25, 0), np.percentile(held, 75, 0), color=color, alpha=0.15
        )
        ended_at = np.isfinite(errors).sum(1)  # steps each episode lasted
        crashed = ~np.asarray(success, dtype=bool)
        on_track = 1.0 - (crashed[:, None] & (ended_at[:, None] <= steps[None, :] - 1)).mean(0)
        ax_alive.plot(steps, on_track, color=color, label=label)
    ax_err.axhline(half_width, color="k", linestyle="--", linewidth=0.8, label="track edge")
    ax_err.set_xlabel("step within episode")
    ax_err.set_ylabel("|cross-track error| (m): mean, 25-75% band")
    ax_err.set_ylim(bottom=0)
    ax_alive.set_xlabel("step within episode")
    ax_alive.set_ylabel("fraction of karts still on the track")
    ax_alive.set_ylim(0, 1.05)
    for ax in (ax_err, ax_alive):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "cross-track error over an episode")
    return save_figure(fig, path)


def plot_completion(
    rates: dict[str, dict[str, float]], path: str | Path, title: str = "lap completion"
) -> Path:
    """Grouped bars: method -> {track family -> completion rate}."""
    methods = list(rates)
    families = list(dict.fromkeys(f for r in rates.values() for f in r))  # first-seen order
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(methods), 3.8))
    width = 0.8 / max(len(families), 1)
    for j, family in enumerate(families):
        values = [rates[m].get(family, np.nan) for m in methods]
        xs = np.arange(len(methods)) + (j - (len(families) - 1) / 2) * width
        bars = ax.bar(xs, values, width, label=f"{family} tracks", color=f"C{j}")
        for bar, value in zip(bars, values, strict=True):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                value + 0.01,
                f"{value:.0%}",
                ha="center",
                fontsize=8,
            )
    ax.set_xticks(range(len(methods)), methods)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("laps completed without leaving the track")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title)
    return save_figure(fig, path)
