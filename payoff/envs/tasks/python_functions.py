"""Small Python functions checked by unit tests: 'def add_7(x): ...' with `assert` lines.

Each family is a template with a random constant; the `tests` column holds assert lines
that the code verifier runs in a sandbox. The out-of-distribution split uses families never
shown in training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from payoff.envs.tasks.base import Row, Task, register_task

# (name, description, solution body, reference function) -- {k} is the random constant.
Family = tuple[str, str, str, Callable[[int], Callable]]
FAMILIES: list[Family] = [
    ("add_{k}", "returns x plus {k}", "return x + {k}", lambda k: lambda x: x + k),
    ("times_{k}", "returns x times {k}", "return x * {k}", lambda k: lambda x: x * k),
    (
        "divisible_by_{k}",
        "returns True when x is divisible by {k}",
        "return x % {k} == 0",
        lambda k: lambda x: x % k == 0,
    ),
    ("minus_{k}", "returns x minus {k}", "return x - {k}", lambda k: lambda x: x - k),
    (
        "clamp_{k}",
        "returns x, but at most {k}",
        "return min(x, {k})",
        lambda k: lambda x: min(x, k),
    ),
    (
        "square_plus_{k}",
        "returns x squared plus {k}",
        "return x * x + {k}",
        lambda k: lambda x: x * x + k,
    ),
    ("mod_{k}", "returns x modulo {k}", "return x % {k}", lambda k: lambda x: x % k),
]
OOD_FAMILIES: list[Family] = [
    (
        "abs_diff_{k}",
        "returns the absolute difference between x and {k}",
        "return abs(x - {k})",
        lambda k: lambda x: abs(x - k),
    ),
    (
        "cube_minus_{k}",
        "returns x cubed minus {k}",
        "return x ** 3 - {k}",
        lambda k: lambda x: x**3 - k,
    ),
]


@dataclass
class PythonOptions:
    """Difficulty knobs.

    max_constant: the constant k in each family is drawn from 2..max_constant.
    tests_per_problem: assert lines per problem.
    template: the prompt; {signature} and {description}.
    """

    max_constant: int = 9
    tests_per_problem: int = 3
    template: str = "def {signature}:\n    # {description}\n"


@register_task("python")
class PythonFunctions(Task):
    """Write the body of a one-line function; rewarded by running its unit tests."""

    default_rewards = ("code",)

    options: PythonOptions

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        o = self.options
        families = OOD_FAMILIES if split == "ood" else FAMILIES
        name, description, body, reference = families[int(rng.integers(len(families)))]
        k = int(rng.integers(2, o.max_constant + 1))
        function = name.format(k=k)
        check = reference(k)
        inputs = [int(x) for x in rng.integers(-20, 50, size=o.tests_per_problem)]
        tests = "\n".join(f"assert {function}({x}) == {check(x)!r}" for x in inputs)
        prompt = o.template.format(signature=f"{function}(x)", description=description.format(k=k))
        return {
            "prompt": prompt,
            "answer": "    " + body.format(k=k) + "\n",
            "tests": tests,
            "key": function,
        }
