"""Networks for continuous control with off-policy actor-critics (SAC, TD3).

Actions live in [-1, 1]^d inside these networks; `ActionScaler` maps them to a Box's bounds
and back. A critic is an ensemble of Q(s, a) networks evaluated in one batched pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from payoff.core.errors import EnvError
from payoff.core.imports import check_weights
from payoff.models.encoding import obs_dim, warn_raw_pixels
from payoff.models.mlp import ACTIVATIONS, as_numpy, mlp, refuse_integer_box

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # keeps exp(log_std) finite and the policy not deterministic


def check_continuous(
    observation_space: gym.Space, action_space: gym.Space, algorithm: str, env_id: str
) -> None:
    """An EnvError naming what `algorithm` needs unless the env has Box observations and a
    bounded Box action space."""
    if not isinstance(action_space, gym.spaces.Box):
        raise EnvError(
            f"{algorithm} outputs continuous actions, so it needs a Box action space; "
            f"{env_id!r} has {action_space}. "
            + (
                "For Discrete actions use DQN (algo: dqn) or PPO (algo: ppo)."
                if isinstance(action_space, gym.spaces.Discrete)
                else "PPO, A2C and REINFORCE (algo: ppo, a2c, reinforce) take it."
            )
        )
    refuse_integer_box(action_space, algorithm, repr(env_id))
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise EnvError(
            f"{algorithm} squashes actions into the Box's bounds, so they must be finite; "
            f"{env_id!r} has {action_space}. Declare the range its actions really take in the "
            f"env's action_space (e.g. Box(-1, 1, ...)), or wrap it in a gymnasium.ActionWrapper "
            f"whose action_space is finite and whose action() maps onto the env's; gymnasium's "
            f"RescaleAction and ClipAction cannot rescale from infinite bounds. PPO (algo: ppo) "
            f"takes unbounded Box actions as they are."
        )
    if not isinstance(observation_space, gym.spaces.Box):
        raise EnvError(
            f"{algorithm}'s networks take Box observations; {env_id!r} has {observation_space}. "
            f"Wrap the env with gymnasium.wrappers.FlattenObservation (Dict/Tuple) first."
        )


class ActionScaler:
    """[-1, 1]^d <-> the Box [low, high]: a = low + (u + 1) / 2 * (high - low)."""

    def __init__(self, action_space: gym.spaces.Box):
        self.shape = tuple(action_space.shape or ())
        self.low = np.asarray(action_space.low, dtype=np.float32).reshape(-1)
        self.high = np.asarray(action_space.high, dtype=np.float32).reshape(-1)
        self.dim = len(self.low)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """[B, d] actions in [-1, 1] -> [B, *shape] in the Box (clipped: float error stays in)."""
        scaled = self.low + (np.asarray(unit, dtype=np.float32) + 1.0) * 0.5 * (
            self.high - self.low
        )
        return np.clip(scaled, self.low, self.high).reshape(len(scaled), *self.shape)

    def to_unit(self, actions: np.ndarray) -> np.ndarray:
        """Box actions [B, *shape] -> [B, d] in [-1, 1] (for demonstrations or random play)."""
        flat = np.asarray(actions, dtype=np.float32).reshape(len(actions), -1)
        return 2.0 * (flat - self.low) / (self.high - self.low) - 1.0


class EnsembleLinear(nn.Module):
    """`members` independent Linear layers applied to [members, B, in] in one batched matmul."""

    def __init__(self, members: int, in_features: int, out_features: int):
        super().__init__()
        check_weights(
            members * (in_features + 1) * out_features,
            f"{members} ensemble layers of {in_features} x {out_features}",
        )
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features))
        # nn.Linear's default initialization, member by member.
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)  # [members, B, out]


class QEnsemble(nn.Module):
    """`members` Q(s, a) networks (SAC and TD3 use two: the clipped double-Q trick)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        members: int = 2,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise EnvError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        self.members = members
        widths = [obs_dim(observation_space) + action_dim, *[int(h) for h in hidden]]
        layers: list[nn.Module] = []
        for width_in, width_out in zip(widths[:-1], widths[1:], strict=True):
            layers += [EnsembleLinear(members, width_in, width_out), ACTIVATIONS[activation]()]
        layers.append(EnsembleLinear(members, widths[-1], 1))
        self.layers = nn.ModuleList(layers)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q-values of every member: [members, B]."""
        x = torch.cat([obs.reshape(len(obs), -1), actions], dim=1)  # [B, obs + act]
        x = x.unsqueeze(0).expand(self.members, *x.shape)  # [members, B, obs + act]
        for layer in self.layers:
            x = layer.forward(x)
        return x[..., 0]


class SquashedGaussianActor(nn.Module):
    """SAC's policy: u ~ N(mu(s), sigma(s)), a = tanh(u), with the log-density of a."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
    ):
        super().__init__()
        self.action_dim = action_dim
        # One head for both: the first half of its output is the mean, the second log sigma.
        warn_raw_pixels(observation_space)
        self.net = mlp(obs_dim(observation_space), hidden, 2 * action_dim, activation, 0.01)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net.forward(obs.reshape(len(obs), -1)).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized actions in (-1, 1) [B, d] and log pi(a|s) [B]."""
        mean, log_std = self.forward(obs)
        noise = torch.randn_like(mean)
        pre_tanh = mean + noise * log_std.exp()
        return torch.tanh(pre_tanh), squashed_log_prob(pre_tanh, noise, log_std)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """tanh of the mean: the deterministic action."""
        return torch.tanh(self.forward(obs)[0])

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool) -> np.ndarray:
        return as_numpy(self.mode(obs) if deterministic else self.sample(obs)[0])


def squashed_log_prob(
    pre_tanh: torch.Tensor, noise: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """log pi(tanh(u)) for u = mean + sigma * noise: the Gaussian's log-density minus the
    log-determinant of tanh's Jacobian, log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))
    (the stable form; SAC paper, appendix C). Summed over action dimensions: [B]."""
    gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))
    return (gaussian - log_det).sum(-1)


class DeterministicActor(nn.Module):
    """TD3's policy: a = tanh(mu(s))."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
    ):
        super().__init__()
        self.action_dim = action_dim
        warn_raw_pixels(observation_space)
        self.net = mlp(obs_dim(observation_space), hidden, action_dim, activation, 0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net.forward(obs.reshape(len(obs), -1)))  # [B, d]

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> np.ndarray:
        return as_numpy(self.forward(obs))
