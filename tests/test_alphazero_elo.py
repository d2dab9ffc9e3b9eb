"""Elo arithmetic: the online update, the maximum-likelihood fit and the league table."""

from __future__ import annotations

import math

import pytest

from payoff.rollout.elo import Result, expected_score, fit_ratings, league_table, update


def test_expected_score_and_update_by_hand() -> None:
    # 200 points apart: 1 / (1 + 10^(-0.5)) = 0.7597
    assert expected_score(1600, 1400) == pytest.approx(0.759747, abs=1e-6)
    assert expected_score(1500, 1500) == 0.5
    a, b = update(1600, 1400, 1.0, k=32)
    assert a == pytest.approx(1600 + 32 * (1 - 0.759747), abs=1e-4)  # 1607.69
    assert a + b == pytest.approx(3000)  # Elo is zero-sum
    a, b = update(1600, 1400, 0.0, k=32)
    assert a == pytest.approx(1600 - 32 * 0.759747, abs=1e-4)


def test_fit_recovers_the_score_ratio() -> None:
    # 75% score <-> odds 3 <-> 400 * log10(3) = 190.85 Elo.
    ratings = fit_ratings([Result("a", "b", 30, 0, 10)], anchor="b", prior_draws=0.0)
    assert ratings["a"] == pytest.approx(400 * math.log10(3), abs=0.1)
    assert ratings["b"] == 0.0
    # Draws count half: 10 wins, 20 draws, 10 losses is an even match.
    even = fit_ratings([Result("a", "b", 10, 20, 10)], anchor="b")
    assert even["a"] == pytest.approx(0.0, abs=1e-6)


def test_transitive_league_and_clean_sweeps_stay_finite() -> None:
    results = [
        Result("b", "a", 30, 0, 10),  # b is 191 above a
        Result("c", "b", 30, 0, 10),  # c is 191 above b
        Result("c", "a", 20, 0, 0),  # a clean sweep: finite thanks to the virtual draw
    ]
    ratings = fit_ratings(results, anchor="a", prior_draws=1.0)
    assert ratings["a"] == 0.0 < ratings["b"] < ratings["c"] < 1000
    rows = league_table(results, anchor="a")
    assert [row.player for row in rows] == ["c", "b", "a"]
    c = rows[0]
    assert (c.games, c.wins, c.draws, c.losses) == (60, 50, 0, 10)
