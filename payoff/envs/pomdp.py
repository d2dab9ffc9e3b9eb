"""Partially observed CartPole: the cart's position and the pole's angle, no velocities.

CartPole-v1's observation is (x, x_dot, theta, theta_dot). With only (x, theta) a single
observation does not say which way the pole is falling, so a memoryless policy can only
react to where it is; a policy that remembers the last observations can difference them
into velocities. This is the standard test for recurrent policies (sb3-contrib's
RecurrentPPO benchmark "CartPole-v1 without velocities", CleanRL's masked CartPole).

Registered as `payoff/CartPoleNoVelocity-v1`, with the same dynamics, reward, termination,
500-step limit, reset distribution and seeding as payoff's batched `payoff/CartPole-v1`
(the single env for evaluation and rendering, the batched one for training).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from payoff.envs.cartpole import THETA_THRESHOLD, X_THRESHOLD, CartPoleEnv, CartPoleVectorEnv

VISIBLE = [0, 2]  # x and theta of (x, x_dot, theta, theta_dot)
_HIGH = np.array([X_THRESHOLD * 2, THETA_THRESHOLD * 2], dtype=np.float32)


class CartPoleNoVelocityEnv(CartPoleEnv):
    """One cart; observations (x, theta)."""

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode)
        self.observation_space = gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[VISIBLE], info

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[VISIBLE], reward, terminated, truncated, info


class CartPoleNoVelocityVectorEnv(CartPoleVectorEnv):
    """`num_envs` carts in NumPy; observations (x, theta)."""

    def __init__(self, num_envs: int = 1, **kwargs: Any):
        super().__init__(num_envs, **kwargs)
        self.single_observation_space = gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[:, VISIBLE], info

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, info = super().step(actions)
        return obs[:, VISIBLE], rewards, terminated, truncated, info
