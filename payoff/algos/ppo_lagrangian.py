"""PPO-Lagrangian: PPO on reward - lam * cost, with lam learned so that the cost stays under a limit.

Costs come from the env's `info[cost_key]` each step (e.g. "no progress along the course"
on BoatRace, "unsafe action" elsewhere). The constraint is on the average cost per step:
E[cost] <= cost_limit. After each rollout the multiplier takes one ascent step on the
measured violation (see payoff/algos/shared/lagrangian.py); the policy update is PPO's,
unchanged, on the penalized reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from payoff.algos.ppo import PPO, PPOConfig
from payoff.algos.shared.lagrangian import LagrangeMultiplier
from payoff.core.config import in_range
from payoff.rollout.buffers import RolloutStorage


@dataclass
class PPOLagrangianConfig(PPOConfig):
    """PPO's keys plus the constraint.

    cost_key: the `info` key holding each step's cost.
    cost_limit: allowed average cost per step (0.1 = at most one costly step in ten).
    lagrangian_lr: step size of the multiplier. Trap: too small and the policy exploits the
        reward for a long time before lam catches up; too large and lam oscillates.
    lagrangian_init: starting lam.
    """

    cost_key: str = "cost"
    cost_limit: float = field(default=0.1, metadata=in_range(0))
    lagrangian_lr: float = field(default=0.5, metadata=in_range(0, low_open=True))
    lagrangian_init: float = field(default=0.0, metadata=in_range(0))

    def validate(self) -> None:
        super().validate()
        if self.cost_key not in self.episode_info:
            self.episode_info = [*self.episode_info, self.cost_key]


class PPOLagrangian(PPO):
    """Constrained PPO with a learned Lagrange multiplier."""

    config: PPOLagrangianConfig

    def setup(self) -> None:
        super().setup()
        config = self.config
        self.multiplier = LagrangeMultiplier(
            config.cost_limit, config.lagrangian_lr, config.lagrangian_init
        )

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        costs = storage.info[self.config.cost_key]  # [T, N]
        mean_cost = float(costs[storage.valid].mean())
        storage.rewards = self.multiplier.penalize(storage.rewards, costs)
        metrics = super().update(storage, progress)
        lam = self.multiplier.value
        self.multiplier.update(mean_cost)
        return {
            **metrics,
            "train/cost_per_step": mean_cost,
            "train/cost_limit": self.config.cost_limit,
            "train/lagrange_multiplier": lam,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "lagrange_multiplier": self.multiplier.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.multiplier.value = float(state["lagrange_multiplier"])


ALGORITHM = PPOLagrangian
