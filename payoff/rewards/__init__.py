"""Rewards for language models: verifiers (math, exact, format, Countdown, code in a sandbox) and
the TRL-compatible reward-function contract with weighted composition."""

from payoff.rewards.base import BUILTIN, RewardMix, RewardResult, RewardSpec, resolve_reward
from payoff.rewards.code import CodeVerifier
from payoff.rewards.verifiers import (
    answer_anywhere_reward,
    answers_match,
    countdown_reward,
    exact_reward,
    extract_answer,
    final_answer_reward,
    format_reward,
    math_reward,
    parse_number,
    stated_answer,
)

__all__ = [
    "BUILTIN",
    "CodeVerifier",
    "RewardMix",
    "RewardResult",
    "RewardSpec",
    "answer_anywhere_reward",
    "answers_match",
    "countdown_reward",
    "exact_reward",
    "extract_answer",
    "final_answer_reward",
    "format_reward",
    "math_reward",
    "parse_number",
    "resolve_reward",
    "stated_answer",
]
