"""Matches between two players, with all games of a match played side by side.

Playing the games together lets a search player evaluate positions from many games in one
network batch. Colours alternate: player A moves first in games 0, 2, 4, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

from payoff.envs.games.base import DRAW, Game, GameState
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

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        return (self.wins + 0.5 * self.draws) / max(self.games, 1)

    def line(self) -> str:
        return (
            f"{self.a} vs {self.b}: {self.wins} won, {self.draws} drawn, {self.losses} lost "
            f"of {self.games} (score {self.score:.3f})"
        )


def play_match(game: Game, a: Player, b: Player, games: int) -> MatchResult:
    """Play `games` games of A against B (A first in even-numbered games) and count results."""
    states: list[GameState] = [game.initial_state() for _ in range(games)]
    a_seat = [0 if i % 2 == 0 else 1 for i in range(games)]  # which side A plays in game i
    running = [i for i in range(games)]
    while running:
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
    return result
