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
    show_working: each row also carries a `demonstration`: the reply a teacher would write,
        working then answer ('83 * 3 = 80 * 3 + 3 * 3 = 240 + 9 = 249'). SFT trains on it,
        and `pairs` prefers it to the same working with one slip (DPO); accuracy still
        checks the answer alone.
    """

    digits: int = 2
    second_digits: int = 0
    ood_digits: int = 3
    template: str = "{a}{op}{b}="
    verifier: str = "math"
    show_working: bool = False

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

    def working(self, a: int, b: int, slip: int = 0) -> str:
        """The worked reply to a (op) b, ending '= answer'; `slip` != 0 adds it to one
        intermediate number, so the working (and the answer) goes wrong as a person's would."""
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
        row = {
            "prompt": o.template.format(a=a, b=b, op=self.operator),
            "answer": str(self._operate(a, b)),
            "key": f"{a}{self.operator}{b}",
        }
        if o.show_working:
            row["demonstration"] = self.working(a, b)
            row["operands"] = [a, b]
        return row

    def pairs(
        self, rng: np.random.Generator, n: int, bias: float, split: str = "train"
    ) -> list[Row]:
        """`n` preference pairs on distinct problems of `split`: the worked reply (chosen)
        against the same working with one slip (rejected, a wrong answer). With probability
        `bias` a pair's labels are swapped: a careless rater. Needs show_working."""
        if not self.options.show_working:
            raise ConfigError(
                f"preference pairs from task {self.name!r} need task.options.show_working=true "
                "(the chosen reply is the worked one)"
            )
        if not 0 <= bias <= 1:
            raise ConfigError(f"preference bias must be in [0, 1], got {bias}")
        rows: list[Row] = []
        for problem in self.split(split, n, seed=int(rng.integers(2**31))):
            a, b = problem["operands"]
            slip = int(rng.choice([-20, -10, -2, -1, 1, 2, 10, 20]))
            chosen, rejected = problem["demonstration"], self.working(a, b, slip)
            if rng.random() < bias:
                chosen, rejected = rejected, chosen
            rows.append({**problem, "chosen": chosen, "rejected": rejected})
        return rows


@register_task("addition")
class Addition(_Arithmetic):
    """a + b with `digits`-digit operands."""

    operator = "+"

    def _operate(self, a: int, b: int) -> int:
        return a + b

    def working(self, a: int, b: int, slip: int = 0) -> str:
        """Tens and units apart: '47 + 38 = 40 + 30 + 7 + 8 = 70 + 15 = 85'."""
        tens, units = a - a % 10 + b - b % 10, a % 10 + b % 10
        slip = -slip if a + b + slip < 0 else slip  # a slip, not a negative sum
        if a < 10 or b < 10:  # nothing to split
            return f"{a} + {b} = {a + b + slip}"
        tens += slip
        return (
            f"{a} + {b} = {a - a % 10} + {b - b % 10} + {a % 10} + {b % 10} "
            f"= {tens} + {units} = {tens + units}"
        )


@register_task("multiplication")
class Multiplication(_Arithmetic):
    """a * b with `digits`-digit (and `second_digits`-digit) operands."""

    operator = "*"

    def _operate(self, a: int, b: int) -> int:
        return a * b

    def working(self, a: int, b: int, slip: int = 0) -> str:
        """The first operand by its digits: '83 * 3 = 80 * 3 + 3 * 3 = 240 + 9 = 249'."""
        parts = [(int(d) * 10**i, b) for i, d in enumerate(reversed(str(a))) if d != "0"][::-1]
        if len(parts) < 2:  # a single nonzero digit: one product, nothing to add
            return f"{a} * {b} = {a * b + (-slip if a * b + slip < 0 else slip)}"
        products = [x * y for x, y in parts]
        products[0] += -slip if products[0] + slip < 0 else slip
        return (
            f"{a} * {b} = {' + '.join(f'{x} * {y}' for x, y in parts)} "
            f"= {' + '.join(map(str, products))} = {sum(products)}"
        )
