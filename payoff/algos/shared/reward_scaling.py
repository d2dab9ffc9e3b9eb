"""Reward scaling by the running spread of the discounted return (`normalize_reward`).

What SB3's VecNormalize(norm_reward=True) and Gymnasium's NormalizeReward do, kept inside
the learner so that logged episode returns and evaluations stay in the env's own units:

    G_t = gamma * G_{t-1} + r_t          (per env; G back to 0 after an episode ends)
    r_t' = clip(r_t / sqrt(Var[G] + eps), -clip, clip)

with Var[G] a running variance over every G_t seen so far (parallel-variance update, as
SB3's RunningMeanStd). The rewards keep their sign and their mean is not subtracted, so a
reward of 0 stays 0. It makes the value targets O(1) whatever the env's reward scale, so
PPO's joint gradient clip is not spent on a huge value loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RewardScaler:
    """Running variance of the discounted return, per-env returns, and the scaling."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.returns = np.zeros(num_envs)  # each env's discounted return so far
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4  # SB3's starting point

    def _update(self, values: np.ndarray) -> None:
        """Fold a batch of returns into the running mean and variance (Chan et al.)."""
        n = values.size
        batch_mean, batch_var = float(values.mean()), float(values.var())
        delta, total = batch_mean - self.mean, self.count + n
        m2 = self.var * self.count + batch_var * n + delta * delta * self.count * n / total
        self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total

    def scale(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray) -> None:
        """Scale a rollout's rewards [T, N] in place, step by step as they came; `done`
        [T, N] ends an env's return after that step, `valid` [T, N] is False where the env
        only reset (no reward, no step of an episode)."""
        for t in range(rewards.shape[0]):
            took = valid[t]
            self.returns[took] = self.returns[took] * self.gamma + rewards[t][took]
            if took.any():
                self._update(self.returns[took])
            scaled = rewards[t] / np.sqrt(self.var + self.epsilon)
            rewards[t] = np.clip(scaled, -self.clip, self.clip)
            self.returns[done[t]] = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "returns": self.returns.tolist(),
            "mean": self.mean,
            "var": self.var,
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        returns = np.asarray(state["returns"], dtype=np.float64)
        if returns.shape != self.returns.shape:
            raise ValueError(f"reward scaler for {returns.size} envs, not {self.returns.size}")
        self.returns = returns
        self.mean, self.var, self.count = (float(state[k]) for k in ("mean", "var", "count"))
