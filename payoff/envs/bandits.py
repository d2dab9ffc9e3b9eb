"""Bernoulli multi-armed bandits as a task distribution for meta-RL (RL², Duan et al. 2016,
https://arxiv.org/abs/1611.02779), and the classic bandit algorithms to compare against.

A *trial* is one bandit: `arms` arms whose success probabilities are drawn uniformly from
[0, 1] when the trial starts, then `pulls` pulls. As in the paper, each pull is an
episode of the bandit, and the trial is the Gymnasium episode: a recurrent policy keeps its
hidden state for the whole trial, so it can learn *how to explore* across bandits it
never saw. The observation at each pull is what the paper feeds back:

    [one-hot of the previous arm pulled (zeros at the first pull), previous reward,
     done flag (1: the previous pull ended an episode; 0 at the first pull)]

info["regret"] of a pull is max(means) - means[arm]: its expected regret. Summed over a
trial it is the (pseudo-)regret the bandit literature reports, and what
`episode_info: [regret]` logs during training.

Registered as `payoff/BernoulliBandits-v0` (kwargs `arms`, `pulls`); the batched NumPy
vector env steps thousands of trials at once. `reset(options={"means": ...})` fixes the
arms' probabilities (one row per env for the vector env), for evaluation on held-out bandits.

Baselines (vectorized over bandits, NumPy only): `RandomPlayer`, `EpsilonGreedyPlayer`,
`UCB1Player` (Auer et al. 2002), `ThompsonPlayer` (Beta(1, 1) priors); `play_bandits` runs
any player (also a trained recurrent policy, through `PolicyPlayer`) on given bandits
with common random numbers, so every method meets the same bandits and the same luck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

from payoff.core.errors import EnvError


def _check_sizes(arms: Any, pulls: Any) -> None:
    if isinstance(arms, bool) or not isinstance(arms, int) or arms < 2:
        raise EnvError(f"bandits: arms must be an integer >= 2, got {arms!r}")
    if isinstance(pulls, bool) or not isinstance(pulls, int) or pulls < 1:
        raise EnvError(f"bandits: pulls must be an integer >= 1, got {pulls!r}")


def bandit_observation(
    arms: int, prev_actions: np.ndarray, prev_rewards: np.ndarray, first: np.ndarray
) -> np.ndarray:
    """The RL² input for a batch: [B, arms + 2] (previous arm one-hot, reward, done flag);
    rows where `first` is True (the trial's first pull) are all zeros."""
    batch = len(prev_actions)
    obs = np.zeros((batch, arms + 2), dtype=np.float32)
    rows = np.flatnonzero(~first)
    obs[rows, np.asarray(prev_actions)[rows]] = 1.0
    obs[rows, arms] = np.asarray(prev_rewards)[rows]
    obs[rows, arms + 1] = 1.0
    return obs


def bandit_space(arms: int) -> gym.spaces.Box:
    return gym.spaces.Box(0.0, 1.0, shape=(arms + 2,), dtype=np.float32)


def _means_option(options: dict[str, Any] | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """options["means"] checked against `shape`, or None when not given."""
    if not options or options.get("means") is None:
        return None
    means = np.asarray(options["means"], dtype=np.float64)
    if means.shape != shape or not ((means >= 0) & (means <= 1)).all():
        raise EnvError(
            f"bandits: options['means'] must be probabilities in [0, 1] of shape {shape}, "
            f"got shape {means.shape}"
        )
    return means


class BernoulliBanditsEnv(gym.Env[np.ndarray, np.int64]):
    """One bandit trial: `arms` Bernoulli arms (means ~ U[0, 1]), `pulls` pulls."""

    def __init__(self, arms: int = 5, pulls: int = 100, render_mode: str | None = None):
        _check_sizes(arms, pulls)
        self.arms, self.pulls = arms, pulls
        self.observation_space = bandit_space(arms)
        self.action_space = gym.spaces.Discrete(arms)
        self.render_mode = render_mode
        self.means = np.zeros(arms)
        self.pulled = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        given = _means_option(options, (self.arms,))
        self.means = given if given is not None else self.np_random.uniform(0, 1, self.arms)
        self.pulled = 0
        return np.zeros(self.arms + 2, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        arm = int(action)
        if not 0 <= arm < self.arms:
            raise EnvError(f"bandits: arm {arm} does not exist; valid arms: 0..{self.arms - 1}")
        reward = float(self.np_random.uniform() < self.means[arm])
        self.pulled += 1
        obs = bandit_observation(self.arms, np.array([arm]), np.array([reward]), np.array([False]))[
            0
        ]
        regret = float(self.means.max() - self.means[arm])
        return obs, reward, self.pulled >= self.pulls, False, {"regret": regret}


class BernoulliBanditsVectorEnv(gym.vector.VectorEnv):
    """`num_envs` bandit trials stepped in NumPy, with NEXT_STEP autoreset (a new bandit)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, arms: int = 5, pulls: int = 100, **kwargs: Any):
        _check_sizes(arms, pulls)
        self.num_envs, self.arms, self.pulls = num_envs, arms, pulls
        self.single_observation_space = bandit_space(arms)
        self.single_action_space = gym.spaces.Discrete(arms)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.means = np.zeros((num_envs, arms))
        self.pulled = np.zeros(num_envs, dtype=np.int64)
        self.needs_reset = np.zeros(num_envs, dtype=bool)
        self.rng = seeding.np_random(None)[0]

    def _new_bandits(self, rows: np.ndarray) -> None:
        self.means[rows] = self.rng.uniform(0, 1, (len(rows), self.arms))
        self.pulled[rows] = 0

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.rng = seeding.np_random(seed if isinstance(seed, int) else seed[0])[0]
        self._new_bandits(np.arange(self.num_envs))
        given = _means_option(options, (self.num_envs, self.arms))
        if given is not None:
            self.means[:] = given
        self.needs_reset[:] = False
        return np.zeros((self.num_envs, self.arms + 2), dtype=np.float32), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        arms = np.asarray(actions, dtype=np.int64)
        if arms.min() < 0 or arms.max() >= self.arms:
            raise EnvError(
                f"bandits: arm {int(arms.max() if arms.max() >= self.arms else arms.min())} "
                f"does not exist; valid arms: 0..{self.arms - 1}"
            )
        rows = np.arange(self.num_envs)
        chosen = self.means[rows, arms]
        rewards = (self.rng.uniform(size=self.num_envs) < chosen).astype(np.float32)
        regret = self.means.max(1) - chosen
        self.pulled += 1
        first = np.zeros(self.num_envs, dtype=bool)
        # Envs whose trial ended on the previous step start a new bandit now, ignoring the arm.
        resetting = np.flatnonzero(self.needs_reset)
        if len(resetting):
            self._new_bandits(resetting)
            rewards[resetting] = 0.0
            regret[resetting] = 0.0
            first[resetting] = True
        terminated = self.pulled >= self.pulls
        terminated[resetting] = False
        self.needs_reset = terminated
        obs = bandit_observation(self.arms, arms, rewards, first)
        truncated = np.zeros(self.num_envs, dtype=bool)
        return obs, rewards, terminated, truncated, {"regret": regret}

    def get_state(self) -> dict[str, Any]:
        """Everything that decides future steps (for exact resume)."""
        return {
            "means": self.means.copy(),
            "pulled": self.pulled.copy(),
            "needs_reset": self.needs_reset.copy(),
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, saved: dict[str, Any]) -> None:
        self.means = np.array(saved["means"], dtype=np.float64)
        self.pulled = np.array(saved["pulled"], dtype=np.int64)
        self.needs_reset = np.array(saved["needs_reset"], dtype=bool)
        self.rng.bit_generator.state = saved["rng"]


# ---- held-out bandits and the classic algorithms ------------------------------------------
def sample_bandits(count: int, arms: int, seed: int) -> np.ndarray:
    """`count` bandits' arm means [count, arms], uniform in [0, 1], from their own seed
    (training envs draw from the run's seed; evaluation uses seeds far from it)."""
    return np.random.default_rng(seed).uniform(0, 1, (count, arms))


class BanditPlayer(Protocol):
    """A bandit algorithm playing many bandits at once."""

    name: str

    def start(self, bandits: int, arms: int, pulls: int, rng: np.random.Generator) -> None: ...
    def choose(self) -> np.ndarray: ...  # [bandits] arms to pull
    def observe(self, arms: np.ndarray, rewards: np.ndarray) -> None: ...


class _Counting:
    """Pull counts and successes per arm, shared by the classic algorithms."""

    name = ""

    def start(self, bandits: int, arms: int, pulls: int, rng: np.random.Generator) -> None:
        self.rng = rng
        self.t = 0
        self.counts = np.zeros((bandits, arms))
        self.successes = np.zeros((bandits, arms))

    def observe(self, arms: np.ndarray, rewards: np.ndarray) -> None:
        rows = np.arange(len(arms))
        self.counts[rows, arms] += 1
        self.successes[rows, arms] += rewards
        self.t += 1

    def _argmax(self, scores: np.ndarray) -> np.ndarray:
        """Argmax per row, ties broken at random."""
        noise = self.rng.uniform(size=scores.shape) * 1e-9
        best = scores.max(1, keepdims=True)
        return np.argmax(np.where(scores >= best - 1e-12, 1.0 + noise, 0.0), axis=1)

    def _untried_first(self, chosen: np.ndarray) -> np.ndarray:
        """Every arm once first (in order), then `chosen`."""
        arms = self.counts.shape[1]
        return np.full(len(chosen), self.t) if self.t < arms else chosen


class RandomPlayer(_Counting):
    """Pulls arms uniformly at random."""

    name = "random"

    def choose(self) -> np.ndarray:
        return self.rng.integers(0, self.counts.shape[1], self.counts.shape[0])


class EpsilonGreedyPlayer(_Counting):
    """Each arm once, then the best empirical mean, or a random arm with probability epsilon."""

    def __init__(self, epsilon: float = 0.1):
        if not 0 <= epsilon <= 1:
            raise EnvError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = epsilon
        self.name = f"epsilon-greedy ({epsilon:g})"

    def choose(self) -> np.ndarray:
        bandits, arms = self.counts.shape
        greedy = self._argmax(self.successes / np.maximum(self.counts, 1))
        explore = self.rng.uniform(size=bandits) < self.epsilon
        chosen = np.where(explore, self.rng.integers(0, arms, bandits), greedy)
        return self._untried_first(chosen)


class UCB1Player(_Counting):
    """UCB1 (Auer, Cesa-Bianchi & Fischer 2002): each arm once, then the highest
    mean + sqrt(2 ln t / n)."""

    name = "UCB1"

    def choose(self) -> np.ndarray:
        n = np.maximum(self.counts, 1)
        bonus = np.sqrt(2 * np.log(max(self.t, 1)) / n)
        return self._untried_first(self._argmax(self.successes / n + bonus))


class ThompsonPlayer(_Counting):
    """Thompson sampling with Beta(1, 1) priors: pull the arm whose posterior sample is highest."""

    name = "Thompson sampling"

    def choose(self) -> np.ndarray:
        samples = self.rng.beta(1 + self.successes, 1 + self.counts - self.successes)
        return self._argmax(samples)


class PolicyPlayer:
    """A recurrent policy as a bandit player: it gets the RL² observation each pull and
    carries its state. predict(obs [B, arms + 2], state, episode_start [B]) -> (arms [B],
    state), e.g. `functools.partial(agent.predict, deterministic=False)`."""

    def __init__(self, predict: Callable[..., tuple[Any, Any]], name: str = "RL²"):
        self.predict = predict
        self.name = name

    def start(self, bandits: int, arms: int, pulls: int, rng: np.random.Generator) -> None:
        self.arms = arms
        self.state: Any = None
        self.first = np.ones(bandits, dtype=bool)
        self.prev_arms = np.zeros(bandits, dtype=np.int64)
        self.prev_rewards = np.zeros(bandits)

    def choose(self) -> np.ndarray:
        obs = bandit_observation(self.arms, self.prev_arms, self.prev_rewards, self.first)
        arms, self.state = self.predict(obs, state=self.state, episode_start=self.first)
        return np.asarray(arms, dtype=np.int64)

    def observe(self, arms: np.ndarray, rewards: np.ndarray) -> None:
        self.prev_arms, self.prev_rewards = arms, rewards
        self.first = np.zeros_like(self.first)


@dataclass
class BanditResult:
    """How a player did on a set of bandits."""

    name: str
    cumulative_regret: np.ndarray  # [pulls] mean over bandits of the regret so far
    total_regret: np.ndarray  # [bandits] regret of each whole trial

    @property
    def mean_regret(self) -> float:
        return float(self.total_regret.mean())

    @property
    def sem_regret(self) -> float:
        """Standard error of the mean regret."""
        return float(self.total_regret.std(ddof=1) / np.sqrt(len(self.total_regret)))


def play_bandits(
    player: BanditPlayer, means: np.ndarray, pulls: int, seed: int = 0
) -> BanditResult:
    """Play every bandit of `means` [bandits, arms] for `pulls` pulls; regret is expected
    regret (max mean - mean of the arm pulled). Rewards use common random numbers: pull t of
    bandit b pays 1 when u[b, t] < mean, with u drawn from `seed`, the same for every player."""
    means = np.asarray(means, dtype=np.float64)
    if means.ndim != 2 or means.shape[1] < 2:
        raise EnvError(f"play_bandits: means must be [bandits, arms >= 2], got {means.shape}")
    bandits, arms = means.shape
    luck = np.random.default_rng(seed).uniform(size=(pulls, bandits))
    player.start(bandits, arms, pulls, np.random.default_rng(seed + 1))
    rows = np.arange(bandits)
    best = means.max(1)
    regret = np.zeros((pulls, bandits))
    for t in range(pulls):
        chosen = np.asarray(player.choose(), dtype=np.int64)
        if chosen.shape != (bandits,) or chosen.min() < 0 or chosen.max() >= arms:
            raise EnvError(
                f"player {player.name!r} chose arms {chosen[:8]}... (shape {chosen.shape}); "
                f"it must choose one arm in 0..{arms - 1} per bandit"
            )
        rewards = (luck[t] < means[rows, chosen]).astype(np.float64)
        regret[t] = best - means[rows, chosen]
        player.observe(chosen, rewards)
    cumulative = regret.cumsum(0)
    return BanditResult(player.name, cumulative.mean(1), cumulative[-1])


def classic_players(epsilon: float = 0.1) -> list[BanditPlayer]:
    """Thompson sampling, UCB1, epsilon-greedy and random."""
    return [ThompsonPlayer(), UCB1Player(), EpsilonGreedyPlayer(epsilon), RandomPlayer()]
