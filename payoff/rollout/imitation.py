"""Batched rollouts for imitation learning: learner/expert mixtures and evaluation traces.

DAgger drives with the mixture policy  pi_i = beta * expert + (1 - beta) * learner  (a coin
per env per step) and asks the expert to label every state visited; evaluation plays whole
episodes and keeps per-step traces (e.g. the kart's cross-track error) for the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from payoff.envs.make import EnvConfig, check_env
from payoff.rollout.evaluate import EPISODE_STEP_LIMIT, warn_unended
from payoff.rollout.experts import Expert, finite_labels
from payoff.rollout.vector import refuse_non_finite, reset_envs, step_envs

Act = Callable[[np.ndarray], np.ndarray]  # [N, *obs] -> [N, *act]


def make_envs(env: EnvConfig, num_envs: int) -> gym.vector.VectorEnv:
    """`num_envs` copies of env: its own batched vector env where it registers one
    (payoff/KartTrack-v0 does), else payoff's default vector env."""
    check_env(env)
    plain = not (env.custom or env.wrappers or env.max_episode_steps or ":" in env.id)
    if plain and env.vector is None and gym.spec(env.id).vector_entry_point is not None:
        return gym.make_vec(
            env.id, num_envs=num_envs, vectorization_mode="vector_entry_point", **env.kwargs
        )
    from payoff.rollout.vector import make_vector_env

    return make_vector_env(env, num_envs)


def _info_array(info: dict[str, Any], key: str, num: int, default: float) -> np.ndarray:
    """A per-env value from a vector env's info dict (absent entries get `default`)."""
    if key not in info:
        return np.full(num, default)
    values = np.asarray(info[key], dtype=np.float64)
    mask = info.get("_" + key)
    if mask is not None:
        values = np.where(np.asarray(mask), values, default)
    return values


@dataclass
class MixtureBatch:
    """States visited by the mixture policy, labelled by the expert."""

    observations: np.ndarray  # [L, *obs]
    expert_actions: np.ndarray  # [L, *act]
    episodes_finished: int = 0
    episodes_succeeded: int = 0
    expert_steps: int = 0  # how many of the steps the expert (not the learner) drove
    returns: list[float] = field(default_factory=list)


def collect_mixture(
    envs: gym.vector.VectorEnv,
    obs: np.ndarray,
    learner: Act,
    expert: Expert,
    beta: float,
    labels: int,
    rng: np.random.Generator,
    env_id: str = "the env",
) -> tuple[MixtureBatch, np.ndarray]:
    """Step `envs` from `obs` until `labels` states have been visited and labelled.

    Each state the policy acts in gets one expert label. Under NEXT_STEP autoreset the
    observation returned when an episode ends is followed by a step whose action the env
    ignores (it resets); that terminal observation is not labelled. Returns the
    batch and the observations to continue from.
    """
    num = envs.num_envs
    observations, actions = [], []
    collected = finished = succeeded = expert_steps = 0
    resetting = np.zeros(num, dtype=bool)
    running_return = np.zeros(num)
    returns: list[float] = []
    while collected < labels:
        expert_act = finite_labels(expert, np.asarray(expert.act(obs)))
        learner_act = np.asarray(learner(obs))
        use_expert = rng.random(num) < beta
        shape = (num,) + (1,) * (learner_act.ndim - 1)
        step_act = np.where(use_expert.reshape(shape), expert_act, learner_act)
        take = np.flatnonzero(~resetting)[: labels - collected]
        observations.append(obs[take])
        actions.append(expert_act[take])
        collected += len(take)
        expert_steps += int(use_expert[take].sum())
        obs, reward, terminated, truncated, info = checked_step(
            envs, step_act, env_id, collected, "DAgger's rollouts"
        )
        running_return += np.where(resetting, 0.0, reward)
        done = np.asarray(terminated) | np.asarray(truncated)
        if done.any():
            success = _info_array(info, "is_success", num, 0.0) > 0.5
            finished += int(done.sum())
            succeeded += int((done & success).sum())
            returns += running_return[done].tolist()
            running_return[done] = 0.0
        resetting = done
    if resetting.any():
        # Finish the pending autoresets so the next call starts from real states.
        obs, *_ = envs.step(np.asarray(learner(obs)))
    batch = MixtureBatch(
        np.concatenate(observations),
        np.concatenate(actions),
        finished,
        succeeded,
        expert_steps,
        returns,
    )
    return batch, obs


