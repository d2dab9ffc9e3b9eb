"""A small gridworld with a hidden goal, as a task distribution for meta-RL (RL²).

A *trial* is one task: a goal cell drawn uniformly at random (never the start cell) and
hidden from the agent, then `episodes` episodes. Each episode starts in the grid's centre
and ends when the agent steps onto the goal (reward +1) or after `max_steps` moves. The
trial is the Gymnasium episode, so a recurrent policy keeps its hidden state across the
episode boundaries inside it: a good meta-learner searches in the first episode and walks
straight to the goal it found in the next ones (the paper's maze experiment, in
miniature). Each move costs `step_cost`.

Observation, as RL² feeds it back (`size` x `size` + 4 + 2 numbers):

    [one-hot of the agent's cell, one-hot of the previous action (zeros at an episode's
     first step), previous reward, done flag (1: the previous step ended an episode)]

info: "episode_in_trial" (0-based) and "found" (1.0 on the step that reaches the goal).

Registered as `payoff/GridGoal-v0` (kwargs `size`, `episodes`, `max_steps`, `step_cost`);
`reset(options={"goal": (row, col)})` fixes the goal, for evaluation on chosen tasks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import EnvError

MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # up, right, down, left


class GridGoalEnv(gym.Env[np.ndarray, np.int64]):
    """One trial: a hidden goal on a size x size grid, `episodes` episodes to reach it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(
        self,
        size: int = 5,
        episodes: int = 3,
        max_steps: int = 20,
        step_cost: float = 0.01,
        render_mode: str | None = None,
    ):
        for key, value, low in (
            ("size", size, 2),
            ("episodes", episodes, 1),
            ("max_steps", max_steps, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise EnvError(f"GridGoal: {key} must be an integer >= {low}, got {value!r}")
        if not 0 <= step_cost < 1:
            raise EnvError(f"GridGoal: step_cost must be in [0, 1), got {step_cost!r}")
        self.size, self.episodes, self.max_steps = size, episodes, max_steps
        self.step_cost = float(step_cost)
        self.start = np.array([size // 2, size // 2])
        cells = size * size
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(cells + 6,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.render_mode = render_mode
        self.goal = np.zeros(2, dtype=np.int64)
        self.position = self.start.copy()
        self.episode = 0
        self.moves = 0

    def _obs(self, prev_action: int | None, prev_reward: float, done: bool) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)  # type: ignore[arg-type]
        obs[self.position[0] * self.size + self.position[1]] = 1.0
        cells = self.size * self.size
        if prev_action is not None:
            obs[cells + prev_action] = 1.0
        obs[cells + 4] = prev_reward
        obs[cells + 5] = float(done)
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options and options.get("goal") is not None:
            goal = np.asarray(options["goal"], dtype=np.int64)
            if goal.shape != (2,) or not ((goal >= 0) & (goal < self.size)).all():
                raise EnvError(
                    f"GridGoal: options['goal'] must be (row, col) inside the {self.size}x"
                    f"{self.size} grid, got {options['goal']!r}"
                )
            self.goal = goal
        else:  # any cell but the start
            cells = [
                c
                for c in range(self.size * self.size)
                if c != self.start[0] * self.size + self.start[1]
            ]
            cell = int(self.np_random.choice(cells))
            self.goal = np.array([cell // self.size, cell % self.size])
        self.position = self.start.copy()
        self.episode = 0
        self.moves = 0
        return self._obs(None, 0.0, False), {"episode_in_trial": 0, "found": 0.0}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        move = int(action)
        if not 0 <= move < 4:
            raise EnvError(
                f"GridGoal: action {move} does not exist; valid: 0-3 (up, right, down, left)"
            )
        self.position = np.clip(self.position + MOVES[move], 0, self.size - 1)
        self.moves += 1
        found = bool((self.position == self.goal).all())
        reward = (1.0 if found else 0.0) - self.step_cost
        info = {"episode_in_trial": self.episode, "found": float(found)}
        episode_over = found or self.moves >= self.max_steps
        if not episode_over:
            return self._obs(move, reward, False), reward, False, False, info
        # The episode ends; the trial goes on from the start cell with the same hidden goal.
        self.episode += 1
        self.position = self.start.copy()
        self.moves = 0
        trial_over = self.episode >= self.episodes
        return self._obs(None, reward, True), reward, trial_over, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        cell = 24
        image = np.full((self.size * cell, self.size * cell, 3), 235, dtype=np.uint8)
        image[::cell, :] = image[:, ::cell] = 180
        for (row, col), colour in ((self.goal, (60, 170, 60)), (self.position, (40, 90, 200))):
            image[row * cell + 4 : (row + 1) * cell - 3, col * cell + 4 : (col + 1) * cell - 3] = (
                colour
            )
        return image
