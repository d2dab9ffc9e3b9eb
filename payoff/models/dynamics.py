"""A learned world model: an ensemble of probabilistic MLPs (Chua et al. 2018, PETS).

Each member maps (observation, action) to a diagonal Gaussian over

    [ obs' - obs  (the change of the observation),  reward ]

and the probability that the step ends the episode, and is trained by Gaussian negative
log-likelihood on its own bootstrap resample of the data. The end of an episode is a
property of the state reached (CartPole ends once the pole is past 12 degrees), so each
member also has a small classifier of the next observation, p(terminated | s'), trained
by cross entropy on the real next observations and applied to the predicted ones. Inputs and targets are normalized with the data's mean and std (kept in buffers, so
they travel with the weights). The log-variance is bounded softly between learned limits,
as in PETS, so the NLL cannot buy a tiny loss by shrinking the variance where data are
scarce: `logvar = max - softplus(max - raw)`, then `min + softplus(logvar - min)`, with a
small penalty that keeps the limits tight.

All members run together: each layer is one batched matmul over weights of shape
[E, in, out] (`EnsembleLinear`), so E members cost one bmm per layer rather than E calls.
Two kinds of disagreement come out of it: a member's own variance (aleatoric: noise the data
show), and the spread of the members' means (epistemic: the model does not know, because it
has seen too little there). A planner that finds high predicted reward where the members
disagree is exploiting the model, not the task.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from payoff.core.denormals import flushed_denormals
from payoff.core.errors import ConfigError
from payoff.models.continuous import EnsembleLinear
from payoff.models.mlp import mlp

LOG_2PI = math.log(2.0 * math.pi)
ACTIVATIONS = {"silu": nn.SiLU, "relu": nn.ReLU, "tanh": nn.Tanh}


def gaussian_nll(mean: torch.Tensor, logvar: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over all elements of -log N(target; mean, exp(logvar)):
    0.5 * (log 2pi + logvar + (target - mean)^2 / exp(logvar))."""
    return 0.5 * (LOG_2PI + logvar + (target - mean).pow(2) * torch.exp(-logvar)).mean()


