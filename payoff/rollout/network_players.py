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

from payoff.core.errors import ConfigError, PayoffError
from payoff.envs.games.base import GameState
from payoff.envs.games.players import Player, make_player
from payoff.models.game_nets import PolicyValueNet
from payoff.models.mlp import as_numpy
from payoff.rollout.mcts import Evaluator, MCTSConfig, MCTSPlayer


def symmetry_maps(game: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The board's symmetries as index maps: per symmetry (cells, actions) such that
    `planes.reshape(B, -1)[:, cells]` is the transformed batch of encoded positions and the
    network's output for it at column j belongs to the original position's action
    `actions[j]`. Read off `game.symmetries` applied to numbered planes and actions, so any
    game that lists its symmetries gets them (the identity first)."""
    shape = np.asarray(game.encode(game.initial_state())).shape
    cells_count = int(np.prod(shape))
    numbered = np.arange(cells_count, dtype=np.float64).reshape(shape)
    pairs = game.symmetries(numbered, np.arange(game.num_actions, dtype=np.float64))
    maps = []
    for cells, actions in pairs:
        cells = np.asarray(cells, dtype=np.float64).reshape(-1)
        actions = np.asarray(actions, dtype=np.float64).reshape(-1)
        if not (
            len(cells) == cells_count
            and np.array_equal(np.sort(cells), np.arange(cells_count))
            and len(actions) == game.num_actions
            and np.array_equal(np.sort(actions), np.arange(game.num_actions))
        ):
            raise ConfigError(
                f"game {game.name!r}: symmetries(planes, policy) must return each image as a "
                f"rearrangement of the planes' {cells_count} cells and of the policy's "
                f"{game.num_actions} entries, for eval_symmetries; one of them is not"
            )
        maps.append((cells.astype(np.int64), actions.astype(np.int64)))
    if not maps or not np.array_equal(maps[0][0], np.arange(cells_count)):
        raise ConfigError(
            f"game {game.name!r}: symmetries(planes, policy) must list the position itself "
            f"first, for eval_symmetries"
        )
    return maps


def network_evaluator(net: PolicyValueNet, game: Any, symmetries: bool = False) -> Evaluator:
    """An MCTS evaluator backed by `net`: encode the positions, one forward pass, mask.

    symmetries: evaluate every position under each of the board's symmetries (Connect
    Four's mirror image; tic-tac-toe's 8) in the same forward pass, and average the priors
    (mapped back to the position's own actions) and the values: a cheap ensemble that
    smooths the network's errors, at the cost of a forward pass as many times larger.
    The positions go to `net`'s device (its device when this is called) in one copy, and the
    priors and values come back as NumPy.
    """

    encode_batch = getattr(game, "encode_batch", None)  # optional fast path of a Game
    device = next(net.parameters()).device
    to_device = None if device.type == "cpu" else device
    maps = symmetry_maps(game)[1:] if symmetries else []
    expected = np.asarray(game.encode(game.initial_state())).shape  # what the net was made for

    def evaluate(states: list[GameState]) -> tuple[np.ndarray, np.ndarray]:
        if encode_batch is not None:
            encoded = encode_batch(states)
        else:
            encoded = [np.asarray(game.encode(s)) for s in states]
            odd = next((e.shape for e in encoded if e.shape != expected), None)
            if odd is not None:  # torch said "mat1 and mat2 shapes cannot be multiplied"
                name = getattr(game, "name", type(game).__name__)
                raise PayoffError(
                    f"game {name!r}: encode() gave planes of shape {odd} for one position and "
                    f"{expected} for the initial one; every position must encode to the same "
                    f"shape ([2, rows, cols] as game.shape says)"
                )
            encoded = np.stack(encoded)
        if maps:  # the symmetric copies after the positions themselves: [(1 + S) B, ...]
            flat = encoded.reshape(len(states), -1)
            encoded = np.concatenate(
                [encoded, *(flat[:, cells].reshape(encoded.shape) for cells, _ in maps)]
            )
        planes = torch.from_numpy(encoded)
        legal = torch.from_numpy(np.stack([game.legal_mask(s) for s in states]))
        if to_device is not None:
            planes, legal = planes.to(to_device), legal.to(to_device)
        with torch.inference_mode():
            logits, values = net(planes)
            if maps:
                batch = len(states)
                parts = [logits[:batch]]
                for k, (_, actions) in enumerate(maps, start=1):
                    part = torch.empty_like(parts[0])
                    part[:, torch.from_numpy(actions)] = logits[k * batch : (k + 1) * batch]
                    parts.append(part)
                masked = torch.stack(parts).masked_fill(~legal, -1e9)
                priors = torch.softmax(masked, dim=-1).mean(0)
                values = values.view(len(parts), batch).mean(0)
            else:
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
    symmetries: bool = False,
) -> MCTSPlayer:
    """`net` with `simulations` of search per move (mcts's other settings), as a player;
    `symmetries` averages the network over the board's symmetries (`network_evaluator`)."""
    return MCTSPlayer(
        game,
        network_evaluator(net, game, symmetries),
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
    symmetries: bool = False  # the network averaged over the board's symmetries


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
        own, game, mcts, spec.simulations, spec.name, spec.random_moves, spec.seed, spec.symmetries
    )
