"""Board pictures (RGB arrays) for GIFs of games: stones as coloured discs on a grid."""

from __future__ import annotations

import numpy as np

from payoff.envs.games.base import Game, GameState, check_ended_within
from payoff.envs.games.players import Player

CELL = 48
COLOURS = {
    "board": (30, 80, 160),
    "empty": (235, 235, 235),
    1: (220, 50, 40),  # first player
    2: (245, 200, 30),  # second player
}


def board_image(game: Game, state: GameState, cell: int = CELL) -> np.ndarray:
    """uint8 [rows * cell, cols * cell, 3] picture of `state`.

    Tic-tac-toe cells are laid out the way PettingZoo numbers them (column by column).
    """
    rows, cols = game.shape
    grid = state.board.reshape(rows, cols)
    if game.name == "tictactoe":
        grid = grid.T  # PettingZoo's cell i sits at row i % 3, column i // 3
    image = np.empty((rows * cell, cols * cell, 3), dtype=np.uint8)
    image[:] = COLOURS["board"]
    yy, xx = np.mgrid[0:cell, 0:cell]
    centre = (cell - 1) / 2
    disc = (yy - centre) ** 2 + (xx - centre) ** 2 <= (0.4 * cell) ** 2
    for r in range(rows):
        for c in range(cols):
            stone = int(grid[r, c])
            patch = image[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell]
            patch[disc] = COLOURS[stone] if stone else COLOURS["empty"]
    return image


def game_frames(game: Game, a: Player, b: Player, games: int = 1) -> list[np.ndarray]:
    """Pictures of every position of `games` games of A against B, for a GIF.

    A moves first in even-numbered games, as in a match; each game lingers on its final
    position for two extra frames.
    """
    frames = []
    for index in range(games):
        state, plies = game.initial_state(), 0
        frames.append(board_image(game, state))
        while state.winner is None:
            check_ended_within(game, state, plies)
            plies += 1
            mover = a if (state.to_play == index % 2) else b
            state = game.play(state, mover.act([state])[0])
            frames.append(board_image(game, state))
        frames.extend([frames[-1]] * 2)  # linger on the final position
    return frames
