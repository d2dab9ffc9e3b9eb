"""Connect Four with PettingZoo's `connect_four_v3` rules, action numbers and observation layout."""

from __future__ import annotations

import numpy as np

from payoff.envs.games.base import GameState, IllegalMoveError, StoneGame

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


def _landing_cell(cells: bytes, column: int) -> int:
    """The lowest empty cell of an open `column` (flat index), where a stone dropped lands."""
    cell = column + (ROWS - 1) * COLS
    while cells[cell]:
        cell -= COLS
    return cell


WINDOWS = _windows()  # [69, 4]
WINDOWS_THROUGH = [np.array([w for w in WINDOWS if cell in w]) for cell in range(ROWS * COLS)]


class ConnectFour(StoneGame):
    """6x7 Connect Four; action = column 0..6, the stone drops to the lowest free row."""

    name = "connect4"
    num_actions = COLS
    shape = (ROWS, COLS)
    lines_through = WINDOWS_THROUGH

    def initial_state(self) -> GameState:
        return GameState(board=np.zeros(ROWS * COLS, dtype=np.int8))

    def legal_mask(self, state: GameState) -> np.ndarray:
        if state.winner is not None:
            return np.zeros(COLS, dtype=bool)
        return state.board[:COLS] == 0  # a column is open while its top cell is empty

    def landing_cells(self, state: GameState) -> list[tuple[int, int]]:
        if state.winner is not None:
            return []
        cells = state.board.tobytes()
        # a column is open while its top cell is empty
        return [
            (column, _landing_cell(cells, column)) for column in range(COLS) if not cells[column]
        ]

    def play(self, state: GameState, action: int) -> GameState:
        column = int(action)
        if state.winner is not None:
            raise IllegalMoveError("the game is over; no more moves can be played")
        if not 0 <= column < COLS or state.board[column] != 0:
            legal = np.flatnonzero(state.board[:COLS] == 0).tolist()
            raise IllegalMoveError(
                f"column {column} is full or off the board; legal moves: {legal}"
            )
        return self.place(state, _landing_cell(state.board.tobytes(), column))

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
