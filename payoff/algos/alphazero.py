"""AlphaZero-lite: self-play with MCTS, a policy/value network, and a gate for new networks.

One iteration:

  1. self-play: the best network so far plays `games_per_iteration` games against itself,
     all side by side; each move is chosen by MCTS (payoff.rollout.mcts) with Dirichlet
     noise at the root and a temperature of 1 for the first `temperature_moves` plies
     (then the most visited move). Every position is stored with the search's visit
     distribution pi and, once the game ends, the outcome z for the player who was to move;
  2. training: minibatches from the replay of the latest positions (and their board
     symmetries) minimize the AlphaZero loss
         loss = (z - v)^2 - pi . log p      (+ weight decay in the optimizer);
  3. gate: the trained network plays `gate_games` against the best one; it becomes the new
     best only if it scores at least `gate_threshold` (AlphaGo Zero's evaluator step;
     gate_games: 0 always accepts, as AlphaZero did);
  4. every `eval_every` iterations the best network plays the fixed baselines (random,
     greedy, minimax / alpha-beta) and the last evaluated checkpoint; all results go into
     an Elo league (payoff.track.elo) anchored at the random player.

Python API:
    agent = AlphaZero(game="tictactoe", iterations=10).learn()
    agent.predict(pettingzoo_observation)        # {'observation', 'action_mask'} -> move
    play_human(agent)                            # play it in the terminal
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from payoff.algos.base import Algorithm
from payoff.core.errors import ConfigError, EnvError, RunError
from payoff.core.seeding import rng_state, seed_everything, set_rng_state
from payoff.envs.games import DRAW, GameState, IllegalMoveError, make_game
from payoff.envs.games.arena import MatchResult, play_match
from payoff.envs.games.base import state_from_planes
from payoff.envs.games.players import Player, make_player
from payoff.models.game_nets import GameNetConfig, PolicyValueNet
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.mcts import (
    MCTS,
    Evaluator,
    MCTSConfig,
    MCTSPlayer,
    SearchStats,
    select_action,
)
from payoff.track.elo import Result, league_markdown, league_table, rows_as_dicts
from payoff.track.interrupt import GracefulInterrupt
from payoff.track.progress import Progress


@dataclass
class AlphaZeroConfig:
    """AlphaZero-lite on a two-player board game.

    game: a registered game name ('tictactoe', 'connect4'; see payoff.envs.games).
    iterations: self-play -> train -> gate cycles.
    games_per_iteration: self-play games per iteration, all played side by side so that
        MCTS leaves from every game share one network batch.
    mcts: search settings for self-play (simulations, c_puct, Dirichlet noise, ...).
        Trap: dirichlet_alpha should shrink as the number of legal moves grows.
    temperature_moves: plies at the start of each self-play game sampled from the visit
        counts (temperature 1); later plies take the most visited move. Too few and all
        games look alike; too many and the targets are full of deliberate mistakes.
    net: network shape (kind resnet|mlp, channels, blocks, hidden).
    replay_size: positions kept (after symmetry augmentation); older ones are dropped.
        Trap: too large keeps stale targets from weak early networks around for long.
    batch_size / train_steps: minibatch size and gradient steps per iteration.
    learning_rate / weight_decay: Adam(W) settings.
    learning_rate_end: null keeps learning_rate; a number decays the rate linearly to it
        over the iterations (the last network is then an average of late data, not one
        iteration's jump).
    search_value_weight: the value target is (1 - w) * z + w * q, where z is the game's
        outcome and q the self-play search's value of the position (mean over its root
        simulations, or the solver's proof), both for the player to move. 0 is AlphaZero's
        target. z labels an opening move with the result of every later (exploratory) move,
        so with few games it is mostly noise; q is a less noisy, if biased, estimate, and
        averaging the two (w = 0.5) trains the value faster.
    augment: store every position with its board symmetries (8 in tic-tac-toe, 2 in
        Connect Four): more data per game for free.
    gate_games / gate_threshold / gate_simulations: the candidate-vs-best match; gate_games
        0 accepts every candidate. gate_random_moves plies at the start of each gate game are
        sampled, so the (otherwise deterministic) players do not replay one game.
    eval_simulations: simulations per move whenever the trained agent plays: the final
        evaluation, `payoff eval`, `payoff play`, predict(). Search is part of the agent's
        strength (AlphaZero played with 800); it costs play time, not training.
    eval_every / eval_games / league_simulations: baseline matches for the Elo curve, every
        that many iterations (and at the end), searched with league_simulations per move
        (null = eval_simulations; fewer keeps the periodic league cheap).
    baselines: fixed opponents ('random', 'greedy', 'minimax', 'alphabeta-<depth>'); the
        last one is the "target" used by `payoff eval`.
    final_eval_games: games against each baseline at the end (alternating colours).
    threads: torch intra-op threads (1 is fastest for these small nets on shared CPUs).
    workers: processes that play an iteration's self-play games (split as evenly as
        possible); 1 plays them in this process. Each worker is a separate process with one
        torch thread that is started once (the pool lives until learn() returns), gets the
        best network's weights every iteration, and draws from its own RNG seeded by
        (seed, iteration, worker), so runs are reproducible and resume stays exact for a
        given `workers`; the games come back and go into the replay in worker order.
        Changing `workers` changes the games (other random streams), not their number.
        Traps: each worker searches only its share of the games, so the network batches
        shrink (games_per_iteration / workers positions); more workers than free cores
        only adds start-up and switching. Training and gates stay in this process; the
        league's and the final evaluation's matches are shared out to the workers too.
    train_threads: torch threads while the network trains; 0 = max(workers, threads).
        The self-play workers wait during training, so their cores are free: on 2 cores a
        step of the Connect Four resnet takes ~37 ms on 2 threads against ~60 ms on 1.
    """

    game: str = "tictactoe"
    seed: int = 0
    iterations: int = 20
    games_per_iteration: int = 64
    mcts: MCTSConfig = field(
        default_factory=lambda: MCTSConfig(simulations=50, dirichlet_alpha=1.0)
    )
    temperature_moves: int = 4
    net: GameNetConfig = field(default_factory=lambda: GameNetConfig(kind="mlp", hidden=128))
    replay_size: int = 40_000
    batch_size: int = 256
    train_steps: int = 100
    learning_rate: float = 1e-3
    learning_rate_end: float | None = None
    weight_decay: float = 1e-4
    search_value_weight: float = 0.0
    augment: bool = True
    gate_games: int = 20
    gate_threshold: float = 0.55
    gate_simulations: int = 25
    gate_random_moves: int = 2
    eval_every: int = 5
    eval_games: int = 20
    eval_simulations: int = 50
    league_simulations: int | None = None
    baselines: list[str] = field(default_factory=lambda: ["random", "greedy", "minimax"])
    final_eval_games: int = 100
    checkpoint_every: int = 1
    threads: int = 1
    workers: int = 1
    train_threads: int = 0

    def validate(self) -> None:
        positive = (
            "iterations",
            "games_per_iteration",
            "replay_size",
            "batch_size",
            "train_steps",
            "gate_simulations",
            "eval_every",
            "eval_simulations",
            "checkpoint_every",
            "threads",
            "workers",
        )
        for key in positive:
            if getattr(self, key) < 1:
                raise ConfigError(f"config key {key!r} must be >= 1, got {getattr(self, key)}")
        for key in (
            "gate_games",
            "eval_games",
            "final_eval_games",
            "temperature_moves",
            "train_threads",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"config key {key!r} must be >= 0, got {getattr(self, key)}")
        if self.league_simulations is not None and self.league_simulations < 1:
            raise ConfigError(
                f"config key 'league_simulations' must be >= 1 (or null: eval_simulations), "
                f"got {self.league_simulations}"
            )
        if self.learning_rate_end is not None and self.learning_rate_end < 0:
            raise ConfigError(
                f"config key 'learning_rate_end' must be >= 0 (or null), got {self.learning_rate_end}"
            )
        if not 0.0 <= self.search_value_weight <= 1.0:
            raise ConfigError(
                "config key 'search_value_weight' must be in [0, 1] (0 = game outcome only, "
                f"1 = search value only), got {self.search_value_weight}"
            )
        if not 0.0 <= self.gate_threshold <= 1.0:
            raise ConfigError(
                f"config key 'gate_threshold' must be in [0, 1], got {self.gate_threshold}"
            )
        if self.batch_size > self.replay_size:
            raise ConfigError(
                f"batch_size {self.batch_size} is larger than replay_size {self.replay_size}"
            )
        game = make_game(self.game)  # unknown game -> clear error now, not mid-run
        if not self.baselines:
            raise ConfigError("config key 'baselines' needs at least one player, e.g. [random]")
        for baseline in self.baselines:
            make_player(baseline, game)


class ReplayBuffer:
    """The latest (planes, pi, z) triples, in preallocated circular arrays."""

    def __init__(self, capacity: int, shape: tuple[int, int], num_actions: int):
        self.planes = np.zeros((capacity, 2, *shape), dtype=np.uint8)  # [N, 2, H, W]
        self.policies = np.zeros((capacity, num_actions), dtype=np.float32)  # [N, A]
        self.values = np.zeros(capacity, dtype=np.float32)  # [N]
        self.capacity, self.size, self.position = capacity, 0, 0

    def add(self, planes: np.ndarray, policy: np.ndarray, value: float) -> None:
        i = self.position
        self.planes[i], self.policies[i], self.values[i] = planes, policy, value
        self.position = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        index = rng.integers(self.size, size=batch)
        return (
            torch.from_numpy(self.planes[index].astype(np.float32)),
            torch.from_numpy(self.policies[index]),
            torch.from_numpy(self.values[index]),
        )

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {
            "planes": self.planes[:n].copy(),
            "policies": self.policies[:n].copy(),
            "values": self.values[:n].copy(),
            "position": self.position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["values"])
        if n > self.capacity:
            raise ValueError(f"replay holds {n} positions, more than replay_size {self.capacity}")
        self.planes[:n], self.policies[:n], self.values[:n] = (
            state["planes"],
            state["policies"],
            state["values"],
        )
        self.size, self.position = n, int(state["position"])


def network_evaluator(net: PolicyValueNet, game: Any) -> Evaluator:
    """An MCTS evaluator backed by `net`: encode the positions, one forward pass, mask."""

    encode_batch = getattr(game, "encode_batch", None)  # optional fast path of a Game

    def evaluate(states: list[GameState]) -> tuple[np.ndarray, np.ndarray]:
        if encode_batch is not None:
            planes = torch.from_numpy(encode_batch(states))
        else:
            planes = torch.from_numpy(np.stack([game.encode(s) for s in states]))
        legal = torch.from_numpy(np.stack([game.legal_mask(s) for s in states]))
        with torch.inference_mode():
            logits, values = net(planes)
            priors = torch.softmax(logits.masked_fill(~legal, -1e9), dim=-1)
        return priors.numpy(), values.numpy()

    return evaluate


# One finished self-play game: (planes, visit distribution pi, player to move, root value q
# for that player) per ply, and the winner (0, 1, or DRAW).
GameRecord = tuple[list[tuple[np.ndarray, np.ndarray, int, float]], int]


def self_play_games(
    game: Any, search: MCTS, n: int, temperature_moves: int, rng: np.random.Generator
) -> list[GameRecord]:
    """Play n games of the search against itself, side by side; returns them in order."""
    states = [game.initial_state() for _ in range(n)]
    history: list[list[tuple[np.ndarray, np.ndarray, int, float]]] = [[] for _ in range(n)]
    running = list(range(n))
    while running:
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


# ---- self-play worker processes (workers > 1) -------------------------------------------
_WORKER: dict[str, Any] = {}  # what a worker process keeps between iterations


def _worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start: never a fork of this process, whose torch has threads.

    A fork server (a clean process that imported this module once) makes every later pool
    start in a fraction of a second; where there is none (Windows), a fresh interpreter.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["payoff.algos.alphazero"])
    return context


def _worker_start(game: Any, net: PolicyValueNet, mcts: MCTSConfig, temperature_moves: int) -> None:
    """Runs once in each new worker process."""
    # Ctrl-C reaches the whole process group: the main process finishes the iteration and
    # stops the workers itself, so a worker must not die mid-game.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    net.eval()
    _WORKER.update(game=game, net=net, mcts=mcts, temperature_moves=temperature_moves)


def _worker_play(
    weights: dict[str, np.ndarray], n: int, seed: tuple[int, int, int]
) -> tuple[tuple[list[GameRecord], tuple[int, int, int]], tuple[int, float]]:
    """n self-play games with these weights; the RNG comes from (seed, iteration, worker)."""
    game, net = _WORKER["game"], _WORKER["net"]
    net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    rng = np.random.default_rng(list(seed))
    search = MCTS(game, network_evaluator(net, game), _WORKER["mcts"], rng)
    records = self_play_games(game, search, n, _WORKER["temperature_moves"], rng)
    stats = search.stats
    return (
        (records, (stats.simulations, stats.evaluations, stats.batches)),
        (os.getpid(), time.process_time()),
    )


@dataclass
class PlayerSpec:
    """A player that can be rebuilt in any process: a baseline by name, or a network with search."""

    name: str
    seed: int
    weights: dict[str, np.ndarray] | None = None  # None: the baseline called `name`
    simulations: int = 0
    random_moves: int = 0


def build_player(spec: PlayerSpec, game: Any, net: PolicyValueNet, mcts: MCTSConfig) -> Player:
    """The player `spec` describes; a network player gets its own copy of `net`'s shape."""
    if spec.weights is None:
        return make_player(spec.name, game, spec.seed)
    own = copy.deepcopy(net)
    own.load_state_dict({k: torch.from_numpy(v) for k, v in spec.weights.items()})
    own.eval()
    return MCTSPlayer(
        game,
        network_evaluator(own, game),
        simulations=spec.simulations,
        name=spec.name,
        config=mcts,
        random_moves=spec.random_moves,
        seed=spec.seed,
    )


