"""Reward-hacking and safety signals, usable from every trainer.

A monitor reads the metric records a trainer logs and raises an `Alarm` when its signal
fires: proxy reward rising while the true objective does not, KL to the reference drifting
past a limit, a reward that tracks a spurious feature such as length, visitation collapsing
onto a few states. Alarms go to the run's metrics.jsonl as events and show in the report.

Attach monitors in a recipe:

    monitors:
      - {kind: divergence, proxy: train/return, truth: train/true_return}
      - {kind: threshold, key: train/kl, above: 0.5}

Runs scored by an AI judge or a reward model also log integrity/judge_addressing_rate, the
share of completions that talk to their scorer (`JudgeAddressing`, judge_addressing.py).
"""

from payoff.monitor.detectors import (
    Alarm,
    Divergence,
    Monitor,
    SpuriousCorrelation,
    Threshold,
    build_monitors,
)
from payoff.monitor.judge_addressing import (
    JudgeAddressing,
    addresses_judge,
    is_model_scored,
    judge_addressing_signals,
)

__all__ = [
    "Alarm",
    "Divergence",
    "JudgeAddressing",
    "Monitor",
    "SpuriousCorrelation",
    "Threshold",
    "addresses_judge",
    "build_monitors",
    "is_model_scored",
    "judge_addressing_signals",
]
