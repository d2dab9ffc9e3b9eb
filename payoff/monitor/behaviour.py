"""Behavioural signatures of a hack, read from one episode: looping and state concentration."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass
class Loop:
    """The episode repeats `period` states from step `start` to its end."""

    start: int
    period: int
    repeats: float
    states: list[Hashable]


def find_loop(
    states: Sequence[Hashable], max_period: int = 50, min_repeats: float = 3.0
) -> Loop | None:
    """The earliest-starting cycle that the episode then follows to its end, if any.

    A cycle of `period` holds from `start` when states[t] == states[t + period] for every
    t >= start; it counts only if it repeats at least `min_repeats` times.
    """
    n = len(states)
    best: Loop | None = None
    for period in range(1, min(max_period, n // 2) + 1):
        start = n - period
        while start > 0 and states[start - 1] == states[start - 1 + period]:
            start -= 1
        repeats = (n - start) / period
        if repeats >= min_repeats and (best is None or start < best.start):
            best = Loop(start, period, repeats, list(states[start : start + period]))
    return best


def concentration(states: Sequence[Hashable], top: int = 4) -> float:
    """Fraction of steps spent in the `top` most visited states (1.0 = stuck in a few states)."""
    if not states:
        return 0.0
    counts = Counter(states)
    return sum(c for _, c in counts.most_common(top)) / len(states)


def distinct_ratio(texts: Sequence[str], n: int = 2) -> float:
    """Distinct n-grams over all n-grams in a batch of texts: low values mean collapsed diversity."""
    grams = [tuple(t[i : i + n]) for t in texts for i in range(max(0, len(t) - n + 1))]
    return len(set(grams)) / len(grams) if grams else 1.0