def model_io(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    next_obs: np.ndarray,
    terminated: np.ndarray,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Transitions [N, ...] as the ensemble's inputs [N, o + a] (observation, action as the
    model reads it) and targets [N, o + 2] (change of observation, reward, terminated)."""
    n = len(rewards)
    obs, next_obs = obs.reshape(n, -1), next_obs.reshape(n, -1)
    inputs = np.concatenate([obs, actions.reshape(n, -1)], axis=1)
    targets = np.concatenate([next_obs - obs, rewards[:, None], terminated[:, None]], axis=1)
    return torch.from_numpy(inputs), torch.from_numpy(targets)


class DynamicsEnsemble(nn.Module):
    """E probabilistic MLPs predicting (delta obs, reward, terminated) from (obs, action).

    Outputs have `out_dim` = obs_dim + 2 columns: delta obs, reward (Gaussian: mean and
    std) and terminated (the probability, with std 0).

    obs_dim: observation size (flat). action_dim: the action's input size (a Box action's
        size, or the number of discrete actions, fed one-hot).
    members: ensemble size E. hidden: widths of the hidden layers. activation: silu
        (PETS' swish), relu or tanh.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        members: int = 5,
        hidden: list[int] | tuple[int, ...] = (200, 200, 200),
        activation: Literal["silu", "relu", "tanh"] = "silu",
    ):
        super().__init__()
        if members < 1:
            raise ConfigError(f"a dynamics ensemble needs at least 1 member, got {members}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        self.obs_dim, self.action_dim, self.members = obs_dim, action_dim, members
        in_dim, self.out_dim = obs_dim + action_dim, obs_dim + 2
        gaussian = obs_dim + 1  # delta obs and reward
        widths = [in_dim, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            layers += [EnsembleLinear(members, a, b), ACTIVATIONS[activation]()]
        self.body = nn.Sequential(*layers)
        # per member: mean and raw log-variance of each Gaussian output
        self.head = EnsembleLinear(members, widths[-1], 2 * gaussian)
        # per member: the logit of "this next observation ends the episode"
        self.ends = nn.Sequential(
            EnsembleLinear(members, obs_dim, widths[-1]),
            ACTIVATIONS[activation](),
            EnsembleLinear(members, widths[-1], 1),
        )
        self.max_logvar = nn.Parameter(torch.full((1, 1, gaussian), 0.5))
        self.min_logvar = nn.Parameter(torch.full((1, 1, gaussian), -10.0))
        # normalization of inputs and Gaussian targets, set from the data by `set_normalizer`
        self.register_buffer("in_mean", torch.zeros(in_dim))
        self.register_buffer("in_std", torch.ones(in_dim))
        self.register_buffer("out_mean", torch.zeros(gaussian))
        self.register_buffer("out_std", torch.ones(gaussian))

    # ---- normalization ------------------------------------------------------------------
    @staticmethod
    def _std(values: torch.Tensor) -> torch.Tensor:
        std = values.std(0) if len(values) > 1 else torch.ones(values.shape[1:])
        # a constant column (Pendulum never terminates) keeps std 1: nothing to scale
        return torch.where(std < 1e-6, torch.ones_like(std), std)

    @torch.no_grad()
    def set_normalizer(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """Mean and std of inputs [N, in] and targets [N, out] (all but `terminated`, a
        probability), used from now on."""
        self.in_mean.copy_(inputs.mean(0))
        self.in_std.copy_(self._std(inputs))
        self.out_mean.copy_(targets[:, :-1].mean(0))
        self.out_std.copy_(self._std(targets[:, :-1]))

    # ---- forward --------------------------------------------------------------------------
    def forward_normalized(
        self, inputs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Raw inputs [E, N, in] -> the Gaussian outputs' mean and bounded log-variance
        [E, N, out - 1], in the normalized target space (what the NLL is computed in), and
        the logit that the predicted next observation (obs + its mean change) ends the
        episode [E, N]."""
        hidden = self.body((inputs - self.in_mean) / self.in_std)
        mean, raw_logvar = self.head(hidden).chunk(2, dim=-1)
        logvar = self.max_logvar - F.softplus(self.max_logvar - raw_logvar)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        o = self.obs_dim
        next_obs = inputs[..., :o] + mean[..., :o] * self.out_std[:o] + self.out_mean[:o]
        return mean, logvar, self.end_logit(next_obs)

    def end_logit(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The logit that an episode ends at next_obs [E, N, o] -> [E, N]."""
        o = self.obs_dim
        return self.ends((next_obs - self.in_mean[:o]) / self.in_std[:o])[..., 0]

    @flushed_denormals()  # after a long fit, SiLU outputs can be denormal (core.denormals)
    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw inputs [E, N, in] -> mean and std [E, N, out] in the targets' own units
        (terminated: its probability, std 0)."""
        mean, logvar, logit = self.forward_normalized(inputs)
        mean = torch.cat([mean * self.out_std + self.out_mean, torch.sigmoid(logit)[..., None]], -1)
        std = torch.exp(0.5 * logvar) * self.out_std
        return mean, torch.cat([std, torch.zeros_like(std[..., :1])], -1)

    def loss(
        self, inputs: torch.Tensor, targets: torch.Tensor, end_weight: float = 1.0
    ) -> torch.Tensor:
        """Gaussian NLL of the raw targets [E, N, out] (normalized) plus the binary cross
        entropy of `terminated`, plus the PETS penalty that keeps the log-variance limits
        from drifting apart. end_weight weighs the terminated transitions' cross entropy
        (rare ones: one per episode)."""
        mean, logvar, _ = self.forward_normalized(inputs)
        nll = gaussian_nll(mean, logvar, (targets[..., :-1] - self.out_mean) / self.out_std)
        o = self.obs_dim
        ends = F.binary_cross_entropy_with_logits(
            self.end_logit(inputs[..., :o] + targets[..., :o]),  # the real next observation
            targets[..., -1],
            pos_weight=torch.tensor(end_weight),
        )
        return nll + ends + 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())

    # ---- training -------------------------------------------------------------------------
    @flushed_denormals()
    def fit(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        steps: int,
        batch_size: int,
        rng: np.random.Generator,
    ) -> float:
        """`steps` gradient steps on the data [N, in] / [N, out]: each member draws its
        minibatches from its own bootstrap resample (N indices with replacement), so the
        members see different data and disagree where data are few. Refreshes the
        normalizer first. Terminations are weighed up to as many as the other transitions
        (at most 100x), so that a rare end of episode is not learned as "never". Returns the
        mean training loss of the last 10% of steps."""
        self.set_normalizer(inputs, targets)
        n = len(inputs)
        ends = float(targets[:, -1].sum())
        end_weight = min(100.0, (n - ends) / ends) if ends > 0 else 1.0
        bootstrap = rng.integers(0, n, size=(self.members, n))  # [E, N]
        size = min(batch_size, n)
        losses = []
        for _ in range(steps):
            columns = rng.integers(0, n, size=(self.members, size))
            index = torch.from_numpy(np.take_along_axis(bootstrap, columns, axis=1))  # [E, B]
            loss = self.loss(inputs[index], targets[index], end_weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return float(np.mean(losses[-max(1, steps // 10) :]))

    @torch.no_grad()
    def one_step_error(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """On data [N, in] / [N, out] (held out: not trained on yet): the Gaussian NLL of the
        ensemble's members (normalized units), and the squared errors of the members'
        average mean for the next observation and the reward (their own units)."""
        stacked = inputs.expand(self.members, *inputs.shape)
        mean, logvar, _ = self.forward_normalized(stacked)
        normalized = (targets[:, :-1] - self.out_mean) / self.out_std
        nll = float(gaussian_nll(mean, logvar, normalized.expand_as(mean)))
        prediction = mean.mean(0) * self.out_std + self.out_mean  # [N, out - 1]
        error = (prediction - targets[:, :-1]).pow(2)
        return {
            "nll": nll,
            "obs_mse": float(error[:, : self.obs_dim].mean()),
            "reward_mse": float(error[:, self.obs_dim].mean()),
        }


class TerminalValue(nn.Module):
    """V(s): the discounted return expected from a state, for the end of a planned sequence.

    A planner that imagines H steps cannot see what comes after them (CartPole's cart
    drifting to the edge over a hundred steps; the last part of a swing-up). V, fitted on the
    real transitions, scores the state a plan ends in, so the search prefers sequences that
    leave the system where the data say the future is good. It is fitted by temporal
    differences against a slowly following copy of itself (fitted value iteration of the
    policy that collected the data):

        V(s) <- r + gamma * (1 - terminated) * V_target(s')    (time limits bootstrap)

    The network predicts (1 - gamma) V, in the reward's units, so its outputs stay small
    whatever the horizon 1 / (1 - gamma); observations are normalized by the data's mean
    and std (buffers, so they travel with the weights).
    """

    def __init__(
        self, obs_dim: int, hidden: list[int] | tuple[int, ...] = (64, 64), gamma: float = 0.99
    ):
        super().__init__()
        self.gamma = gamma
        self.net = mlp(obs_dim, list(hidden), 1, "tanh", 1.0)
        self.target = mlp(obs_dim, list(hidden), 1, "tanh", 1.0)
        self.target.load_state_dict(self.net.state_dict())
        self.target.requires_grad_(False)
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))

    def _scaled(self, net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        return net((obs - self.obs_mean) / self.obs_std)[..., 0]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs) for obs [..., o] -> [...]."""
        return self._scaled(self.net, obs) / (1.0 - self.gamma)

    def fit(
        self,
        obs: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        steps: int,
        batch_size: int,
        rng: np.random.Generator,
        tau: float = 0.01,
    ) -> float:
        """`steps` TD(0) steps on minibatches of the transitions [N, ...]; the target copy
        follows by Polyak averaging (`tau` per step). Returns the mean squared TD error
        (in (1 - gamma)-scaled reward units) of the last 10% of steps."""
        with torch.no_grad():
            self.obs_mean.copy_(obs.mean(0))
            self.obs_std.copy_(DynamicsEnsemble._std(obs))
        n, size = len(obs), min(batch_size, len(obs))
        g = self.gamma
        losses = []
        for _ in range(steps):
            index = torch.from_numpy(rng.integers(0, n, size=size))
            with torch.no_grad():
                following = self._scaled(self.target, next_obs[index])
                target = (1 - g) * rewards[index] + g * (1 - terminated[index]) * following
            loss = (self._scaled(self.net, obs[index]) - target).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for mine, theirs in zip(
                    self.net.parameters(), self.target.parameters(), strict=True
                ):
                    theirs.lerp_(mine, tau)
            losses.append(float(loss.detach()))
        return float(np.mean(losses[-max(1, steps // 10) :]))
