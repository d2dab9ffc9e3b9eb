"""Connect Four with PettingZoo's `connect_four_v3` rules, action numbers and observation layout."""

from __future__ import annotations

import numpy as np

from payoff.envs.games.base import (
    DRAW,
    GameState,
    IllegalMoveError,
    encode_planes,
    encode_planes_batch,
    outcome_for_mover,
)

ROWS, COLS = 6, 7


def _windows() -> np.ndarray:
    """All 69 lines of four cells (flat indices, row 0 at the top as in PettingZoo)."""
    lines = []
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (-1, 1)):
                cells = [(r + i * dr, c + i * dc) for i in range(4)]
                if all(0 <= rr < ROWS and 0 <= cc < COLS for rr, cc in cells):
                    lines.append([rr * COLS + cc for rr, cc in cells])
    return np.array(lines)


WINDOWS = _windows()  # [69, 4]
WINDOWS_THROUGH = [np.array([w for w in WINDOWS if cell in w]) for cell in range(ROWS * COLS)]


class ConnectFour:
    """6x7 Connect Four; action = column 0..6, the stone drops to the lowest free row."""

    name = "connect4"
    num_actions = COLS
    shape = (ROWS, COLS)

    def initial_state(self) -> GameState:
        return GameState(board=np.zeros(ROWS * COLS, dtype=np.int8))

    def legal_mask(self, state: GameState) -> np.ndarray:
        if state.winner is not None:
            return np.zeros(COLS, dtype=bool)
        return state.board[:COLS] == 0  # a column is open while its top cell is empty

    def play(self, state: GameState, action: int) -> GameState:
        column = int(action)
        if state.winner is not None:
            raise IllegalMoveError("the game is over; no more moves can be played")
        if not 0 <= column < COLS or state.board[column] != 0:
            legal = np.flatnonzero(state.board[:COLS] == 0).tolist()
            raise IllegalMoveError(
                f"column {column} is full or off the board; legal moves: {legal}"
            )
        board = state.board.copy()
        row = ROWS - 1 - int(np.count_nonzero(board[column::COLS]))  # stones fill from the bottom
        cell = row * COLS + column
        stone = state.to_play + 1
        board[cell] = stone
        moves = state.moves + 1
        winner = None
        if (board[WINDOWS_THROUGH[cell]] == stone).all(axis=1).any():
            winner = state.to_play
        elif moves == ROWS * COLS:
            winner = DRAW
        return GameState(board=board, to_play=1 - state.to_play, winner=winner, moves=moves)

    def outcome(self, state: GameState) -> float | None:
        return outcome_for_mover(state)

    def encode(self, state: GameState) -> np.ndarray:
        return encode_planes(state, self.shape)

    def encode_batch(self, states: list[GameState]) -> np.ndarray:
        """`encode` for many positions at once (one NumPy pass): [N, 2, rows, cols]."""
        return encode_planes_batch(states, self.shape)

    def symmetries(
        self, planes: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The position and its mirror image (columns reversed)."""
        return [
            (planes, policy),
            (np.ascontiguousarray(planes[:, :, ::-1]), np.ascontiguousarray(policy[::-1])),
        ]

    def render(self, state: GameState) -> str:
        marks = {0: ".", 1: "X", 2: "O"}
        board = state.board.reshape(ROWS, COLS)
        lines = [" ".join(marks[int(v)] for v in row) for row in board]
        lines.append(" ".join(str(c) for c in range(COLS)))
        return "\n".join(lines)
