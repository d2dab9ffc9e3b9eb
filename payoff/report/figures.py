"""Each algorithm's pictures, drawn after training by the report layer, not by the algorithm.

`FIGURES[algo]` draws the pictures of one finished run of `algo` into its media/ folder;
`COMPARISONS[algo]` draws the comparison pictures of an experiment whose members include
`algo`. Curves come from the run's metrics.jsonl and events; what only the trained model
knows (a Q-table, a policy to replay, a league's match results) comes from the algorithm
object. An algorithm without an entry has no pictures beyond the report's learning curves,
which `payoff.report.page` draws for every run (train/return and the evaluations of deep-RL
runs: a figure of its own here would show the same curves twice). `CURVES_IN_FIGURES[algo]`
names the metrics an algorithm's figures already draw, so that the page leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from payoff.report.bandits import bandit_regret
from payoff.report.elo import plot_elo, plot_league
from payoff.report.imitation import comparison_figures, cross_track_figures
from payoff.report.lm import (
    has_integrity_story,
    plot_agent_training,
    plot_integrity,
    plot_lm_training,
)
from payoff.report.model_based import plot_model_based
from payoff.report.overoptimization import plot_overoptimization, run_alarms
from payoff.report.plots import plot_q_table
from payoff.rollout.elo import league_markdown, rating_errors
from payoff.rollout.league import league_anchor, league_rows
from payoff.track.run import Run

Figures = Callable[[Run, Any], list[Path]]  # (run, trained algorithm) -> files written
Comparison = Callable[[list[Run], list[str], Path], list[Path]]  # (runs, labels, media)


def q_table(run: Run, algorithm: Any) -> list[Path]:
    """The greedy action of each cell as an arrow, coloured by max Q (FrozenLake's grid)."""
    path = run.media / "q_table.png"
    desc = getattr(algorithm.env.unwrapped, "desc", None)
    config = algorithm.config
    plot_q_table(algorithm.q, path, desc=desc, title=f"{config.method} on {config.env.id}")
    return [path]


def elo_league(run: Run, algorithm: Any) -> list[Path]:
    """Elo of the best network over self-play games, and the league table (PNG and markdown)."""
    if not algorithm.elo_curve:
        return []
    baselines = algorithm.config.baselines
    game = algorithm.game.name
    rows = league_rows(algorithm.results, baselines)
    # Each point as the whole league rates it now, as the table does; eval/elo in the metrics
    # is the rating the point had when it was played, from the games up to then.
    ratings = {row.player: row.rating for row in rows}
    spread = rating_errors(algorithm.results, ratings, league_anchor(baselines))
    curve = [
        (iteration, games, ratings.get(f"iter-{iteration}", elo))
        for iteration, games, elo in algorithm.elo_curve
    ]
    errors = [spread.get(f"iter-{iteration}", float("inf")) for iteration, _, _ in curve]
    path = run.media / "elo.png"
    plot_elo(curve, rows, baselines, str(path), f"AlphaZero on {game}", errors)
    (run.media / "league.md").write_text(league_markdown(rows) + "\n")
    league = run.media / "league.png"
    plot_league(rows, str(league), f"Elo league, {game} (random = 0)")
    return [path, league]


def best_of_n_overoptimization(run: Run, algorithm: Any) -> list[Path]:
    """Proxy and gold score against sqrt(KL) over the sweep of N."""
    path = run.media / "overoptimization.png"
    return [plot_overoptimization(run.records(), run_alarms(run), path)]


def rlhf_overoptimization(run: Run, algorithm: Any) -> list[Path]:
    """Proxy and gold score against sqrt(KL) over PPO-RLHF training (smoothed)."""
    return [
        plot_overoptimization(
            run.records(),
            run_alarms(run),
            run.media / "overoptimization.png",
            title="PPO-RLHF against a proxy: proxy rises, gold peaks and falls",
            keys=("train/sqrt_kl", "reward/proxy", "reward/gold"),
            xlabel="sqrt(KL(policy || SFT reference)) per completion  (nats^0.5)",
            smooth=8,
        )
    ]


def llm_training(run: Run, algorithm: Any) -> list[Path]:
    """Accuracy and length; with a proxy that is not the verifier (or canaries), integrity."""
    figures = [plot_lm_training(run, run.media / "llm_training.png")]
    if has_integrity_story(run):
        figures.append(plot_integrity([run], [run.name], run.media / "integrity.png"))
    return figures


def model_based(run: Run, algorithm: Any) -> list[Path]:
    """The model's open-loop error vs horizon; planned vs realized return, disagreement."""
    path = run.media / "model_based.png"
    title = f"mbrl on {algorithm.config.env.id}"
    return [plot_model_based(run.records(), algorithm.model_errors, path, title)]


def agent_training(run: Run, algorithm: Any) -> list[Path]:
    return [plot_agent_training(run, run.media / "agent_training.png")]


FIGURES: dict[str, Figures] = {
    "qlearning": q_table,
    "bc": cross_track_figures,
    "dagger": cross_track_figures,
    "alphazero": elo_league,
    "grpo": llm_training,
    "agent_grpo": agent_training,
    "best_of_n": best_of_n_overoptimization,
    "rlhf_ppo": rlhf_overoptimization,
    "mbrl": model_based,
    "recurrent_ppo": bandit_regret,  # RL² on bandits: held-out regret vs the classics
}

CURVES_IN_FIGURES: dict[str, tuple[str, ...]] = {
    "grpo": ("train/accuracy", "eval/accuracy", "train/completion_length"),
    "agent_grpo": ("eval/success",),
}

COMPARISONS: dict[str, Comparison] = {
    "bc": comparison_figures,
    "dagger": comparison_figures,
}


def draw_figures(run: Run, algorithm: Any) -> list[Path]:
    """The pictures of `algorithm`'s finished `run`, written into run.media."""
    draw = FIGURES.get(algorithm.name)
    if draw is None:
        return []
    run.media.mkdir(exist_ok=True)
    return draw(run, algorithm)


def draw_comparisons(runs: list[Run], labels: list[str], media: Path) -> list[Path]:
    """Each member algorithm's comparison pictures for an experiment (each drawer once)."""
    drawn: list[Comparison] = []
    paths: list[Path] = []
    for run in runs:
        draw = COMPARISONS.get(str(run.config.get("algo")))
        if draw is not None and draw not in drawn:
            drawn.append(draw)
            paths += draw(runs, labels, media)
    return paths
