"""Monte Carlo tree search with PUCT, as in AlphaZero, for any payoff `Game`.

One simulation walks from the root to a leaf, always taking the edge with the highest

    Q(s, a) + c_puct * P(s, a) * sqrt(N(s)) / (1 + N(s, a))

(Q: mean value of the edge for the player choosing it, P: the evaluator's prior, N: visit
counts), asks the evaluator for the leaf's move priors and value, and adds that value to
every edge on the way back, negated at each ply because the players alternate.

Batched leaf evaluation: `search` runs one tree per position it is given and, in every
round, collects a leaf from each tree (and `leaves_per_tree` leaves per tree, kept apart by
a virtual loss) and evaluates them all in one call. With a neural network evaluator the
network therefore sees batches of positions, not one position at a time.

Exploration at the root (self-play only): Dirichlet noise mixed into the root priors, and
a temperature on the visit counts when a move is picked (`select_action`).

Solver (`solver: true`, MCTS-Solver after Winands, Bjornsson and Saito 2008): expanding a
node also finds which of its moves end the game (the game's `ending_moves` where it has one,
else by playing each move once), and game results found
in the tree are proven upwards by minimax (a position is won if one move wins, lost if every
move loses). Searches stop visiting proven positions, a proven win is played at once and a
proven loss is avoided while any other move remains. A network's value is a guess; a
finished game in the tree is a fact, and short tactics (a win or a forced loss a few plies
ahead) are exactly what a few hundred simulations with an imperfect network miss.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from payoff.core.config import MAX_SIMULATIONS, in_range
from payoff.core.errors import ConfigError, PayoffError
from payoff.envs.games.base import Game, GameState, check_ended_within
from payoff.envs.games.players import Player

# positions -> (priors [N, A], values [N]); values are for the player to move, in [-1, 1].
Evaluator = Callable[[list[GameState]], tuple[np.ndarray, np.ndarray]]


@dataclass
class MCTSConfig:
    """Search settings.

    simulations: simulations per search (per position searched).
    c_puct: weight of the prior-guided exploration term. Higher explores more; values are
        in [-1, 1], so 1-2.5 is the usual range.
    dirichlet_alpha: concentration of the root noise; ~10 / (typical number of legal moves)
        (0.3 for Go-sized... here about 1.0 for tic-tac-toe, 1.0-1.5 for Connect Four).
    dirichlet_fraction: share of the root prior replaced by noise (0 turns noise off).
    leaves_per_tree: leaves collected per tree per round with virtual loss. 1 is plain
        sequential MCTS; more makes bigger batches from few trees but searches slightly worse.
    virtual_loss: value subtracted from an edge while a leaf below it awaits evaluation.
    solver: prove wins and losses found in the tree (see the module docstring). Costs one
        `play` per legal move at each expansion (per game-ending move where the game has
        `ending_moves`); pays off in games decided by short tactics.
    """

    simulations: int = field(default=100, metadata=in_range(0, low_open=True, most=MAX_SIMULATIONS))
    c_puct: float = field(default=1.5, metadata=in_range(0, low_open=True))
    dirichlet_alpha: float = field(default=1.0, metadata=in_range(0, low_open=True))
    dirichlet_fraction: float = field(default=0.25, metadata=in_range(0, 1))
    leaves_per_tree: int = field(default=1, metadata=in_range(1))
    virtual_loss: float = field(default=1.0, metadata=in_range(0))
    solver: bool = False

    def validate(self) -> None:
        if self.simulations < 1:
            raise ConfigError(f"mcts 'simulations' must be >= 1, got {self.simulations}")
        if self.leaves_per_tree < 1:
            raise ConfigError(f"mcts 'leaves_per_tree' must be >= 1, got {self.leaves_per_tree}")
        if not 0.0 <= self.dirichlet_fraction <= 1.0:
            raise ConfigError(
                f"mcts 'dirichlet_fraction' must be in [0, 1], got {self.dirichlet_fraction}"
            )
        if self.dirichlet_alpha <= 0:
            raise ConfigError(f"mcts 'dirichlet_alpha' must be > 0, got {self.dirichlet_alpha}")


class Node:
    """A position in the tree; statistics live on its outgoing edges, indexed by action.

    Edge statistics are plain Python lists: with at most a few dozen actions, list
    arithmetic in a loop costs less than NumPy's per-call overhead on arrays that small.
    """

    __slots__ = (
        "children",
        "legal",
        "priors",
        "proven",
        "q",
        "scaled_priors",
        "state",
        "terminal",
        "total",
        "value_sums",
        "visits",
    )

    def __init__(self, state: GameState, terminal: float | None):
        self.state = state
        self.terminal = terminal  # game result for the player to move, None if running
        # Game-theoretic value for the player to move once known (solver), else None.
        self.proven: float | None = terminal
        # Edge statistics, one entry per action, filled in on expansion (empty until then):
        self.priors: list[float] = []  # P(s, a), the evaluator's move probabilities
        self.legal: list[int] = []  # the actions allowed here
        self.visits: list[int] = []  # N(s, a)
        self.value_sums: list[float] = []  # W(s, a), total value for this node's mover
        self.q: list[float] = []  # W / N, 0 when unvisited
        self.scaled_priors: list[float] = []  # c_puct * P(s, a)
        self.total = 0  # N(s), the sum of the edges' visits
        self.children: dict[int, Node] = {}

    @property
    def expanded(self) -> bool:
        return bool(self.priors)

    def set_priors(self, priors: list[float], c_puct: float) -> None:
        self.priors = priors
        self.scaled_priors = [c_puct * p for p in priors]

    def add(self, action: int, visits: int, value: float) -> None:
        """Add visits and value to one edge and refresh its mean value."""
        n = self.visits[action] + visits
        w = self.value_sums[action] + value
        self.visits[action], self.value_sums[action] = n, w
        self.total += visits
        self.q[action] = w / n if n > 0 else 0.0


@dataclass
class SearchStats:
    """Counters of the work done, for the simulations/s figure."""

    simulations: int = 0
    evaluations: int = 0  # leaves sent to the evaluator
    batches: int = 0  # evaluator calls
    seconds: float = 0.0

    @property
    def simulations_per_second(self) -> float:
        return self.simulations / max(self.seconds, 1e-9)

    @property
    def mean_batch(self) -> float:
        return self.evaluations / max(self.batches, 1)


class MCTS:
    """PUCT search over many trees at once, sharing evaluator batches."""

    def __init__(
        self,
        game: Game,
        evaluator: Evaluator,
        config: MCTSConfig | None = None,
        rng: np.random.Generator | None = None,
    ):
        self.game = game
        self.evaluator = evaluator
        self.config = config or MCTSConfig()
        self.config.validate()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.stats = SearchStats()
        # The last search's root values [len(states)] for the player to move: the proven
        # result where the solver settled the root, else the mean value of its simulations.
        self.root_values = np.zeros(0)

    # ---- the public entry point --------------------------------------------------------
    def search(
        self, states: list[GameState], add_noise: bool = False, simulations: int | None = None
    ) -> np.ndarray:
        """Search each running position; returns root visit counts [len(states), A].

        With the solver, a root's proven-winning moves get all of its counts (so they are the
        target and the move), and moves proven to lose get none while another move remains.
        """
        started = time.perf_counter()
        config = self.config
        simulations = config.simulations if simulations is None else simulations
        for state in states:
            if self.game.outcome(state) is not None:
                raise PayoffError("cannot search a finished game: the position has a result")
        roots = [Node(state, None) for state in states]
        self._expand(roots)
        if add_noise and config.dirichlet_fraction > 0:
            for root in roots:
                self._add_dirichlet_noise(root)
        for _ in range(math.ceil(simulations / config.leaves_per_tree)):
            self._simulate_round(roots)
        self.stats.simulations += len(roots) * simulations
        self.stats.seconds += time.perf_counter() - started
        counts = np.array([root.visits for root in roots], dtype=np.float64)
        self.root_values = np.array([_root_value(root) for root in roots])
        if config.solver:
            for row, root in zip(counts, roots, strict=True):
                _apply_proofs(row, root)
        return counts

    # ---- one round: select leaves, evaluate them together, back up ---------------------
    def _simulate_round(self, roots: list[Node]) -> None:
        config = self.config
        pending: dict[int, Node] = {}  # leaves awaiting evaluation, by id (a leaf may repeat)
        paths: list[tuple[Node, list[tuple[Node, int]]]] = []
        for root in roots:
            if root.proven is not None:  # solved: more simulations cannot change the move
                continue
            for _ in range(config.leaves_per_tree):
                leaf, path = self._select(root)
                if leaf.proven is not None:
                    # a finished (or solved) game needs no evaluator
                    self._backup(path, leaf.proven)
                    if config.solver:
                        self._prove(path)
                    continue
                for node, action in path:  # virtual loss steers the next pick elsewhere
                    node.add(action, 1, -config.virtual_loss)
                pending[id(leaf)] = leaf
                paths.append((leaf, path))
        if not pending:
            return
        values = self._expand(list(pending.values()))
        for leaf, path in paths:
            for node, action in path:
                node.add(action, -1, config.virtual_loss)
            if leaf.proven is None:
                self._backup(path, values[id(leaf)])
            else:  # the solver settled it on expansion: back up the fact, not the guess
                self._backup(path, leaf.proven)
                self._prove(path)

    def _select(self, root: Node) -> tuple[Node, list[tuple[Node, int]]]:
        """Walk down by PUCT to an unexpanded or finished node."""
        node, path = root, []
        while node.expanded and node.proven is None:
            # q holds W/N per edge (0 unvisited), kept current by the backups.
            scale = math.sqrt(max(node.total, 1))
            q, scaled_priors, visits = node.q, node.scaled_priors, node.visits
            best, action = -math.inf, -1
            for a in node.legal:
                score = q[a] + scaled_priors[a] * scale / (1.0 + visits[a])
                if score > best:
                    best, action = score, a
            path.append((node, action))
            child = node.children.get(action)
            if child is None:
                state = self.game.play(node.state, action)
                child = Node(state, self.game.outcome(state))
                node.children[action] = child
            node = child
        return node, path

    def _expand(self, leaves: list[Node]) -> dict[int, float]:
        """Evaluate running leaves in one batch, store their priors; returns values by id."""
        priors, values = self.evaluator([leaf.state for leaf in leaves])
        self.stats.evaluations += len(leaves)
        self.stats.batches += 1
        result = {}
        # A game may say which moves end it without playing them all (payoff's StoneGames
        # do); the children of the other moves are then made when a search first takes them.
        ending_moves = getattr(self.game, "ending_moves", None)
        # One NumPy pass for the whole batch: the evaluator may put mass on illegal moves;
        # where it puts none on legal ones, the legal moves share the prior equally.
        legal = np.stack([self.game.legal_mask(leaf.state) for leaf in leaves])  # [N, A]
        if not legal.any(axis=1).all():  # a search would make up action -1
            stuck = leaves[int(np.flatnonzero(~legal.any(axis=1))[0])].state
            name = getattr(self.game, "name", type(self.game).__name__)
            raise PayoffError(
                f"game {name!r}: legal_mask allows no move in a position that has not ended "
                f"(ply {stuck.moves}, player {stuck.to_play} to move): make outcome() end the "
                f"game there, or give the game a pass move"
            )
        priors = np.where(legal, priors, 0.0)
        totals = priors.sum(axis=1, keepdims=True)
        uniform = legal / legal.sum(axis=1, keepdims=True)
        priors = np.where(totals > 0, priors / np.where(totals > 0, totals, 1.0), uniform)
        actions = legal.shape[1]
        for leaf, prior, moves, value in zip(
            leaves, priors.tolist(), legal.tolist(), np.asarray(values).tolist(), strict=True
        ):
            leaf.set_priors(prior, self.config.c_puct)
            leaf.legal = [a for a in range(actions) if moves[a]]
            leaf.visits = [0] * actions
            leaf.value_sums = [0.0] * actions
            leaf.q = [0.0] * actions
            result[id(leaf)] = value
            if self.config.solver:  # one ply of look-ahead: which moves end the game?
                ending = leaf.legal if ending_moves is None else ending_moves(leaf.state)
                for action in ending:
                    state = self.game.play(leaf.state, action)
                    leaf.children[action] = Node(state, self.game.outcome(state))
                _settle(leaf)
        return result

    @staticmethod
    def _prove(path: list[tuple[Node, int]]) -> None:
        """After a proven leaf: settle its ancestors, bottom up, while they become proven."""
        for node, _ in reversed(path):
            if node.proven is not None or not _settle(node):
                return

    def _add_dirichlet_noise(self, root: Node) -> None:
        config = self.config
        noise = self.rng.dirichlet([config.dirichlet_alpha] * len(root.legal))
        priors = list(root.priors)
        for action, eta in zip(root.legal, noise, strict=True):
            priors[action] = (1 - config.dirichlet_fraction) * priors[action] + (
                config.dirichlet_fraction * float(eta)
            )
        root.set_priors(priors, config.c_puct)

    @staticmethod
    def _backup(path: list[tuple[Node, int]], leaf_value: float) -> None:
        """Add the leaf's value to each edge above it, from the view of that edge's mover."""
        value = leaf_value
        for node, action in reversed(path):
            value = -value  # the parent's mover is the leaf mover's opponent
            node.add(action, 1, value)


def _settle(node: Node) -> bool:
    """Set node.proven by minimax over its children when their results decide it."""
    values = []
    for action in node.legal:
        child = node.children.get(action)
        if child is not None and child.proven == -1.0:
            node.proven = 1.0  # a move after which the opponent has lost
            return True
        values.append(None if child is None else child.proven)
    if values and all(v is not None for v in values):
        node.proven = max(-v for v in values if v is not None)
        return True
    return False


def _root_value(root: Node) -> float:
    """What the search thinks the root is worth to its mover: proven, or mean over visits."""
    if root.proven is not None:
        return root.proven
    return sum(root.value_sums) / root.total if root.total else 0.0


def _apply_proofs(counts: np.ndarray, root: Node) -> None:
    """Turn a root's visit counts into the solver's choice where proofs decide it (in place)."""
    total = counts.sum()
    if total == 0:  # solved before any simulation: start from the legal moves
        counts[root.legal] = 1.0
    child_value = {a: root.children[a].proven for a in root.legal if a in root.children}
    wins = [a for a, v in child_value.items() if v == -1.0]
    if wins:
        counts[:] = 0.0
        counts[wins] = max(total, 1.0) / len(wins)
        return
    losing = [a for a, v in child_value.items() if v == 1.0]
    if len(losing) < len(root.legal):
        counts[losing] = 0.0
        if counts.sum() == 0:  # every visit went to losing moves: spread over the others
            counts[[a for a in root.legal if a not in losing]] = 1.0


def select_action(counts: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Pick a move from root visit counts: sample counts^(1/T), or the most visited when T = 0."""
    if temperature <= 1e-3:
        best = np.flatnonzero(counts == counts.max())
        return int(best[0] if len(best) == 1 else rng.choice(best))
    weights = counts ** (1.0 / temperature)
    return int(rng.choice(len(counts), p=weights / weights.sum()))


