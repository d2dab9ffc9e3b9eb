"""Finished `connect4-alphazero` runs against deeper alpha-beta, and how strong each depth is.

The recipe's own final evaluation stops at depth-4 alpha-beta. This script plays a run's
final network, exactly as that evaluation does (its `eval_simulations`, `eval_symmetries`,
100 distinct games from random 3-ply openings, both colours, seeded from the run's seed),
against alpha-beta at the depths given. A depth is only a stronger opponent if it beats
the shallower ones, and with a static evaluation at the horizon that is not a given (the
odd/even horizon effect), so it also plays the alpha-beta ladder itself on the same kind of
openings:

    payoff train connect4-alphazero --set seed=0      # and seed=1, seed=2
    python benchmarks/connect4_depth.py runs/*-connect4-alphazero --depths 5 6

Each run's matches go to its own two self-play workers (one per core), in parallel.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff.envs.games import make_game  # noqa: E402
from payoff.envs.games.arena import play_match  # noqa: E402
from payoff.envs.games.players import make_player  # noqa: E402
from payoff.rollout.league import final_matches  # noqa: E402
from payoff.rollout.network_players import PlayerSpec, network_weights  # noqa: E402


def score_run(path: str, depths: list[int], games: int) -> tuple[int, list[str], float]:
    """(seed, 'won-drawn-lost (score), distinct' per depth, seconds) of one run's network."""
    import torch

    from payoff.train import load

    torch.set_num_threads(1)
    _, az = load(path)
    config = az.config
    agent = PlayerSpec(
        f"gen-{az.generation}",
        config.seed + 2_000_000,  # the final evaluation's seeds
        network_weights(az.best),
        config.eval_simulations,
        symmetries=config.eval_symmetries,
    )
    baselines = [f"alphabeta-{d}" for d in depths]
    matches = final_matches(agent, baselines, games, config.final_eval_openings)
    started = time.perf_counter()
    results = az.pool.play_matches(matches)
    seconds = time.perf_counter() - started
    az.pool.close()
    cells = [f"{r.wins}-{r.draws}-{r.losses} (**{r.score:.3f}**), {r.distinct}" for r in results]
    for baseline, cell in zip(baselines, cells, strict=True):
        print(f"{path} (seed {config.seed}) vs {baseline}: {cell}", flush=True)
    return config.seed, cells, seconds


def ladder(depths: list[int], games: int) -> list[list[object]]:
    """Each depth against the one below it and against depth 4, on random 3-ply openings."""
    game = make_game("connect4")
    pairs = sorted({(d, d - 1) for d in depths if d > 4} | {(d, 4) for d in depths if d > 4})
    rows: list[list[object]] = []
    for deeper, shallower in pairs:
        started = time.perf_counter()
        a = make_player(f"alphabeta-{deeper}", game, 1)
        b = make_player(f"alphabeta-{shallower}", game, 2)
        r = play_match(game, a, b, games, 3, 7)
        line = f"{r.wins}-{r.draws}-{r.losses}"
        print(f"alphabeta-{deeper} vs alphabeta-{shallower}: {line} ({r.score:.3f})", flush=True)
        rows.append(
            [
                f"alphabeta-{deeper} vs alphabeta-{shallower}",
                line,
                f"{r.score:.3f}",
                r.distinct,
                f"{time.perf_counter() - started:.0f}",
            ]
        )
    return rows


def ladder_verdict(rows: list[list[object]]) -> str:
    """What the ladder says, pair by pair: which depths are stronger opponents."""
    said = []
    for match, _, score, _, _ in rows:
        deeper, shallower = (str(name) for name in str(match).split(" vs "))
        value = float(str(score))
        if value > 0.55:
            said.append(f"{deeper} beats {shallower} ({score})")
        elif value >= 0.45:
            said.append(f"{deeper} is about even with {shallower} ({score})")
        else:
            said.append(f"{deeper} loses to {shallower} ({score})")
    text = "Ladder: " + "; ".join(said) + "."
    if any("beats" not in part for part in said):
        text += (
            " A depth that does not beat a shallower one is no stronger an opponent: with a "
            "static evaluation at the horizon, odd and even depths can misjudge positions in "
            "opposite ways (the horizon effect), so a score against it says less than its "
            "depth suggests."
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished connect4-alphazero run directories")
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 6])
    parser.add_argument("--games", type=int, default=100)
    args = parser.parse_args()
    if any(d < 1 for d in args.depths):
        parser.error(f"--depths must be >= 1, got {args.depths}")
    ladder_rows = ladder(args.depths, args.games)
    rows = []
    for path in args.runs:
        seed, cells, seconds = score_run(path, args.depths, args.games)
        rows.append([seed, *cells, f"{seconds:.0f}"])
    rows.sort(key=lambda row: row[0])
    header = ["seed", *[f"vs alphabeta-{d}: W-D-L (score), distinct games" for d in args.depths]]
    body = (
        "Each finished `connect4-alphazero` run's final network, played as the recipe's final "
        "evaluation plays it (800 simulations a move, averaged with the mirror image, "
        f"{args.games} games from random 3-ply openings, both colours, the run's seeds), "
        "against alpha-beta searching deeper than the recipe's depth-4 opponent. The "
        "matches of a run share its two self-play workers.\n\n"
        + markdown_table([*header, "seconds (2 workers)"], rows)
        + "\n\nHow strong each depth is: alpha-beta against alpha-beta (the same line "
        f"heuristic), {args.games} games from random 3-ply openings, both colours, one "
        "process.\n\n"
        + markdown_table(["match", "W-D-L", "score", "distinct games", "seconds"], ladder_rows)
        + "\n\n"
        + ladder_verdict(ladder_rows)
    )
    path = write_section(
        "connect4_depth", "Connect Four: AlphaZero against deeper alpha-beta", body
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
