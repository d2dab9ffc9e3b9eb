"""The `Game` protocol: what a two-player, turn-based, zero-sum board game must provide.

Self-play search (payoff.rollout.mcts) and AlphaZero (payoff.algos.alphazero) only talk to
a game through this protocol, so adding a game is writing one class:

    state = game.initial_state()
    while game.outcome(state) is None:
        action = choose(game.legal_mask(state))      # bool [num_actions]
        state = game.play(state, action)             # a new state; the old one is unchanged
    game.outcome(state)                              # +1 / 0 / -1 for the player to move

Values are always from the point of view of the player to move, so the same network
serves both sides. States are immutable: search trees keep them in their nodes.

Two optional methods make search faster and change none of its results: `encode_batch`
(many positions' planes in one pass) and `ending_moves` (the legal moves that end the game,
which the MCTS solver otherwise finds by playing every move). `StoneGame` has both.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from payoff.core.errors import PayoffError

DRAW = -1  # GameState.winner when the game ended without a winner


class IllegalMoveError(PayoffError):
    """A move that the rules forbid in the current position."""


@dataclass(frozen=True, eq=False)
class GameState:
    """One position.

    board: flat int8 cells, 0 empty, 1 the first player's stone, 2 the second player's
        (PettingZoo's classic envs use the same numbering).
    to_play: 0 for the first player, 1 for the second.
    winner: None while the game runs, 0 or 1 for the player who won, DRAW (-1) for a draw.
    moves: plies played so far.
    """

    board: np.ndarray
    to_play: int = 0
    winner: int | None = None
    moves: int = 0

    def key(self) -> bytes:
        """A hashable identity of the position (for transposition tables): the plies played
        belong to it, since a game may end in a draw after so many of them."""
        return self.board.tobytes() + bytes([self.to_play]) + int(self.moves).to_bytes(8, "little")


@runtime_checkable
class Game(Protocol):
    """A two-player zero-sum game with a fixed, discrete action set and full information."""

    name: str
    num_actions: int
    shape: tuple[int, int]  # board rows, columns (the spatial shape of `encode`)

    def initial_state(self) -> GameState: ...

    def legal_mask(self, state: GameState) -> np.ndarray:
        """bool [num_actions]: which actions the player to move may take."""
        ...

    def play(self, state: GameState, action: int) -> GameState:
        """The position after `action`; raises IllegalMoveError for a forbidden move."""
        ...

    def outcome(self, state: GameState) -> float | None:
        """None while running, else +1 / 0 / -1 for the player to move in `state`."""
        ...

    def encode(self, state: GameState) -> np.ndarray:
        """float32 [2, rows, cols] planes: the mover's stones, then the opponent's."""
        ...

    def symmetries(
        self, planes: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Equivalent (planes, policy) pairs under the board's symmetries (including itself)."""
        ...

    def render(self, state: GameState) -> str:
        """The position as text, with the action numbers a human types."""
        ...


MAX_PLIES = 1_000
"""A game still running after this many plies (or the game's own `max_plies`) stops self-play,
matches and drawing with an error: its outcome() never ends it, and the loop would run on."""


def check_ended_within(game: Any, state: GameState, plies: int) -> None:
    """PayoffError when `state` still runs after `plies` plies, past the game's limit."""
    limit = getattr(game, "max_plies", None)
    limit = MAX_PLIES if limit is None else int(limit)  # None: no limit of its own
    if state.winner is None and plies >= limit:
        name = getattr(game, "name", type(game).__name__)
        raise PayoffError(
            f"game {name!r} has not ended after {plies:,} plies (its outcome() declared no "
            f"winner and no draw): make it end, e.g. a draw after so many plies, or give the "
            f"game a max_plies attribute if its games are really longer"
        )


def outcome_for_mover(state: GameState) -> float | None:
    """+1 / 0 / -1 for the player to move, or None while the game runs."""
    if state.winner is None:
        return None
    if state.winner == DRAW:
        return 0.0
    return 1.0 if state.winner == state.to_play else -1.0


def encode_planes(state: GameState, shape: tuple[int, int]) -> np.ndarray:
    """[2, rows, cols] float32: the mover's stones, then the opponent's (PettingZoo's layout)."""
    board = state.board.reshape(shape)
    mover = state.to_play + 1
    opponent = 2 - state.to_play
    return np.stack([board == mover, board == opponent]).astype(np.float32)


def encode_planes_batch(states: list[GameState], shape: tuple[int, int]) -> np.ndarray:
    """`encode_planes` for many positions at once: [N, 2, rows, cols] float32."""
    boards = np.stack([s.board for s in states])  # [N, cells]
    mover = np.array([s.to_play + 1 for s in states], dtype=np.int8)[:, None]
    planes = np.stack([boards == mover, boards == 3 - mover], axis=1)  # [N, 2, cells]
    return planes.reshape(len(states), 2, *shape).astype(np.float32)


def state_from_planes(planes: np.ndarray, shape: tuple[int, int]) -> GameState:
    """Rebuild a running position from mover/opponent planes ([2, H, W] or PettingZoo's [H, W, 2]).

    Who moves follows from the stone counts: the first player moves when both have as many.
    """
    planes = np.asarray(planes)
    if planes.shape == (*shape, 2):
        planes = np.moveaxis(planes, -1, 0)
    if planes.shape != (2, *shape):
        raise PayoffError(
            f"observation planes must have shape (2, {shape[0]}, {shape[1]}) or "
            f"({shape[0]}, {shape[1]}, 2), got {planes.shape}"
        )
    mine, theirs = planes[0].astype(bool).ravel(), planes[1].astype(bool).ravel()
    to_play = 0 if mine.sum() == theirs.sum() else 1
    board = np.zeros(shape[0] * shape[1], dtype=np.int8)
    board[mine] = to_play + 1
    board[theirs] = 2 - to_play
    return GameState(board=board, to_play=to_play, moves=int(mine.sum() + theirs.sum()))


class StoneGame:
    """What tic-tac-toe and Connect Four share: a flat board of stones (0 empty, 1 and 2 the
    players), a win made by a line through the last stone, PettingZoo's planes encoding.

    A game sets `shape` and `lines_through` (for each cell, the lines of cells through it)
    and turns an action into a cell in its own `play`, then calls `place`.
    """

    shape: tuple[int, int]
    lines_through: list[np.ndarray]

    def landing_cells(self, state: GameState) -> list[tuple[int, int]]:
        """(action, cell) for every legal move of a running game: where its stone goes."""
        raise NotImplementedError

    def place(self, state: GameState, cell: int) -> GameState:
        """The position after the player to move puts a stone on the empty `cell`."""
        board = state.board.copy()
        stone = state.to_play + 1
        board[cell] = stone
        moves = state.moves + 1
        winner = None
        if self._completes_line(board.tobytes(), cell, stone):
            winner = state.to_play
        elif moves == board.size:
            winner = DRAW
        return GameState(board=board, to_play=1 - state.to_play, winner=winner, moves=moves)

    def ending_moves(self, state: GameState) -> list[int]:
        """The legal moves that end the game: those that complete a line for the mover, or
        all of them when one empty cell is left. The MCTS solver asks this at every
        expansion; answering it from the board spares it playing every move."""
        if state.winner is not None:
            return []
        moves = self.landing_cells(state)
        if state.moves + 1 == state.board.size:
            return [action for action, _ in moves]
        cells, stone = state.board.tobytes(), state.to_play + 1
        return [action for action, cell in moves if self._completes_line(cells, cell, stone)]

    @cached_property
    def lines(self) -> np.ndarray:
        """Every line of the game once, [L, k] flat cell indices (a net's threat planes)."""
        return np.unique(np.concatenate(self.lines_through), axis=0)

    @cached_property
    def _line_others(self) -> list[list[tuple[int, ...]]]:
        """For each cell, each line through it less the cell itself, as tuples (built on
        first use, once per game object)."""
        return [
            [tuple(int(c) for c in line if c != cell) for line in lines]
            for cell, lines in enumerate(self.lines_through)
        ]

    def _completes_line(self, cells: bytes, cell: int, stone: int) -> bool:
        """Whether a stone on `cell` makes a line of `stone`s with the stones in `cells`."""
        for line in self._line_others[cell]:
            for c in line:
                if cells[c] != stone:
                    break
            else:
                return True
        return False

    def outcome(self, state: GameState) -> float | None:
        return outcome_for_mover(state)

    def encode(self, state: GameState) -> np.ndarray:
        return encode_planes(state, self.shape)

    def encode_batch(self, states: list[GameState]) -> np.ndarray:
        """`encode` for many positions at once (one NumPy pass): [N, 2, rows, cols]."""
        return encode_planes_batch(states, self.shape)
