"""Verifiers for answers that can be checked: math answers, exact text, Countdown, and format.

Each is a reward function in the TRL convention, `(prompts, completions, **columns) ->
list[float | None]`, reading the reference from a dataset column (`answer`, `numbers`,
`target`). None means "not applicable to this row" (e.g. no reference answer), which the
composition skips rather than scores as zero.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from payoff.core.pysource import parse_expression

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
# A number: optional sign, digits with optional thousands commas, optional decimals, or a fraction.
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:\s*/\s*-?\d+)?|-?\.\d+")
FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.S)


def extract_answer(text: str) -> str:
    """The final answer of a completion: inside the last <answer>...</answer>, else the text."""
    tagged = ANSWER_TAG.findall(text)
    return tagged[-1].strip() if tagged else text.strip()


def parse_number(text: str) -> Fraction | None:
    """The last number in `text` as an exact Fraction ('1,000' -> 1000, '0.50' -> 1/2, '1/2')."""
    matches = NUMBER.findall(text.replace("\u2212", "-"))
    if not matches:
        return None
    raw = matches[-1].replace(",", "").replace(" ", "")
    try:
        if "/" in raw:
            numerator, denominator = raw.split("/")
            if int(denominator) == 0:
                return None
            return Fraction(int(numerator), int(denominator))
        return Fraction(raw)
    except (ValueError, ZeroDivisionError):
        return None


# A reference that is one number (optionally $ before it, % after it): compared as numbers.
SINGLE_NUMBER = re.compile(rf"\s*\$?\s*(?:{NUMBER.pattern})\s*%?\s*")


def answers_match(completion: str, reference: Any) -> bool:
    """Whether the completion's final answer equals `reference`: as numbers when the
    reference is one number (the completion's last number counts, GSM8K-style: '46 apples'
    matches 46), else as text, whitespace-normalized. A reference such as '[1, 2, 3]',
    '1999-12-01' or 'A12' is text, so the last number in it decides nothing."""
    text = str(reference).replace("\u2212", "-")
    if SINGLE_NUMBER.fullmatch(text):
        predicted, expected = parse_number(extract_answer(completion)), parse_number(text)
        if predicted is not None and expected is not None:
            return predicted == expected
    return " ".join(extract_answer(completion).split()) == " ".join(text.split())


def _score_answers(
    completions: Sequence[str], answer: Sequence[Any] | None, match: Callable[[str, Any], bool]
) -> list[float | None]:
    """1.0 / 0.0 per completion as `match(completion, reference)`; None where no reference."""
    if answer is None:
        return [None] * len(completions)
    return [
        None if ref is None else float(match(c, ref))
        for c, ref in zip(completions, answer, strict=True)
    ]


def math_reward(
    prompts: Sequence[Any],
    completions: Sequence[str],
    answer: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """1.0 when the final answer equals the `answer` column numerically, else 0.0."""
    return _score_answers(completions, answer, answers_match)


def exact_reward(
    prompts: Sequence[Any],
    completions: Sequence[str],
    answer: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """1.0 when the final answer equals the `answer` column as text (whitespace-normalised)."""
    return _score_answers(
        completions, answer, lambda c, ref: extract_answer(c).split() == str(ref).split()
    )


# A reply's last words state its answer: 'Answer: N', '= N' or 'is N' (bold or a period may
# follow), nothing else after it; or the whole reply is the number. Matched against the
# reply's tail with its whitespace collapsed to single spaces (`stated_answer`), so each
# ' ?' takes at most one character: no run of spaces a model writes can make the search
# try every way of splitting it.
FINAL_ANSWER = re.compile(
    rf"(?:^|\banswer ?:|=|\bis ?:?) ?(?:\*\* ?)?({NUMBER.pattern}) ?(?:\*\* ?)?\.? ?$",
    re.I,
)
# How much of a reply's end stated_answer reads: its last words are the statement.
FINAL_ANSWER_TAIL = 1_000


def stated_answer(text: str) -> str | None:
    """The number a reply ends by stating ('... = 46', 'The answer is 46.', 'Answer: 46', or
    just '46'); None when its last words are not such a statement (more text after the answer, or a
    list of numbers: 'Answer: 44, 45, 46' states nothing)."""
    text = " ".join(text.replace("\u2212", "-").split())  # linear: one pass over the reply
    tail = text[-FINAL_ANSWER_TAIL:]
    if len(text) > FINAL_ANSWER_TAIL:
        tail = "... " + tail  # cut: the tail is not the whole reply, so '^' must not match
    found = FINAL_ANSWER.search(tail)
    return found.group(1) if found else None


def final_answer_reward(
    prompts: Sequence[Any],
    completions: Sequence[str],
    answer: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """1.0 when the reply ends by stating one number ('= N', 'is N' or 'Answer: N') equal to
    the `answer` column; stricter than `math`, which pays the last number wherever it is."""

    def match(completion: str, reference: Any) -> bool:
        stated = stated_answer(completion)
        expected = parse_number(str(reference))
        return stated is not None and expected is not None and parse_number(stated) == expected

    return _score_answers(completions, answer, match)


# How many numbers a reply may hold before answer_anywhere stops looking (a reply is model-
# written: a wall of digits costs no more than this many comparisons).
ANYWHERE_MOST_NUMBERS = 200


def answer_anywhere_reward(
    prompts: Sequence[Any],
    completions: Sequence[str],
    answer: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """1.0 when any number in the reply equals the `answer` column: the loose checker people
    write as `str(answer) in completion`. Deliberately gameable (a reply that lists many
    numbers, or states the answer and then goes on, is paid): a proxy to train on when you
    want to watch a hack being learned and caught; `final_answer` is the strict twin."""

    def match(completion: str, reference: Any) -> bool:
        expected = parse_number(str(reference))
        found = NUMBER.findall(completion.replace("\u2212", "-"))[:ANYWHERE_MOST_NUMBERS]
        return expected is not None and any(parse_number(n) == expected for n in found)

    return _score_answers(completions, answer, match)


def format_reward(prompts: Sequence[Any], completions: Sequence[str], **_: Any) -> list[float]:
    """1.0 for exactly `<think>...</think><answer>...</answer>` (R1's layout), else 0.0."""
    return [float(bool(FORMAT.match(c))) for c in completions]


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    """Exact value of an arithmetic expression tree; collects the integer literals it uses."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, used)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, used), _evaluate(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError
        return Fraction(_OPERATORS[type(node.op)](left, right))
    raise ValueError("only integers, + - * / and parentheses are allowed")


def countdown_reward(
    prompts: Sequence[Any],
    completions: Sequence[str],
    numbers: Sequence[Sequence[int]] | None = None,
    target: Sequence[int] | None = None,
    **_: Any,
) -> list[float | None]:
    """1.0 when the expression uses each given number exactly once and equals the target."""
    if numbers is None or target is None:
        return [None] * len(completions)
    scores: list[float | None] = []
    for completion, given, goal in zip(completions, numbers, target, strict=True):
        expression = extract_answer(completion).split("=")[0].strip()
        if len(expression) > 200:  # no evaluating huge expressions (e.g. 9**9**9 is refused anyway)
            scores.append(0.0)
            continue
        used: list[int] = []
        try:
            value = _evaluate(parse_expression(expression), used)
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            scores.append(0.0)
            continue
        scores.append(float(sorted(used) == sorted(given) and value == goal))
    return scores
