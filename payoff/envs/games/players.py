"""Fixed opponents for any `Game`: random, greedy, perfect minimax and depth-limited alpha-beta.

A player answers a list of positions with a list of actions (`act`), so a search player can
think about many games at once. Every baseline breaks ties at random from its own seeded
generator, so repeated games differ and matches are reproducible.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.games.base import Game, GameState


class Player:
    """Something that picks moves: `act(states) -> actions`, one action per position."""

    name: str = "player"

    def act(self, states: list[GameState]) -> list[int]:
        return [self.choose(state) for state in states]

    def choose(self, state: GameState) -> int:
        raise NotImplementedError


def _pick(rng: np.random.Generator, candidates: Any) -> int:
    return int(candidates[0] if len(candidates) == 1 else rng.choice(candidates))


class RandomPlayer(Player):
    """Uniform over legal moves."""

    def __init__(self, game: Game, seed: int = 0):
        self.game, self.rng, self.name = game, np.random.default_rng(seed), "random"

    def choose(self, state: GameState) -> int:
        return _pick(self.rng, np.flatnonzero(self.game.legal_mask(state)))


class GreedyPlayer(Player):
    """Takes a winning move if there is one, else blocks the opponent's, else plays at random."""

    def __init__(self, game: Game, seed: int = 0):
        self.game, self.rng, self.name = game, np.random.default_rng(seed), "greedy"

    def choose(self, state: GameState) -> int:
        game = self.game
        legal = np.flatnonzero(game.legal_mask(state))
        for action in legal:
            if game.outcome(game.play(state, int(action))) == -1.0:  # the opponent to move has lost
                return int(action)
        # Which of the opponent's moves would win if it were their turn now?
        passed = GameState(board=state.board, to_play=1 - state.to_play, moves=state.moves)
        # (only moves both sides may take: a game may give the two sides other moves)
        theirs = game.legal_mask(passed)
        threats = [
            a for a in legal if theirs[a] and game.outcome(game.play(passed, int(a))) == -1.0
        ]
        return _pick(self.rng, threats or legal)


class MinimaxPlayer(Player):
    """Perfect play by exhaustive negamax with a transposition table (small games only).

    Among equally good moves it picks at random, so it does not replay one game forever.
    Tic-tac-toe has 5,478 positions; Connect Four is far too large for this player.
    """

    def __init__(self, game: Game, seed: int = 0):
        self.game, self.rng, self.name = game, np.random.default_rng(seed), "minimax"
        self.table: dict[bytes, float] = {}

    def value(self, state: GameState) -> float:
        """Game-theoretic value for the player to move: +1 win, 0 draw, -1 loss."""
        outcome = self.game.outcome(state)
        if outcome is not None:
            return outcome
        key = state.key()
        if key not in self.table:
            legal = np.flatnonzero(self.game.legal_mask(state))
            self.table[key] = max(-self.value(self.game.play(state, int(a))) for a in legal)
        return self.table[key]

    def action_values(self, state: GameState) -> dict[int, float]:
        legal = np.flatnonzero(self.game.legal_mask(state))
        return {int(a): -self.value(self.game.play(state, int(a))) for a in legal}

    def choose(self, state: GameState) -> int:
        values = self.action_values(state)
        best = max(values.values())
        return _pick(self.rng, [a for a, v in values.items() if v == best])


WIN_SCORE = 1_000_000.0


