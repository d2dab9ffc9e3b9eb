"""Countdown (reach a target with + - * /) and sorting a list of numbers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.tasks.base import Row, Task, register_task


@dataclass
class CountdownOptions:
    """Difficulty knobs.

    numbers: how many numbers are given (each must be used exactly once).
    max_number: numbers are drawn from 1..max_number.
    ood_numbers: how many numbers in the out-of-distribution split.
    template: the prompt; {numbers} (space separated) and {target}.
    """

    numbers: int = 3
    max_number: int = 20
    ood_numbers: int = 4
    template: str = "{numbers}->{target}:"

    def validate(self) -> None:
        if self.numbers < 2 or self.ood_numbers < 2 or self.max_number < 2:
            raise ConfigError("task.options numbers/ood_numbers/max_number must be >= 2")


@register_task("countdown")
class Countdown(Task):
    """Given numbers and a target, write an expression using each number once that hits it.

    Targets come from a random expression over the numbers, so every problem is solvable;
    the answer column holds that expression (one solution of possibly many).
    """

    default_rewards = ("countdown",)

    options: CountdownOptions

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        o = self.options
        count = o.ood_numbers if split == "ood" else o.numbers
        while True:
            numbers = [int(n) for n in rng.integers(1, o.max_number + 1, size=count)]
            order = list(rng.permutation(count))
            expression, value = str(numbers[order[0]]), numbers[order[0]]
            for i in order[1:]:
                op = str(rng.choice(["+", "-", "*", "/"]))
                n = numbers[i]
                if op == "/" and (n == 0 or value % n):
                    op = "+"
                value = {"+": value + n, "-": value - n, "*": value * n, "/": value // n}[op]
                expression = f"({expression}){op}{n}" if op in "*/" else f"{expression}{op}{n}"
            if 0 < value <= 1000:
                break
        text = " ".join(map(str, numbers))
        return {
            "prompt": o.template.format(numbers=text, target=value),
            "answer": expression,
            "numbers": numbers,
            "target": value,
            "key": f"{text}->{value}",
        }


@dataclass
class SortingOptions:
    """Difficulty knobs.

    length: list length in training and test.
    ood_length: list length in the out-of-distribution split.
    max_value: values are drawn from 0..max_value.
    template: the prompt; {items} (space separated).
    """

    length: int = 4
    ood_length: int = 6
    max_value: int = 99
    template: str = "sort {items}:"

    def validate(self) -> None:
        if self.length < 2 or self.ood_length < 2:
            raise ConfigError("task.options length/ood_length must be >= 2")


@register_task("sorting")
class Sorting(Task):
    """Sort a list of integers ascending: 'sort 5 3 9:' -> '3 5 9'."""

    default_rewards = ("exact",)

    options: SortingOptions

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        o = self.options
        length = o.ood_length if split == "ood" else o.length
        items = [int(v) for v in rng.integers(0, o.max_value + 1, size=length)]
        text = " ".join(map(str, items))
        return {
            "prompt": o.template.format(items=text),
            "answer": " ".join(map(str, sorted(items))),
            "key": text,
        }
