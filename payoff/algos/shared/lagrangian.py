"""The Lagrange multiplier of constrained RL: maximize reward subject to E[cost] <= limit.

    L(pi, lam) = E[reward] - lam * (E[cost] - limit),   lam >= 0

The policy ascends L for the current lam (i.e. trains on reward - lam * cost); lam
ascends the constraint violation: it grows while the cost is over the limit and shrinks
back to zero once the policy is safely under it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LagrangeMultiplier:
    """Projected gradient ascent on lam: lam <- max(0, lam + lr * (cost - limit))."""

    limit: float
    lr: float
    value: float = 0.0

    def update(self, cost: float) -> float:
        self.value = max(0.0, self.value + self.lr * (cost - self.limit))
        return self.value

    def penalize(self, rewards, costs):  # tensors or arrays, same shape
        """The reward the policy trains on, scaled by 1 / (1 + lam) to keep its size steady."""
        return (rewards - self.value * costs) / (1.0 + self.value)