@dataclass
class EpisodeTraces:
    """Whole evaluation episodes, one per env, with per-step traces."""

    returns: np.ndarray  # [E]
    lengths: np.ndarray  # [E]
    success: np.ndarray  # [E] bool (False where the env defines no success)
    has_success: bool
    cross_track_error: np.ndarray | None  # [E, T] metres, NaN after the episode ended

    @property
    def success_rate(self) -> float | None:
        return float(self.success.mean()) if self.has_success else None


def checked_step(
    envs: gym.vector.VectorEnv, actions: Any, env_id: str, steps: int, during: str
) -> tuple[Any, ...]:
    """`step_envs`, then one EnvError for a non-finite observation or reward: imitation's
    loops do not go through the VectorRunner, whose check the other algorithms have."""
    obs, reward, terminated, truncated, info = step_envs(envs, actions, env_id, steps, during)
    refuse_non_finite(obs, reward, env_id, f"during {during}, after {steps:,} steps")
    return obs, reward, terminated, truncated, info


def play_episodes(
    env: EnvConfig, act: Act, episodes: int, seed: int, max_steps: int = EPISODE_STEP_LIMIT
) -> EpisodeTraces:
    """Play `episodes` episodes at once (one per env) with the deterministic policy `act`;
    an episode still running after `max_steps` is cut there, with the shared warning."""
    envs = make_envs(env, episodes)
    try:
        obs, _ = reset_envs(envs, seed, env.id, "evaluation")
        returns = np.zeros(episodes)
        lengths = np.zeros(episodes, dtype=np.int64)
        success = np.zeros(episodes, dtype=bool)
        running = np.ones(episodes, dtype=bool)
        has_success, errors = False, []
        while running.any() and lengths.max() < max_steps:
            obs, reward, terminated, truncated, info = checked_step(
                envs, np.asarray(act(obs)), env.id, int(lengths.sum()), "evaluation"
            )
            returns += np.asarray(reward) * running
            lengths += running
            if "cross_track_error" in info:
                errors.append(
                    np.where(
                        running, _info_array(info, "cross_track_error", episodes, np.nan), np.nan
                    )
                )
            done = (np.asarray(terminated) | np.asarray(truncated)) & running
            if "is_success" in info:
                has_success = True
                success |= done & (_info_array(info, "is_success", episodes, 0.0) > 0.5)
            running &= ~done
        if running.any():  # cut at max_steps: said, as every whole-episode loop says it
            warn_unended(env.id, max_steps)
    finally:
        envs.close()
    return EpisodeTraces(
        returns=returns,
        lengths=lengths,
        success=success,
        has_success=has_success,
        cross_track_error=np.stack(errors, axis=1) if errors else None,
    )


def discounted_returns(
    env: EnvConfig, act: Act, steps: int, gamma: float, seed: int, num_envs: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Visited observations and their discounted returns-to-go under `act`, from episodes that
    finished within about `steps` env steps (unfinished tails are dropped: their returns are
    unknown). For fitting a critic to a cloned policy before RL."""
    envs = make_envs(env, num_envs)
    try:
        obs, _ = reset_envs(envs, seed, env.id, "the critic's value prefit")
        pending: list[list[tuple[np.ndarray, float]]] = [[] for _ in range(num_envs)]
        observations: list[np.ndarray] = []
        returns: list[float] = []
        resetting = np.zeros(num_envs, dtype=bool)
        taken = 0
        while taken < steps:
            next_obs, reward, terminated, truncated, _ = checked_step(
                envs, np.asarray(act(obs)), env.id, taken, "the critic's value prefit"
            )
            done = np.asarray(terminated) | np.asarray(truncated)
            for i in np.flatnonzero(~resetting):
                pending[i].append((obs[i], float(reward[i])))
                taken += 1
                if done[i]:
                    running = 0.0
                    for state, r in reversed(pending[i]):
                        running = r + gamma * running
                        observations.append(state)
                        returns.append(running)
                    pending[i] = []
            resetting = done
            obs = next_obs
    finally:
        envs.close()
    if not returns:
        return np.zeros((0, *obs.shape[1:]), dtype=np.float32), np.zeros(0)
    return np.stack(observations).astype(np.float32), np.asarray(returns)
