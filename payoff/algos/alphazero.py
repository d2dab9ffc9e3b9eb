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
     an Elo league (payoff.rollout.elo) anchored at the random player.

The pieces live below the learner: self-play games and their worker processes in
payoff.rollout.selfplay, network players in payoff.rollout.network_players, the league's
matches in payoff.rollout.league, the replay in payoff.rollout.replay; this module keeps
the config, the loss and update, the gate and the loop.

Devices (config key `device`): the network trains there, and the searches in this process
(self-play with workers 1, the gate, predict, matches) evaluate their leaf batches there,
one copy each way per batch. Self-play worker processes (workers > 1) always run a CPU
copy of the network: their weights travel as NumPy arrays. The tree search itself is
Python on the CPU whatever the device.

Python API:
    agent = AlphaZero(game="tictactoe", iterations=10).learn()
    move, _ = agent.predict(pettingzoo_observation)  # {'observation', 'action_mask'} -> move
    agent.act(pettingzoo_observation)                # the move alone
    payoff.play.play_human(agent)                    # play it in the terminal
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from payoff.algos.agent import Agent
from payoff.algos.base import NO_FINAL_EVALUATION, RunKeys, check_deterministic
from payoff.algos.loop import TrainLoop
from payoff.core.config import (
    MAX_BATCH,
    MAX_ENV_COPIES,
    MAX_REPLAY,
    MAX_SIMULATIONS,
    MAX_THREADS,
    in_range,
)
from payoff.core.device import resolve_device
from payoff.core.errors import ConfigError, EnvError
from payoff.core.seeding import seed_everything
from payoff.envs.games import DRAW, GameState, make_game
from payoff.envs.games.arena import MatchResult, play_match, random_opening
from payoff.envs.games.base import state_from_planes
from payoff.envs.games.players import make_player
from payoff.models.game_nets import GameNetConfig, PolicyValueNet
from payoff.rollout.elo import Result, league_markdown, rows_as_dicts
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.league import (
    as_result,
    calibration_matches,
    eval_result,
    final_matches,
    final_record,
    league_matches,
    league_metrics,
    league_rows,
)
from payoff.rollout.mcts import MCTS, MCTSConfig, MCTSPlayer, select_action
from payoff.rollout.network_players import (
    PlayerSpec,
    network_evaluator,
    network_player,
    network_weights,
)
from payoff.rollout.replay import PositionReplay
from payoff.rollout.selfplay import SelfPlayPool, self_play_games


