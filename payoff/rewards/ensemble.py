"""A conservative reward from an ensemble: mean - k * std across members.

Where the members disagree, the policy is off the data they were fit on and none of them
can be trusted; subtracting their spread makes exploiting one member's mistake pay less
(the "pessimism under uncertainty" defence against over-optimizing a learned reward).
Members are reward functions with the usual `(prompts, completions, **columns)` contract,
e.g. several reward models trained from different seeds or data splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError
from payoff.rewards.base import RewardFn


class ConservativeEnsemble:
    """Reward function returning mean - k * std of its members' scores; keeps the last spread."""

    __name__ = "conservative_ensemble"

    def __init__(self, members: Sequence[RewardFn], k: float = 1.0):
        if len(members) < 2:
            raise ConfigError(
                f"a conservative ensemble needs at least 2 members to measure disagreement, got {len(members)}"
            )
        self.members = list(members)
        self.k = k
        self.last_std: list[float] = []

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        scores = np.array(
            [
                [np.nan if s is None else float(s) for s in member(prompts, completions, **columns)]
                for member in self.members
            ]
        )  # [members, rows]
        mean, std = np.nanmean(scores, axis=0), np.nanstd(scores, axis=0)
        self.last_std = [float(s) for s in std]
        return [
            None if np.isnan(m) else float(m - self.k * s) for m, s in zip(mean, std, strict=True)
        ]
