"""Advantage and return estimators over [T, N] rollouts (time first, then envs).

`dones[t]` means no return flows from step t+1 back into step t (the episode ended at t,
by termination or truncation; a truncated step's reward already carries the bootstrap).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

        delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}

    rewards, values, dones: [T, N]; next_values: [N] = V(s_T). Returns (advantages, returns)
    with returns = advantages + values, the value-function targets. lam=1 gives n-step
    returns minus the baseline (A2C); lam=0 the one-step TD error.
    """
    # On the CPU every op runs on NumPy views of the same memory: the same float32 ops
    # (bitwise, tested), each a fraction of a torch call's cost on [T, N] this small.
    on_cpu = rewards.device.type == "cpu"
    xp: Any = np if on_cpu else torch
    if on_cpu:
        rewards, values, next_values = rewards.numpy(), values.numpy(), next_values.numpy()
        done = dones.numpy().astype(np.float32)
    else:
        done = dones.float()
    not_done = 1.0 - done
    following = xp.concatenate([values[1:], next_values[None]])  # V(s_{t+1}) for every t
    deltas = rewards + gamma * following * not_done - values  # all steps at once
    discounts = gamma * lam * not_done
    advantages = xp.empty_like(rewards)
    # Only the recursion itself runs per step.
    last: Any = 0.0
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + discounts[t] * last
        advantages[t] = last
    returns = advantages + values
    if on_cpu:
        return torch.from_numpy(advantages), torch.from_numpy(returns)
    return advantages, returns


def returns_to_go(rewards: torch.Tensor, dones: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted sum of future rewards within each episode: G_t = r_t + gamma * G_{t+1}.

    Rewards after the end of the rollout are unknown, so G_t is only the true return for
    steps whose episode ended inside the rollout; see `completed_episodes`.
    """
    not_done = 1.0 - dones.float()
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * not_done[t] * running
        returns[t] = running
    return returns


def completed_episodes(dones: torch.Tensor) -> torch.Tensor:
    """[T, N] mask of steps whose episode ends at or after them within the rollout."""
    # Reverse cumulative "any done from here on" along time.
    return torch.flip(torch.cummax(torch.flip(dones.int(), [0]), dim=0).values, [0]).bool()


def normalize(values: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit std (advantage normalization)."""
    return (values - values.mean()) / (values.std() + eps)
