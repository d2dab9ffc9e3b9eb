"""CartPole-v1 as batched NumPy: thousands of carts stepped in one vectorized call.

Dynamics, reward, termination (|x| > 2.4 or |theta| > 12 degrees), truncation (500 steps)
and the reset distribution (uniform in [-0.05, 0.05]^4, one seeded generator per env as
`SyncVectorEnv` would hold) are those of Gymnasium's CartPole-v1, and autoreset follows
Gymnasium 1.x's default NEXT_STEP mode: the step after an episode ends resets that env and
ignores its action. tests/test_deeprl_cartpole.py compares both step by step.

Registered as `payoff/CartPole-v1`: `gymnasium.make` gives the single env `CartPoleEnv`,
`gymnasium.make_vec(..., vectorization_mode="vector_entry_point")` the batched one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASS_POLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_STEPS = 500

_HIGH = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)


_FORCES = np.array([-FORCE_MAG, FORCE_MAG])  # pushed left (action 0), right (action 1)


def cartpole_step(state: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One Euler step of every cart: state [N, 4] float64, action [N] in {0, 1}.

    Returns the new state and whether each pole fell or cart left the track.

    Gymnasium's expressions, in its order of operations (so the same float64 results, bit
    for bit), written as in-place NumPy calls: with 64 carts each call costs more than its
    arithmetic, so fewer temporaries and one [N, 4] update of the state count.
    """
    theta, theta_dot = state[:, 2], state[:, 3]
    rates = np.empty_like(state)  # d/dt of (x, x_dot, theta, theta_dot)
    costheta, sintheta = np.cos(theta), np.sin(theta)
    # temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
    temp = np.square(theta_dot)
    temp *= POLEMASS_LENGTH
    temp *= sintheta
    temp += _FORCES.take(action == 1)  # Gymnasium's force_mag if action == 1 else -force_mag
    temp /= TOTAL_MASS
    # thetaacc = (GRAVITY * sintheta - costheta * temp)
    #            / (LENGTH * (4/3 - MASS_POLE * costheta**2 / TOTAL_MASS))
    denominator = np.square(costheta)
    denominator *= MASS_POLE
    denominator /= TOTAL_MASS
    np.subtract(4.0 / 3.0, denominator, out=denominator)
    denominator *= LENGTH
    thetaacc = np.multiply(GRAVITY, sintheta, out=rates[:, 3])
    thetaacc -= costheta * temp
    thetaacc /= denominator
    # xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    xacc = np.multiply(POLEMASS_LENGTH, thetaacc, out=rates[:, 1])
    xacc *= costheta
    xacc /= TOTAL_MASS
    np.subtract(temp, xacc, out=xacc)
    rates[:, 0] = state[:, 1]
    rates[:, 2] = theta_dot
    rates *= TAU
    new = rates.__iadd__(state)  # state + TAU * rate, per column as Gymnasium's x + tau * x_dot
    terminated = np.abs(new[:, 0]) > X_THRESHOLD
    terminated |= np.abs(new[:, 2]) > THETA_THRESHOLD
    return new, terminated


class CartPoleEnv(gym.Env[np.ndarray, np.int64]):
    """One cart, sharing `cartpole_step` with the batched env (used for eval and rendering)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, render_mode: str | None = None):
        self.observation_space = gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.render_mode = render_mode
        self.state = np.zeros((1, 4))
        self._renderer: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-0.05, 0.05, size=(4,))[None, :]
        return self.state[0].astype(np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.state, terminated = cartpole_step(self.state, np.asarray([action]))
        # Time limits come from the TimeLimit wrapper added at registration, as in Gymnasium.
        return self.state[0].astype(np.float32), 1.0, bool(terminated[0]), False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            from gymnasium.envs.classic_control.cartpole import CartPoleEnv as GymCartPole

            self._renderer = GymCartPole(render_mode="rgb_array")
        self._renderer.state = self.state[0]
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()


class CartPoleVectorEnv(gym.vector.VectorEnv):
    """`num_envs` carts in NumPy arrays, with NEXT_STEP autoreset and a 500-step time limit."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, max_episode_steps: int = MAX_STEPS, **kwargs: Any):
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.state = np.zeros((num_envs, 4))
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.needs_reset = np.zeros(num_envs, dtype=bool)
        self.rngs = [seeding.np_random(None)[0] for _ in range(num_envs)]
        self._ones = np.ones(num_envs, dtype=np.float32)  # copied as each step's rewards

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed
            self.rngs = [seeding.np_random(s)[0] for s in seeds]
        self.redraw(range(self.num_envs))
        self.elapsed[:] = 0
        self.needs_reset[:] = False
        return self.state.astype(np.float32), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        self.state, terminated = cartpole_step(self.state, actions)
        self.elapsed += 1
        rewards = self._ones.copy()
        # Envs whose episode ended on the previous step reset now, ignoring their action.
        resetting = np.flatnonzero(self.needs_reset)
        self.redraw(resetting.tolist())
        if len(resetting):
            self.elapsed[resetting] = 0
            terminated[resetting] = False
            rewards[resetting] = 0.0
        # As Gymnasium's TimeLimit: truncated at the limit even when the pole also fell.
        truncated = self.elapsed >= self.max_episode_steps
        self.needs_reset = terminated | truncated
        return self.state.astype(np.float32), rewards, terminated, truncated, {}

    def redraw(self, envs: Iterable[int], obs: np.ndarray | None = None) -> None:
        """New starting states for `envs` (indices), each from its env's own generator in
        order (CartPole-v1's reset distribution), copied to the float32 rows of `obs` if given."""
        for i in envs:
            self.state[i] = self.rngs[i].uniform(-0.05, 0.05, size=(4,))
            if obs is not None:
                obs[i] = self.state[i]

    def get_state(self) -> dict[str, Any]:
        """Everything that decides future steps (for exact resume)."""
        return {
            "state": self.state.copy(),
            "elapsed": self.elapsed.copy(),
            "needs_reset": self.needs_reset.copy(),
            "rngs": [rng.bit_generator.state for rng in self.rngs],
        }

    def set_state(self, saved: dict[str, Any]) -> None:
        self.state = np.array(saved["state"], dtype=np.float64)
        self.elapsed = np.array(saved["elapsed"], dtype=np.int64)
        self.needs_reset = np.array(saved["needs_reset"], dtype=bool)
        for rng, state in zip(self.rngs, saved["rngs"], strict=True):
            rng.bit_generator.state = state
