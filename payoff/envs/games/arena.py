"""Matches between two players, with all games of a match played side by side.

Playing the games together lets a search player evaluate positions from many games in one
network batch. Colours alternate: player A moves first in games 0, 2, 4, ...

Two deterministic players replay one game over and over, so a match of 100 games can be a
handful of distinct lines. `openings=k` starts each pair of games (2i, 2i + 1) from the same
k random legal plies, played for both sides before either player moves, with A on each
side once; `distinct` counts the different move sequences the match actually played.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.games.base import DRAW, Game, GameState, check_ended_within
from payoff.envs.games.players import Player


@dataclass
class MatchResult:
    """A's results against B; `score` counts a draw as half a win."""

    a: str
    b: str
    wins: int = 0
    draws: int = 0
    losses: int = 0
    wins_first: int = 0  # wins with A moving first (the advantage side in most games)
    losses_first: int = 0
    lengths: list[int] = field(default_factory=list)
    distinct: int = 0  # different move sequences among the games

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        return (self.wins + 0.5 * self.draws) / max(self.games, 1)

    def line(self) -> str:
        return (
            f"{self.a} vs {self.b}: {self.wins} won, {self.draws} drawn, {self.losses} lost "
            f"of {self.games} (score {self.score:.3f}; {self.distinct} distinct games)"
        )


def play_match(
    game: Game, a: Player, b: Player, games: int, openings: int = 0, seed: int = 0
) -> MatchResult:
    """Play `games` games of A against B (A first in even-numbered games) and count results.

    openings: random legal plies that start each pair of games (see the module docstring),
        drawn from `seed`; an opening that would end the game is drawn again.
    """
    states: list[GameState] = [game.initial_state() for _ in range(games)]
    moves: list[list[int]] = [[] for _ in range(games)]
    if openings:
        rng = np.random.default_rng(seed)
        used: set[tuple[int, ...]] = set()
        for pair in range(0, games, 2):
            line = random_opening(game, openings, rng, used)
            used.add(tuple(line))
            for i in range(pair, min(pair + 2, games)):
                states[i] = play_line(game, line)
                moves[i] = list(line)
    a_seat = [0 if i % 2 == 0 else 1 for i in range(games)]  # which side A plays in game i
    running = [i for i in range(games)]
    rounds = 0
    while running:
        check_ended_within(game, states[running[0]], 2 * rounds)  # a round: a ply each side
        rounds += 1
        for player, is_a in ((a, True), (b, False)):
            turn = [
                i
                for i in running
                if states[i].winner is None and (states[i].to_play == a_seat[i]) == is_a
            ]
            if not turn:
                continue
            actions = player.act([states[i] for i in turn])
            for i, action in zip(turn, actions, strict=True):
                states[i] = game.play(states[i], action)
                moves[i].append(int(action))
        running = [i for i in running if states[i].winner is None]
    result = MatchResult(a=a.name, b=b.name)
    for i, state in enumerate(states):
        result.lengths.append(state.moves)
        if state.winner == DRAW:
            result.draws += 1
        elif state.winner == a_seat[i]:
            result.wins += 1
            result.wins_first += int(a_seat[i] == 0)
        else:
            result.losses += 1
            result.losses_first += int(a_seat[i] == 0)
    result.distinct = len({tuple(line) for line in moves})
    return result


def play_line(game: Game, line: list[int]) -> GameState:
    """The position after playing `line` from the start."""
    state = game.initial_state()
    for action in line:
        state = game.play(state, action)
    return state


def random_opening(
    game: Game,
    plies: int,
    rng: np.random.Generator,
    avoid: AbstractSet[tuple[int, ...]] = frozenset(),
) -> list[int]:
    """`plies` uniformly random legal moves from the start that leave the game running, not
    one of `avoid` while fresh ones turn up (after 100 draws a repeat is accepted)."""
    repeat: list[int] | None = None
    for attempt in range(1000):
        state, line = game.initial_state(), []
        while len(line) < plies and state.winner is None:
            action = int(rng.choice(np.flatnonzero(game.legal_mask(state))))
            state = game.play(state, action)
            line.append(action)
        if state.winner is not None:
            continue
        if tuple(line) not in avoid:
            return line
        repeat = repeat or line
        if attempt >= 100:
            break
    if repeat is None:
        raise ConfigError(
            f"openings {plies}: no {plies} random plies that leave the game running were "
            f"found in 1000 tries; use fewer opening plies"
        )
    return repeat
