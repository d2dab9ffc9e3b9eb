"""Soft Actor-Critic (Haarnoja et al. 2018, with the automatic temperature of their
"SAC: algorithms and applications") for continuous (Box) actions.

The agent maximizes return plus entropy, r + alpha * H(pi(.|s)). Per gradient step, on a
minibatch (s, a, r, s', terminated) from the replay buffer:

    a' ~ pi(.|s'),  y = r + gamma * (1 - terminated) * (min_i Q_target_i(s', a') - alpha log pi(a'|s'))
    critic loss = sum_i mean (Q_i(s, a) - y)^2 / 2                   (two Q-networks, i = 1, 2)
    ã ~ pi(.|s),   actor loss  = mean (alpha log pi(ã|s) - min_i Q_i(s, ã))
    temperature loss = -mean log alpha * (log pi(ã|s) + target_entropy)    (if autotune)
    Q_target <- (1 - tau) Q_target + tau Q

The policy is a tanh-squashed Gaussian (payoff.models.continuous), so actions stay inside
the Box; the replay buffer stores them in [-1, 1]. The twin critics run as one batched
network (QEnsemble): one matmul per layer for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from payoff.algos.shared.offpolicy import ContinuousActorCritic, OffPolicyKeys
from payoff.core.config import MAX_ENV_COPIES, MAX_WIDTH, in_range
from payoff.core.errors import ConfigError
from payoff.envs.make import EnvConfig
from payoff.models.continuous import SquashedGaussianActor
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.rollout.replay import TransitionBatch


@dataclass
class SACConfig(OffPolicyKeys):
    """SAC on vectorized envs with a Box action space. The shared keys are
    payoff.algos.base.VectorAgentKeys (env, seed, total_steps, num_envs, gamma, ...) and
    payoff.algos.shared.offpolicy.OffPolicyKeys (learning_rate, batch_size, learning_starts,
    train_every, gradient_steps, replay, log_every). The deterministic policy tanh(mean) is
    evaluated.

    hidden / activation: the actor's and each critic's MLP.
    tau: Polyak step of the target critics after each gradient step (1 = copy).
    alpha: the entropy temperature; with autotune, its starting value.
    autotune: learn alpha so that the policy's entropy stays near target_entropy.
    target_entropy: null = -(action dimensions), the SAC paper's choice.
    max_grad_norm: 0 (no clipping) by default, as in the paper; > 0 clips actor and critic
        gradients separately.
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
    alpha: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None

    def validate(self) -> None:
        super().validate()
        if self.alpha < 0 or (self.autotune and self.alpha == 0):
            raise ConfigError(
                f"config key 'alpha' must be > 0 with autotune (it is learned as log alpha), "
                f"or >= 0 with autotune=false (0: no entropy bonus); got {self.alpha}"
            )


class Temperature(nn.Module):
    """SAC's entropy temperature, learned as log alpha so that alpha stays positive."""

    def __init__(self, alpha: float):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor([math.log(alpha) if alpha > 0 else -math.inf]))


class SAC(ContinuousActorCritic):
    """Soft Actor-Critic with twin critics and a learned temperature."""

    config: SACConfig
    saved = (
        "actor",
        "critics",
        "actor_optimizer",
        "temperature",
        "alpha_optimizer",
        "buffer",
        "rng",
        "runner",
        "gradient_updates",
        "_stats",  # what the next log averages: a checkpoint between logs keeps it
    )

    actor_class = SquashedGaussianActor

    def build(self) -> None:
        super().build()  # actor, its flat Adam, the twin critics
        config = self.config
        self.temperature = Temperature(config.alpha).to(self.device)
        self.alpha_flat = FlatParameters([self.temperature.log_alpha])
        self.alpha_optimizer = FlatAdam(self.alpha_flat, lr=config.learning_rate(0.0))
        self.target_entropy = (
            -float(self.scaler.dim) if config.target_entropy is None else config.target_entropy
        )
        self._stats: list[torch.Tensor] = []  # per gradient step: losses, alpha, entropy, Q

    def optimizers(self) -> list[FlatAdam]:
        return [*super().optimizers(), self.alpha_optimizer]  # the temperature's too, as SB3's

    def policy_actions(self, obs: np.ndarray) -> np.ndarray:
        """Samples of the squashed Gaussian policy."""
        return self.actor.act(self.tensor(obs), deterministic=False)

    # ---- learning ----------------------------------------------------------------------
    def gradient_step(self, batch: TransitionBatch) -> None:
        config = self.config
        alpha = self.temperature.log_alpha.detach().exp()
        # Critics: regress both Q(s, a) on the soft Bellman target.
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(batch.next_obs)
            next_q = self.critics.target(batch.next_obs, next_actions).min(0).values
            soft_value = next_q - alpha * next_log_prob
            targets = batch.rewards + config.gamma * (1.0 - batch.terminated) * soft_value
        critic_loss, q_values = self.critics.regress(batch.obs, batch.actions, targets)

        # Actor: maximize min Q(s, ã) + alpha H; gradients reach only the actor's weights.
        actions, log_prob = self.actor.sample(batch.obs)
        q_new = self.critics.online(batch.obs, actions).min(0).values
        actor_loss = (alpha * log_prob - q_new).mean()
        self.step_actor(actor_loss)

        # Temperature: raise alpha when the entropy is below target, lower it when above.
        log_prob = log_prob.detach()
        if config.autotune:
            # The temperature loss -mean(log alpha * (log pi + target_entropy)) has gradient
            # -mean(log pi + target_entropy) in log alpha: written directly, no graph needed.
            torch.neg(
                (log_prob + self.target_entropy).mean(0, keepdim=True), out=self.alpha_flat.grads[0]
            )
            self.alpha_optimizer.step()

        self.critics.update_targets(config.tau)
        self.gradient_updates += 1
        self._stats.append(
            torch.stack(
                [critic_loss.detach(), actor_loss.detach(), alpha[0], -log_prob.mean(), q_values]
            )
        )

    def train_metrics(self) -> dict[str, Any]:
        if not self._stats:
            return {}
        critic_loss, actor_loss, alpha, entropy, q = torch.stack(self._stats).mean(0).tolist()
        self._stats = []
        return {
            "train/critic_loss": critic_loss,
            "train/actor_loss": actor_loss,
            "train/alpha": alpha,
            "train/entropy": entropy,
            "train/mean_q": q,
        }


ALGORITHM = SAC
