"""Advantage Actor-Critic (A2C, the synchronous A3C of Mnih et al. 2016).

Every num_steps steps of every env, one gradient step on

    loss = -mean[ log pi(a_t | s_t) * A_t ] + vf_coef * mean[ (R_t - V(s_t))^2 ] - ent_coef * H

where R_t is the n-step return bootstrapped from V at the end of the rollout and
A_t = R_t - V(s_t). That is GAE with lambda = 1 (payoff.algos.shared.advantages.gae);
`gae_lambda` < 1 blends in shorter returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from payoff.algos.base import ROLLOUT_STEPS
from payoff.algos.shared.advantages import normalize
from payoff.algos.shared.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from payoff.algos.shared.policy_loss import explained_variance, value_loss
from payoff.core.config import MAX_ENV_COPIES, in_range
from payoff.core.schedules import Schedule
from payoff.rollout.buffers import RolloutStorage


@dataclass
class A2CConfig(OnPolicyConfig):
    """A2C. Shared keys are described in payoff.algos.shared.onpolicy.OnPolicyConfig.

    gae_lambda: 1.0 = plain n-step returns (classic A2C).
    normalize_advantages: standardize advantages per update (off in classic A2C).
    ent_coef / vf_coef: entropy bonus and value-loss weights.
    Defaults follow SB3's A2C (num_steps 5, lr 7e-4) but with 16 envs and Adam.
    """

    num_envs: int = field(default=16, metadata=in_range(1, MAX_ENV_COPIES))
    num_steps: int = field(default=5, metadata=in_range(0, low_open=True, product=ROLLOUT_STEPS))
    learning_rate: Schedule = field(
        default_factory=lambda: Schedule(start=7e-4, end=7e-4), metadata=in_range(0, low_open=True)
    )
    gae_lambda: float = field(default=1.0, metadata=in_range(0, 1))
    normalize_advantages: bool = False
    ent_coef: float = field(default=0.0, metadata=in_range(0))
    vf_coef: float = field(default=0.5, metadata=in_range(0))


class A2C(OnPolicyAlgorithm):
    """Synchronous n-step advantage actor-critic."""

    config: A2CConfig

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        config = self.config
        assert self.critic is not None
        rollout = self.advantage_batch(storage, config.gae_lambda)
        obs, actions = rollout.obs, rollout.actions
        advantages, returns = rollout.advantages, rollout.returns
        if config.normalize_advantages and len(advantages) > 1:
            advantages = normalize(advantages)

        logprobs, entropy = self.actor.log_prob_entropy(obs, actions)
        values = self.critic(obs)
        pg_loss = -(logprobs * advantages).mean()
        v_loss = value_loss(values, returns)
        entropy_loss = entropy.mean()
        loss = pg_loss + config.vf_coef * v_loss - config.ent_coef * entropy_loss

        self.optimizer_step(loss)
        return {
            "train/policy_loss": float(pg_loss.detach()),
            "train/value_loss": float(v_loss.detach()),
            "train/entropy": float(entropy_loss.detach()),
            "train/explained_variance": explained_variance(values.detach(), returns),
        }


ALGORITHM = A2C
