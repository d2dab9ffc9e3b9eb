"""Schedules for exploration rates, learning rates and clip ranges, as config data."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from payoff.core.config import in_range


@dataclass
class Schedule:
    """A value that moves from `start` to `end` over the first `fraction` of training.

    kind: 'linear' interpolates, 'exponential' interpolates log-values (both ends > 0),
    'constant' stays at `start`.
    """

    start: float = 1.0
    end: float = 1.0
    fraction: float = field(default=1.0, metadata=in_range(0, 1, low_open=True))
    kind: Literal["linear", "exponential", "constant"] = "linear"

    @classmethod
    def from_value(cls, value: object) -> Schedule | None:
        """A constant schedule: where a config takes a schedule, a plain number means this."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return cls(start=float(value), end=float(value))
        return None

    @classmethod
    def refusal(cls, value: object) -> str | None:
        """Why `value` is not a schedule, where a generic message would not say it."""
        if callable(value):
            return (
                "takes a number or a schedule, not a function (Stable-Baselines3's schedules "
                "are functions of progress_remaining; a run's config must be data it can save "
                "and resume): write e.g. {'start': 3e-4, 'end': 0.0} for a linear decay over "
                "training, with kind linear | exponential | constant and fraction, the share "
                "of training it spans"
            )
        return None

    def validate(self) -> None:
        from payoff.core.errors import ConfigError

        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"schedule fraction must be in (0, 1], got {self.fraction}")
        if self.kind == "exponential" and (self.start <= 0 or self.end <= 0):
            raise ConfigError(
                f"an exponential schedule needs start and end > 0, got {self.start} and {self.end}"
            )

    def __call__(self, progress: float) -> float:
        """Value at `progress` in [0, 1] (fraction of training done)."""
        if self.kind == "constant":
            return self.start
        t = min(1.0, max(0.0, progress) / self.fraction)
        if self.kind == "exponential":
            return math.exp(math.log(self.start) + t * (math.log(self.end) - math.log(self.start)))
        return self.start + t * (self.end - self.start)


def constant(value: float) -> Schedule:
    return Schedule(start=value, end=value, kind="constant")
