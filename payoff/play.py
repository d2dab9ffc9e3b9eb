"""Play a trained board-game agent (alphazero) in the terminal.

`payoff play RUN --human [--second]` (payoff.cli) and `python -m payoff.play RUN [--second]`
both end here. An agent is playable when it has a `game` (payoff.envs.games) and
`player(seed=...)`, the arena player it plays with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from payoff import train
from payoff.core.errors import PayoffError
from payoff.envs.games import DRAW, IllegalMoveError
from payoff.envs.games.base import Game


def playable(agent: Any) -> bool:
    """Whether `agent` plays a board game that a human can play against it."""
    return isinstance(getattr(agent, "game", None), Game) and callable(
        getattr(agent, "player", None)
    )


def play_human(
    agent: Any,
    human_first: bool = True,
    read: Callable[[str], str] | None = None,
    write: Callable[[str], Any] = print,
) -> float:
    """Play one game against `agent` in the terminal; returns +1 / 0 / -1 for the human.

    Illegal or unreadable moves are answered with the legal moves and asked again;
    'q' (or end of input) resigns.
    """
    read = read or input  # looked up at call time, so a replaced builtins.input is used
    game = agent.game
    bot = agent.player(seed=int(time.time()) % 100_000)
    human_side = 0 if human_first else 1
    state = game.initial_state()
    write(f"You play {'X (first)' if human_first else 'O (second)'} in {game.name}.")
    while state.winner is None:
        if state.to_play == human_side:
            write(game.render(state))
            legal = np.flatnonzero(game.legal_mask(state)).tolist()
            while True:
                try:
                    text = read(f"your move {legal}: ").strip()
                except EOFError:
                    text = "q"
                if text.lower() in ("q", "quit", "resign"):
                    write("You resign.")
                    return -1.0
                try:
                    state = game.play(state, int(text))
                    break
                except ValueError:
                    write(f"{text!r} is not a move; type one of {legal}")
                except IllegalMoveError as err:
                    write(f"illegal move: {err}")
        else:
            action = bot.act([state])[0]
            write(f"{bot.name} plays {action}")
            state = game.play(state, action)
    write(game.render(state))
    if state.winner == DRAW:
        write("Draw.")
        return 0.0
    won = state.winner == human_side
    write("You win!" if won else "You lose.")
    return 1.0 if won else -1.0


def play_run(run: str, human_first: bool = True) -> float:
    """Load the run's agent and play one game against it in the terminal."""
    _, agent = train.load(run)
    if not playable(agent):
        raise PayoffError(
            f"{agent.name} runs cannot be played by a human; --human works with board-game runs (alphazero)"
        )
    return play_human(agent, human_first=human_first)


def main(argv: list[str] | None = None) -> int:
    """`python -m payoff.play RUN [--second]`: play a trained run in the terminal."""
    import argparse

    parser = argparse.ArgumentParser(description="Play against a trained AlphaZero run.")
    parser.add_argument("run", help="run directory of an alphazero run")
    parser.add_argument("--second", action="store_true", help="let the agent move first")
    args = parser.parse_args(argv)
    try:
        play_run(args.run, human_first=not args.second)
    except PayoffError as err:
        print(f"error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
