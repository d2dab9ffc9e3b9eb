"""Elo arithmetic: the online update, the maximum-likelihood fit and the league table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from payoff.rollout.elo import (
    Result,
    expected_score,
    fit_ratings,
    league_table,
    rating_errors,
    update,
)


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


def test_rating_errors_match_the_spread_of_refitted_matches() -> None:
    """The standard error is what the fitted rating varies by when the same match is played
    again: 40 games at a true score of 0.75 (+191 Elo), replayed 400 times."""
    rng = np.random.default_rng(0)
    fitted = []
    for _ in range(400):
        wins = int(rng.binomial(40, 0.75))
        fitted.append(fit_ratings([Result("a", "b", wins, 0, 40 - wins)], "b", 0.0)["a"])
    truth = [Result("a", "b", 30, 0, 10)]
    error = rating_errors(truth, fit_ratings(truth, "b", 0.0), "b", prior_draws=0.0)
    assert error["b"] == 0.0
    assert error["a"] == pytest.approx(400 / math.log(10) / math.sqrt(40 * 0.1875))
    assert float(np.std(fitted)) == pytest.approx(error["a"], rel=0.15)
    # ten games at even odds: about +-105 with the virtual draw, and more games shrink it
    even = [Result("a", "b", 5, 0, 5)]
    assert rating_errors(even, fit_ratings(even, "b"), "b")["a"] == pytest.approx(104.8, abs=0.1)
    more = [Result("a", "b", 50, 0, 50)]
    assert rating_errors(more, fit_ratings(more, "b"), "b")["a"] < 40
    assert rating_errors(even, {"a": 0.0}) == {"a": math.inf}  # b unrated: no information


def test_a_rating_two_links_from_the_anchor_carries_both_links_uncertainty() -> None:
    """y plays only x, x only the anchor r: y's error is both matches' (about sqrt(2) times
    one's), as the spread of y's refitted rating over replayed leagues shows."""
    rng = np.random.default_rng(1)
    fitted = []
    for _ in range(300):
        x_wins, y_wins = int(rng.binomial(40, 0.75)), int(rng.binomial(40, 0.5))
        results = [
            Result("x", "r", x_wins, 0, 40 - x_wins),
            Result("y", "x", y_wins, 0, 40 - y_wins),
        ]
        fitted.append(fit_ratings(results, "r", 0.0)["y"])
    truth = [Result("x", "r", 30, 0, 10), Result("y", "x", 20, 0, 20)]
    errors = rating_errors(truth, fit_ratings(truth, "r", 0.0), "r", prior_draws=0.0)
    one_link_x = 400 / math.log(10) / math.sqrt(40 * 0.1875)
    one_link_y = 400 / math.log(10) / math.sqrt(40 * 0.25)
    assert errors["r"] == 0.0 and errors["x"] == pytest.approx(one_link_x)
    assert errors["y"] == pytest.approx(math.hypot(one_link_x, one_link_y))
    assert float(np.std(fitted)) == pytest.approx(errors["y"], rel=0.15)


def test_the_elo_figure_draws_the_curve_with_its_error_bars(tmp_path) -> None:
    from payoff.report.elo import plot_elo

    results = [Result("iter-0", "random", 6, 0, 4), Result("iter-5", "random", 9, 0, 1)]
    rows = league_table(results, anchor="random")
    ratings = {row.player: row.rating for row in rows}
    errors = rating_errors(results, ratings, "random")
    curve = [(0, 0, ratings["iter-0"]), (5, 100, ratings["iter-5"])]
    path = plot_elo(
        curve,
        rows,
        ["random"],
        str(tmp_path / "elo.png"),
        "t",
        [errors["iter-0"], errors["iter-5"]],
    )
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 0 < ratings["iter-0"] < ratings["iter-5"] and 100 < errors["iter-0"] < 200
