"""MCTS finds forced wins and blocks, batches its evaluations, and explores at the root."""

from __future__ import annotations

import numpy as np
import pytest

from payoff.core.errors import ConfigError, PayoffError
from payoff.envs.games import make_game
from payoff.rollout.mcts import (
    MCTS,
    MCTSConfig,
    rollout_evaluator,
    select_action,
    uniform_evaluator,
)


def _position(game_name: str, moves: list[int]):
    game = make_game(game_name)
    state = game.initial_state()
    for move in moves:
        state = game.play(state, move)
    return game, state


def _best_move(game, state, simulations: int, evaluator=None, **config) -> int:
    search = MCTS(
        game,
        evaluator or uniform_evaluator(game),
        MCTSConfig(simulations=simulations, **config),
        np.random.default_rng(0),
    )
    counts = search.search([state])[0]
    return int(np.argmax(counts))


def test_tictactoe_takes_the_win_and_blocks() -> None:
    # X: 0, 1 (PettingZoo cells 0 and 1 share the first column with 2); O: 4, 8. X to move wins at 2.
    game, state = _position("tictactoe", [0, 4, 1, 8])
    assert _best_move(game, state, 200) == 2
    # O to move must block X's column 0-1-2 at 2 (O has no win of its own).
    game, state = _position("tictactoe", [0, 4, 1])
    assert _best_move(game, state, 400) == 2


def test_tictactoe_agrees_with_perfect_play() -> None:
    """On random mid-game positions, the searched move is one that minimax rates best."""
    from payoff.envs.games.players import MinimaxPlayer

    game = make_game("tictactoe")
    minimax = MinimaxPlayer(game)
    rng = np.random.default_rng(3)
    checked = 0
    while checked < 25:
        state = game.initial_state()
        for _ in range(int(rng.integers(3, 7))):  # early openings need deeper search
            if state.winner is None:
                state = game.play(state, int(rng.choice(np.flatnonzero(game.legal_mask(state)))))
        if state.winner is not None:
            continue
        values = minimax.action_values(state)
        best = {a for a, v in values.items() if v == max(values.values())}
        assert _best_move(game, state, 1000) in best, game.render(state)
        checked += 1


def test_connect4_forced_win_in_three_plies() -> None:
    """X has two stones with open ends on the bottom row; the win takes a double threat."""
    # Bottom row after these moves: X at columns 2 and 3, O stacked in 2 and 3 above them.
    game, state = _position("connect4", [2, 2, 3, 3])
    # X to move: playing 1 or 4 makes an open three (two winning squares): a forced win.
    move = _best_move(
        game, state, 1500, evaluator=rollout_evaluator(game, np.random.default_rng(1))
    )
    assert move in (1, 4)
    after = game.play(state, move)
    # Whatever O answers, X then wins at once.
    for reply in np.flatnonzero(game.legal_mask(after)):
        following = game.play(after, int(reply))
        if following.winner is not None:
            continue
        win = _best_move(game, following, 300)
        assert game.play(following, win).winner == 0


def test_connect4_blocks_an_immediate_threat() -> None:
    # X has three in column 0; O to move must block on top of it.
    game, state = _position("connect4", [0, 6, 0, 6, 0])
    assert _best_move(game, state, 400) == 0


def test_batched_search_evaluates_many_trees_per_call() -> None:
    game = make_game("connect4")
    calls: list[int] = []
    uniform = uniform_evaluator(game)

    def counting(states):
        calls.append(len(states))
        return uniform(states)

    search = MCTS(game, counting, MCTSConfig(simulations=20, leaves_per_tree=4))
    counts = search.search([game.initial_state()] * 8)
    assert counts.shape == (8, 7) and np.all(counts.sum(axis=1) == 20)
    assert max(calls) > 8  # several leaves per tree per call, kept apart by virtual loss
    assert search.stats.mean_batch > 8


def test_dirichlet_noise_and_temperature() -> None:
    game = make_game("tictactoe")
    rng = np.random.default_rng(0)
    search = MCTS(
        game, uniform_evaluator(game), MCTSConfig(simulations=1, dirichlet_fraction=0.5), rng
    )
    counts = [search.search([game.initial_state()], add_noise=True)[0] for _ in range(20)]
    assert len({int(np.argmax(c)) for c in counts}) > 1  # noise changes where the search goes
    visits = np.array([0.0, 10.0, 30.0])
    assert select_action(visits, 0.0, rng) == 2
    samples = [select_action(visits, 1.0, rng) for _ in range(400)]
    assert 0 not in samples and 0.6 < np.mean(np.array(samples) == 2) < 0.9


