"""Preallocated ring buffers: transitions (s, a, r, s', terminated) for off-policy learning,
and self-play positions (planes, pi, z) for AlphaZero."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from payoff.core.errors import ConfigError
from payoff.core.state import tensors_to


@dataclass
class TransitionBatch:
    """A minibatch of transitions as tensors ([B, ...])."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")

    def rows(self, index: slice) -> TransitionBatch:
        """The transitions at `index` (views, no copy)."""
        return TransitionBatch(
            self.obs[index],
            self.actions[index],
            self.rewards[index],
            self.next_obs[index],
            self.terminated[index],
        )

    def to(self, device: torch.device) -> TransitionBatch:
        """The batch on `device`: one copy per field (the buffer itself is NumPy, on the CPU)."""
        return tensors_to(self, device)


def interleave(first: TransitionBatch, second: TransitionBatch, steps: int) -> TransitionBatch:
    """`steps` minibatches of two sources, one after the other: rows k*B..(k+1)*B (B = the two
    parts' sizes together) are the k-th part of `first` then the k-th part of `second`."""

    def join(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        parts = (a.reshape(steps, -1, *a.shape[1:]), b.reshape(steps, -1, *b.shape[1:]))
        return torch.cat(parts, dim=1).reshape(-1, *a.shape[1:])

    return TransitionBatch(
        *(join(getattr(first, f), getattr(second, f)) for f in TransitionBatch.FIELDS)
    )


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where sysconf cannot say: Windows)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(capacity: int, obs_shape: tuple[int, ...]) -> None:
    """ConfigError when `capacity` transitions' observations (float32, twice: obs and
    next_obs) would not fit in this machine's memory; a warning past half of it."""
    needed = 2 * 4 * int(capacity) * int(np.prod(obs_shape, dtype=np.int64))
    memory = machine_memory()
    if memory is None or needed <= memory // 2:
        return
    fits = max(int(memory // 2 // max(needed // max(capacity, 1), 1)), 1)
    message = (
        f"the replay buffer of {capacity:,} transitions of {tuple(obs_shape)} observations needs "
        f"{needed / 2**30:.1f} GiB (observations kept as float32, with the next ones) of this "
        f"machine's {memory / 2**30:.1f} GiB; replay.size={fits:,} fits in half of it"
    )
    if needed > memory:
        raise ConfigError(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class ReplayBuffer:
    """Fixed-capacity storage; the oldest transitions are overwritten first.

    Only `terminated` is stored as "done": a time-limit truncation still bootstraps from
    the next observation, so it must not cut the target.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...] = (),
        act_dtype: type = np.int64,
    ):
        """act_shape / act_dtype: () and int64 for Discrete actions (indices), the Box's
        shape and float32 for continuous ones. A buffer larger than the machine's memory is
        refused now (NumPy's zeros reserve it lazily: the run would fail once it filled)."""
        check_fits(capacity, obs_shape)
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros((self.capacity, *act_shape), dtype=act_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.position = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """Add a batch of transitions (one per env), wrapping around at capacity."""
        n = len(rewards)
        index = (self.position + np.arange(n)) % self.capacity
        self.obs[index] = obs
        self.actions[index] = actions
        self.rewards[index] = rewards
        self.next_obs[index] = next_obs
        self.terminated[index] = terminated
        self.position = int((self.position + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> TransitionBatch:
        """Uniformly sampled transitions."""
        return self.take(rng.integers(0, self.size, size=batch_size))

    def latest(self, batch_size: int, repeat: int = 1) -> TransitionBatch:
        """The most recently added transitions (replay switched off), `repeat` times over."""
        n = min(batch_size, self.size)
        return self.take(np.tile((self.position - 1 - np.arange(n)) % self.capacity, repeat))

    def take(self, index: np.ndarray) -> TransitionBatch:
        return TransitionBatch(
            obs=torch.from_numpy(self.obs[index]),
            actions=torch.from_numpy(self.actions[index]),
            rewards=torch.from_numpy(self.rewards[index]),
            next_obs=torch.from_numpy(self.next_obs[index]),
            terminated=torch.from_numpy(self.terminated[index]),
        )

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (only the filled part) and the write position."""
        n = self.size
        return {
            "obs": self.obs[:n].copy(),
            "next_obs": self.next_obs[:n].copy(),
            "actions": self.actions[:n].copy(),
            "rewards": self.rewards[:n].copy(),
            "terminated": self.terminated[:n].copy(),
            "position": self.position,
            "size": self.size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(
                f"replay buffer holds {n} transitions, more than capacity {self.capacity}"
            )
        for key in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, key)[:n] = state[key]
        self.position, self.size = int(state["position"]), n


class PositionReplay:
    """The latest self-play (planes, pi, z) triples, in preallocated circular arrays."""

    def __init__(self, capacity: int, shape: tuple[int, int], num_actions: int):
        self.planes = np.zeros((capacity, 2, *shape), dtype=np.uint8)  # [N, 2, H, W]
        self.policies = np.zeros((capacity, num_actions), dtype=np.float32)  # [N, A]
        self.values = np.zeros(capacity, dtype=np.float32)  # [N]
        self.capacity, self.size, self.position = capacity, 0, 0

    def add(self, planes: np.ndarray, policy: np.ndarray, value: float) -> None:
        i = self.position
        self.planes[i], self.policies[i], self.values[i] = planes, policy, value
        self.position = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        index = rng.integers(self.size, size=batch)
        return (
            torch.from_numpy(self.planes[index].astype(np.float32)),
            torch.from_numpy(self.policies[index]),
            torch.from_numpy(self.values[index]),
        )

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {
            "planes": self.planes[:n].copy(),
            "policies": self.policies[:n].copy(),
            "values": self.values[:n].copy(),
            "position": self.position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["values"])
        if n > self.capacity:
            raise ValueError(f"replay holds {n} positions, more than replay_size {self.capacity}")
        self.planes[:n], self.policies[:n], self.values[:n] = (
            state["planes"],
            state["policies"],
            state["values"],
        )
        self.size, self.position = n, int(state["position"])
