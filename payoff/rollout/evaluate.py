"""Run a policy for whole episodes and summarize returns and success."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError, EnvError, PayoffError, TrainingError
from payoff.envs.make import EnvConfig, is_success, make_env
from payoff.track.progress import LateProgress

Policy = Callable[[Any], Any]  # one observation -> one action

EPISODE_STEP_LIMIT = 100_000
"""Whole-episode loops (evaluation, evolution strategies' episodes, Q-learning's episodes)
stop an episode that has not ended after this many steps and count it as truncated there:
an env with no time limit of its own, under a policy that never reaches a terminal state,
would otherwise run forever without a word. Set env.max_episode_steps to choose the cut."""


def warn_unended(env_id: str, limit: int = EPISODE_STEP_LIMIT) -> None:
    """Say that episodes of `env_id` were cut at `limit` steps, and how to set a limit."""
    warnings.warn(
        f"episodes of env {env_id!r} had not ended after {limit:,} steps, so they were cut "
        f"there (counted as truncated): the env returned neither terminated nor truncated. "
        f"Give it a time limit (env.max_episode_steps=N, or register it with "
        f"max_episode_steps) if its episodes are meant to end",
        RuntimeWarning,
        stacklevel=3,
    )


EARLY_NOTE_STEPS = 10_000  # when an evaluation's episodes without a time limit say so

# An evaluation played one episode at a time stops once this many were cut at the step
# limit (a policy that loops in an env without a time limit loops in every episode).
CUT_EPISODES_BEFORE_STOPPING = 5


def note_long_episodes(env_id: str, steps: int, limit: int = EPISODE_STEP_LIMIT) -> None:
    """Say early, on the console, that episodes of an env without a time limit are still
    running after `steps` steps and will run to `limit`: a planning agent can take hours to
    play 5 of them to 100,000, and the user should know why the run seems stuck."""
    print(
        f"note: evaluation episodes of env {env_id!r} are still running after {steps:,} steps; "
        f"they run until they end or are cut at {limit:,} (env.max_episode_steps=N sets a "
        f"time limit)",
        file=sys.stderr,
    )


class EvaluationStopped(PayoffError):
    """An evaluation ended early by a pending stop signal (`stopped_when`); its episodes
    count for nothing."""


# What evaluations ask, between two steps, whether a stop signal is pending (the training
# loop's GracefulInterrupt.requested, see `stopped_when`).
_stop_requested: list[Callable[[], bool]] = []


@contextmanager
def stopped_when(requested: Callable[[], bool]) -> Iterator[None]:
    """Within this context an evaluation (`evaluate_policy`, `evaluate_batched`) ends with
    EvaluationStopped at its next step once `requested()` is true. The training loop passes
    its GracefulInterrupt's flag, so that one Ctrl-C, SIGTERM or SIGHUP stops a periodic
    evaluation of 100,000 episodes as it stops an iteration, instead of after it."""
    _stop_requested.append(requested)
    try:
        yield
    finally:
        _stop_requested.remove(requested)


def check_stop(env_id: str) -> None:
    """EvaluationStopped where a stop signal is pending (see `stopped_when`)."""
    if any(requested() for requested in _stop_requested):
        raise EvaluationStopped(f"the evaluation on env {env_id!r} was stopped by a signal")


def check_actions(actions: Any, env_id: str, step: int) -> None:
    """TrainingError when a policy's continuous actions are NaN or inf: its weights have
    diverged, and the env, stepped with them, would be blamed for the NaN it returns."""
    if (
        isinstance(actions, np.ndarray)
        and actions.dtype.kind == "f"
        and not np.isfinite(actions).all()
    ):
        raise TrainingError(
            f"the policy's actions are not finite at step {step} of env {env_id!r} "
            f"({actions[~np.isfinite(actions)][:3].tolist()}): its weights have diverged (NaN "
            f"or inf). Lower learning_rate, clip gradients (max_grad_norm) or scale the rewards "
            f"down; a checkpoint saved since then holds the broken weights"
        )


@dataclass
class EvalResult:
    """Summary of evaluation episodes; success_rate is None where the env defines no success.

    episode_returns / episode_lengths: each episode's, in seed order (Stable-Baselines3's
    `return_episode_rewards`); not in `to_dict`, which is the summary a run logs.
    """

    mean_return: float
    std_return: float
    episodes: int
    success_rate: float | None
    mean_length: float
    episode_returns: list[float] = field(default_factory=list, repr=False)
    episode_lengths: list[int] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, returns: Any, lengths: Any, success_rate: float | None = None) -> EvalResult:
        """The summary of per-episode returns and lengths."""
        returns, lengths = np.asarray(returns, dtype=float), np.asarray(lengths)
        return cls(
            mean_return=float(returns.mean()),
            std_return=float(returns.std()),
            episodes=len(returns),
            success_rate=success_rate,
            mean_length=float(lengths.mean()),
            episode_returns=[float(r) for r in returns],
            episode_lengths=[int(n) for n in lengths],
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["episode_returns"], data["episode_lengths"]
        return data

    def line(self) -> str:
        text = f"mean return {self.mean_return:.3f} ± {self.std_return:.3f} over {self.episodes} episodes"
        if self.success_rate is not None:
            text += f", success rate {self.success_rate:.3f}"
        return text


def check_episodes(episodes: Any) -> None:
    """evaluate(n) takes a whole number of episodes, at least 1."""
    if isinstance(episodes, bool) or not isinstance(episodes, int | np.integer) or episodes < 1:
        raise ConfigError(f"evaluate() takes a number of episodes >= 1, got {episodes!r}")


def evaluate_policy(
    env: EnvConfig,
    policy: Policy,
    episodes: int,
    seed: int,
    step_limit: int = EPISODE_STEP_LIMIT,
) -> EvalResult:
    """Play `episodes` episodes of `policy` on a fresh env seeded with `seed` (each cut at
    `step_limit` steps, with a warning, if it has not ended by then)."""
    check_episodes(episodes)
    environment = make_env(env)
    spec = getattr(environment, "spec", None)
    unlimited = getattr(spec, "max_episode_steps", None) is None  # its own time limit ends them
    noted = False
    cut = 0  # episodes cut at step_limit so far
    returns, lengths, successes = [], [], []
    progress = LateProgress(episodes, f"evaluating {env.id}")
    try:
        for episode in range(episodes):
            if cut >= CUT_EPISODES_BEFORE_STOPPING:  # a policy that loops: 1,000 such
                warnings.warn(  # episodes of a Q-table's final evaluation ran for a long time
                    f"evaluation of env {env.id!r} stopped after {episode} of {episodes} "
                    f"episodes: {cut} of them never ended and were cut at {step_limit:,} "
                    f"steps, and the policy would likely loop in the rest too; its result is "
                    f"over the {episode} played",
                    RuntimeWarning,
                    stacklevel=2,
                )
                break
            obs, _ = environment.reset(seed=seed + episode)
            total, length, done = 0.0, 0, False
            reward: float = 0.0
            info: dict[str, Any] = {}
            while not done:
                check_stop(env.id)  # between steps: one episode may run 100,000 of them
                action = policy(obs)
                check_actions(action, env.id, length)
                obs, step_reward, terminated, truncated, info = environment.step(action)
                reward = float(step_reward)
                total += reward
                length += 1
                done = terminated or truncated
                if not done and length >= step_limit:
                    if not cut:
                        warn_unended(env.id, step_limit)
                    cut += 1
                    done = True
                if length == EARLY_NOTE_STEPS and not done and not noted and unlimited:
                    note_long_episodes(env.id, length, step_limit)
                    noted = True  # once per evaluation
                progress.tick(1, int(done))
            returns.append(total)
            lengths.append(length)
            successes.append(is_success(env.id, info, float(reward)))
    finally:
        environment.close()
        progress.close()
    defined = [s for s in successes if s is not None]
    return EvalResult.of(returns, lengths, float(np.mean(defined)) if defined else None)


def _frame(render: Callable[[], Any], env_id: str) -> np.ndarray:
    """One rgb_array frame from `render`, or one EnvError saying why there is none."""
    raised = False
    try:
        image = render()
    except NotImplementedError:
        image, raised = None, True
    picture = np.asarray(image)
    if not (picture.ndim == 2 or picture.ndim == 3 and picture.shape[-1] in (3, 4)):
        if env_id.startswith("payoff/"):  # payoff's own: nothing for its user to fix
            raise EnvError(
                f"payoff's env {env_id!r} draws no frames, so there is no GIF of it; "
                f"`payoff eval RUN` scores its episodes"
            )
        gave = (
            "raised NotImplementedError"
            if raised
            else f"gave {type(image).__name__}"
            + ("" if image is None else f" of shape {picture.shape}")
        )
        raise EnvError(
            f"env {env_id!r} does not render RGB frames (render() {gave}): "
            f"for a GIF, give the env's __init__ a render_mode=None argument and return an "
            f"[H, W, 3] (or [H, W]) uint8 array from render() when it is 'rgb_array'"
        )
    if picture.dtype != np.uint8:  # floats in [0, 1] would come out black, and no one says
        raise EnvError(
            f"env {env_id!r} renders {picture.dtype} frames; a GIF needs uint8 values 0-255: "
            f"return (frame * 255).astype(np.uint8) from render() for colours in [0, 1]"
        )
    return picture


def _headless() -> None:
    """pygame-based renderers need no window for rgb_array; keep SDL from looking for one."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")