def test_bad_settings_and_finished_games() -> None:
    game, state = _position("tictactoe", [0, 4, 1, 8, 2])  # X has won
    with pytest.raises(PayoffError, match="finished game"):
        MCTS(game, uniform_evaluator(game)).search([state])
    with pytest.raises(ConfigError, match="simulations"):
        MCTS(game, uniform_evaluator(game), MCTSConfig(simulations=0))


# ---- the solver: game results found in the tree are proven upwards ----------------------
def _solver_counts(game, state, simulations: int) -> np.ndarray:
    search = MCTS(
        game,
        uniform_evaluator(game),
        MCTSConfig(simulations=simulations, solver=True),
        np.random.default_rng(0),
    )
    return search.search([state])[0]


def test_solver_plays_an_immediate_win_without_simulating() -> None:
    # X (first player) has three stones in column 6; X to move wins by playing 6 again.
    game, state = _position("connect4", [6, 1, 6, 1, 6, 2])
    counts = _solver_counts(game, state, 1)
    assert counts.argmax() == 6 and counts[:6].sum() == 0
    # Without the solver one simulation (uniform priors) visits column 0, not the win.
    plain = MCTS(game, uniform_evaluator(game), MCTSConfig(simulations=1), np.random.default_rng(0))
    assert plain.search([state])[0][6] == 0


def test_solver_proves_every_non_blocking_move_loses() -> None:
    # O (second player) to move; X threatens to complete column 0: every move but 0 loses.
    game, state = _position("connect4", [0, 1, 0, 2, 0])
    counts = _solver_counts(game, state, 60)
    assert counts[0] > 0 and counts[1:].sum() == 0, counts


def test_solver_stops_searching_a_lost_position() -> None:
    # X has an open three on the bottom row (columns 2-4, both ends free); O to move has lost:
    # whatever O plays, X wins at once at column 1 or 5.
    game, state = _position("connect4", [2, 2, 3, 3, 4])
    search = MCTS(
        game,
        uniform_evaluator(game),
        MCTSConfig(simulations=400, solver=True),
        np.random.default_rng(0),
    )
    counts = search.search([state])[0]
    # Once every reply is proven to lose the root is solved and the search stops early.
    assert search.stats.evaluations < 40, search.stats
    legal = game.legal_mask(state)
    assert counts.sum() > 0 and (counts[~legal] == 0).all()


def test_root_values_are_proofs_or_mean_simulation_values() -> None:
    game = make_game("connect4")
    search = MCTS(
        game,
        uniform_evaluator(game),
        MCTSConfig(simulations=60, solver=True),
        np.random.default_rng(0),
    )
    won = _position("connect4", [6, 1, 6, 1, 6, 2])[1]  # X to move wins at once
    lost = _position("connect4", [2, 2, 3, 3, 4])[1]  # O to move has lost
    opening = game.initial_state()
    search.search([won, lost, opening])
    assert search.root_values.tolist()[:2] == [1.0, -1.0]
    # Value-0 evaluations everywhere and no game end within reach: the mean is 0.
    assert search.root_values[2] == 0.0
    # Without the solver the won position's value is the mean of its simulations' results.
    plain = MCTS(
        game, uniform_evaluator(game), MCTSConfig(simulations=60), np.random.default_rng(0)
    )
    counts = plain.search([won])[0]
    assert 0.0 < plain.root_values[0] <= counts[6] / counts.sum() + 1e-9


class _PlaysEveryMove:
    """A game without `ending_moves`: the solver then plays every move at each expansion."""

    def __init__(self, game):
        self.game = game
        for name in ("name", "num_actions", "shape", "initial_state", "legal_mask", "play"):
            setattr(self, name, getattr(game, name))
        self.outcome, self.encode = game.outcome, game.encode


@pytest.mark.parametrize("name", ["tictactoe", "connect4"])
def test_solver_searches_alike_with_and_without_ending_moves(name: str) -> None:
    # `ending_moves` only spares the solver work: counts and root values stay bitwise equal.
    game = make_game(name)
    rng = np.random.default_rng(1)
    states, state = [], game.initial_state()
    while state.winner is None:
        states.append(state)
        state = game.play(state, int(rng.choice(np.flatnonzero(game.legal_mask(state)))))
    results = []
    for played in (game, _PlaysEveryMove(game)):
        search = MCTS(
            played,
            rollout_evaluator(played, np.random.default_rng(2)),
            MCTSConfig(simulations=80, solver=True),
            np.random.default_rng(3),
        )
        results.append((search.search(states, add_noise=True), search.root_values))
    (counts, values), (slow_counts, slow_values) = results
    assert np.array_equal(counts, slow_counts) and np.array_equal(values, slow_values)
    assert not hasattr(_PlaysEveryMove(game), "ending_moves")
