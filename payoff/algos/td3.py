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

import numpy as np
import torch

from payoff.algos.shared.offpolicy import ContinuousActorCritic, OffPolicyKeys
from payoff.core.config import MAX_ENV_COPIES, MAX_WIDTH, in_range
from payoff.envs.make import EnvConfig
from payoff.models.continuous import DeterministicActor
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

    # continuous actions: a Discrete default (CartPole) would be refused by name
    env: EnvConfig = field(default_factory=lambda: EnvConfig(id="Pendulum-v1"))
    total_steps: int = field(default=20_000, metadata=in_range(0, low_open=True))
    num_envs: int = field(default=1, metadata=in_range(1, MAX_ENV_COPIES))
    learning_starts: int = field(default=1_000, metadata=in_range(0))
    max_grad_norm: float = field(default=0.0, metadata=in_range(0))
    hidden: list[int] = field(
        default_factory=lambda: [256, 256], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["tanh", "relu", "gelu"] = "relu"
    tau: float = field(default=0.005, metadata=in_range(0, 1, low_open=True))
    policy_delay: int = field(default=2, metadata=in_range(1))
    exploration_noise: float = field(default=0.1, metadata=in_range(0))
    policy_noise: float = field(default=0.2, metadata=in_range(0))
    noise_clip: float = field(default=0.5, metadata=in_range(0))


class TD3(ContinuousActorCritic):
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
        "_stats",  # what the next log averages: a checkpoint between logs keeps them
        "_actor_losses",
    )

    actor_class = DeterministicActor

    def build(self) -> None:
        super().build()  # actor, its flat Adam, the twin critics
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self._stats: list[torch.Tensor] = []  # per gradient step: critic loss, Q
        self._actor_losses: list[torch.Tensor] = []

    def policy_actions(self, obs: np.ndarray) -> np.ndarray:
        """mu(s) plus Gaussian exploration noise, clipped to [-1, 1]."""
        noise = self.rng.normal(0.0, self.config.exploration_noise, (len(obs), self.scaler.dim))
        actions = self.actor.act(self.tensor(obs)) + noise
        return np.clip(actions, -1.0, 1.0).astype(np.float32)

    # ---- learning ----------------------------------------------------------------------
    def gradient_step(self, batch: TransitionBatch) -> None:
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
        self.step_actor(actor_loss)
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