def _worker_match(
    a: PlayerSpec, b: PlayerSpec, games: int
) -> tuple[MatchResult, tuple[int, float]]:
    """One evaluation match in a worker process (the same games as in the main process)."""
    game, net, mcts = _WORKER["game"], _WORKER["net"], _WORKER["mcts"]
    result = play_match(
        game, build_player(a, game, net, mcts), build_player(b, game, net, mcts), games
    )
    return result, (os.getpid(), time.process_time())


class AlphaZero(Algorithm):
    """AlphaZero-style self-play with MCTS and gated network replacement."""

    name = "alphazero"
    config_class = AlphaZeroConfig
    config: AlphaZeroConfig

    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        self.rng = seed_everything(config.seed)
        self.game = make_game(config.game)
        self.net = PolicyValueNet(self.game.shape, self.game.num_actions, config.net)
        self.best = copy.deepcopy(self.net)
        self.net.eval()
        self.best.eval()
        self.optimizer = torch.optim.AdamW(
            self.net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.replay = ReplayBuffer(config.replay_size, self.game.shape, self.game.num_actions)
        self.iteration = 0
        self.games_played = 0
        self.generation = 0  # how many candidates have been accepted as best
        self.results: list[Result] = []  # every rated match, for the Elo league
        self.elo_curve: list[tuple[int, int, float]] = []  # (iteration, games, best's Elo)
        self.snapshots: dict[str, dict[str, torch.Tensor]] = {}  # evaluated checkpoints
        self.last_evaluated: str | None = None
        self._pool: ProcessPoolExecutor | None = None  # self-play workers, while learning
        self._worker_cpu: dict[int, float] = {}  # worker pid -> its CPU seconds so far

    def spaces(self) -> dict[str, str]:
        return {"game": self.game.name}

    def progress_step(self) -> int:
        return self.games_played

    # ---- acting -----------------------------------------------------------------------
    def player(
        self, simulations: int | None = None, random_moves: int = 0, seed: int = 0
    ) -> MCTSPlayer:
        """The best network with search, as an arena player."""
        return MCTSPlayer(
            self.game,
            network_evaluator(self.best, self.game),
            simulations=simulations or self.config.eval_simulations,
            name=f"gen-{self.generation}",
            config=self.config.mcts,
            random_moves=random_moves,
            seed=seed,
        )

    def predict(self, observation: Any, deterministic: bool = True) -> int:
        """A move for a PettingZoo-style observation ({'observation': planes, 'action_mask'}).

        Also accepts a GameState. The search uses eval_simulations; deterministic=False
        samples the move from the visit counts instead of taking the most visited.
        """
        if isinstance(observation, GameState):
            state = observation
        else:
            if not isinstance(observation, dict) or "action_mask" not in observation:
                keys = (
                    list(observation)
                    if isinstance(observation, dict)
                    else type(observation).__name__
                )
                raise EnvError(
                    "AlphaZero needs observations with an 'action_mask' (a dict with 'observation' "
                    f"and 'action_mask', as PettingZoo's classic games give); got {keys}"
                )
            state = state_from_planes(observation["observation"], self.game.shape)
            if not np.array_equal(
                np.asarray(observation["action_mask"]).astype(bool), self.game.legal_mask(state)
            ):
                raise EnvError(
                    f"the observation's action_mask does not match {self.game.name}'s legal moves "
                    "for that board; is this the right game?"
                )
        search = MCTS(
            self.game,
            network_evaluator(self.best, self.game),
            MCTSConfig(
                **{**self.config.mcts.__dict__, "simulations": self.config.eval_simulations}
            ),
            self.rng,
        )
        counts = search.search([state])[0]
        return select_action(counts, 0.0 if deterministic else 1.0, self.rng)

    # ---- learning ---------------------------------------------------------------------
    def learn(self, total: int | None = None) -> AlphaZero:
        """Run until `total` iterations (default config.iterations) have been done."""
        config = self.config
        total = config.iterations if total is None else total
        progress = Progress(
            total, initial=self.iteration, desc=f"alphazero {config.game}", unit="it"
        )
        finished = False
        with GracefulInterrupt() as interrupt:
            try:
                if not self.results and config.eval_games:
                    self._calibrate_baselines()
                    # The untrained network (with search) starts the Elo curve.
                    self.log(0, iteration=0, **self._evaluate_league())
                    self.checkpoint()
                while self.iteration < total and not interrupt.requested:
                    metrics = self._self_play()
                    metrics.update(self._train())
                    metrics.update(self._gate())
                    self.iteration += 1
                    last = self.iteration == total
                    if config.eval_games and (self.iteration % config.eval_every == 0 or last):
                        metrics.update(self._evaluate_league())
                    # CPU seconds of this process and its self-play workers: the honest
                    # budget on a shared, busy machine.
                    workers_cpu = sum(self._worker_cpu.values())
                    metrics["perf/cpu_seconds"] = time.process_time() + workers_cpu
                    if config.workers > 1:
                        metrics["perf/worker_cpu_seconds"] = workers_cpu
                    self.log(self.games_played, iteration=self.iteration, **metrics)
                    progress.update(
                        1,
                        games=self.games_played,
                        gen=self.generation,
                        elo=self.elo_curve[-1][2] if self.elo_curve else 0.0,
                    )
                    if self.iteration % config.checkpoint_every == 0:
                        self.checkpoint()
                progress.close()
                if self.iteration >= total and not interrupt.requested:
                    self._finish()  # still with the workers: the final matches use them too
                finished = True
            finally:
                self._close_pool(abort=not finished)
        progress.close()
        self.interrupted = interrupt.requested
        self.checkpoint()
        return self

    def _self_play(self) -> dict[str, Any]:
        """Play a batch of games with the best network; store (planes, pi, z) in the replay."""
        config, game = self.config, self.game
        started = time.perf_counter()
        n = config.games_per_iteration
        if config.workers == 1:
            search = MCTS(game, network_evaluator(self.best, game), config.mcts, self.rng)
            records = self_play_games(game, search, n, config.temperature_moves, self.rng)
            stats = search.stats
            sims_per_s = stats.simulations_per_second
        else:
            records, stats = self._self_play_in_workers(n)
            sims_per_s = stats.simulations / max(time.perf_counter() - started, 1e-9)
        positions, first_wins, draws = 0, 0, 0
        for history, winner in records:
            draws += winner == DRAW
            first_wins += winner == 0
            for planes, policy, to_play, q in history:
                z = 0.0 if winner == DRAW else (1.0 if winner == to_play else -1.0)
                target = (1.0 - config.search_value_weight) * z + config.search_value_weight * q
                pairs = game.symmetries(planes, policy) if config.augment else [(planes, policy)]
                for sym_planes, sym_policy in pairs:
                    self.replay.add(sym_planes, sym_policy, target)
                positions += 1
        self.games_played += n
        seconds = time.perf_counter() - started
        return {
            "selfplay/games": n,
            "selfplay/positions": positions,
            "selfplay/first_player_win_rate": first_wins / n,
            "selfplay/draw_rate": draws / n,
            "selfplay/mean_length": positions / n,
            "replay/size": self.replay.size,
            "perf/selfplay_seconds": seconds,
            "perf/sims_per_s": sims_per_s,
            "perf/mean_eval_batch": stats.mean_batch,
        }

    def _self_play_in_workers(self, n: int) -> tuple[list[GameRecord], SearchStats]:
        """Split n games over the worker pool; the records come back in worker order."""
        config = self.config
        weights = self._weights(self.best)
        shares = [n // config.workers + (w < n % config.workers) for w in range(config.workers)]
        jobs = [
            (_worker_play, weights, share, (config.seed % 2**32, self.iteration, worker))
            for worker, share in enumerate(shares)
            if share > 0
        ]
        records: list[GameRecord] = []
        stats = SearchStats()
        for games, (simulations, evaluations, batches) in self._in_workers(jobs):
            records.extend(games)
            stats.simulations += simulations
            stats.evaluations += evaluations
            stats.batches += batches
        return records, stats

    @staticmethod
    def _weights(net: PolicyValueNet) -> dict[str, np.ndarray]:
        # Plain arrays: torch tensors would travel through shared-memory file handles.
        return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    def _in_workers(self, jobs: list[tuple[Any, ...]]) -> list[Any]:
        """Run (function, *args) jobs in the worker pool (started on first use), in order.

        Every worker function returns (result, (pid, cpu seconds)); the CPU is counted here.
        """
        config = self.config
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=config.workers,
                mp_context=_worker_context(),
                initializer=_worker_start,
                initargs=(self.game, self.best, config.mcts, config.temperature_moves),
            )
        futures = [self._pool.submit(*job) for job in jobs]
        results = []
        try:
            for future in futures:
                result, (pid, cpu) = future.result()
                results.append(result)
                self._worker_cpu[pid] = cpu
        except BrokenProcessPool as err:
            raise RunError(
                f"a worker process died ({err}); out of memory? try fewer 'workers' or a "
                "smaller games_per_iteration. From a Python script, start training under "
                "`if __name__ == '__main__':`: worker processes import the script's module"
            ) from err
        return results

    def _play_matches(self, matches: list[tuple[PlayerSpec, PlayerSpec, int]]) -> list[MatchResult]:
        """Evaluation matches (A, B, games), in the worker pool when there is one; in order.

        Each match rebuilds its players from their specs, so it plays the same games in
        whichever process runs it.
        """
        if self.config.workers > 1:
            # Started last-first: the list ends with the strongest (slowest) opponents, and a
            # long match started late would leave the other worker idle at the end.
            jobs = [(_worker_match, a, b, games) for a, b, games in reversed(matches)]
            return self._in_workers(jobs)[::-1]
        net, mcts = self.best, self.config.mcts
        return [
            play_match(
                self.game,
                build_player(a, self.game, net, mcts),
                build_player(b, self.game, net, mcts),
                games,
            )
            for a, b, games in matches
        ]

    def _close_pool(self, abort: bool = False) -> None:
        """Stop the self-play workers: wait for them, or (abort) terminate them at once."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if abort:
            # A worker mid-game would otherwise finish it first (Python 3.11 has no public
            # terminate for a ProcessPoolExecutor; shutdown forgets the processes, so first).
            processes = list((getattr(pool, "_processes", None) or {}).values())
            for process in processes:
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown(wait=True)

    def _train(self) -> dict[str, Any]:
        """train_steps minibatches of the AlphaZero loss on the replay."""
        config = self.config
        started = time.perf_counter()
        self.net.train()
        rate = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        torch.set_num_threads(config.train_threads or max(config.workers, config.threads))
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
        steps = config.train_steps if self.replay.size >= config.batch_size else 0
        for _ in range(steps):
            planes, target_pi, target_z = self.replay.sample(config.batch_size, self.rng)
            logits, values = self.net(planes)
            log_probs = F.log_softmax(logits, dim=-1)
            policy_loss = -(target_pi * log_probs).sum(dim=-1).mean()  # cross-entropy to pi
            value_loss = F.mse_loss(values, target_z)
            loss = policy_loss + value_loss
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            sums["policy_loss"] += policy_loss.item()
            sums["value_loss"] += value_loss.item()
            sums["entropy"] += -(log_probs.exp() * log_probs).sum(dim=-1).mean().item()
        torch.set_num_threads(config.threads)  # searches run best on one thread
        self.net.eval()
        metrics: dict[str, Any] = {
            "perf/train_seconds": time.perf_counter() - started,
            "train/learning_rate": rate,
        }
        if steps:
            metrics.update({f"train/{k}": v / steps for k, v in sums.items()})
        return metrics

    def _learning_rate(self) -> float:
        """This iteration's rate: constant, or linear from learning_rate to learning_rate_end."""
        config = self.config
        if config.learning_rate_end is None:
            return config.learning_rate
        progress = self.iteration / max(1, config.iterations - 1)
        return config.learning_rate + min(1.0, progress) * (
            config.learning_rate_end - config.learning_rate
        )

    def _gate(self) -> dict[str, Any]:
        """Candidate vs best; the candidate replaces the best if it scores >= gate_threshold."""
        config = self.config
        if config.gate_games == 0:
            self.best.load_state_dict(self.net.state_dict())
            self.generation += 1
            return {"gate/accepted": 1.0, "gate/generation": self.generation}
        seed = config.seed * 1_000 + self.iteration
        candidate = MCTSPlayer(
            self.game,
            network_evaluator(self.net, self.game),
            simulations=config.gate_simulations,
            name="candidate",
            config=config.mcts,
            random_moves=config.gate_random_moves,
            seed=seed,
        )
        best = self.player(config.gate_simulations, config.gate_random_moves, seed + 500)
        result = play_match(self.game, candidate, best, config.gate_games)
        accepted = result.score >= config.gate_threshold
        if accepted:
            self.best.load_state_dict(self.net.state_dict())
            self.generation += 1
        return {
            "gate/score": result.score,
            "gate/accepted": float(accepted),
            "gate/generation": self.generation,
        }

    # ---- evaluation and the Elo league --------------------------------------------------
    def _calibrate_baselines(self) -> None:
        """Baseline-vs-baseline matches, so the baselines have ratings before any network."""
        names, seed, games = self.config.baselines, self.config.seed, self.config.eval_games
        matches = [
            (PlayerSpec(first, seed + 11), PlayerSpec(second, seed + 12), games)
            for i, first in enumerate(names)
            for second in names[i + 1 :]
        ]
        self.results.extend(_as_result(result) for result in self._play_matches(matches))

    def _evaluate_league(self) -> dict[str, Any]:
        """The best network against every baseline (and the last evaluated checkpoint)."""
        config = self.config
        name = f"iter-{self.iteration}"
        seed = config.seed * 1_000 + 100 * self.iteration
        weights = self._weights(self.best)
        simulations = config.league_simulations or config.eval_simulations
        agent = PlayerSpec(name, seed, weights, simulations)
        matches = [
            (agent, PlayerSpec(baseline, seed + 1 + k), config.eval_games)
            for k, baseline in enumerate(config.baselines)
        ]
        if self.last_evaluated is not None:
            previous = {k: v.numpy() for k, v in self.snapshots[self.last_evaluated].items()}
            sampled = config.gate_random_moves  # two searchers would replay one game
            matches.append(
                (
                    PlayerSpec(name, seed, weights, simulations, sampled),
                    PlayerSpec(self.last_evaluated, seed + 99, previous, simulations, sampled),
                    config.eval_games,
                )
            )
        results = self._play_matches(matches)
        self.results.extend(_as_result(result) for result in results)
        metrics: dict[str, Any] = {}
        for baseline, result in zip(config.baselines, results, strict=False):
            metrics[f"eval/score_vs_{baseline}"] = result.score
            metrics[f"eval/loss_rate_vs_{baseline}"] = result.losses / max(result.games, 1)
        if self.last_evaluated is not None:
            metrics["eval/score_vs_previous"] = results[-1].score
        self.snapshots[name] = {k: v.clone() for k, v in self.best.state_dict().items()}
        self.last_evaluated = name
        ratings = league_table(
            self.results, anchor="random" if "random" in config.baselines else None
        )
        elo = next(row.rating for row in ratings if row.player == name)
        self.elo_curve.append((self.iteration, self.games_played, elo))
        metrics["eval/elo"] = elo
        return metrics

    def evaluate(self, episodes: int = 100, seed: int | None = None) -> EvalResult:
        """The best network against the last baseline; return +1 win / 0 draw / -1 loss.

        success_rate is the share of games not lost (against a perfect player a draw is
        the best possible result).
        """
        seed = self.config.seed + 1_000_000 if seed is None else seed
        baseline = self.config.baselines[-1]
        result = play_match(
            self.game,
            self.player(seed=seed),
            make_player(baseline, self.game, seed + 1),
            episodes,
        )
        return _eval_result(result)

    def _finish(self) -> None:
        config = self.config
        finals = {}
        last: MatchResult | None = None
        weights = self._weights(self.best)
        baselines = config.baselines if config.final_eval_games else []
        matches = [
            (
                PlayerSpec(f"gen-{self.generation}", seed, weights, config.eval_simulations),
                PlayerSpec(baseline, seed + 1),
                config.final_eval_games,
            )
            for baseline, seed in (
                (b, config.seed + 2_000_000 + k) for k, b in enumerate(baselines)
            )
        ]
        for baseline, result in zip(baselines, self._play_matches(matches), strict=True):
            finals[baseline] = {
                "won": result.wins,
                "drawn": result.draws,
                "lost": result.losses,
                "lost_moving_first": result.losses_first,
                "score": round(result.score, 3),
            }
            self.log(self.games_played, **{f"final/score_vs_{baseline}": result.score})
            last = result
        rows = league_table(self.results, anchor="random" if "random" in config.baselines else None)
        if self.run is not None:
            self.run.write_summary(
                final_eval=_eval_result(last).to_dict() if last is not None else None,
                final_opponent=config.baselines[-1],
                final_matches=finals,
                self_play_games=self.games_played,
                generations=self.generation,
                elo_curve=[[it, games, round(elo, 1)] for it, games, elo in self.elo_curve],
                league=rows_as_dicts(rows),
            )

    def play_human(self, human_first: bool = True, **io: Any) -> float:
        """Play one game against a human in the terminal (see `play_human`)."""
        return play_human(self, human_first=human_first, **io)

    def league(self) -> str:
        """The current Elo league as a markdown table."""
        anchor = "random" if "random" in self.config.baselines else None
        return league_markdown(league_table(self.results, anchor=anchor))

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "net": self.net.state_dict(),
            "best": self.best.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replay": self.replay.state_dict(),
            "iteration": self.iteration,
            "games_played": self.games_played,
            "generation": self.generation,
            "results": [r.__dict__.copy() for r in self.results],
            "elo_curve": list(self.elo_curve),
            "snapshots": self.snapshots,
            "last_evaluated": self.last_evaluated,
            "rng": rng_state(self.rng),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.best.load_state_dict(state["best"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.replay.load_state_dict(state["replay"])
        self.iteration = int(state["iteration"])
        self.games_played = int(state["games_played"])
        self.generation = int(state["generation"])
        self.results = [Result(**r) for r in state["results"]]
        self.elo_curve = [tuple(e) for e in state["elo_curve"]]  # type: ignore[misc]
        self.snapshots = state["snapshots"]
        self.last_evaluated = state["last_evaluated"]
        set_rng_state(state["rng"], self.rng)
        self.net.eval()
        self.best.eval()

    # ---- pictures ---------------------------------------------------------------------
    def figures(self, media: Path) -> list[Path]:
        from payoff.track.elo import plot_elo, plot_league

        if not self.elo_curve:
            return []
        anchor = "random" if "random" in self.config.baselines else None
        rows = league_table(self.results, anchor=anchor)
        path = media / "elo.png"
        plot_elo(
            self.elo_curve, rows, self.config.baselines, str(path), f"AlphaZero on {self.game.name}"
        )
        (media / "league.md").write_text(league_markdown(rows) + "\n")
        league = media / "league.png"
        plot_league(rows, str(league), f"Elo league, {self.game.name} (random = 0)")
        return [path, league]

    def record_gif(
        self, path: str | Path, episodes: int = 1, seed: int | None = None, fps: int = 2
    ) -> Path:
        """A game of the best network (first player) against the last baseline."""
        from payoff.envs.games.draw import board_image
        from payoff.track.media import write_gif

        seed = self.config.seed + 3_000_000 if seed is None else seed
        agent = self.player(seed=seed)
        opponent = make_player(self.config.baselines[-1], self.game, seed + 1)
        frames = []
        for episode in range(episodes):
            state = self.game.initial_state()
            frames.append(board_image(self.game, state))
            while state.winner is None:
                mover = agent if (state.to_play == episode % 2) else opponent
                state = self.game.play(state, mover.act([state])[0])
                frames.append(board_image(self.game, state))
            frames.extend([frames[-1]] * 2)  # linger on the final position
        return write_gif(frames, path, fps=fps)


def _as_result(match: MatchResult) -> Result:
    return Result(match.a, match.b, match.wins, match.draws, match.losses)


def _eval_result(match: MatchResult) -> EvalResult:
    scores = np.array([1.0] * match.wins + [0.0] * match.draws + [-1.0] * match.losses)
    return EvalResult(
        mean_return=float(scores.mean()),
        std_return=float(scores.std()),
        episodes=match.games,
        success_rate=1.0 - match.losses / max(match.games, 1),
        mean_length=float(np.mean(match.lengths)),
    )


# ---- playing against a human ----------------------------------------------------------
def play_human(
    agent: AlphaZero,
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


def main(argv: list[str] | None = None) -> int:
    """`python -m payoff.algos.alphazero RUN [--second]`: play a trained run in the terminal."""
    import argparse

    from payoff.core.errors import PayoffError

    parser = argparse.ArgumentParser(description="Play against a trained AlphaZero run.")
    parser.add_argument("run", help="run directory of an alphazero run")
    parser.add_argument("--second", action="store_true", help="let the agent move first")
    args = parser.parse_args(argv)
    try:
        from payoff import train

        _, agent = train.load(args.run)
        if not hasattr(agent, "play_human"):  # (run as __main__, this module's class is a copy)
            raise PayoffError(
                f"{args.run} is a {agent.name} run; only alphazero runs can be played"
            )
        agent.play_human(human_first=not args.second)
    except PayoffError as err:
        print(f"error: {err}")
        return 2
    return 0


ALGORITHM = AlphaZero

if __name__ == "__main__":
    raise SystemExit(main())
