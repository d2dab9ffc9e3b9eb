"""AlphaZero self-play in worker processes (`workers`): same data shape, reproducible, exact resume."""

from __future__ import annotations

import numpy as np
import pytest

from payoff.algos.alphazero import AlphaZero
from payoff.core.errors import ConfigError
from payoff.rollout.network_players import Match, PlayerSpec, network_weights

TINY = dict(
    game="tictactoe",
    iterations=2,
    games_per_iteration=7,  # odd: the workers get 4 and 3 games
    train_steps=5,
    batch_size=32,
    gate_games=0,
    eval_games=0,
    baselines=["random"],
    final_eval_games=0,
    mcts={"simulations": 8},
)


def _replay(agent: AlphaZero) -> tuple[np.ndarray, ...]:
    n = agent.replay.size
    return agent.replay.planes[:n], agent.replay.policies[:n], agent.replay.values[:n]


def _comparable(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in history]


@pytest.fixture(scope="module")
def two_workers() -> AlphaZero:
    return AlphaZero(workers=2, **TINY).learn()


def test_workers_store_every_game_like_one_process(two_workers: AlphaZero) -> None:
    one = AlphaZero(workers=1, **TINY).learn()
    for agent in (one, two_workers):
        records = [h for h in agent.history if "selfplay/games" in h]
        assert [h["selfplay/games"] for h in records] == [7, 7]
        positions = sum(h["selfplay/positions"] for h in records)
        # every position of every game is stored with its 8 symmetries, nothing else
        assert agent.replay.size == 8 * positions
        assert all(5 <= h["selfplay/mean_length"] <= 9 for h in records)
        planes, policies, values = _replay(agent)
        assert set(np.unique(values)) <= {-1.0, 0.0, 1.0}
        np.testing.assert_allclose(policies.sum(axis=1), 1.0, atol=1e-5)
    assert two_workers.games_played == one.games_played == 14
    # the workers play other games (their own random streams), not the same ones
    assert not np.array_equal(_replay(one)[1][:64], _replay(two_workers)[1][:64])
    cpu = [h["perf/worker_cpu_seconds"] for h in two_workers.history if "selfplay/games" in h]
    assert cpu[-1] > 0 and not two_workers.pool.running  # counted, and shut down after learn()


def test_workers_are_reproducible_and_resume_exactly(two_workers: AlphaZero) -> None:
    first = AlphaZero(workers=2, **TINY)
    first.learn(1)
    resumed = AlphaZero(workers=2, **TINY)
    resumed.load_state_dict(first.state_dict())
    resumed.learn()
    for a, b in zip(_replay(resumed), _replay(two_workers), strict=True):
        np.testing.assert_array_equal(a, b)
    assert _comparable(first.history + resumed.history) == _comparable(two_workers.history)


def test_workers_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="'workers' must be >= 1, got 0"):
        AlphaZero(**{**TINY, "workers": 0})


def test_evaluation_matches_in_workers_equal_the_main_process() -> None:
    config = {**TINY, "iterations": 1, "eval_games": 6, "baselines": ["random", "greedy"]}
    pooled = AlphaZero(workers=2, **config)
    local = AlphaZero(workers=1, **config)
    local.best.load_state_dict(pooled.best.state_dict())
    weights = network_weights(pooled.best)
    matches = [
        Match(PlayerSpec("net", 5, weights, 8), PlayerSpec("random", 6), 6),
        Match(PlayerSpec("net", 5, weights, 8, random_moves=2), PlayerSpec("greedy", 7), 6),
        Match(PlayerSpec("net", 5, weights, 8, 2), PlayerSpec("old", 8, weights, 4, 2), 4),
        Match(PlayerSpec("net", 5, weights, 8), PlayerSpec("greedy", 7), 6, openings=2, seed=3),
    ]
    try:
        in_workers = pooled.pool.play_matches(matches)
        assert pooled.pool.cpu_seconds  # the workers played (and their CPU is counted)
    finally:
        pooled.pool.close()

    def seen(r):
        return (r.a, r.b, r.wins, r.draws, r.losses, r.lengths, r.distinct)

    assert [seen(r) for r in in_workers] == [seen(r) for r in local.pool.play_matches(matches)]
    assert in_workers[-1].distinct >= 3  # three pairs, three openings


def test_league_and_final_matches_run_in_workers() -> None:
    config = {**TINY, "iterations": 2, "eval_every": 1, "eval_games": 4, "final_eval_games": 4}
    agent = AlphaZero(workers=2, **config).learn()
    evals = [h for h in agent.history if "eval/elo" in h]
    assert len(evals) == 3  # before training and after each iteration
    assert "eval/score_vs_previous" in evals[-1]
    assert "final/score_vs_random" in agent.history[-1]
    assert not agent.pool.running
