"""MCTS simulations per second on Connect Four: payoff's batched search vs OpenSpiel's MCTS.

Both searches use PUCT and the same policy/value network (payoff's small resnet), so the
difference is the search: OpenSpiel's Python MCTSBot asks its evaluator about one position
at a time, payoff's MCTS collects leaves from many trees (and several per tree, with a
virtual loss) and runs the network once per batch. A network-free row (uniform priors,
value 0) measures the tree bookkeeping alone.

    python benchmarks/mcts_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff.envs.games import make_game
from payoff.models.game_nets import GameNetConfig, PolicyValueNet
from payoff.rollout.mcts import MCTS, MCTSConfig, uniform_evaluator
from payoff.rollout.network_players import network_evaluator

OPENING = [3, 3, 2, 4]  # a few moves in, so positions are not all the empty board


def payoff_rate(
    evaluator, trees: int, leaves: int, simulations: int, searches: int, solver: bool = False
) -> float:
    """Simulations per second of payoff's MCTS searching `trees` positions at once."""
    game = make_game("connect4")
    state = game.initial_state()
    for move in OPENING:
        state = game.play(state, move)
    search = MCTS(
        game, evaluator, MCTSConfig(simulations=simulations, leaves_per_tree=leaves, solver=solver)
    )
    search.search([state] * trees)  # warm-up (first torch calls are slow)
    search.stats = type(search.stats)()
    for _ in range(searches):
        search.search([state] * trees)
    return search.stats.simulations_per_second


def openspiel_rate(net: PolicyValueNet | None, simulations: int, searches: int) -> float:
    """Simulations per second of OpenSpiel's Python MCTSBot (PUCT) with the same network."""
    try:
        import pyspiel
        from open_spiel.python.algorithms import mcts
    except ImportError:
        raise SystemExit(
            "this benchmark compares against OpenSpiel: pip install open_spiel (the bench extra)"
        ) from None

    class NetEvaluator(mcts.Evaluator):
        """One position per network call, as OpenSpiel's evaluators are asked."""

        def _run(self, state):
            if net is None:
                return np.ones(7) / 7, 0.0
            # OpenSpiel's tensor: [3, 6, 7] planes (player 0, player 1, empty), bottom row first.
            tensor = np.asarray(state.observation_tensor(), dtype=np.float32).reshape(3, 6, 7)
            mover = state.current_player()
            planes = np.stack([tensor[mover], tensor[1 - mover]])[:, ::-1].copy()
            with torch.inference_mode():
                logits, value = net(torch.from_numpy(planes)[None])
            return torch.softmax(logits[0], -1).numpy(), float(value[0])

        def evaluate(self, state):
            _, value = self._run(state)
            mover = state.current_player()
            return np.array([value, -value] if mover == 0 else [-value, value])

        def prior(self, state):
            if net is None:
                legal = state.legal_actions()
                return [(a, 1.0 / len(legal)) for a in legal]
            priors, _ = self._run(state)
            legal = state.legal_actions()
            total = sum(priors[a] for a in legal)
            return [(a, priors[a] / total) for a in legal]

    game = pyspiel.load_game("connect_four")
    bot = mcts.MCTSBot(
        game,
        uct_c=1.5,
        max_simulations=simulations,
        evaluator=NetEvaluator(),
        solve=False,
        random_state=np.random.RandomState(0),
        child_selection_fn=mcts.SearchNode.puct_value,
    )
    state = game.new_initial_state()
    for move in OPENING:
        state.apply_action(move)
    bot.mcts_search(state)  # warm-up
    started = time.perf_counter()
    for _ in range(searches):
        bot.mcts_search(state)
    return simulations * searches / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer searches (a rough number)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    simulations = 100
    reps = 1 if args.quick else 3
    game = make_game("connect4")
    net = PolicyValueNet(game.shape, game.num_actions, GameNetConfig("resnet", 32, 2, 64)).eval()
    evaluator = network_evaluator(net, game)

    rows: list[list[object]] = []
    openspiel_net = openspiel_rate(net, simulations, 4 * reps)
    openspiel_plain = openspiel_rate(None, simulations, 10 * reps)
    rows.append(
        ["OpenSpiel MCTSBot (Python), one position per net call", 1, round(openspiel_net), 1.0]
    )
    for trees, leaves in ((1, 1), (16, 1), (64, 1), (16, 4), (64, 4)):
        rate = payoff_rate(evaluator, trees, leaves, simulations, reps)
        rows.append(
            [
                f"payoff MCTS, {trees} trees x {leaves} leaves/tree",
                trees * leaves,
                round(rate),
                rate / openspiel_net,
            ]
        )
        print(rows[-1])
    solver = payoff_rate(evaluator, 64, 1, simulations, reps, solver=True)
    rows.append(
        [
            "payoff MCTS, 64 trees x 1 leaf/tree, solver on",
            64,
            round(solver),
            solver / openspiel_net,
        ]
    )
    print(rows[-1])
    plain = payoff_rate(uniform_evaluator(game), 64, 1, simulations, reps)
    body = (
        "Connect Four, 100 simulations per search from the same position, PUCT (c=1.5), "
        "payoff's policy/value resnet (32 channels, 2 blocks, 41k parameters) as the evaluator "
        "on 1 torch thread. The ratio column is simulations/s relative to OpenSpiel's Python MCTS "
        "with the same network. The solver row also finds which moves of each expanded node end "
        "the game (Connect Four's `ending_moves`, read off the board) and proves results up the "
        "tree (`mcts.solver: true`).\n\n"
        + markdown_table(
            ["search", "positions per net call", "simulations/s", "vs OpenSpiel"], rows
        )
        + "\n\nWithout a network (uniform priors, value 0; tree bookkeeping only): "
        f"payoff {plain:,.0f} simulations/s (64 trees), OpenSpiel {openspiel_plain:,.0f} "
        f"(ratio {plain / openspiel_plain:.2f}).\n"
    )
    print(body)
    write_section("mcts_speed", "MCTS simulations per second (batched leaf evaluation)", body)


if __name__ == "__main__":
    main()
