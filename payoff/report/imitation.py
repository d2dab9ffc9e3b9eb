"""Imitation-learning pictures: cross-track error over an episode, completion per track
family, and the comparison of imitation learners in an experiment (with race GIFs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from payoff.algos import get_algorithm
from payoff.algos.shared.imitation import KART_ID, ImitationAlgorithm
from payoff.report.plots import plt, save_figure
from payoff.rollout.evaluate import evaluate_policy, record_frames
from payoff.track.media import write_gif
from payoff.track.run import Run


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


def cross_track_figures(run: Run, learner: ImitationAlgorithm) -> list[Path]:
    """On KartTrack: cross-track error over an episode, per track family."""
    if learner.config.env.id != KART_ID:
        return []
    traces = {
        split: learner.play(50, learner.config.seed + 4_000_000, split)
        for split in learner.config.eval_tracks
    }
    path = run.media / "cross_track_error.png"
    plot_cross_track_error(
        {
            f"{learner.name} ({split})": (t.cross_track_error, t.success)
            for split, t in traces.items()
        },
        path,
        title=f"{learner.name}: |cross-track error| over an episode",
    )
    return [path]


def comparison_figures(runs: list[Run], labels: list[str], media: Path) -> list[Path]:
    """For experiments comparing imitation learners (e.g. kart-bc-vs-dagger): completion
    rates per track family (mean over seeds), cross-track error over an episode on
    held-out tracks, a GIF of each learner on the same held-out track, and a table."""
    groups: dict[str, list[tuple[Run, ImitationAlgorithm]]] = {}
    for run, label in zip(runs, labels, strict=True):
        target = get_algorithm(str(run.config.get("algo")))
        if not issubclass(target, ImitationAlgorithm) or not run.summary():
            continue
        learner = target.load(run.path)
        groups.setdefault(label, []).append((run, learner))  # type: ignore[arg-type]
    if not groups:
        return []
    paths: list[Path] = []
    rows = []
    rates: dict[str, dict[str, float]] = {}
    for label, members in groups.items():
        finals = [run.summary().get("final_metrics", {}) for run, _ in members]
        splits = (
            members[0][1].config.eval_tracks if members[0][1].config.env.id == KART_ID else [""]
        )
        rates[label] = {}
        row = [label, str(len(members)), str(members[0][1].labels)]
        for split in splits:
            suffix = f"_{split}" if split else ""
            success = [f.get(f"eval/success_rate{suffix}") for f in finals]
            returns = [f.get(f"eval/mean_return{suffix}", float("nan")) for f in finals]
            if all(s is not None for s in success):
                rates[label][split or "eval"] = float(np.mean(success))
                row.append(f"{np.mean(success):.2f} ({min(success):.2f}-{max(success):.2f})")
            row.append(f"{np.mean(returns):.1f}")
        rows.append(row)
    if all(rates.values()):
        paths.append(plot_completion(rates, media / "completion.png"))
    first = {label: members[0][1] for label, members in groups.items()}
    if all(learner.config.env.id == KART_ID for learner in first.values()):
        seed = 7_000_000
        traces = {label: learner.play(100, seed, "heldout") for label, learner in first.items()}
        paths.append(
            plot_cross_track_error(
                {
                    f"{label} (held-out tracks)": (t.cross_track_error, t.success)
                    for label, t in traces.items()
                },
                media / "cross_track_error.png",
                title="|cross-track error| over an episode on held-out tracks (100 episodes)",
            )
        )
        paths += _race_gifs(first, media)
    header = ["member", "seeds", "labels"]
    for split in first[next(iter(first))].config.eval_tracks if len(rows[0]) > 5 else [""]:
        name = f" ({split})" if split else ""
        header += [f"completion{name} mean (min-max)", f"mean return{name}"]
    table = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    table += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    (media / "imitation_comparison.md").write_text(table)
    paths.append(media / "imitation_comparison.md")
    return paths


def _race_gifs(learners: dict[str, ImitationAlgorithm], media: Path) -> list[Path]:
    """A GIF per learner on the same held-out track: the first seed where they differ."""
    envs = {label: learner.env_for("heldout") for label, learner in learners.items()}
    chosen = 8_000_000
    for seed in range(8_000_000, 8_000_040):
        outcomes = {
            evaluate_policy(envs[label], learner.act, 1, seed).success_rate
            for label, learner in learners.items()
        }
        if len(outcomes) > 1:
            chosen = seed
            break
    paths = []
    for label, learner in learners.items():
        frames = record_frames(envs[label], learner.act, 1, chosen, max_frames=400)
        safe = "".join(c if c.isalnum() else "-" for c in label)
        paths.append(
            write_gif(frames[::2] + [frames[-1]] * 6, media / f"{safe}-heldout.gif", fps=10)
        )
    return paths
