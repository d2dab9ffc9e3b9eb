"""Two-player board games for self-play: the `Game` protocol and fast NumPy implementations.

Games are looked up by name (`game: connect4` in a recipe). Register your own with
`register_game("name", factory)`; it must follow payoff.envs.games.base.Game.
"""

from __future__ import annotations

from collections.abc import Callable

from payoff.core.errors import ConfigError, suggest
from payoff.core.imports import import_object
from payoff.envs.games.base import DRAW, Game, GameState, IllegalMoveError
from payoff.envs.games.connect4 import ConnectFour
from payoff.envs.games.tictactoe import TicTacToe

GAMES: dict[str, Callable[[], Game]] = {"tictactoe": TicTacToe, "connect4": ConnectFour}


def register_game(name: str, factory: Callable[[], Game]) -> None:
    """Make `make_game(name)` build your game (a class or function returning a Game)."""
    GAMES[name] = factory


def make_game(name: str) -> Game:
    """The game called `name`, with a clear error naming the known games."""
    if ":" in name:  # your own game's class or function, e.g. my_games:Nim
        factory = import_object(name, "game")
    elif name not in GAMES:
        raise ConfigError(
            f"unknown game {name!r}.{suggest(name, GAMES)} Known games: "
            f"{', '.join(sorted(GAMES))}; your own game: 'module:Class' (e.g. my_games:Nim, "
            f"imported from the working folder or the Python path), or "
            f"payoff.envs.games.register_game(name, Class) in the process that trains"
        )
    else:
        factory = GAMES[name]
    try:
        game = factory()
    except TypeError as err:
        raise ConfigError(f"game {name!r} could not be made without arguments: {err}") from None
    if not isinstance(game, Game):
        raise ConfigError(
            f"game {name!r} does not implement the Game protocol (payoff.envs.games.base)"
        )
    return game


__all__ = [
    "DRAW",
    "GAMES",
    "ConnectFour",
    "Game",
    "GameState",
    "IllegalMoveError",
    "TicTacToe",
    "make_game",
    "register_game",
]