@dataclass
class AlphaZeroConfig(RunKeys):
    """AlphaZero-lite on a two-player board game. Shared keys (seed, threads, log_every,
    eval_every, checkpoint_every, counted in iterations): payoff.algos.base.RunKeys.

    game: a registered game name ('tictactoe', 'connect4'; see payoff.envs.games).
    iterations: self-play -> train -> gate cycles.
    games_per_iteration: self-play games per iteration, all played side by side so that
        MCTS leaves from every game share one network batch.
    mcts: search settings for self-play (simulations, c_puct, Dirichlet noise, ...).
        Trap: dirichlet_alpha should shrink as the number of legal moves grows.
    temperature_moves: plies at the start of each self-play game sampled from the visit
        counts (temperature 1); later plies take the most visited move. Too few and all
        games look alike; too many and the targets are full of deliberate mistakes.
    selfplay_openings: k > 0 starts each self-play game from 0 to k (uniformly) random
        legal plies, which are not stored. Search-guided openings soon settle on a few
        lines, and a network that never saw anything else misjudges positions off them
        (an opponent's odd move, or a final evaluation from random openings).
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
    eval_symmetries: whenever the trained agent plays (as eval_simulations), average its
        network over the board's symmetries: each position and its mirror image (Connect
        Four; tic-tac-toe's 8 images) in one forward pass, priors mapped back and averaged
        with the values. An ensemble against the network's blind spots, for more play time
        per move; self-play and the gate are unchanged.
    eval_every / eval_games / league_simulations: baseline matches for the Elo curve, every
        that many iterations (and at the end), searched with league_simulations per move
        (null = eval_simulations; fewer keeps the periodic league cheap). eval_games 0: no
        league at all. In Python all three match counts (eval_every, eval_games,
        final_eval_games) are 0, so learn() only trains (self-play and its gate games);
        `payoff train` runs default to 5, 20 and 100 (run_defaults).
    baselines: fixed opponents ('random', 'greedy', 'minimax', 'alphabeta-<depth>'); the
        last one is the "target" used by `payoff eval`.
    final_eval_games: games against each baseline at the end (alternating colours); 0: none.
    final_eval_openings: random legal plies that start each pair of final games, one game
        with each colour (0: every game from the empty board). Deterministic players
        replay the same few lines from the empty board; openings make the games distinct
        (the summary's final_matches count them: distinct_games).
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
        The self-play workers wait during training, so their cores are free for it.
    """

    game: str = "tictactoe"
    iterations: int = field(default=20, metadata=in_range(0, low_open=True))
    games_per_iteration: int = field(
        default=64, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES)
    )
    mcts: MCTSConfig = field(
        default_factory=lambda: MCTSConfig(simulations=50, dirichlet_alpha=1.0)
    )
    temperature_moves: int = field(default=4, metadata=in_range(0))
    selfplay_openings: int = field(default=0, metadata=in_range(0))
    net: GameNetConfig = field(default_factory=lambda: GameNetConfig(kind="mlp", hidden=128))
    replay_size: int = field(default=40_000, metadata=in_range(0, low_open=True, most=MAX_REPLAY))
    batch_size: int = field(default=256, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    train_steps: int = field(default=100, metadata=in_range(0, low_open=True))
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    learning_rate_end: float | None = field(default=None, metadata=in_range(0))
    weight_decay: float = field(default=1e-4, metadata=in_range(0))
    search_value_weight: float = field(default=0.0, metadata=in_range(0, 1))
    augment: bool = True
    gate_games: int = field(default=20, metadata=in_range(0, most=MAX_ENV_COPIES))
    gate_threshold: float = field(default=0.55, metadata=in_range(0, 1))
    gate_simulations: int = field(
        default=25, metadata=in_range(0, low_open=True, most=MAX_SIMULATIONS)
    )
    gate_random_moves: int = field(default=2, metadata=in_range(0))
    eval_every: int = field(default=0, metadata=in_range(0))
    eval_games: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    eval_simulations: int = field(
        default=50, metadata=in_range(0, low_open=True, most=MAX_SIMULATIONS)
    )
    eval_symmetries: bool = False
    league_simulations: int | None = field(default=None, metadata=in_range(1, most=MAX_SIMULATIONS))
    baselines: list[str] = field(default_factory=lambda: ["random", "greedy", "minimax"])
    final_eval_games: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    final_eval_openings: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    checkpoint_every: int = field(default=1, metadata=in_range(0, low_open=True))
    workers: int = field(default=1, metadata=in_range(1))
    train_threads: int = field(default=0, metadata=in_range(0, MAX_THREADS))

    # payoff train runs (in Python no matches beyond self-play and the gate)
    run_defaults: ClassVar[dict[str, Any]] = {
        "eval_every": 5,
        "eval_games": 20,
        "final_eval_games": 100,
    }

    def validate(self) -> None:
        # Ranges of single keys (counts >= 1, weights in [0, 1], ...) are checked by core.config.
        if self.batch_size > self.replay_size:
            raise ConfigError(
                f"batch_size {self.batch_size} is larger than replay_size {self.replay_size}"
            )
        if not self.baselines:
            raise ConfigError("config key 'baselines' needs at least one player, e.g. [random]")
        if ":" in self.game:
            # your own game: imported in setup, where a loaded file's word is refused (a config
            # is read and validated before that check applies: no user code runs here)
            return
        self.check_game(make_game(self.game))  # unknown game -> clear error now, not mid-run

    def check_game(self, game: Any) -> None:
        """The settings that depend on the game: baselines it can play, openings it allows."""
        for baseline in self.baselines:
            make_player(baseline, game)
        # Openings too long for the game (every line of that many plies ends it) would fail
        # in the first self-play iteration or, worse, in the final evaluation after training.
        for key in ("selfplay_openings", "final_eval_openings"):
            plies = getattr(self, key)
            if plies:
                try:
                    random_opening(game, plies, np.random.default_rng(0))
                except ConfigError:
                    raise ConfigError(
                        f"config key {key!r} is {plies}, but no {plies} random plies of "
                        f"{self.game} were found that leave the game running; use fewer "
                        f"(0 starts from the empty board)"
                    ) from None


class AlphaZero(Agent):
    """AlphaZero-style self-play with MCTS and gated network replacement."""

    total_key = "iterations"
    config: AlphaZeroConfig
    saved = (
        "net",
        "best",
        "optimizer",
        "replay",
        "games_played",
        "generation",
        "elo_curve",
        "snapshots",
        "last_evaluated",
        "rng",
    )

    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self.rng = seed_everything(config.seed)
        self.game = make_game(config.game)
        if ":" in config.game:  # your own game's checks, left to this point by validate
            config.check_game(self.game)
        self.net = PolicyValueNet(
            self.game.shape, self.game.num_actions, config.net, getattr(self.game, "lines", None)
        )
        self.net.to(self.device)
        self.best = copy.deepcopy(self.net)
        self.net.eval()
        self.best.eval()
        self.optimizer = torch.optim.AdamW(
            self.net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.replay = PositionReplay(config.replay_size, self.game.shape, self.game.num_actions)
        self._metrics: dict[str, Any] = {}
        self._total = config.iterations
        self.games_played = 0
        self.generation = 0  # how many candidates have been accepted as best
        self.results: list[Result] = []  # every rated match, for the Elo league
        self.elo_curve: list[tuple[int, int, float]] = []  # (iteration, games, best's Elo)
        self.snapshots: dict[str, dict[str, torch.Tensor]] = {}  # evaluated checkpoints
        self.last_evaluated: str | None = None
        # self-play workers (processes only while learning) and the league's matches
        self.pool = SelfPlayPool(
            config.workers,
            self.game,
            self.best,
            config.mcts,
            config.temperature_moves,
            config.selfplay_openings,
        )

    def spaces(self) -> dict[str, str]:
        return {"game": self.game.name}

    def progress_step(self) -> int:
        return self.games_played

    # ---- acting -----------------------------------------------------------------------
    def player(
        self,
        simulations: int | None = None,
        random_moves: int = 0,
        seed: int = 0,
        symmetries: bool | None = None,
    ) -> MCTSPlayer:
        """The best network with search, as an arena player (symmetries: None =
        eval_symmetries)."""
        return network_player(
            self.best,
            self.game,
            self.config.mcts,
            simulations or self.config.eval_simulations,
            f"gen-{self.generation}",
            random_moves,
            seed,
            self.config.eval_symmetries if symmetries is None else symmetries,
        )

    def act(self, observation: Any, deterministic: bool = True) -> int:
        """A move for a PettingZoo-style observation ({'observation': planes, 'action_mask'}).

        Also accepts a GameState. The search uses eval_simulations; deterministic=False
        samples the move from the visit counts instead of taking the most visited.
        """
        check_deterministic(deterministic, "act")
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
            network_evaluator(self.best, self.game, self.config.eval_symmetries),
            MCTSConfig(
                **{**self.config.mcts.__dict__, "simulations": self.config.eval_simulations}
            ),
            self.rng,
        )
        counts = search.search([state])[0]
        return select_action(counts, 0.0 if deterministic else 1.0, self.rng)

    # ---- learning ---------------------------------------------------------------------
    @property
    def iteration(self) -> int:
        """Self-play iterations done: the loop's step counter for AlphaZero."""
        return self.state.step

    def train_until(self, total: int) -> None:
        """Run until `total` iterations have been done."""
        config = self.config
        self._total = total
        finished = False
        try:
            if not self.results and config.eval_games:
                self._calibrate_baselines()
                # The untrained network (with search) starts the Elo curve.
                self.log(0, iteration=0, **self._evaluate_league())
                self.checkpoint()
            # The final matches (finish) still use the workers, so they close afterwards.
            finished = TrainLoop.from_config(
                self,
                self._total,
                desc=f"alphazero {config.game}",
                unit="it",
                eval_every=0,  # league matches are part of an iteration's record (log_training)
            ).run()
        finally:
            self.pool.close(abort=not finished)

    def iterate(self) -> None:
        """Self-play a batch of games, train on the replay, gate the candidate."""
        metrics = self._self_play()
        metrics.update(self._train())
        metrics.update(self._gate())
        self.state.step += 1
        self._metrics = metrics

    def progress_postfix(self) -> dict[str, Any]:
        return {
            "games": self.games_played,
            "gen": self.generation,
            "elo": self.elo_curve[-1][2] if self.elo_curve else 0.0,
        }

    def log_training(self) -> None:
        """The iteration's record, with the league's matches merged in when they are due."""
        config = self.config
        metrics = dict(self._metrics)
        last = self.iteration == self._total
        due = config.eval_every > 0 and self.iteration % config.eval_every == 0
        if config.eval_games and (due or last):
            metrics.update(self._evaluate_league())
        # CPU seconds of this process and its self-play workers: the honest budget on a
        # shared, busy machine.
        workers_cpu = sum(self.pool.cpu_seconds.values())
        metrics["perf/cpu_seconds"] = time.process_time() + workers_cpu
        if config.workers > 1:
            metrics["perf/worker_cpu_seconds"] = workers_cpu
        self.log(self.games_played, iteration=self.iteration, **metrics)

    def evaluate_now(self) -> None:
        """League matches are part of the iteration's record (log_training)."""

    def _self_play(self) -> dict[str, Any]:
        """Play a batch of games with the best network; store (planes, pi, z) in the replay."""
        config, game = self.config, self.game
        started = time.perf_counter()
        n = config.games_per_iteration
        if config.workers == 1:
            search = MCTS(game, network_evaluator(self.best, game), config.mcts, self.rng)
            records = self_play_games(
                game, search, n, config.temperature_moves, self.rng, config.selfplay_openings
            )
            stats = search.stats
            sims_per_s = stats.simulations_per_second
        else:
            weights = network_weights(self.best)
            records, stats = self.pool.self_play(weights, n, config.seed, self.iteration)
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
            if self.device.type != "cpu":
                planes = planes.to(self.device)
                target_pi, target_z = target_pi.to(self.device), target_z.to(self.device)
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
        candidate = network_player(
            self.net,
            self.game,
            config.mcts,
            config.gate_simulations,
            "candidate",
            config.gate_random_moves,
            seed,
        )
        best = self.player(
            config.gate_simulations, config.gate_random_moves, seed + 500, symmetries=False
        )
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
        config = self.config
        matches = calibration_matches(config.baselines, config.seed, config.eval_games)
        self.results.extend(as_result(result) for result in self.pool.play_matches(matches))

    def _evaluate_league(self) -> dict[str, Any]:
        """The best network against every baseline (and the last evaluated checkpoint)."""
        config = self.config
        name = f"iter-{self.iteration}"
        seed = config.seed * 1_000 + 100 * self.iteration
        simulations = config.league_simulations or config.eval_simulations
        agent = PlayerSpec(
            name, seed, network_weights(self.best), simulations, symmetries=config.eval_symmetries
        )
        previous = None
        if self.last_evaluated is not None:
            weights = {k: v.numpy() for k, v in self.snapshots[self.last_evaluated].items()}
            sampled = config.gate_random_moves  # two searchers would replay one game
            previous = PlayerSpec(
                self.last_evaluated,
                seed + 99,
                weights,
                simulations,
                sampled,
                config.eval_symmetries,
            )
        matches = league_matches(agent, config.baselines, config.eval_games, previous)
        results = self.pool.play_matches(matches)
        self.results.extend(as_result(result) for result in results)
        metrics = league_metrics(config.baselines, results)
        # Snapshots are CPU copies (they are sent to workers as arrays and checkpointed).
        self.snapshots[name] = {
            k: v.to("cpu", copy=True) for k, v in self.best.state_dict().items()
        }
        self.last_evaluated = name
        rows = league_rows(self.results, config.baselines)
        elo = next(row.rating for row in rows if row.player == name)
        self.elo_curve.append((self.iteration, self.games_played, elo))
        metrics["eval/elo"] = elo
        return metrics

    def evaluate(
        self, episodes: int = 100, seed: int | None = None, opponent: str | None = None
    ) -> EvalResult:
        """The best network against `opponent` (default: the last baseline, the strongest),
        a baseline name such as 'alphabeta-5'; return +1 win / 0 draw / -1 loss.

        success_rate is the share of games not lost (against a perfect player a draw is
        the best possible result). Games start from `final_eval_openings` random plies, as
        the final evaluation's do (other openings: they are drawn from `seed`).
        """
        seed = self.config.seed + 1_000_000 if seed is None else seed
        baseline = self.config.baselines[-1] if opponent is None else opponent
        result = play_match(
            self.game,
            self.player(seed=seed),
            make_player(baseline, self.game, seed + 1),
            episodes,
            self.config.final_eval_openings,
            seed,
        )
        return eval_result(result, baseline)

    def finish(self) -> None:
        config = self.config
        finals = {}
        last: MatchResult | None = None
        agent = PlayerSpec(
            f"gen-{self.generation}",
            config.seed + 2_000_000,
            network_weights(self.best),
            config.eval_simulations,
            symmetries=config.eval_symmetries,
        )
        baselines = config.baselines if config.final_eval_games else []
        matches = final_matches(
            agent, baselines, config.final_eval_games, config.final_eval_openings
        )
        for baseline, result in zip(baselines, self.pool.play_matches(matches), strict=True):
            finals[baseline] = final_record(result)
            self.log(self.games_played, **{f"final/score_vs_{baseline}": result.score})
            last = result
        rows = league_rows(self.results, config.baselines)
        # the strongest opponent first (the baselines run weakest to strongest), by name
        line = "; ".join(
            f"vs {name} {r['won']}-{r['drawn']}-{r['lost']} (score {r['score']:.3f}, "
            f"{r['distinct_games']} distinct games)"
            for name, r in reversed(finals.items())
        )
        if self.run is not None:
            self.run.write_summary(
                final_eval=eval_result(last, config.baselines[-1]).to_dict()
                if last is not None
                else None,
                final_line=line or NO_FINAL_EVALUATION.format("final_eval_games=0"),
                final_opponent=config.baselines[-1],
                final_matches=finals,
                self_play_games=self.games_played,
                generations=self.generation,
                elo_curve=[[it, games, round(elo, 1)] for it, games, elo in self.elo_curve],
                league=rows_as_dicts(rows),
            )

    def league(self) -> str:
        """The current Elo league as a markdown table."""
        return league_markdown(league_rows(self.results, self.config.baselines))

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "results": [r.__dict__.copy() for r in self.results]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.results = [Result(**r) for r in state["results"]]
        self.elo_curve = [tuple(e) for e in self.elo_curve]  # type: ignore[misc]
        self.net.eval()
        self.best.eval()

    def record_gif(
        self, path: str | Path, episodes: int = 1, seed: int | None = None, fps: int = 2
    ) -> Path:
        """Games of the best network against the last baseline (it moves first in the first)."""
        from payoff.envs.games.draw import game_frames
        from payoff.track.media import write_gif

        seed = self.config.seed + 3_000_000 if seed is None else seed
        agent = self.player(seed=seed)
        opponent = make_player(self.config.baselines[-1], self.game, seed + 1)
        return write_gif(game_frames(self.game, agent, opponent, episodes), path, fps=fps)


ALGORITHM = AlphaZero
