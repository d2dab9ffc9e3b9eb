"""What a task is: rows of `{"prompt", "answer" | "tests", ...}` for training and held-out splits.

A task draws training rows with the caller's RNG and builds fixed evaluation splits
('test': same distribution, never seen in training; 'ood': harder than anything in
training). Every column of a row is passed through to reward functions as a keyword
argument, the way TRL passes dataset columns.
"""

from __future__ import annotations

import ast
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from payoff.core.config import annotated_class, from_dict
from payoff.core.errors import ConfigError
from payoff.core.pysource import parse_module

Row = dict[str, Any]
SPLITS = ("train", "test", "ood")


def held_out(key: str, percent: float) -> bool:
    """Whether a problem (named by `key`) belongs to the held-out test pool; stable across runs."""
    return zlib.crc32(key.encode()) % 10_000 < percent * 100


class Task:
    """Base of the task generators. Subclasses implement `_problem(rng, split)`.

    `_problem` returns one row with a `key` naming the problem; training draws reject keys
    in the held-out pool and the test split draws only from it, so they never overlap.
    """

    name: str = "task"
    default_rewards: tuple[str, ...] = ("math",)
    held_out_percent: float = 10.0
    options_class: type | None = None  # of `task.options`: the class its `options` annotation names
    options: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.options_class = annotated_class(cls, "options") or cls.options_class

    def __init__(self, **options: object):
        """A generator's difficulty knobs, checked against its options_class."""
        if self.options_class is not None:
            self.options = from_dict(self.options_class, dict(options), prefix="task.options.")

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        raise NotImplementedError

    def _draw(self, rng: np.random.Generator, split: str) -> Row:
        for _ in range(10_000):
            row = self._problem(rng, split)
            if split == "ood":
                return row
            if held_out(row["key"], self.held_out_percent) == (split == "test"):
                return row
        raise ConfigError(
            f"task {self.name!r} could not draw a {split!r} problem: the problem space is too small "
            f"for a {self.held_out_percent}% held-out pool; raise the difficulty knobs"
        )

    @property
    def has_references(self) -> bool:
        """Whether rows carry what a verifier checks (an answer, tests); prompt-only data does
        not, and has no default reward: the run's reward functions alone score it."""
        return bool(self.default_rewards)

    def has_split(self, split: str) -> bool:
        """Whether `split` has problems: a generator has all three, your data may lack 'ood'."""
        return split in SPLITS

    def contradict(self, row: Row) -> Row | None:
        """`row` with its checks contradicting themselves (canary tasks); None when it has none.

        See `contradict_row`: the first assert of each test column expects another value (the
        same change where the prompt shows that assert), or a numeric answer is off by one.
        """
        return contradict_row(row)

    def sample(self, rng: np.random.Generator, n: int) -> list[Row]:
        """`n` training rows drawn with `rng` (never from the held-out pool)."""
        return [self._draw(rng, "train") for _ in range(n)]

    def split(self, split: str, n: int, seed: int = 0) -> list[Row]:
        """A fixed list of `n` rows for 'test' or 'ood' (or 'train'), the same on every call."""
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        rng = np.random.default_rng([zlib.crc32(f"{self.name}/{split}".encode()), seed])
        rows: list[Row] = []
        seen: set[str] = set()
        for _ in range(50 * n):
            if len(rows) == n:
                break
            row = self._draw(rng, split)
            if row["key"] not in seen:  # distinct problems, so accuracy is not over-weighted
                seen.add(row["key"])
                rows.append(row)
        return rows


TEST_COLUMNS = ("tests", "visible_tests")


def _changed_assert(line: str) -> tuple[str, str, str] | None:
    """(shown, changed line, changed shown) for `assert CALL == LITERAL`; else None.

    shown is `CALL == LITERAL` as written; the change expects another literal (an int or
    float plus one, a flipped bool, a string with a character added).
    """
    try:
        node = parse_module(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return None
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
        return None
    compare = node.test
    if len(compare.ops) != 1 or not isinstance(compare.ops[0], ast.Eq):
        return None
    try:
        expected = ast.literal_eval(compare.comparators[0])
    except ValueError:
        return None
    if isinstance(expected, bool):
        other: object = not expected
    elif isinstance(expected, int | float):
        other = expected + 1
    elif isinstance(expected, str):
        other = expected + "x"
    else:
        return None
    call = ast.get_source_segment(line.strip(), compare.left)
    shown = f"{call} == {expected!r}"
    changed = f"{call} == {other!r}"
    return shown, f"assert {changed}", changed


def contradict_row(row: Row) -> Row | None:
    """A copy of `row` whose checks no honest answer meets together with the original's.

    Test columns (`tests`, `visible_tests` of assert lines): the first `assert CALL ==
    LITERAL` expects another value, in the prompt too where it shows that assert. A numeric
    `answer`: plus one. None when the row has neither (no canary can be made of it).
    """
    twin = dict(row)
    changed_any = False
    for column in TEST_COLUMNS:
        tests = row.get(column)
        if not isinstance(tests, str) or not tests.strip():
            continue
        lines = tests.splitlines()
        for i, line in enumerate(lines):
            change = _changed_assert(line)
            if change is None:
                continue
            shown, lines[i], changed_shown = change
            twin[column] = "\n".join(lines)
            twin["prompt"] = str(twin["prompt"]).replace(shown, changed_shown)
            changed_any = True
            break
    if not changed_any:
        answer = row.get("answer")
        try:
            value = float(str(answer).strip())
        except ValueError:
            return None
        twin["answer"] = str(int(value) + 1 if value.is_integer() else value + 1)
    return twin


TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a Task subclass available as `task.name: <name>`."""

    def wrap(cls: type[Task]) -> type[Task]:
        cls.name = name
        TASKS[name] = cls
        return cls

    return wrap