class AlphaBetaPlayer(Player):
    """Depth-limited negamax with alpha-beta pruning and a static evaluation at the horizon.

    heuristic(state) scores a running position for the player to move (the default,
    `line_heuristic`, counts open lines: made for Connect Four, fine for any line game).
    Wins are worth WIN_SCORE plus the remaining depth, so it wins fast and loses slow.
    Moves are searched centre-first, which lets alpha-beta prune more.
    """

    def __init__(
        self,
        game: Game,
        depth: int = 4,
        seed: int = 0,
        heuristic: Callable[[Game, GameState], float] | None = None,
    ):
        if depth < 1:
            raise ConfigError(f"alpha-beta depth must be >= 1, got {depth}")
        self.game, self.depth, self.rng = game, depth, np.random.default_rng(seed)
        self.heuristic = heuristic or line_heuristic
        self.name = f"alphabeta-{depth}"
        center = (game.num_actions - 1) / 2
        self.order = sorted(range(game.num_actions), key=lambda a: abs(a - center))
        self.nodes = 0  # positions visited, for the curious

    def _negamax(self, state: GameState, depth: int, alpha: float, beta: float) -> float:
        self.nodes += 1
        outcome = self.game.outcome(state)
        if outcome is not None:
            return outcome * (WIN_SCORE + depth)
        if depth == 0:
            return self.heuristic(self.game, state)
        legal = self.game.legal_mask(state)
        best = -math.inf
        for action in self.order:
            if not legal[action]:
                continue
            value = -self._negamax(self.game.play(state, action), depth - 1, -beta, -alpha)
            best = max(best, value)
            alpha = max(alpha, value)
            if alpha >= beta:
                break
        return best

    def choose(self, state: GameState) -> int:
        legal = self.game.legal_mask(state)
        best, ties = -math.inf, []
        for action in self.order:
            if not legal[action]:
                continue
            # A null window just below the best so far: worse moves fail low cheaply,
            # equal or better ones get their exact value, so ties are found and broken at random.
            floor = best - 1e-6
            value = -self._negamax(self.game.play(state, action), self.depth - 1, -math.inf, -floor)
            if value > best + 1e-6:
                best, ties = value, [action]
            elif value >= best - 1e-6:
                ties.append(action)
        return _pick(self.rng, ties)


def line_heuristic(game: Game, state: GameState) -> float:
    """Open-line count for the player to move (Connect Four's usual static evaluation).

    Per line of four: 3 own stones and an empty cell +5, 2 own and 2 empty +2, 3 opponent
    stones and an empty cell -4; each own stone in the centre column +3.
    """
    from payoff.envs.games.connect4 import WINDOWS

    if state.board.size != 42:  # other boards: no positional knowledge, search only
        return 0.0
    mover = state.to_play + 1
    codes = state.board[WINDOWS] @ _BASE_3  # each line of four as one number
    score = _LINE_SCORES[mover][codes].sum() + 3 * np.count_nonzero(state.board[3::7] == mover)
    return float(score)


def _line_scores(mover: int) -> np.ndarray:
    """line_heuristic's score of every line of four for `mover` (1 or 2), indexed by the
    line read as a base-3 number (cell values 0 empty, 1 and 2 the players' stones): one
    table lookup per line instead of counting its stones."""
    scores = np.zeros(3**4, dtype=np.int64)
    for code, cells in enumerate(itertools.product(range(3), repeat=4)):
        mine, empty = cells.count(mover), cells.count(0)
        theirs = 4 - mine - empty
        scores[code] = (
            5 * (mine == 3 and empty == 1)
            + 2 * (mine == 2 and empty == 2)
            - 4 * (theirs == 3 and empty == 1)
        )
    return scores


# itertools.product runs the last cell fastest, so the first cell is the highest digit
_BASE_3 = np.array([27, 9, 3, 1], dtype=np.int64)
_LINE_SCORES = {1: _line_scores(1), 2: _line_scores(2)}


def make_player(spec: str, game: Game, seed: int = 0) -> Player:
    """A baseline from its name: 'random', 'greedy', 'minimax', or 'alphabeta-<depth>'."""
    if spec == "random":
        return RandomPlayer(game, seed)
    if spec == "greedy":
        return GreedyPlayer(game, seed)
    if spec == "minimax":
        if game.name == "connect4":
            raise ConfigError(
                "perfect minimax cannot solve connect4 in reasonable time; use 'alphabeta-<depth>'"
            )
        return MinimaxPlayer(game, seed)
    if spec.startswith("alphabeta-") and spec.removeprefix("alphabeta-").isdigit():
        return AlphaBetaPlayer(game, depth=int(spec.removeprefix("alphabeta-")), seed=seed)
    raise ConfigError(
        f"unknown baseline player {spec!r}; valid: 'random', 'greedy', 'minimax', 'alphabeta-<depth>' (e.g. alphabeta-4)"
    )