def uniform_evaluator(game: Game) -> Evaluator:
    """Uniform priors and value 0: pure search, no knowledge (for tests and as a baseline)."""

    def evaluate(states: list[GameState]) -> tuple[np.ndarray, np.ndarray]:
        return np.ones((len(states), game.num_actions)), np.zeros(len(states))

    return evaluate


def rollout_evaluator(game: Game, rng: np.random.Generator, rollouts: int = 1) -> Evaluator:
    """Uniform priors and the mean result of random playouts: classic MCTS, no network."""

    def playout(state: GameState) -> float:
        mover, current, plies = state.to_play, state, 0
        while current.winner is None:
            check_ended_within(game, current, plies)
            plies += 1
            legal = np.flatnonzero(game.legal_mask(current))
            current = game.play(current, int(rng.choice(legal)))
        if current.winner < 0:
            return 0.0
        return 1.0 if current.winner == mover else -1.0

    def evaluate(states: list[GameState]) -> tuple[np.ndarray, np.ndarray]:
        values = [np.mean([playout(s) for _ in range(rollouts)]) for s in states]
        return np.ones((len(states), game.num_actions)), np.array(values)

    return evaluate


class MCTSPlayer(Player):
    """Plays by search: all positions handed to `act` are searched together.

    random_moves: plies at the start of a game played by sampling the visit counts
    (temperature 1) instead of taking the most visited move, so matches between two
    deterministic searchers do not replay the same game.
    """

    def __init__(
        self,
        game: Game,
        evaluator: Evaluator,
        simulations: int = 100,
        name: str = "mcts",
        config: MCTSConfig | None = None,
        random_moves: int = 0,
        seed: int = 0,
    ):
        base = config or MCTSConfig()
        self.config = MCTSConfig(**{**base.__dict__, "simulations": simulations})
        self.rng = np.random.default_rng(seed)
        self.search = MCTS(game, evaluator, self.config, self.rng)
        self.name, self.random_moves = name, random_moves

    def act(self, states: list[GameState]) -> list[int]:
        counts = self.search.search(states)
        return [
            select_action(c, 1.0 if s.moves < self.random_moves else 0.0, self.rng)
            for c, s in zip(counts, states, strict=True)
        ]
