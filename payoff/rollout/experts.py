"""Experts for imitation learning: anything with `act(observations) -> actions` on a batch.

    expert = make_expert("kart")                 # scripted centre-line driver for KartTrack
    actions = expert.act(observations)           # [B, obs_dim] -> [B, act_dim] (or [B] ints)

Shipped experts: a scripted kart driver (curvature feed-forward plus a PD correction on the
centre line), a scripted CartPole balancer, any trained payoff policy (`PolicyExpert`, from
a saved policy file, or a run directory via payoff.algos.shared.imitation.expert_from_run), any plain function (`FunctionExpert`),
and a human at the keyboard (`KeyboardExpert`, pygame, needs a display).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from payoff.core.errors import ConfigError, EnvError, PayoffError, suggest


@runtime_checkable
class Expert(Protocol):
    """Labels states with actions: act([B, ...] observations) -> [B, ...] actions."""

    def act(self, observations: np.ndarray) -> np.ndarray: ...


class FunctionExpert:
    """Any callable `fn(observations) -> actions` (batched) as an Expert."""

    def __init__(self, fn: Callable[[np.ndarray], Any]):
        self.fn = fn

    def act(self, observations: np.ndarray) -> np.ndarray:
        return np.asarray(self.fn(observations))


class KartExpert:
    """Scripted KartTrack driver: steer along the bend ahead, and correct offset and heading.

    steering angle = atan(wheelbase * curvature a little ahead)   (feed-forward: the bend)
                     - heading_gain * heading error
                     - atan(offset_gain * offset / speed)          (Stanley's cross-track term)
    With `throttle=True` (for envs made with throttle=True) it also holds the reference speed.
    With the default gains it holds the kart within a few centimetres of the centre line, so
    its demonstrations show almost no corrections: exactly the data that makes behaviour
    cloning brittle.
    """

    def __init__(
        self,
        offset_gain: float = 2.5,
        heading_gain: float = 1.0,
        preview: float = 0.5,
        half_width: float = 1.0,
        speed: float = 6.0,
        max_steer: float = 0.5,
        throttle: bool = False,
    ):
        self.throttle = throttle
        self.offset_gain, self.heading_gain, self.preview = offset_gain, heading_gain, preview
        self.half_width, self.speed, self.max_steer = half_width, speed, max_steer

    def act(self, observations: np.ndarray) -> np.ndarray:
        from payoff.envs.kart import CURVATURE_SCALE, WHEELBASE

        obs = np.asarray(observations, dtype=np.float64).reshape(-1, observations.shape[-1])
        offset = obs[:, 0] * self.half_width
        heading_error = obs[:, 1]
        speed = np.maximum(obs[:, 2] * self.speed, 0.5)
        # Blend the curvature here and 2 m ahead: the kart needs a moment to turn in.
        curvature = ((1 - self.preview) * obs[:, 3] + self.preview * obs[:, 4]) / CURVATURE_SCALE
        steer = (
            np.arctan(WHEELBASE * curvature)
            - self.heading_gain * heading_error
            - np.arctan(self.offset_gain * offset / speed)
        )
        steering = np.clip(steer / self.max_steer, -1.0, 1.0)[:, None]
        if not self.throttle:
            return steering.astype(np.float32)
        # With a throttle, hold the reference speed (observation 2 is speed / reference).
        hold = np.clip(3.0 * (1.0 - obs[:, 2]), -1.0, 1.0)[:, None]
        return np.concatenate([steering, hold], axis=1).astype(np.float32)


class CartPoleExpert:
    """Scripted CartPole balancer: push toward where the pole is falling (PD on angle)."""

    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations, dtype=np.float64).reshape(-1, 4)
        # Small terms on cart position/velocity keep the cart from drifting off the screen.
        push = obs[:, 2] + 0.3 * obs[:, 3] + 0.02 * obs[:, 0] + 0.1 * obs[:, 1]
        return (push > 0).astype(np.int64)


class PolicyExpert:
    """A trained payoff policy (any batched `predict`) as an expert."""

    def __init__(self, predict: Callable[[np.ndarray], Any], source: str = ""):
        self._predict = predict
        self.source = source

    @classmethod
    def load(cls, path: str | Path) -> PolicyExpert:
        """From a policy file written by `payoff.models.save_policy` (e.g. a run's policy.safetensors).

        For a whole run directory (any algorithm), use
        `payoff.algos.shared.imitation.expert_from_run`.
        """
        from payoff.models.policy_file import load_policy

        actor, _ = load_policy(path)
        return cls(lambda obs: actor.predict(obs, deterministic=True), str(path))

    def act(self, observations: np.ndarray) -> np.ndarray:
        return np.asarray(self._predict(np.asarray(observations)))


class KeyboardExpert:
    """A human at the keyboard labels states (pygame window; needs a display).

    For KartTrack: left/right arrows steer. For discrete actions: keys 0-9 pick the action.
    Each `act` call shows the state and waits `wait_ms` for keys, so a human can drive DAgger.
    """

    def __init__(self, action_space: gym.Space, wait_ms: int = 100):
        display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        if os.environ.get("SDL_VIDEODRIVER") == "dummy" or not display:
            raise PayoffError(
                "the keyboard expert needs a display (no $DISPLAY/$WAYLAND_DISPLAY, or "
                "SDL_VIDEODRIVER=dummy); run on a desktop session, or use a scripted or trained expert"
            )
        try:
            import pygame
        except ImportError:
            raise PayoffError(
                "the keyboard expert needs pygame: pip install pygame-ce (or pygame)"
            ) from None
        self.pygame = pygame
        self.action_space, self.wait_ms = action_space, wait_ms
        try:
            pygame.init()
            self.screen = pygame.display.set_mode((320, 120))
        except pygame.error as err:
            raise PayoffError(f"the keyboard expert could not open a window: {err}") from None
        pygame.display.set_caption("payoff expert: arrows steer, 0-9 pick an action")

    def act(self, observations: np.ndarray) -> np.ndarray:
        pygame = self.pygame
        pygame.time.wait(self.wait_ms)
        pygame.event.pump()
        keys = pygame.key.get_pressed()
        rows = len(observations)
        if isinstance(self.action_space, gym.spaces.Discrete):
            chosen = next((d for d in range(10) if keys[pygame.K_0 + d]), 0)
            return np.full(rows, min(chosen, int(self.action_space.n) - 1), dtype=np.int64)
        action = np.zeros((rows, *(self.action_space.shape or ())), dtype=np.float32)
        action[:, 0] = float(keys[pygame.K_LEFT]) - float(keys[pygame.K_RIGHT])
        return action


EXPERTS: dict[str, Callable[..., Expert]] = {"kart": KartExpert, "cartpole": CartPoleExpert}


def make_expert(spec: str, action_space: gym.Space | None = None, **kwargs: Any) -> Expert:
    """An expert from a name ('kart', 'cartpole', 'keyboard') or a path to a policy file."""
    if spec in EXPERTS:
        return EXPERTS[spec](**kwargs)
    if spec == "keyboard":
        if action_space is None:
            raise ConfigError("the keyboard expert needs the env's action space")
        return KeyboardExpert(action_space, **kwargs)
    if Path(spec).exists():
        return PolicyExpert.load(spec)
    valid = [*EXPERTS, "keyboard", "<policy file>", "<run directory> (in recipes)"]
    raise ConfigError(
        f"unknown expert {spec!r}.{suggest(spec, list(EXPERTS) + ['keyboard'])} Valid: {', '.join(valid)}"
    )


def finite_labels(expert: Expert, actions: np.ndarray) -> np.ndarray:
    """`actions` an expert labelled, or EnvError where any is NaN or inf: a label like that
    would train a NaN policy."""
    if actions.dtype.kind == "f" and not np.isfinite(actions).all():
        raise EnvError(
            f"expert {type(expert).__name__} labelled a state with a non-finite action "
            f"({actions[~np.isfinite(actions)][:3].tolist()}); such labels would train a NaN "
            f"policy: fix the expert"
        )
    return actions


def check_expert(expert: Expert, observation_space: gym.Space, action_space: gym.Space) -> None:
    """Ask the expert about two sample states and check its answers fit the action space."""
    sample = np.stack([observation_space.sample(), observation_space.sample()])
    if isinstance(observation_space, gym.spaces.Box):
        sample = np.clip(np.nan_to_num(sample, posinf=1.0, neginf=-1.0), -1.0, 1.0).astype(
            observation_space.dtype
        )
    try:
        actions = np.asarray(expert.act(sample))
    except Exception as err:
        raise EnvError(
            f"expert {type(expert).__name__} failed on observations from {observation_space}: "
            f"{type(err).__name__}: {err} (is it an expert for a different env?)"
        ) from None
    if isinstance(action_space, gym.spaces.Discrete):
        ok = actions.shape == (2,) and np.issubdtype(actions.dtype, np.integer)
        ok = ok and bool(
            (
                (actions >= action_space.start) & (actions < action_space.start + action_space.n)
            ).all()
        )
        want = f"[B] integers in [{action_space.start}, {action_space.start + action_space.n})"
    elif isinstance(action_space, gym.spaces.Box):
        ok = actions.shape == (2, *action_space.shape)
        want = f"[B, {', '.join(map(str, action_space.shape))}] floats"
        if ok and not np.isfinite(actions.astype(np.float64)).all():
            raise EnvError(
                f"expert {type(expert).__name__} returned non-finite actions {actions.tolist()} "
                f"for 2 sample states of {observation_space}: labels of NaN or inf would train "
                f"a NaN policy"
            )
    else:
        raise EnvError(f"imitation supports Discrete and Box action spaces, got {action_space}")
    if not ok:
        raise EnvError(
            f"expert {type(expert).__name__} returned actions of shape {actions.shape} "
            f"({actions.dtype}) for a batch of 2, but the env's action space {action_space} "
            f"needs {want}: expert and env do not match. Set the config key 'expert' to one "
            f"for this env: a policy file or run directory of an agent trained on it (e.g. "
            f"`payoff train` it with PPO first), 'keyboard', or a shipped scripted expert "
            f"({', '.join(f'{name!r}' for name in EXPERTS)}: for their own envs only)"
        )
