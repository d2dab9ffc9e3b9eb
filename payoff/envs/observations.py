"""What `predict` accepts: one observation of the env's space, or a batch of them.

Every agent's `predict(observation)` takes either one observation (shaped as the space) or a
batch ([N, *shape]). Anything else used to reach the network and fail there, as a matmul's
shape error or a one-hot's "class values must be smaller than num_classes"; a vector of the
wrong length could even be read as a batch of scalars. `observation_batch` says what was
expected instead.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import EnvError


def observation_batch(
    observation: Any, space: gym.Space, dtype: Any = np.float32
) -> tuple[np.ndarray, bool]:
    """(batch [N, *shape] as `dtype`, whether one observation was given) for `space`."""
    if isinstance(space, gym.spaces.Discrete) and isinstance(observation, int | np.integer):
        # one state, the common case of a per-step predict: checked with Python ints
        low, high = _states(space)
        if not low <= int(observation) <= high:
            raise _outside(space, observation)
        return np.array([observation], dtype=dtype), True
    try:
        obs = np.asarray(observation)
    except ValueError as error:  # ragged nested lists
        raise EnvError(f"predict: the observation is not an array ({error})") from None
    shape = tuple(space.shape or ())
    if obs.dtype == object or not np.issubdtype(obs.dtype, np.number) and obs.dtype != bool:
        flat = (
            " (a dict or tuple observation: flatten it as the agent's env did, e.g. "
            "gymnasium.spaces.flatten(env_space, obs))"
            if isinstance(observation, dict | tuple)
            else ""
        )
        raise EnvError(
            f"predict: an observation of {space} must be numbers, got {obs.dtype} values{flat}"
        )
    if np.issubdtype(obs.dtype, np.floating) and np.isnan(obs).any():
        # a network maps NaN to an arbitrary action (training refuses NaN too, check_finite;
        # infinities pass here, for envs that train with check_finite off)
        at = int(np.flatnonzero(np.isnan(obs.reshape(-1)))[0])
        raise EnvError(
            f"predict: the observation holds NaN (element {at}); a policy's action for it "
            f"would be arbitrary: give the observation the env would"
        )
    if obs.shape == shape:
        single = True
    elif obs.ndim == len(shape) + 1 and obs.shape[1:] == shape:
        if not len(obs):
            raise EnvError(f"predict: an empty batch (shape {obs.shape}): nothing to act on")
        single = False
    else:
        batch = f"(N, {', '.join(map(str, shape))})" if shape else "(N,)"
        raise EnvError(
            f"predict: expected one observation of shape {shape} or a batch of shape {batch} "
            f"for {space}, got shape {obs.shape}"
        )
    if isinstance(space, gym.spaces.Discrete):
        low, high = _states(space)
        outside = (obs != np.round(obs)) | (obs < low) | (obs > high)
        if np.any(outside):
            raise _outside(space, obs.reshape(-1)[np.flatnonzero(outside.reshape(-1))[0]])
    batch_obs = obs[None] if single else obs
    return batch_obs.astype(dtype, copy=False), single


def _states(space: gym.spaces.Discrete) -> tuple[int, int]:
    """The first and last state of a Discrete space."""
    return int(space.start), int(space.start + space.n - 1)


def _outside(space: gym.spaces.Discrete, state: Any) -> EnvError:
    low, high = _states(space)
    return EnvError(
        f"predict: state {state} is outside {space}: its states are the integers {low}..{high}"
    )
