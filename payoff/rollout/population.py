"""What an evolution-strategies worker does: rebuild noise from seeds, play perturbed policies.

    noise(seed, dim)                       the perturbation direction epsilon of a seed
    EpisodePlayer(env).play(act, seeds)    one episode per row, all rows at once
    evaluate_pairs(player, policy, theta, sigma, tasks, mean, std) -> [PairResult]
    LocalPopulation                        `backend: local`: the same, in this process

A generation is a list of `PairTask`s: a noise seed and the env seeds of its episodes. For each,
the worker regenerates epsilon = `noise(seed, dim)` and plays theta + sigma * epsilon and
theta - sigma * epsilon (antithetic or "mirrored" sampling) on the same env seeds (common
random numbers: the pair differs only by the sign of the perturbation). What goes back is a
`PairResult`: the seed, the returns of both signs, episode lengths and observation sums for
the normalizer; never the parameters. `payoff.rollout.ray_population` runs the same
`evaluate_pairs` on Ray actors.

Every number a pair produces depends only on theta, sigma, its seed and its env seeds, not on
which worker played it or next to which other pairs, so any number of workers gives the same
generation (tested against the local backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import EnvError
from payoff.envs.make import EnvConfig, check_env, make_env
from payoff.models.population import FlatPolicy
from payoff.rollout.evaluate import EPISODE_STEP_LIMIT, EvalResult, warn_unended
from payoff.rollout.vector import batched_id, env_errors, make_vector_env, reset_envs, step_envs

SEED_BOUND = 2**31 - 1  # noise and env seeds are drawn in [0, SEED_BOUND)


def noise(seed: int, dim: int) -> np.ndarray:
    """epsilon ~ N(0, I) of dimension `dim`, the same for the same seed in every process.

    Salimans et al. share one big table of Gaussian noise between workers and send offsets
    into it; a generator seeded per perturbation gives the same property (only the seed
    travels) without the table's memory, at the cost of drawing `dim` normals per use.
    """
    return np.random.default_rng(int(seed)).standard_normal(int(dim), dtype=np.float32)


@dataclass
class PairTask:
    """One antithetic pair: the seed of its noise and the env seed of each of its episodes
    (`episodes_per_perturbation` of them, played by both signs)."""

    index: int
    seed: int
    env_seeds: list[int]


@dataclass
class PairResult:
    """What a worker sends back for a pair: the seed and the returns of theta + sigma eps
    (`returns_pos`, one per episode) and theta - sigma eps (`returns_neg`); the env steps
    played; and the sums of the observations seen (for the running normalizer)."""

    index: int
    seed: int
    returns_pos: np.ndarray
    returns_neg: np.ndarray
    steps: int
    obs_sum: np.ndarray
    obs_sumsq: np.ndarray
    obs_count: int


@dataclass
class Episodes:
    """One episode per row: returns [K], lengths [K], per-row observation sums [K, d]."""

    returns: np.ndarray
    lengths: np.ndarray
    obs_sum: np.ndarray
    obs_sumsq: np.ndarray


class RunningStat:
    """Running sum, sum of squares and count of observations (Salimans et al.'s normalizer).

    mean = sum / count, std = sqrt(max(sumsq / count - mean^2, 1e-2)); the small initial count
    keeps the first generation's statistics at mean 0, std ~1 (no normalization yet).
    """

    def __init__(self, dim: int, eps: float = 1e-2):
        self.sum = np.zeros(dim, dtype=np.float64)
        self.sumsq = np.full(dim, eps, dtype=np.float64)
        self.count = eps

    def add(self, obs_sum: np.ndarray, obs_sumsq: np.ndarray, count: float) -> None:
        self.sum += obs_sum
        self.sumsq += obs_sumsq
        self.count += count

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        mean = self.sum / self.count
        std = np.sqrt(np.maximum(self.sumsq / self.count - mean**2, 1e-2))
        return mean.astype(np.float32), std.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"sum": self.sum.copy(), "sumsq": self.sumsq.copy(), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if np.shape(state["sum"]) != self.sum.shape:
            raise ValueError(
                f"the checkpoint's observation statistics have shape {np.shape(state['sum'])}, "
                f"this env's observations {self.sum.shape}"
            )
        self.sum = np.array(state["sum"], dtype=np.float64)
        self.sumsq = np.array(state["sumsq"], dtype=np.float64)
        self.count = float(state["count"])


class EpisodePlayer:
    """Plays one whole episode per row with a batched policy, on envs it keeps between calls.

    Envs payoff implements as a batched NumPy env (CartPole-v1) step together in one vector
    env; others are separate envs, of which only those still in an episode are stepped.
    Each episode starts from `env.reset(seed=...)` with its own seed, so its course depends on
    the seed and the policy only.
    """

    def __init__(self, env: EnvConfig, check_finite: bool = True):
        if env.vector is not None:
            raise EnvError(
                "evolution strategies play many episodes at once on envs they make themselves; "
                "pass an env id, an entry point or a factory, not a vector env"
            )
        check_env(env)
        self.env = env
        self.check_finite = check_finite
        plain = not (env.custom or env.wrappers or env.max_episode_steps)
        self.batched = plain and batched_id(env) is not None
        self.vector: gym.vector.VectorEnv | None = None
        self.envs: list[gym.Env] = []

    def close(self) -> None:
        if self.vector is not None:
            self.vector.close()
            self.vector = None
        for env in self.envs:
            env.close()
        self.envs = []

    def play(
        self,
        act: Callable[[np.ndarray, np.ndarray], np.ndarray],
        seeds: list[int],
        obs_stats: bool = False,
        step_limit: int = EPISODE_STEP_LIMIT,
    ) -> Episodes:
        """Episodes seeded `seeds[k]`, played by `act(obs, rows) -> actions`: the actions of
        rows `rows` (indices into `seeds`) given their observations `obs` [len(rows), ...].
        `obs_stats`: also sum each row's observations. Episodes still running after
        `step_limit` steps are cut there, with a warning."""
        count = len(seeds)
        if self.batched:
            if self.vector is None or self.vector.num_envs != count:
                if self.vector is not None:
                    self.vector.close()
                self.vector = make_vector_env(self.env, count, "batched")
            obs, _ = reset_envs(
                self.vector, [int(s) for s in seeds], self.env.id, "an evolution-strategies episode"
            )
            obs = np.asarray(obs, dtype=np.float32)
        else:
            while len(self.envs) < count:
                self.envs.append(make_env(self.env))
            obs = np.stack([self._reset(k, int(seeds[k])) for k in range(count)])
        self._check(obs, None)
        width = int(np.prod(obs.shape[1:]))
        returns = np.zeros(count)
        lengths = np.zeros(count, dtype=np.int64)
        obs_sum = np.zeros((count, width if obs_stats else 0))
        obs_sumsq = np.zeros_like(obs_sum)
        running = np.ones(count, dtype=bool)
        everyone = np.arange(count)
        while running.any():
            if obs_stats:
                seen = obs.reshape(count, width).astype(np.float64) * running[:, None]
                obs_sum += seen
                obs_sumsq += seen * seen
            if self.vector is not None:  # every env steps; the finished ones are ignored
                actions = act(obs, everyone)
                next_obs, rewards, terminated, truncated, _ = step_envs(
                    self.vector,
                    actions,
                    self.env.id,
                    int(lengths.max()) * count,
                    "an evolution-strategies episode",
                )
                next_obs = np.asarray(next_obs, dtype=np.float32)
                rewards = np.asarray(rewards, dtype=np.float64)
                done = np.asarray(terminated) | np.asarray(truncated)
            else:
                rows = np.flatnonzero(running)  # only the envs still in an episode
                actions = act(obs[rows], rows)
                next_obs, rewards = obs.copy(), np.zeros(count)
                done = ~running
                for action, k in zip(actions, rows, strict=True):
                    action = action.item() if action.ndim == 0 else action
                    when = (
                        f"step of an evolution-strategies episode, after {int(lengths[k]):,} "
                        f"steps of it"
                    )
                    with env_errors(self.envs[k].observation_space, self.env.id, when):
                        o, r, term, trunc, _ = self.envs[k].step(action)
                        next_obs[k], rewards[k], done[k] = o, float(r), bool(term or trunc)
            self._check(next_obs[running], rewards[running])
            returns += rewards * running
            lengths += running
            running &= ~done
            obs = next_obs
            if running.any() and lengths.max() >= step_limit:
                warn_unended(self.env.id, step_limit)
                break
        return Episodes(returns, lengths, obs_sum, obs_sumsq)

    def _reset(self, k: int, seed: int) -> np.ndarray:
        """Env k's first observation of an episode seeded `seed`, as float32."""
        env = self.envs[k]
        space = env.observation_space
        with env_errors(space, self.env.id, "reset of an evolution-strategies episode"):
            obs, _ = env.reset(seed=seed)
            return np.asarray(obs, dtype=np.float32).reshape(space.shape or ())

    def _check(self, obs: np.ndarray, rewards: np.ndarray | None) -> None:
        if not self.check_finite:
            return
        if not np.isfinite(obs).all() or (rewards is not None and not np.isfinite(rewards).all()):
            raise EnvError(
                f"env {self.env.id!r} returned a non-finite observation or reward during an "
                f"evolution-strategies episode; fix the env or set check_finite=false"
            )

    def evaluate(
        self,
        policy: FlatPolicy,
        theta: np.ndarray,
        episodes: int,
        seed: int,
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> EvalResult:
        """The unperturbed policy `theta` on `episodes` episodes seeded seed, seed + 1, ..."""
        params = np.asarray(theta, dtype=np.float32)[None]
        played = self.play(
            lambda obs, rows: policy.act(params, obs, obs_mean, obs_std),
            [seed + k for k in range(episodes)],
        )
        return EvalResult.of(played.returns, played.lengths)


def evaluate_pairs(
    player: EpisodePlayer,
    policy: FlatPolicy,
    theta: np.ndarray,
    sigma: float,
    tasks: list[PairTask],
    obs_mean: np.ndarray | None = None,
    obs_std: np.ndarray | None = None,
) -> list[PairResult]:
    """Play theta +- sigma * noise(seed) for every pair, all episodes at once.

    Rows are laid out pair by pair: the E episodes of theta + sigma eps, then the E of
    theta - sigma eps, each set on the pair's env seeds.
    """
    if not tasks:
        return []
    theta = np.asarray(theta, dtype=np.float32)
    params, seeds = [], []
    for task in tasks:
        step = np.float32(sigma) * noise(task.seed, policy.dim)
        episodes = len(task.env_seeds)
        params += [theta + step] * episodes + [theta - step] * episodes
        seeds += list(task.env_seeds) * 2
    stacked = np.stack(params)
    stats = obs_mean is not None
    played = player.play(
        lambda obs, rows: policy.act(stacked[rows], obs, obs_mean, obs_std), seeds, stats
    )
    results, row = [], 0
    for task in tasks:
        episodes = len(task.env_seeds)
        rows = slice(row, row + 2 * episodes)
        lengths = played.lengths[rows]
        results.append(
            PairResult(
                index=task.index,
                seed=task.seed,
                returns_pos=played.returns[row : row + episodes].copy(),
                returns_neg=played.returns[row + episodes : row + 2 * episodes].copy(),
                steps=int(lengths.sum()),
                obs_sum=played.obs_sum[rows].sum(0),
                obs_sumsq=played.obs_sumsq[rows].sum(0),
                obs_count=int(lengths.sum()) if stats else 0,
            )
        )
        row += 2 * episodes
    return results


class LocalPopulation:
    """`backend: local`: every pair of a generation played in this process."""

    def __init__(self, env: EnvConfig, policy: FlatPolicy, check_finite: bool = True):
        self.policy = policy
        self.player = EpisodePlayer(env, check_finite)

    def evaluate(
        self,
        theta: np.ndarray,
        sigma: float,
        tasks: list[PairTask],
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> list[PairResult]:
        return evaluate_pairs(self.player, self.policy, theta, sigma, tasks, obs_mean, obs_std)

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.player.close()
