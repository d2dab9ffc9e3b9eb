"""Elo ratings from match results, and a league table.

Two ways to get ratings:

- `update`: the classic online Elo step after one game,
      E_a = 1 / (1 + 10^((R_b - R_a) / 400)),   R_a' = R_a + K (S_a - E_a);
- `fit_ratings`: the ratings that best explain all results at once (the Bradley-Terry
  maximum-likelihood fit on the Elo scale), which does not depend on the order games were
  played in. That is what a league of checkpoints and fixed baselines needs.

A player who won every game has no finite maximum-likelihood rating, so `fit_ratings`
adds `prior_draws` virtual drawn games to every pairing that was played: a 20-0 sweep then
reads as +640 rather than infinity. Ratings are shifted so that `anchor` sits at 0.

Self-contained on purpose (only numpy): ratings need no game code, and the league
(payoff.rollout.league) and the report (payoff.report.elo) both read them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

ELO_SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log unit of the odds


def expected_score(rating_a: float, rating_b: float) -> float:
    """Expected score of A against B (a win counts 1, a draw 0.5)."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))


def update(
    rating_a: float, rating_b: float, score_a: float, k: float = 32.0
) -> tuple[float, float]:
    """Both ratings after one game in which A scored `score_a` (1, 0.5 or 0)."""
    delta = k * (score_a - expected_score(rating_a, rating_b))
    return rating_a + delta, rating_b - delta


@dataclass
class Result:
    """Games between two players, counted from A's side."""

    a: str
    b: str
    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses


def fit_ratings(
    results: Iterable[Result],
    anchor: str | None = None,
    prior_draws: float = 1.0,
    iterations: int = 2000,
) -> dict[str, float]:
    """Maximum-likelihood Elo ratings for all players in `results`; `anchor` is set to 0.

    Uses the minorize-maximize updates for Bradley-Terry strengths (Hunter 2004), with a
    draw counted as half a win for each side.
    """
    results = list(results)
    players = sorted({r.a for r in results} | {r.b for r in results})
    if not players:
        return {}
    index = {p: i for i, p in enumerate(players)}
    n = len(players)
    wins = np.zeros((n, n))  # wins[i, j]: points i scored against j
    for r in results:
        i, j = index[r.a], index[r.b]
        wins[i, j] += r.wins + 0.5 * r.draws
        wins[j, i] += r.losses + 0.5 * r.draws
    played = (wins + wins.T) > 0
    wins += 0.5 * prior_draws * played  # virtual draws keep a clean sweep finite
    games = wins + wins.T
    strength = np.ones(n)
    for _ in range(iterations):
        denominator = (games / (strength[:, None] + strength[None, :])).sum(axis=1)
        new = wins.sum(axis=1) / np.maximum(denominator, 1e-12)
        new = np.where(new > 0, new, 1e-12)
        new /= np.exp(np.mean(np.log(new)))  # fix the scale's arbitrary offset
        converged = np.max(np.abs(np.log(new) - np.log(strength))) < 1e-9
        strength = new
        if converged:
            break
    ratings = ELO_SCALE * np.log(strength)
    offset = ratings[index[anchor]] if anchor in index else 0.0
    return {p: float(ratings[index[p]] - offset) for p in players}


def rating_errors(
    results: Iterable[Result],
    ratings: dict[str, float],
    anchor: str | None = None,
    prior_draws: float = 1.0,
) -> dict[str, float]:
    """Each player's standard error of its rating (Elo points): the square root of the
    diagonal of the inverse Fisher information of the Bradley-Terry likelihood at
    `ratings`, every rating uncertain but the anchor's (0 error; without an anchor, the
    ratings' mean is what is held fixed). On the log-odds scale a pairing of n games at
    expected score p adds n p (1 - p) to both players' information and subtracts it between
    them; the same virtual draws as fit_ratings. Ten games against the anchor at even odds
    give about ±105 Elo: a league of short matches moves that much by chance alone. A
    player with no games against rated players gets inf."""
    players = sorted(ratings)
    index = {p: i for i, p in enumerate(players)}
    information = np.zeros((len(players), len(players)))
    for r in results:
        if r.a not in index or r.b not in index or not r.games:
            continue
        p = expected_score(ratings[r.a], ratings[r.b])
        weight = (r.games + prior_draws) * p * (1.0 - p)
        i, j = index[r.a], index[r.b]
        information[i, i] += weight
        information[j, j] += weight
        information[i, j] -= weight
        information[j, i] -= weight
    connected = information.diagonal() > 0
    free = [k for k in range(len(players)) if connected[k] and players[k] != anchor]
    errors = {p: math.inf for p in players}
    if anchor in index:
        errors[anchor] = 0.0
    if free:
        block = information[np.ix_(free, free)]
        covariance = np.linalg.inv(block) if anchor in index else np.linalg.pinv(block)
        for k, variance in zip(free, covariance.diagonal(), strict=True):
            errors[players[k]] = ELO_SCALE * math.sqrt(max(float(variance), 0.0))
    return errors


@dataclass
class LeagueRow:
    player: str
    rating: float
    games: int
    wins: int
    draws: int
    losses: int

    @property
    def score(self) -> float:
        return (self.wins + 0.5 * self.draws) / max(self.games, 1)


def league_table(
    results: Iterable[Result], anchor: str | None = None, prior_draws: float = 1.0
) -> list[LeagueRow]:
    """One row per player, strongest first: rating and the player's own W/D/L totals."""
    results = list(results)
    ratings = fit_ratings(results, anchor=anchor, prior_draws=prior_draws)
    totals = {p: [0, 0, 0] for p in ratings}
    for r in results:
        for player, counts in (
            (r.a, (r.wins, r.draws, r.losses)),
            (r.b, (r.losses, r.draws, r.wins)),
        ):
            for k in range(3):
                totals[player][k] += counts[k]
    rows = [
        LeagueRow(p, ratings[p], sum(totals[p]), totals[p][0], totals[p][1], totals[p][2])
        for p in ratings
    ]
    return sorted(rows, key=lambda row: -row.rating)


def league_markdown(rows: list[LeagueRow]) -> str:
    """The league as a markdown table."""
    lines = [
        "| player | Elo | games | won | drawn | lost | score |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.player} | {row.rating:.0f} | {row.games} | {row.wins} | {row.draws} | "
            f"{row.losses} | {row.score:.2f} |"
        )
    return "\n".join(lines)


def rows_as_dicts(rows: list[LeagueRow]) -> list[dict]:
    return [{**asdict(row), "rating": round(row.rating, 1)} for row in rows]
