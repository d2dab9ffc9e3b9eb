"""Twin Delayed DDPG (Fujimoto et al. 2018) for continuous (Box) actions.

A deterministic policy mu(s) and two Q-networks, with the paper's three fixes to DDPG's
overestimation. Per gradient step, on a minibatch (s, a, r, s', terminated) from the
replay buffer:

    a' = clip(mu_target(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)
                                                        (target policy smoothing)
    y  = r + gamma * (1 - terminated) * min_i Q_target_i(s', a')     (clipped double Q)
    critic loss = sum_i mean (Q_i(s, a) - y)^2 / 2
    every policy_delay steps (delayed policy updates):
        actor loss = -mean Q_1(s, mu(s));  mu_target, Q_target <- Polyak steps of tau

Exploration adds N(0, exploration_noise) to mu(s) (actions in [-1, 1], clipped there). The
twin critics and their targets are payoff.algos.shared.offpolicy.TwinCritics, as in SAC.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from payoff.algos.shared.offpolicy import OffPolicyAlgorithm, OffPolicyKeys, TwinCritics
from payoff.models.continuous import ActionScaler, DeterministicActor, check_continuous
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.rollout.replay import TransitionBatch


@dataclass
class TD3Config(OffPolicyKeys):
    """TD3 on vectorized envs with a Box action space. The shared keys are
    payoff.algos.base.VectorAgentKeys (env, seed, total_steps, num_envs, gamma, ...) and
    payoff.algos.shared.offpolicy.OffPolicyKeys (learning_rate, batch_size, learning_starts,
    train_every, gradient_steps, replay, log_every). The policy mu(s) is evaluated.

    hidden / activation: the actor's and each critic's MLP.
    tau: Polyak step of the target actor and critics at each policy update.
    policy_delay: critic updates per actor (and target) update.
    exploration_noise: std of the Gaussian noise added to mu(s) when playing, in units of
        half the action range (actions are in [-1, 1] inside the networks).
    policy_noise / noise_clip: std and clip of the smoothing noise on the target action.
    max_grad_norm: 0 (no clipping) by default, as in the paper.
    """

    total_steps: int = 20_000
    num_envs: int = 1
    learning_starts: int = 1_000
    max_grad_norm: float = 0.0
    hidden: list[int] = field(default_factory=lambda: [256, 256])
    activation: Literal["tanh", "relu", "gelu"] = "relu"
    tau: float = 0.005
    policy_delay: int = 2
    exploration_noise: float = 0.1
    policy_noise: float = 0.2
    noise_clip: float = 0.5


class TD3(OffPolicyAlgorithm):
    """TD3: clipped double Q, delayed policy updates, target policy smoothing."""

    config: TD3Config
    saved = (
        "actor",
        "target_actor",
        "critics",
        "actor_optimizer",
        "buffer",
        "rng",
        "runner",
        "gradient_updates",
    )

    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_continuous(observation_space, action_space, "TD3", self.config.env.id)

    def build(self) -> None:
        config = self.config
        self.scaler = ActionScaler(self.action_space)
        self.actor = DeterministicActor(
            self.observation_space, self.scaler.dim, config.hidden, config.activation
        ).to(self.device)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.actor_flat = FlatParameters(list(self.actor.parameters()))
        self.actor_optimizer = FlatAdam(self.actor_flat, lr=config.learning_rate)
        self.critics = TwinCritics(
            self.observation_space,
            self.scaler.dim,
            config.hidden,
            config.activation,
            config.learning_rate,
            config.max_grad_norm,
            self.device,
        )
        self._stats: list[torch.Tensor] = []  # per gradient step: critic loss, Q
        self._actor_losses: list[torch.Tensor] = []

    # ---- acting ------------------------------------------------------------------------
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Uniform random actions until learning_starts, then mu(s) plus Gaussian noise."""
        shape = (len(obs), self.scaler.dim)
        if self.step < self.config.learning_starts:
            return self.rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        noise = self.rng.normal(0.0, self.config.exploration_noise, shape)
        actions = self.actor.act(self.tensor(obs)) + noise
        return np.clip(actions, -1.0, 1.0).astype(np.float32)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        return self.scaler.to_env(actions)

    def greedy(self, obs: torch.Tensor) -> np.ndarray:
        return self.scaler.to_env(self.actor.act(obs))

    # ---- learning ----------------------------------------------------------------------
    def train(self, steps: int) -> None:
        batches, size = self.minibatches(steps)
        for k in range(steps):
            self._gradient_step(batches.rows(slice(k * size, (k + 1) * size)))

    def _gradient_step(self, batch: TransitionBatch) -> None:
        config = self.config
        with torch.no_grad():
            next_actions = self.target_actor(batch.next_obs)
            smoothing = torch.randn_like(next_actions).mul_(config.policy_noise)
            smoothing.clamp_(-config.noise_clip, config.noise_clip)
            next_actions = (next_actions + smoothing).clamp_(-1.0, 1.0)
            next_q = self.critics.target(batch.next_obs, next_actions).min(0).values
            targets = batch.rewards + config.gamma * (1.0 - batch.terminated) * next_q
        critic_loss, q_values = self.critics.regress(batch.obs, batch.actions, targets)
        self.gradient_updates += 1
        self._stats.append(torch.stack([critic_loss, q_values]))
        if self.gradient_updates % config.policy_delay:
            return
        # Actor: ascend Q_1(s, mu(s)); gradients reach only the actor's weights.
        actor_loss = -self.critics.online(batch.obs, self.actor(batch.obs))[0].mean()
        self.actor_flat.zero_grad()
        actor_loss.backward(inputs=self.actor_flat.params)
        if config.max_grad_norm > 0:
            self.actor_flat.clip_grad_norm(config.max_grad_norm)
        self.actor_optimizer.step()
        self.critics.update_targets(config.tau)
        with torch.no_grad():
            torch._foreach_lerp_(
                list(self.target_actor.parameters()), self.actor_flat.params, config.tau
            )
        self._actor_losses.append(actor_loss.detach())

    def train_metrics(self) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self._stats:
            critic_loss, q = torch.stack(self._stats).mean(0).tolist()
            record |= {"train/critic_loss": critic_loss, "train/mean_q": q}
        if self._actor_losses:
            record["train/actor_loss"] = float(torch.stack(self._actor_losses).mean())
        self._stats, self._actor_losses = [], []
        return record


ALGORITHM = TD3
