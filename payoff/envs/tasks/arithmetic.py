"""Multi-digit addition and multiplication: '12+34=' -> '46'."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.tasks.base import Row, Task, register_task

VERIFIERS = ("math", "final_answer", "exact")


@dataclass
class ArithmeticOptions:
    """Difficulty knobs.

    digits: operands have up to this many digits in training and test (0 .. 10**digits - 1).
    second_digits: digits of the second operand (default: same as `digits`); e.g. 1 for
        'multiply by a single digit'.
    ood_digits: operand digits in the out-of-distribution split (longer than training).
    template: the prompt; {a} and {b} are the operands, {op} the operator ('+' or '*'). A
        question for a chat model, e.g. "What is {a} {op} {b}? End your reply with the
        answer.", reaches it as a user message through its chat template.
    verifier: what counts as correct (held-out accuracy, and the reward when the run names
        none): 'math' = the reply's last number, wherever it is; 'final_answer' = the reply
        ends by stating one number ('= 46', 'The answer is 46.', 'Answer: 46' or just '46'),
        so an answer followed by more text, or among a list of numbers, is not paid;
        'exact' = the reply is the number alone.
    """

    digits: int = 2
    second_digits: int = 0
    ood_digits: int = 3
    template: str = "{a}{op}{b}="
    verifier: str = "math"

    def validate(self) -> None:
        if self.verifier not in VERIFIERS:
            raise ConfigError(
                f"task.options.verifier must be one of {', '.join(VERIFIERS)}, got {self.verifier!r}"
            )
        if not 1 <= self.digits <= 12 or not 1 <= self.ood_digits <= 12:
            raise ConfigError(
                f"task.options digits/ood_digits must be in 1..12, got {self.digits}/{self.ood_digits}"
            )


class _Arithmetic(Task):
    operator = "+"

    options: ArithmeticOptions

    def __init__(self, **options: object):
        super().__init__(**options)
        self.default_rewards = (self.options.verifier,)

    def _operate(self, a: int, b: int) -> int:
        raise NotImplementedError

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        o = self.options
        digits = o.ood_digits if split == "ood" else o.digits
        second = o.second_digits or digits
        if split == "ood" and o.second_digits:
            second = o.second_digits
        a = int(rng.integers(0, 10**digits))
        b = int(rng.integers(0, 10**second))
        if split == "ood":
            # Guarantee the OOD problem really is longer than anything seen in training.
            a = int(rng.integers(10 ** (digits - 1), 10**digits))
        return {
            "prompt": o.template.format(a=a, b=b, op=self.operator),
            "answer": str(self._operate(a, b)),
            "key": f"{a}{self.operator}{b}",
        }


@register_task("addition")
class Addition(_Arithmetic):
    """a + b with `digits`-digit operands."""

    operator = "+"

    def _operate(self, a: int, b: int) -> int:
        return a + b


@register_task("multiplication")
class Multiplication(_Arithmetic):
    """a * b with `digits`-digit (and `second_digits`-digit) operands."""

    operator = "*"

    def _operate(self, a: int, b: int) -> int:
        return a * b
