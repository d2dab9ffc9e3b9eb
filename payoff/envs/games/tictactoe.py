"""Tic-tac-toe with PettingZoo's `tictactoe_v3` rules, action numbers and observation layout."""

from __future__ import annotations

import numpy as np

from payoff.envs.games.base import GameState, IllegalMoveError, StoneGame

# The eight lines of three, as flat cell indices.
LINES = np.array(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]]
)
# For each cell, the lines through it: a win can only appear on a line through the new stone.
LINES_THROUGH = [np.array([line for line in LINES if cell in line]) for cell in range(9)]


class TicTacToe(StoneGame):
    """3x3 tic-tac-toe; action = flat cell index 0..8.

    PettingZoo numbers cells column by column (0 1 2 down the first column); the rules are
    symmetric, so only `render` cares, and it prints the numbers in PettingZoo's places.
    """

    name = "tictactoe"
    num_actions = 9
    shape = (3, 3)
    lines_through = LINES_THROUGH

    def initial_state(self) -> GameState:
        return GameState(board=np.zeros(9, dtype=np.int8))

    def legal_mask(self, state: GameState) -> np.ndarray:
        if state.winner is not None:
            return np.zeros(9, dtype=bool)
        return state.board == 0

    def landing_cells(self, state: GameState) -> list[tuple[int, int]]:
        if state.winner is not None:
            return []
        cells = state.board.tobytes()
        return [(cell, cell) for cell in range(9) if cells[cell] == 0]

    def play(self, state: GameState, action: int) -> GameState:
        action = int(action)
        if state.winner is not None:
            raise IllegalMoveError("the game is over; no more moves can be played")
        if not 0 <= action < 9 or state.board[action] != 0:
            legal = np.flatnonzero(state.board == 0).tolist()
            what = "is not free" if 0 <= action < 9 else "does not exist (cells are 0-8)"
            raise IllegalMoveError(f"cell {action} {what}; legal moves: {legal}")
        return self.place(state, action)

    def symmetries(
        self, planes: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The 8 rotations and reflections of the square (policy cells move with the stones)."""
        grid = policy.reshape(3, 3)
        pairs = []
        for flip in (False, True):
            p, g = (planes[:, :, ::-1], grid[:, ::-1]) if flip else (planes, grid)
            for k in range(4):
                pairs.append(
                    (
                        np.ascontiguousarray(np.rot90(p, k, axes=(1, 2))),
                        np.ascontiguousarray(np.rot90(g, k)).ravel(),
                    )
                )
        return pairs

    def render(self, state: GameState) -> str:
        marks = {0: " ", 1: "X", 2: "O"}
        rows = []
        for r in range(3):
            cells = []
            for c in range(3):
                index = 3 * c + r  # PettingZoo's column-major numbering
                stone = int(state.board[index])
                cells.append(marks[stone] if stone else str(index))
            rows.append(" " + " | ".join(cells))
        return "\n---+---+---\n".join(rows)
