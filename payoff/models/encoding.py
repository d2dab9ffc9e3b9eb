"""What a classic-RL network sees: observations from a Gymnasium space as one float row.

`ObsEncoder` flattens Box observations or one-hot encodes Discrete ones, then normalizes them
with an `ObsNormalizer` (running mean and variance, off unless enabled) that lives inside the
network, so a saved actor carries its statistics. `obs_dim` is the row's width, and refuses
spaces the MLP networks cannot take with the way to flatten them; the warnings say when raw
pixels or far-from-zero Box observations go in unnormalized.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from payoff.core.errors import EnvError


def obs_dim(space: gym.Space, env_id: str | None = None) -> int:
    """Input width of a network for observations from `space` (of env `env_id`, named in
    the error for a space the networks cannot take)."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    of = f"env {env_id!r} has observations {space}: " if env_id else f"got {space}; "
    raise EnvError(
        f"{of}payoff's MLP networks take Box or Discrete observations. Flatten them into one "
        f"Box: env.wrappers=[{{name: FlattenObservation}}] in a recipe or on the command "
        f"line, or gymnasium.wrappers.FlattenObservation(env) in Python (Dict, Tuple, "
        f"MultiDiscrete and MultiBinary spaces flatten; predict then takes flat observations, "
        f"gymnasium.spaces.flatten(space, obs))"
    )


class ObsNormalizer(nn.Module):
    """Running mean/variance of observations; identity unless `enabled`.

    The statistics are buffers, so they travel with the module's state_dict (checkpoints,
    saved policies). Only the algorithm that collects rollouts calls `update`.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, enabled: bool = False, clip: float = 10.0):
        super().__init__()
        self.enabled = enabled
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge a batch [B, dim] into the running statistics (parallel-variance formula)."""
        if not self.enabled:
            return
        batch = batch.to(self.mean.device, torch.float64).reshape(-1, self.mean.shape[0])
        b_mean, b_var, b_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return obs
        normed = (obs - self.mean.to(obs.dtype)) / torch.sqrt(self.var.to(obs.dtype) + 1e-8)
        return normed.clamp(-self.clip, self.clip)


# (what, space) already warned about in this process: once per space, not for the actor,
# its critic and a reload each
_WARNED: set[tuple[str, str]] = set()


def _warn_once(what: str, space: gym.Space, message: str, stacklevel: int) -> None:
    """warnings.warn(message) the first time `what` is said of `space` in this process."""
    if (what, repr(space)) in _WARNED:
        return
    _WARNED.add((what, repr(space)))
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def is_image(space: gym.Space) -> bool:
    """Whether observations of `space` are uint8 images (0..255 pixels in 2 or more axes)."""
    return (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) >= 2
        and int(space.high.max()) > 1  # 0..255 pixels, not a 0/1 occupancy grid
    )


def warn_raw_pixels(space: gym.Space, remedy: str = "") -> None:
    """Warn, once per space, when observations are uint8 images (0..255) an MLP reads as
    they are: it learns slowly or not at all from raw pixels."""
    if not is_image(space):
        return
    _warn_once(
        "pixels",
        space,
        f"observations {space} are uint8 images, flattened into an MLP as 0..255: it learns "
        f"slowly or not at all from raw pixels (SB3 divides them by 255). Scale them first "
        f"with an ObservationWrapper of yours that gives float32 in [0, 1] "
        f"(env.wrappers=[{{name: my_module:ScaleImage}}]){', ' + remedy if remedy else ''}",
        stacklevel=5,
    )


def warn_box_far_from_zero(space: gym.Space) -> None:
    """Warn, once per space, when a Gaussian policy's first actions would mostly be clipped:
    it starts with its mean near 0 and std 1, so a Box that leaves out 0, or has 0 at (or
    near) a bound, such as [0, 10], gets its bound for 40% or more of them."""
    if not isinstance(space, gym.spaces.Box):
        return
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)

    def normal_cdf(x: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))

    clipped = normal_cdf(low) + (1.0 - normal_cdf(high))  # the share of N(0, 1) out of bounds
    if not (clipped >= 0.4).any():
        return
    where = int(np.argmax(clipped))
    bounds = f"[{low.reshape(-1)[where]:g}, {high.reshape(-1)[where]:g}]"
    leaves_out = bool(((low > 0) | (high < 0)).any())
    _warn_once(
        "box without 0",
        space,
        f"action space {space} "
        + (
            "leaves out 0: a Gaussian policy starts near 0 with std 1, so its actions are "
            "clipped to the nearest bound until its mean walks there"
            if leaves_out
            else f"puts 0 at or near a bound (dimension {where}: {bounds}): a Gaussian policy "
            f"starts near 0 with std 1, so {clipped.reshape(-1)[where]:.0%} of its first "
            f"actions there are clipped to that bound"
        )
        + ", and learning may never see the rest of the range. Rescale the actions to "
        "[-1, 1] (env.wrappers=[{name: RescaleAction, kwargs: {min_action: -1, max_action: "
        "1}}], as SB3 recommends), or use SAC or TD3, which scale to the Box's bounds",
        stacklevel=4,
    )


class ObsEncoder(nn.Module):
    """Flattens Box observations / one-hot encodes Discrete ones, then normalizes."""

    def __init__(self, space: gym.Space, normalizer: ObsNormalizer | None):
        super().__init__()
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.dim = obs_dim(space)
        self.space = space
        # Discrete(n, start=s) numbers its states s..s+n-1; the one-hot counts from 0
        self.start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        self.normalizer = normalizer if normalizer is not None else ObsNormalizer(self.dim)
        if not self.normalizer.enabled:
            warn_raw_pixels(space, "or set normalize_obs=true")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            index = obs.long().reshape(-1) - self.start
            if len(index) and (int(index.min()) < 0 or int(index.max()) >= self.dim):
                bad = int((index[(index < 0) | (index >= self.dim)][0]) + self.start)
                raise EnvError(
                    f"observation {bad} is not in the env's observation space {self.space} "
                    f"(states {self.start}..{self.start + self.dim - 1})"
                )
            return nn.functional.one_hot(index, self.dim).float()
        return self.normalizer.forward(obs.reshape(obs.shape[0], -1).float())
