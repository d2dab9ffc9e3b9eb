"""The evaluation league of a self-play run: which matches are played, and what they mean.

The fixed baselines are first rated among themselves, so they have ratings before any
network plays. At every evaluation the best network plays each baseline and the previously
evaluated network; all results go into one maximum-likelihood Elo fit (payoff.rollout.elo),
anchored at the random player when it takes part. At the end the final network plays each
baseline once more. A match is (PlayerSpec, PlayerSpec, games), so any process can play it
(payoff.rollout.selfplay.SelfPlayPool.play_matches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from payoff.envs.games.arena import MatchResult
from payoff.rollout.elo import LeagueRow, Result, league_table
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.network_players import Match, PlayerSpec


def league_anchor(baselines: list[str]) -> str | None:
    """The player rated 0: random, when it is one of the baselines."""
    return "random" if "random" in baselines else None


def league_rows(results: list[Result], baselines: list[str]) -> list[LeagueRow]:
    """The league table of every rated match so far."""
    return league_table(results, anchor=league_anchor(baselines))


def calibration_matches(baselines: list[str], seed: int, games: int) -> list[Match]:
    """Every baseline against every later one."""
    return [
        Match(PlayerSpec(first, seed + 11), PlayerSpec(second, seed + 12), games)
        for i, first in enumerate(baselines)
        for second in baselines[i + 1 :]
    ]


def league_matches(
    agent: PlayerSpec, baselines: list[str], games: int, previous: PlayerSpec | None = None
) -> list[Match]:
    """The agent against baseline k (seeded agent.seed + 1 + k), then against `previous`.

    Against the previous network the agent also samples its first previous.random_moves
    plies: two searchers would otherwise replay one game.
    """
    matches = [
        Match(agent, PlayerSpec(baseline, agent.seed + 1 + k), games)
        for k, baseline in enumerate(baselines)
    ]
    if previous is not None:
        matches.append(Match(replace(agent, random_moves=previous.random_moves), previous, games))
    return matches


def league_metrics(baselines: list[str], results: list[MatchResult]) -> dict[str, Any]:
    """eval/score_vs_* and eval/loss_rate_vs_* of `league_matches`' results."""
    metrics: dict[str, Any] = {}
    for baseline, result in zip(baselines, results, strict=False):
        metrics[f"eval/score_vs_{baseline}"] = result.score
        metrics[f"eval/loss_rate_vs_{baseline}"] = result.losses / max(result.games, 1)
    if len(results) > len(baselines):
        metrics["eval/score_vs_previous"] = results[-1].score
    return metrics


def final_matches(
    agent: PlayerSpec, baselines: list[str], games: int, openings: int = 0
) -> list[Match]:
    """The final agent against baseline k, the agent seeded agent.seed + k, the baseline + 1;
    `openings` random plies start each pair of games (drawn from the agent's seed + k)."""
    return [
        Match(
            replace(agent, seed=agent.seed + k),
            PlayerSpec(baseline, agent.seed + k + 1),
            games,
            openings,
            agent.seed + k,
        )
        for k, baseline in enumerate(baselines)
    ]


def final_record(result: MatchResult) -> dict[str, Any]:
    """One final match as the run summary shows it."""
    return {
        "won": result.wins,
        "drawn": result.draws,
        "lost": result.losses,
        "lost_moving_first": result.losses_first,
        "score": round(result.score, 3),
        "distinct_games": result.distinct,
    }


def as_result(match: MatchResult) -> Result:
    """A match as a rated result for the Elo fit."""
    return Result(match.a, match.b, match.wins, match.draws, match.losses)


@dataclass
class MatchEval(EvalResult):
    """A match as evaluation episodes, and who was played with what result."""

    opponent: str = ""
    wins: int = 0
    draws: int = 0
    losses: int = 0

    def line(self) -> str:
        return (
            f"against {self.opponent}: {self.wins} won, {self.draws} drawn, {self.losses} lost "
            f"of {self.episodes} games (mean return {self.mean_return:.3f}, not lost "
            f"{self.success_rate:.3f})"
        )


def eval_result(match: MatchResult, opponent: str = "") -> MatchEval:
    """A match as evaluation episodes: +1 win / 0 draw / -1 loss; success = not lost."""
    scores = np.array([1.0] * match.wins + [0.0] * match.draws + [-1.0] * match.losses)
    return MatchEval(
        mean_return=float(scores.mean()),
        std_return=float(scores.std()),
        episodes=match.games,
        success_rate=1.0 - match.losses / max(match.games, 1),
        mean_length=float(np.mean(match.lengths)),
        opponent=opponent,
        wins=match.wins,
        draws=match.draws,
        losses=match.losses,
    )
