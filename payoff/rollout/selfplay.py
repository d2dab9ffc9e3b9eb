"""Self-play experience: games of a network's search against itself, and the worker processes
that play them (and evaluation matches) in parallel.

`self_play_games` plays n games side by side, so the MCTS leaves of every game share one
network batch; each ply is stored with the search's visit distribution pi and root value q.
`SelfPlayPool` shares games and matches out to worker processes: each worker starts once,
gets the network's weights with every job, and draws from its own RNG seeded by
(seed, iteration, worker), so runs are reproducible for a given number of workers.

Workers run their network on the CPU whatever the trainer's device: they get a CPU copy of
the network when they start and NumPy weights with every job (one torch thread each,
which suits the small batches a worker's share of the games gives). With one process,
games and matches run in this process on the network's own device.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
import torch

from payoff.core.errors import RunError
from payoff.envs.games.arena import MatchResult, play_line, play_match, random_opening
from payoff.envs.games.base import check_ended_within
from payoff.models.game_nets import PolicyValueNet
from payoff.rollout.mcts import MCTS, MCTSConfig, SearchStats, select_action
from payoff.rollout.network_players import Match, build_player, network_evaluator
from payoff.track.interrupt import ignore_ctrl_c_in_worker

# One finished self-play game: (planes, visit distribution pi, player to move, root value q
# for that player) per ply, and the winner (0, 1, or DRAW).
GameRecord = tuple[list[tuple[np.ndarray, np.ndarray, int, float]], int]


def self_play_games(
    game: Any,
    search: MCTS,
    n: int,
    temperature_moves: int,
    rng: np.random.Generator,
    opening_plies: int = 0,
) -> list[GameRecord]:
    """Play n games of the search against itself, side by side; returns them in order.

    The first `temperature_moves` plies of each game are sampled from the visit counts
    (temperature 1); later plies take the most visited move. opening_plies > 0 starts each
    game from a uniformly random number (0 to opening_plies) of uniformly random legal
    plies; those plies were not searched, so they are not stored.
    """
    states = [
        play_line(game, random_opening(game, int(rng.integers(opening_plies + 1)), rng))
        if opening_plies
        else game.initial_state()
        for _ in range(n)
    ]
    history: list[list[tuple[np.ndarray, np.ndarray, int, float]]] = [[] for _ in range(n)]
    running = list(range(n))
    plies = 0
    while running:
        check_ended_within(game, states[running[0]], plies)  # all advance together
        plies += 1
        counts = search.search([states[i] for i in running], add_noise=True)
        root_values = search.root_values
        for i, visit_counts, q in zip(running, counts, root_values, strict=True):
            state = states[i]
            policy = (visit_counts / visit_counts.sum()).astype(np.float32)
            history[i].append((game.encode(state), policy, state.to_play, float(q)))
            temperature = 1.0 if state.moves < temperature_moves else 0.0
            states[i] = game.play(state, select_action(visit_counts, temperature, rng))
        running = [i for i in running if states[i].winner is None]
    return [(history[i], states[i].winner) for i in range(n)]


def play_matches(
    game: Any, net: PolicyValueNet, mcts: MCTSConfig, matches: list[Match]
) -> list[MatchResult]:
    """Evaluation matches (A, B, games) in this process, in order."""
    return [_play(game, net, mcts, match) for match in matches]


def _play(game: Any, net: PolicyValueNet, mcts: MCTSConfig, match: Match) -> MatchResult:
    a, b = (build_player(spec, game, net, mcts) for spec in (match.a, match.b))
    return play_match(game, a, b, match.games, match.openings, match.seed)


# ---- worker processes -------------------------------------------------------------------
_WORKER: dict[str, Any] = {}  # what a worker process keeps between jobs


def _worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start: never a fork of this process, whose torch has threads.

    A fork server (a clean process that imported this module once) makes every later pool
    start in a fraction of a second; where there is none (Windows), a fresh interpreter.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["payoff.rollout.selfplay"])
    return context


def _worker_start(
    game: Any, net: PolicyValueNet, mcts: MCTSConfig, temperature_moves: int, opening_plies: int
) -> None:
    """Runs once in each new worker process."""
    ignore_ctrl_c_in_worker()
    torch.set_num_threads(1)
    net.eval()
    _WORKER.update(
        game=game,
        net=net,
        mcts=mcts,
        temperature_moves=temperature_moves,
        opening_plies=opening_plies,
    )


def _worker_play(
    weights: dict[str, np.ndarray], n: int, seed: tuple[int, int, int]
) -> tuple[tuple[list[GameRecord], tuple[int, int, int]], tuple[int, float]]:
    """n self-play games with these weights; the RNG comes from (seed, iteration, worker)."""
    game, net = _WORKER["game"], _WORKER["net"]
    net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    rng = np.random.default_rng(list(seed))
    search = MCTS(game, network_evaluator(net, game), _WORKER["mcts"], rng)
    records = self_play_games(
        game, search, n, _WORKER["temperature_moves"], rng, _WORKER["opening_plies"]
    )
    stats = search.stats
    return (
        (records, (stats.simulations, stats.evaluations, stats.batches)),
        (os.getpid(), time.process_time()),
    )


def _worker_match(match: Match) -> tuple[MatchResult, tuple[int, float]]:
    """One evaluation match in a worker process (the same games as in the main process)."""
    result = _play(_WORKER["game"], _WORKER["net"], _WORKER["mcts"], Match(*match))
    return result, (os.getpid(), time.process_time())


class SelfPlayPool:
    """Worker processes that play self-play games and evaluation matches, started on first use.

    processes: 1 plays matches in this process (and self-play stays with the caller, on its
        own RNG); more starts that many workers with one torch thread each, which live
        until close().
    net: the network whose shape the workers copy (onto the CPU); its weights travel with
        every job.
    Traps: each worker searches only its share of the games, so network batches shrink;
    more workers than free cores only adds start-up and switching.
    """

    def __init__(
        self,
        processes: int,
        game: Any,
        net: PolicyValueNet,
        mcts: MCTSConfig,
        temperature_moves: int,
        opening_plies: int = 0,
    ):
        self.processes, self.game, self.net = processes, game, net
        self.mcts, self.temperature_moves = mcts, temperature_moves
        self.opening_plies = opening_plies
        self.cpu_seconds: dict[int, float] = {}  # worker pid -> its CPU seconds so far
        self._executor: ProcessPoolExecutor | None = None

    @property
    def running(self) -> bool:
        """Whether worker processes are up."""
        return self._executor is not None

    def self_play(
        self, weights: dict[str, np.ndarray], n: int, seed: int, iteration: int
    ) -> tuple[list[GameRecord], SearchStats]:
        """Split n games over the workers; the records come back in worker order.

        Worker w plays n // processes games (one more for the first n % processes) on the
        RNG seeded by (seed, iteration, w).
        """
        workers = self.processes
        shares = [n // workers + (w < n % workers) for w in range(workers)]
        jobs = [
            (_worker_play, weights, share, (seed % 2**32, iteration, worker))
            for worker, share in enumerate(shares)
            if share > 0
        ]
        records: list[GameRecord] = []
        stats = SearchStats()
        for games, (simulations, evaluations, batches) in self._run(jobs):
            records.extend(games)
            stats.simulations += simulations
            stats.evaluations += evaluations
            stats.batches += batches
        return records, stats

    def play_matches(self, matches: list[Match]) -> list[MatchResult]:
        """Evaluation matches (A, B, games), in the workers when there are any; in order.

        Each match rebuilds its players from their specs, so it plays the same games in
        whichever process runs it.
        """
        if self.processes > 1:
            # Started last-first: the list ends with the strongest (slowest) opponents, and a
            # long match started late would leave the other worker idle at the end.
            jobs = [(_worker_match, tuple(match)) for match in reversed(matches)]
            return self._run(jobs)[::-1]
        return play_matches(self.game, self.net, self.mcts, matches)

    def _run(self, jobs: list[tuple[Any, ...]]) -> list[Any]:
        """Run (function, *args) jobs in the workers (started on first use), in order.

        Every worker function returns (result, (pid, cpu seconds)); the CPU is counted here.
        """
        if self._executor is None:
            # Workers get a CPU copy: a network on a GPU would make each of them open CUDA.
            on_cpu = all(p.is_cpu for p in self.net.parameters())
            net = self.net if on_cpu else copy.deepcopy(self.net).to("cpu")
            self._executor = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=_worker_context(),
                initializer=_worker_start,
                initargs=(self.game, net, self.mcts, self.temperature_moves, self.opening_plies),
            )
        futures = [self._executor.submit(*job) for job in jobs]
        results = []
        try:
            for future in futures:
                result, (pid, cpu) = future.result()
                results.append(result)
                self.cpu_seconds[pid] = cpu
        except BrokenProcessPool as err:
            raise RunError(
                f"a worker process died ({err}); out of memory? try fewer 'workers' or a "
                "smaller games_per_iteration. From a Python script, start training under "
                "`if __name__ == '__main__':`: worker processes import the script's module"
            ) from err
        return results

    def close(self, abort: bool = False) -> None:
        """Stop the workers: wait for them, or (abort) terminate them at once."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if abort:
            # A worker mid-game would otherwise finish it first (Python 3.11 has no public
            # terminate for a ProcessPoolExecutor; shutdown forgets the processes, so first).
            processes = list((getattr(executor, "_processes", None) or {}).values())
            for process in processes:
                process.terminate()
            executor.shutdown(wait=False, cancel_futures=True)
        else:
            executor.shutdown(wait=True)
