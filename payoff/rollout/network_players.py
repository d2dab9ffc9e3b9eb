"""Board-game players backed by a policy/value network, and players rebuilt from plain data.

- `network_evaluator`: a network as the MCTS evaluator (priors over legal moves, values);
- `network_player`: a network with search, as an arena player;
- `PlayerSpec` / `build_player`: a player described by plain data (a baseline's name and
  seed, or a network's weights, simulations and seed), so that a match plays the same games
  in whichever process rebuilds its players.

A network evaluates on the device it is on; the search and its arrays stay on the CPU.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from payoff.envs.games.base import GameState
from payoff.envs.games.players import Player, make_player
from payoff.models.game_nets import PolicyValueNet
from payoff.models.mlp import as_numpy
from payoff.rollout.mcts import Evaluator, MCTSConfig, MCTSPlayer


def network_evaluator(net: PolicyValueNet, game: Any) -> Evaluator:
    """An MCTS evaluator backed by `net`: encode the positions, one forward pass, mask.

    The positions go to `net`'s device (its device when this is called) in one copy, and the
    priors and values come back as NumPy.
    """

    encode_batch = getattr(game, "encode_batch", None)  # optional fast path of a Game
    device = next(net.parameters()).device
    to_device = None if device.type == "cpu" else device

    def evaluate(states: list[GameState]) -> tuple[np.ndarray, np.ndarray]:
        if encode_batch is not None:
            planes = torch.from_numpy(encode_batch(states))
        else:
            planes = torch.from_numpy(np.stack([game.encode(s) for s in states]))
        legal = torch.from_numpy(np.stack([game.legal_mask(s) for s in states]))
        if to_device is not None:
            planes, legal = planes.to(to_device), legal.to(to_device)
        with torch.inference_mode():
            logits, values = net(planes)
            priors = torch.softmax(logits.masked_fill(~legal, -1e9), dim=-1)
        return as_numpy(priors), as_numpy(values)

    return evaluate


def network_player(
    net: PolicyValueNet,
    game: Any,
    mcts: MCTSConfig,
    simulations: int,
    name: str,
    random_moves: int = 0,
    seed: int = 0,
) -> MCTSPlayer:
    """`net` with `simulations` of search per move (mcts's other settings), as a player."""
    return MCTSPlayer(
        game,
        network_evaluator(net, game),
        simulations=simulations,
        name=name,
        config=mcts,
        random_moves=random_moves,
        seed=seed,
    )


def network_weights(net: PolicyValueNet) -> dict[str, np.ndarray]:
    """`net`'s weights as plain CPU arrays, to send to another process."""
    # Plain arrays: torch tensors would travel through shared-memory file handles.
    return {k: as_numpy(v.detach()).copy() for k, v in net.state_dict().items()}


@dataclass
class PlayerSpec:
    """A player that can be rebuilt in any process: a baseline by name, or a network with search."""

    name: str
    seed: int
    weights: dict[str, np.ndarray] | None = None  # None: the baseline called `name`
    simulations: int = 0
    random_moves: int = 0


# An evaluation match: player A, player B, and how many games (A moves first in even ones).
class Match(NamedTuple):
    """An evaluation match: A against B for `games` games, each pair of games starting from
    the same `openings` random plies drawn from `seed` (payoff.envs.games.arena.play_match)."""

    a: PlayerSpec
    b: PlayerSpec
    games: int
    openings: int = 0
    seed: int = 0


def build_player(spec: PlayerSpec, game: Any, net: PolicyValueNet, mcts: MCTSConfig) -> Player:
    """The player `spec` describes; a network player gets its own copy of `net`'s shape
    (on `net`'s device)."""
    if spec.weights is None:
        return make_player(spec.name, game, spec.seed)
    own = copy.deepcopy(net)
    own.load_state_dict({k: torch.from_numpy(v) for k, v in spec.weights.items()})
    own.eval()
    return network_player(
        own, game, mcts, spec.simulations, spec.name, spec.random_moves, spec.seed
    )