def _episode_frames(
    reset: Callable[[int], Any],
    step: Callable[[Any], tuple[Any, bool]],
    render: Callable[[], Any],
    name: str,
    episodes: int,
    seed: int,
    max_frames: int,
) -> list[np.ndarray]:
    """The frames of `episodes` episodes: reset(seed) -> obs, step(obs) -> (obs, ended)."""
    frames: list[np.ndarray] = []
    for episode in range(episodes):
        obs = reset(seed + episode)
        frames.append(_frame(render, name))
        done = False
        while not done and len(frames) < max_frames:
            obs, done = step(obs)
            frames.append(_frame(render, name))
    return frames


def record_frames(
    env: EnvConfig, policy: Policy, episodes: int, seed: int, max_frames: int = 1000
) -> list[np.ndarray]:
    """Render `episodes` episodes of `policy` as rgb_array frames."""
    _headless()
    with warnings.catch_warnings():  # an env without rgb_array: the caller's note says so
        warnings.filterwarnings("ignore", message=".*render_mode.*")
        environment = make_env(env, render_mode="rgb_array")

    def step(obs: Any) -> tuple[Any, bool]:
        obs, _, terminated, truncated, _ = environment.step(policy(obs))
        return obs, terminated or truncated

    try:
        return _episode_frames(
            lambda s: environment.reset(seed=s)[0],
            step,
            environment.render,
            str(env.id),
            episodes,
            seed,
            max_frames,
        )
    finally:
        environment.close()


def record_team_frames(
    env: EnvConfig, policy: Policy, episodes: int, seed: int, max_frames: int = 1000
) -> list[np.ndarray]:
    """Render `episodes` episodes of a PettingZoo parallel env (`payoff/PettingZoo-v0`,
    its kwargs) in which every agent acts by `policy`, given all agents' observations
    [n_agents, ...] at once: a shared-parameter team as it was trained, where
    `record_frames`' single-agent view shows one learner among random players."""
    from payoff.envs.pettingzoo import team_env

    _headless()
    team = team_env(dict(env.kwargs), render_mode="rgb_array")

    def step(obs: Any) -> tuple[Any, bool]:
        obs, _, terminated, truncated = team.step(np.asarray(policy(obs)))
        return obs, terminated or truncated

    try:
        name = str(env.kwargs.get("env_id", env.id))
        return _episode_frames(team.reset, step, team.env.render, name, episodes, seed, max_frames)
    finally:
        team.env.close()
