"""A deterministic MLP policy held as one flat parameter vector, run for a whole population of
parameter vectors at once (evolution strategies, `payoff.algos.es`).

    policy = FlatPolicy(observation_space, action_space, hidden=(64, 64))
    theta = policy.initial_parameters()              # [dim] float32, orthogonal init
    actions = policy.act(params, obs, mean, std)     # params [K, dim] or [1, dim], obs [K, ...]

Row k of `obs` is fed through the network whose weights are row k of `params` (or the one
row, broadcast): one batched matmul per layer serves every perturbed policy of a generation,
instead of one small forward pass per policy. The layout of the vector is the one of
`payoff.models.mlp.mlp` flattened in `parameters()` order (weight [out, in] then bias, layer
by layer), so `as_module` gives a torch MLP whose weights are the same numbers (ES steps it
with `FlatParameters` and `FlatAdam`).

Actions: Discrete spaces take the argmax of the outputs; Box spaces squash them with tanh
and scale them to the bounds (unbounded dimensions take the output as it is).
Observations (Box) are flattened, standardized with the given mean and std and clipped to
+-`obs_clip`, as in Salimans et al. (2017).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from payoff.core.errors import EnvError
from payoff.models.mlp import MLP, mlp

ES_ACTIVATIONS = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}


class FlatPolicy:
    """Shapes of a deterministic MLP and its batched forward pass on flat parameter vectors."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        obs_clip: float = 5.0,
    ):
        if not isinstance(observation_space, gym.spaces.Box):
            raise EnvError(
                f"evolution strategies' flat policy takes Box observations, got "
                f"{observation_space}; wrap the env (e.g. gymnasium.wrappers.FlattenObservation)"
            )
        if isinstance(action_space, gym.spaces.Discrete):
            out_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            out_dim = int(np.prod(action_space.shape))
        else:
            raise EnvError(
                f"evolution strategies' flat policy takes Discrete or Box actions, got {action_space}"
            )
        if activation not in ES_ACTIVATIONS:
            raise EnvError(
                f"unknown activation {activation!r} for the flat policy; valid: "
                f"{', '.join(ES_ACTIVATIONS)}"
            )
        self.observation_space = observation_space
        self.action_space = action_space
        self.hidden = [int(h) for h in hidden]
        self.activation = activation
        self.obs_clip = float(obs_clip)
        self.in_dim = int(np.prod(observation_space.shape))
        self.out_dim = out_dim
        # (weight start, weight stop, bias stop, out, in) per layer, in parameters() order
        self.layers: list[tuple[int, int, int, int, int]] = []
        offset, width = 0, self.in_dim
        for size in [*self.hidden, out_dim]:
            weights = offset + size * width
            self.layers.append((offset, weights, weights + size, size, width))
            offset, width = weights + size, size
        self.dim = offset
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        # Discrete(n, start=s) takes s..s+n-1: the argmax's index plus the start
        self.action_start = int(action_space.start) if self.discrete else 0
        if not self.discrete:
            low = np.asarray(action_space.low, dtype=np.float32).reshape(-1)
            high = np.asarray(action_space.high, dtype=np.float32).reshape(-1)
            self.bounded = np.isfinite(low) & np.isfinite(high)
            self.low = np.where(self.bounded, low, 0.0).astype(np.float32)
            self.span = np.where(self.bounded, high - low, 0.0).astype(np.float32)

    def spec(self) -> dict[str, Any]:
        """What a worker process needs to rebuild this policy."""
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "hidden": self.hidden,
            "activation": self.activation,
            "obs_clip": self.obs_clip,
        }

    def as_module(self) -> MLP:
        """A torch MLP of this shape, freshly initialized (orthogonal; small output layer, so
        the first policy's outputs are near zero), whose parameters in order flatten to a
        vector of this layout."""
        return mlp(self.in_dim, self.hidden, self.out_dim, self.activation, out_gain=0.01)

    def initial_parameters(self) -> np.ndarray:
        """A fresh flat parameter vector [dim] (float32), drawn from torch's global RNG."""
        module = self.as_module()
        with torch.no_grad():
            return torch.cat([p.reshape(-1) for p in module.parameters()]).numpy().copy()

    def outputs(
        self,
        params: np.ndarray,
        obs: np.ndarray,
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> np.ndarray:
        """Network outputs [K, out] for observations [K, ...] under parameters [K or 1, dim]."""
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), self.in_dim)
        if obs_mean is not None and obs_std is not None:
            x = np.clip((x - obs_mean) / obs_std, -self.obs_clip, self.obs_clip)
        params = np.asarray(params, dtype=np.float32).reshape(-1, self.dim)
        rows = params.shape[0]
        nonlinearity = ES_ACTIVATIONS[self.activation]
        h = x[:, :, None]  # [K, in, 1]
        for index, (start, weights, bias, size, width) in enumerate(self.layers):
            w = params[:, start:weights].reshape(rows, size, width)
            h = np.matmul(w, h)[..., 0] + params[:, weights:bias]  # [K, out]
            if index < len(self.layers) - 1:
                h = nonlinearity(h)
            h = h[:, :, None]
        return h[..., 0]

    def to_actions(self, outputs: np.ndarray) -> np.ndarray:
        """Env actions [K, ...] from network outputs: argmax, or tanh scaled to the Box."""
        if self.discrete:
            return outputs.argmax(-1) + self.action_start
        squashed = np.where(
            self.bounded, self.low + (np.tanh(outputs) + 1.0) * 0.5 * self.span, outputs
        ).astype(np.float32)
        return squashed.reshape(len(outputs), *(self.action_space.shape or ()))

    def act(
        self,
        params: np.ndarray,
        obs: np.ndarray,
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> np.ndarray:
        """Env actions for observations [K, ...] under parameters [K or 1, dim]."""
        return self.to_actions(self.outputs(params, obs, obs_mean, obs_std))


def flat_policy_from_spec(spec: dict[str, Any]) -> FlatPolicy:
    return FlatPolicy(**spec)
