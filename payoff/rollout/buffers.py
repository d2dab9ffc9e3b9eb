"""Preallocated on-policy rollout storage: one [num_steps, num_envs] tensor per field."""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from payoff.core.errors import ConfigError
from payoff.core.state import tensors_to
from payoff.rollout.replay import machine_memory


@dataclass
class RolloutStorage:
    """What one rollout of `num_steps` x `num_envs` collected, plus the masks learners need.

    valid[t, i] is False on the step where env i only reset itself (Gymnasium's NEXT_STEP
    autoreset ignores that action and pays no reward); learners skip those steps.
    dones[t, i] = terminated or truncated: no return flows from step t+1 back into step t.
    A truncated step's reward already includes gamma * V(final observation) (see
    `bootstrap_truncated`), so every done can be treated as the end of the return.
    """

    obs: torch.Tensor  # [T, N, *obs_shape]
    actions: torch.Tensor  # [T, N, *act_shape]
    logprobs: torch.Tensor  # [T, N]
    values: torch.Tensor  # [T, N]
    rewards: torch.Tensor  # [T, N]
    terminated: torch.Tensor  # [T, N] bool
    truncated: torch.Tensor  # [T, N] bool
    valid: torch.Tensor  # [T, N] bool
    next_values: torch.Tensor  # [N], V(obs after the last step)
    info: dict[str, torch.Tensor] = field(default_factory=dict)  # [T, N] per requested info key

    @classmethod
    def allocate(
        cls,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: torch.dtype,
        obs_dtype: torch.dtype = torch.float32,
        info_keys: tuple[str, ...] = (),
    ) -> RolloutStorage:
        shape = (num_steps, num_envs)
        check_rollout_fits(shape, obs_shape, obs_dtype, act_shape, act_dtype, len(info_keys))
        return cls(
            obs=torch.zeros(*shape, *obs_shape, dtype=obs_dtype),
            actions=torch.zeros(*shape, *act_shape, dtype=act_dtype),
            logprobs=torch.zeros(shape),
            values=torch.zeros(shape),
            rewards=torch.zeros(shape),
            terminated=torch.zeros(shape, dtype=torch.bool),
            truncated=torch.zeros(shape, dtype=torch.bool),
            valid=torch.ones(shape, dtype=torch.bool),
            next_values=torch.zeros(num_envs),
            info={key: torch.zeros(shape) for key in info_keys},
        )

    @classmethod
    def for_spaces(
        cls,
        num_steps: int,
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        info_keys: tuple[str, ...] = (),
    ) -> RolloutStorage:
        """`allocate` for an env's spaces: a Box's actions as float32 values, flat as the
        Gaussian actor samples them (a (2, 2) Box's as 4), any discrete space's (Discrete,
        MultiDiscrete, MultiBinary) as int64 indices."""
        box = isinstance(action_space, gym.spaces.Box)
        shape = tuple(action_space.shape or ())
        return cls.allocate(
            num_steps,
            num_envs,
            tuple(observation_space.shape or ()),
            (int(np.prod(shape)),) if box else shape,
            torch.float32 if box else torch.long,
            info_keys=info_keys,
        )

    def to(self, device: torch.device) -> RolloutStorage:
        """A copy of every field on `device` (the runner fills the CPU copy through NumPy
        views; learners on an accelerator update from this one)."""
        return tensors_to(self, device)

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def dones(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def bootstrap_truncated(self, gamma: float) -> None:
        """Add gamma * V(final obs) to the reward of steps cut by a time limit (not a terminal).

        Under NEXT_STEP autoreset the observation returned with a truncation *is* the final
        observation, so its value is simply the next row of `values` (or `next_values`).
        """
        fields = (self.values, self.next_values, self.truncated, self.terminated, self.rewards)
        on_cpu = self.rewards.device.type == "cpu"  # NumPy views: cheaper calls, same float32 ops
        values, next_values, truncated, terminated, rewards = (
            (f.numpy() for f in fields) if on_cpu else fields
        )
        xp = np if on_cpu else torch
        following = xp.concatenate([values[1:], next_values[None]])  # V(s_{t+1})
        cut = truncated & ~terminated
        rewards += gamma * following * cut


def check_rollout_fits(
    shape: tuple[int, int],
    obs_shape: tuple[int, ...],
    obs_dtype: torch.dtype,
    act_shape: tuple[int, ...],
    act_dtype: torch.dtype,
    info_fields: int = 0,
) -> None:
    """ConfigError, before any of it is allocated, when a rollout of shape [num_steps,
    num_envs] would not fit in this machine's memory (a num_steps or num_envs typed, or read
    from a file, orders of magnitude too large would otherwise grow until the OS kills it)."""
    memory = machine_memory()
    steps = int(shape[0]) * int(shape[1])
    per_step = (
        int(np.prod(obs_shape, dtype=np.int64)) * obs_dtype.itemsize
        + int(np.prod(act_shape, dtype=np.int64)) * act_dtype.itemsize
        + 4 * (3 + info_fields)  # logprobs, values, rewards, info
        + 3  # terminated, truncated, valid
    )
    if memory is None or steps * per_step <= memory:
        return
    raise ConfigError(
        f"a rollout of num_steps {shape[0]:,} x num_envs {shape[1]:,} with "
        f"{tuple(obs_shape)} observations needs {steps * per_step / 2**30:,.1f} GiB, more than "
        f"this machine's {memory / 2**30:.1f} GiB; lower num_steps or num_envs"
    )
