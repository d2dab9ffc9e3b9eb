"""Tabular Q-learning and SARSA for discrete observation and action spaces.

The whole algorithm is one update per step:

    Q(s, a) <- Q(s, a) + alpha * [r + gamma * max_a' Q(s', a') - Q(s, a)]     (Q-learning)
    Q(s, a) <- Q(s, a) + alpha * [r + gamma * Q(s', a') - Q(s, a)]            (SARSA, a' taken)

with no bootstrap past a terminal state (but bootstrapping past a time-limit truncation),
epsilon-greedy exploration and schedules for epsilon and alpha.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from payoff.algos.agent import Agent
from payoff.algos.base import NO_FINAL_EVALUATION, AgentKeys, check_deterministic
from payoff.core.config import MAX_ENV_COPIES, in_range
from payoff.core.errors import ConfigError, EnvError
from payoff.core.schedules import Schedule
from payoff.core.seeding import seed_everything
from payoff.envs.make import EnvConfig, is_success, make_env
from payoff.envs.observations import observation_batch
from payoff.rollout.evaluate import EPISODE_STEP_LIMIT, warn_unended


def _frozenlake() -> EnvConfig:
    return EnvConfig(id="FrozenLake-v1", kwargs={"map_name": "4x4", "is_slippery": True})


@dataclass
class QLearningConfig(AgentKeys):
    """Tabular Q-learning / SARSA. Shared keys (seed, log_every, eval_every, eval_episodes,
    final_eval_episodes, checkpoint_every): payoff.algos.base.AgentKeys, counted in episodes.

    env: a Gymnasium env with Discrete observation and action spaces.
    method: 'q_learning' (off-policy, max over next actions) or 'sarsa' (on-policy).
    total_episodes: training length, in episodes.
    gamma: discount. On FrozenLake the only reward is reaching the goal, so gamma < 1 is
        what makes shorter safe paths worth more than longer ones.
    learning_rate: alpha, scheduled over training (a decaying alpha averages out the
        slippery-ice noise; a constant one keeps the table jittering).
    epsilon: exploration rate, scheduled over training.
    plateau_tolerance: the run reports the first evaluation within this much of the best
        success rate it reached, "episodes until it stopped improving"; for an env without
        a success rate, within this fraction of the range from its worst evaluated return to
        its best (a return's scale is the env's: 0.05 of Taxi's -200..20 is 11).
    device: cpu or auto (the table is a NumPy array on the CPU: there is no network to
        move); naming an accelerator is an error.
    """

    env: EnvConfig = field(default_factory=_frozenlake)
    method: Literal["q_learning", "sarsa"] = "q_learning"
    total_episodes: int = field(default=20_000, metadata=in_range(0, low_open=True))
    gamma: float = field(default=0.99, metadata=in_range(0, 1))
    learning_rate: Schedule = field(
        default_factory=lambda: Schedule(start=0.1, end=0.01, fraction=1.0),
        metadata=in_range(0, low_open=True),
    )
    epsilon: Schedule = field(
        default_factory=lambda: Schedule(start=1.0, end=0.01, fraction=0.8), metadata=in_range(0, 1)
    )
    initial_q: float = 0.0
    log_every: int = field(default=100, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    eval_episodes: int = field(
        default=200, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES)
    )
    final_eval_episodes: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    checkpoint_every: int = field(default=2000, metadata=in_range(0, low_open=True))
    plateau_tolerance: float = field(default=0.05, metadata=in_range(0))

    # payoff train runs (in Python both are off: learn(n) only trains)
    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 1000, "final_eval_episodes": 1000}

    def validate(self) -> None:
        if self.device not in ("cpu", "auto"):
            raise ConfigError(
                f"Q-learning is tabular: its Q-table is a NumPy array on the CPU, with no "
                f"network to put on a device; device must be cpu or auto, got {self.device!r}. "
                f"DQN (algo: dqn) learns a Q-network, which can go on a device."
            )


class QLearning(Agent):
    """Tabular Q-learning (or SARSA with method='sarsa')."""

    total_key = "total_episodes"
    loop_unit = "ep"
    config: QLearningConfig

    def setup(self) -> None:
        config = self.config
        self.env = make_env(config.env)
        obs_space, act_space = self.env.observation_space, self.env.action_space
        if not isinstance(obs_space, gym.spaces.Discrete):
            raise EnvError(
                f"Q-learning keeps one table row per state, so it needs a Discrete observation space; "
                f"{config.env.id!r} has {obs_space}. Use DQN (algo: dqn) for other observations "
                f"(wrapped in gymnasium.wrappers.FlattenObservation if Tuple or Dict), or wrap "
                f"the env so it numbers its states."
            )
        if not isinstance(act_space, gym.spaces.Discrete):
            raise EnvError(
                f"Q-learning needs a Discrete action space; {config.env.id!r} has {act_space}. "
                f"Use PPO (algo: ppo), which takes Box, MultiDiscrete and MultiBinary actions."
            )
        for name, space in (("observation", obs_space), ("action", act_space)):
            if int(space.start) != 0:
                raise EnvError(
                    f"Q-learning numbers states and actions from 0; {config.env.id!r} has "
                    f"{name} space {space}, numbered from {int(space.start)}. Wrap the env "
                    f"so it numbers them from 0 (gymnasium.wrappers.TransformObservation / "
                    f"TransformAction), or use DQN or PPO, which take the offset"
                )
        self.rng = seed_everything(config.seed)
        self.env.reset(seed=config.seed)
        self.q = np.full(
            (int(obs_space.n), int(act_space.n)), config.initial_q, dtype=np.float64
        )  # [S, A]
        self.env_steps = 0  # metrics are logged against env steps; the loop counts episodes
        self._fraction = 0.0
        self.evals: list[
            tuple[int, float, float | None]
        ] = []  # (episode, mean return, success rate)
        self.recent_success: deque[float] = deque(maxlen=100)

    def spaces(self) -> dict[str, str]:
        return {
            "observation_space": repr(self.env.observation_space),
            "action_space": repr(self.env.action_space),
        }

    def progress_step(self) -> int:
        return self.env_steps

    # ---- acting -----------------------------------------------------------------------
    def _explore(self, state: int, epsilon: float) -> int:
        """Epsilon-greedy, breaking ties between equal Q-values at random."""
        if self.rng.random() < epsilon:
            return int(self.rng.integers(self.q.shape[1]))
        row = self.q[state]
        best = np.flatnonzero(row == row.max())
        return int(best[0] if len(best) == 1 else self.rng.choice(best))

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """The action (an int) for one state, or an array of actions for a batch of states."""
        check_deterministic(deterministic, "act")
        states, single = observation_batch(observation, self.env.observation_space, np.int64)
        if deterministic:
            actions = [int(np.argmax(self.q[s])) for s in states]
        else:
            with self.predict_streams():
                actions = [self._explore(int(s), self.config.epsilon.end) for s in states]
        return actions[0] if single else np.array(actions, np.int64)

    # ---- learning ---------------------------------------------------------------------
    @property
    def episode(self) -> int:
        """Episodes played: the loop's step counter for tabular methods."""
        return self.state.step

    def train_until(self, total: int) -> None:
        """Train until `total` episodes have been played."""
        self._started, self._start_step = time.time(), self.env_steps
        super().train_until(total)

    def _check_state(self, state: Any, where: str) -> None:
        """EnvError when the env returned a state the table has no row for: one int in
        [0, n) (a float 2.0 or an array [2] would index the table wrongly or not at all)."""
        whole = isinstance(state, int | np.integer) or (  # the usual case first: every step
            np.ndim(state) == 0 and np.issubdtype(np.asarray(state).dtype, np.integer)
        )
        if not whole or not 0 <= state < self.q.shape[0]:
            kind = "" if whole else f" ({type(state).__name__}, shape {np.shape(state)})"
            raise EnvError(
                f"env {self.config.env.id!r} returned observation {state!r}{kind} from {where}; "
                f"its observation space {self.env.observation_space} needs one int in "
                f"[0, {self.q.shape[0]})"
            )

    def iterate(self) -> None:
        """One episode, updating Q after every step (Q-learning or SARSA target)."""
        config = self.config
        sarsa = config.method == "sarsa"
        q, env = self.q, self.env
        self._fraction = self.episode / config.total_episodes
        alpha, epsilon = config.learning_rate(self._fraction), config.epsilon(self._fraction)
        state, _ = env.reset()
        self._check_state(state, "reset")
        action = self._explore(state, epsilon)
        episode_return, done, length = 0.0, False, 0
        reward: float = 0.0
        info: dict[str, Any] = {}
        while not done:
            next_state, step_reward, terminated, truncated, info = env.step(action)
            self._check_state(next_state, "step")
            reward = float(step_reward)
            episode_return += reward
            self.env_steps += 1
            if sarsa:
                next_action = self._explore(next_state, epsilon)
                bootstrap = q[next_state, next_action]
            else:
                bootstrap = q[next_state].max()
            target = reward + (0.0 if terminated else config.gamma * bootstrap)
            q[state, action] += alpha * (target - q[state, action])
            if not sarsa:
                next_action = self._explore(next_state, epsilon)
            state, action = next_state, next_action
            done = terminated or truncated
            length += 1
            if not done and length >= EPISODE_STEP_LIMIT:
                warn_unended(config.env.id)
                done = True
        self.state.step += 1
        self.state.add_returns([episode_return])
        success = is_success(config.env.id, info, reward)
        if success is not None:
            self.recent_success.append(float(success))

    def progress_postfix(self) -> dict[str, Any]:
        return {
            "step": self.env_steps,
            "ret": float(np.mean(self.recent_returns)),
            "eps": self.config.epsilon(self._fraction),
            "sps": int(
                (self.env_steps - self._start_step) / max(time.time() - self._started, 1e-9)
            ),
        }

    def log_training(self) -> None:
        config = self.config
        metrics: dict[str, Any] = {
            "episode": self.episode,
            "train/return": float(np.mean(self.recent_returns)),
            "train/epsilon": config.epsilon(self._fraction),
            "train/learning_rate": config.learning_rate(self._fraction),
            "train/mean_max_q": float(self.q.max(axis=1).mean()),
        }
        if self.recent_success:
            metrics["train/success_rate"] = float(np.mean(self.recent_success))
        self.log(self.env_steps, **metrics)

    def evaluate_now(self) -> None:
        config = self.config
        result = self.evaluate(config.eval_episodes, seed=config.seed + 10_000 + self.episode)
        self.evals.append((self.episode, result.mean_return, result.success_rate))
        metrics = {"episode": self.episode, "eval/mean_return": result.mean_return}
        if result.success_rate is not None:
            metrics["eval/success_rate"] = result.success_rate
        self.log(self.env_steps, **metrics)

    def episodes_to_plateau(self) -> int | None:
        """First evaluated episode count within plateau_tolerance of the best evaluation."""
        if not self.evals:
            return None
        scores = [s if s is not None else r for _, r, s in self.evals]
        best = max(scores)
        returns = any(s is None for _, _, s in self.evals)
        tolerance = self.config.plateau_tolerance * ((best - min(scores)) if returns else 1.0)
        for (episode, _, _), score in zip(self.evals, scores, strict=True):
            if score >= best - tolerance:
                return episode
        return None

    def finish(self) -> None:
        config = self.config
        result = self.evaluate(config.final_eval_episodes) if config.final_eval_episodes else None
        plateau = self.episodes_to_plateau()
        if result is not None:
            self.log(
                self.env_steps,
                episode=self.episode,
                **{f"final/{k}": v for k, v in result.to_dict().items()},
            )
        if self.run is not None:
            self.run.write_summary(
                **(
                    {"final_eval": result.to_dict()}
                    if result is not None
                    else {"final_line": NO_FINAL_EVALUATION.format("final_eval_episodes=0")}
                ),
                episodes=self.episode,
                steps=self.env_steps,
                episodes_to_plateau=plateau,
                plateau_note=(
                    f"greedy-policy evaluation came within {config.plateau_tolerance:g} of its "
                    f"best {'success rate' if self.evals[-1][2] is not None else 'return (as a fraction of its range)'} "
                    f"after {plateau} episodes ({len(self.evals)} evaluations)"
                    if plateau is not None
                    else None
                ),
            )

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "loop": self.state.state_dict(),
            "q": self.q.copy(),
            "env_steps": self.env_steps,
            "recent_success": list(self.recent_success),
            "rng": self.rng.bit_generator.state,
            "env_rng": self.env.unwrapped.np_random.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        q = np.asarray(state["q"], dtype=np.float64)
        if q.shape != self.q.shape:
            raise ValueError(f"Q-table shape {q.shape} does not match this env's {self.q.shape}")
        self.q = q
        self.state.load_state_dict(state["loop"])
        self.env_steps = int(state["env_steps"])
        self.recent_success = deque(state["recent_success"], maxlen=100)
        self.rng.bit_generator.state = state["rng"]
        self.env.unwrapped.np_random.bit_generator.state = state["env_rng"]


ALGORITHM = QLearning
