"""REINFORCE (Williams 1992): Monte Carlo policy gradient, with or without a learned baseline.

    loss = -mean_t[ log pi(a_t | s_t) * (G_t - b(s_t)) ]      G_t = sum_k gamma^k r_{t+k}

G_t is the discounted return-to-go within the episode (payoff.algos.shared.advantages
.returns_to_go), so each rollout must see episodes end: steps whose episode is still
running when the rollout stops have no known G_t and are left out of the loss (their
episode continues in the next rollout, whose first steps do have their G_t). Make
num_steps at least a typical episode length. With `baseline: true` a critic V(s) is
regressed on G_t and subtracted, which lowers the gradient's variance without biasing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from payoff.algos.shared.advantages import completed_episodes, normalize, returns_to_go
from payoff.algos.shared.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from payoff.algos.shared.policy_loss import explained_variance, value_loss
from payoff.core.config import in_range
from payoff.rollout.buffers import RolloutStorage


@dataclass
class ReinforceConfig(OnPolicyConfig):
    """REINFORCE. Shared keys are described in payoff.algos.shared.onpolicy.OnPolicyConfig.

    baseline: learn V(s) and use G_t - V(s_t) as the weight (false: G_t alone).
    normalize_returns: standardize the weights per update (a cheap baseline of its own;
        the classic trick that makes plain REINFORCE work on CartPole).
    ent_coef: entropy bonus weight.
    vf_coef: weight of the baseline's regression loss.
    Trap: a time-limit truncation is bootstrapped from V only when there is a baseline;
    without one, a truncated episode's return simply stops at the limit.
    """

    baseline: bool = True
    normalize_returns: bool = True
    ent_coef: float = field(default=0.0, metadata=in_range(0))
    vf_coef: float = field(default=0.5, metadata=in_range(0))


class Reinforce(OnPolicyAlgorithm):
    """Monte Carlo policy gradient over vectorized envs."""

    config: ReinforceConfig

    def setup(self) -> None:
        self.uses_critic = self.config.baseline
        super().setup()

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        config = self.config
        if self.critic is not None:
            storage.bootstrap_truncated(config.gamma)
        returns = returns_to_go(storage.rewards, storage.dones, config.gamma)
        # Only steps that really happened and whose episode ended in this rollout.
        keep = (storage.valid & completed_episodes(storage.dones)).reshape(-1)
        if not keep.any():
            return {"train/used_fraction": 0.0}
        obs = storage.obs.reshape(-1, *storage.obs.shape[2:])[keep]
        actions = storage.actions.reshape(-1, *storage.actions.shape[2:])[keep]
        returns = returns.reshape(-1)[keep]

        logprobs, entropy = self.actor.log_prob_entropy(obs, actions)
        metrics: dict[str, float] = {}
        if self.critic is not None:
            values = self.critic(obs)
            weights = returns - values.detach()
            v_loss = value_loss(values, returns)
            metrics["train/value_loss"] = float(v_loss.detach())
            metrics["train/explained_variance"] = explained_variance(values.detach(), returns)
        else:
            weights = returns
            v_loss = torch.zeros(())
        if config.normalize_returns and len(weights) > 1:
            weights = normalize(weights)
        pg_loss = -(logprobs * weights).mean()
        entropy_loss = entropy.mean()
        loss = pg_loss - config.ent_coef * entropy_loss + config.vf_coef * v_loss

        self.optimizer_step(loss)
        return {
            **metrics,
            "train/policy_loss": float(pg_loss.detach()),
            "train/entropy": float(entropy_loss.detach()),
            "train/used_fraction": float(keep.float().mean()),
        }


ALGORITHM = Reinforce
