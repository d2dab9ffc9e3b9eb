"""The `instructions` verifier: the share of a row's constraints (IFEval's kind) a reply meets.

A row's `constraints` column holds plain data, e.g. `[{"kind": "max_words", "n": 25},
{"kind": "lowercase"}]` (payoff.envs.tasks.instructions writes them); each kind has one
small pure check here, `CHECKS[kind](text, constraint) -> bool`. The score is the fraction
met, so a reply meeting all of them scores 1.0: the trainers' accuracy is the share of
replies that follow every instruction (IFEval's strict prompt-level accuracy), the reward
the share followed (its instruction-level accuracy, per row).

Completions are written by the model being trained: hostile text. Every check runs in
time linear in the text (no eval; regular expressions of single character classes only,
which cannot backtrack catastrophically), a reply over MAX_CHARS characters meets nothing,
and JSON is parsed only after a scan bounds its nesting depth. A reply of fewer than
MIN_WORDS words meets nothing either: otherwise an empty reply would be all lowercase, free
of commas and under any word limit -- the first hack GRPO finds.

A constraint with `"negate": true` asks for the opposite (canary twins).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from payoff.core.errors import ConfigError

MAX_CHARS = 20_000  # a "short piece of writing" is far shorter; longer replies meet nothing
MIN_WORDS = 5
MAX_JSON_DEPTH = 20
WORD = re.compile(r"\w+")
SENTENCE_END = re.compile(r"[.!?\n]+")
PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,50}\]")
FENCE_OPEN = ("```json", "```JSON", "```Json", "```")

Constraint = dict[str, Any]


def words(text: str) -> list[str]:
    """The words of `text` as IFEval counts them: runs of letters, digits and '_'."""
    return WORD.findall(text)


def sentences(text: str) -> int:
    """Sentences: stretches holding a word, ended by '.', '!', '?' or a line break ('3.5'
    counts two: good enough for limits of 1-3)."""
    return sum(1 for part in SENTENCE_END.split(text) if WORD.search(part))


def max_words(text: str, c: Constraint) -> bool:
    return len(words(text)) <= int(c["n"])


def min_words(text: str, c: Constraint) -> bool:
    return len(words(text)) >= int(c["n"])


def max_sentences(text: str, c: Constraint) -> bool:
    return sentences(text) <= int(c["n"])


def lowercase(text: str, c: Constraint) -> bool:
    """Some cased letters, none of them capitals."""
    return any(ch.islower() for ch in text) and not any(ch.isupper() for ch in text)


def uppercase(text: str, c: Constraint) -> bool:
    """Some cased letters, all of them capitals."""
    return any(ch.isupper() for ch in text) and not any(ch.islower() for ch in text)


def _has_word(text: str, word: str) -> bool:
    """Whether `word` (one or more words) appears as whole words, ignoring case."""
    wanted = [w.casefold() for w in words(word)]
    found = [w.casefold() for w in words(text)]
    if not wanted:
        return False
    n = len(wanted)
    return any(found[i : i + n] == wanted for i in range(len(found) - n + 1))


def include_keyword(text: str, c: Constraint) -> bool:
    return _has_word(text, str(c["word"]))


def exclude_keyword(text: str, c: Constraint) -> bool:
    return not _has_word(text, str(c["word"]))


def bullets(text: str, c: Constraint) -> bool:
    """Exactly n lines that are markdown bullet points ('* ' or '- ', indented or not)."""
    count = sum(1 for line in text.splitlines() if line.lstrip().startswith(("* ", "- ")))
    return count == int(c["n"])


def _unfenced(text: str) -> str:
    """The text without a ```json ... ``` fence around it (IFEval allows one)."""
    text = text.strip()
    for fence in FENCE_OPEN:
        if text.startswith(fence) and text.endswith("```") and len(text) >= len(fence) + 3:
            return text[len(fence) : -3].strip()
    return text


def json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside JSON strings, in one pass."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def json_object(text: str, c: Constraint) -> bool:
    """The whole reply (a ```json fence allowed) is one JSON object with the key asked for."""
    body = _unfenced(text)
    if not body.startswith("{") or json_depth(body) > MAX_JSON_DEPTH:
        return False
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # int too long to parse is a ValueError too
        return False
    key = c.get("key")
    return isinstance(value, dict) and (not key or key in value)


def ends_with(text: str, c: Constraint) -> bool:
    """The reply ends with the phrase (case and surrounding whitespace aside)."""
    phrase = str(c["phrase"]).strip().casefold()
    return bool(phrase) and text.strip().casefold().endswith(phrase)


def starts_with(text: str, c: Constraint) -> bool:
    """The reply's first word (after any leading punctuation or markup) is the word asked for."""
    first = WORD.search(text)
    return first is not None and first.group().casefold() == str(c["word"]).casefold()


def no_commas(text: str, c: Constraint) -> bool:
    return "," not in text and "\uff0c" not in text  # the full-width comma too


def title(text: str, c: Constraint) -> bool:
    """A title in double angular brackets: '<<' then 1-200 characters on one line then '>>'."""
    start = text.find("<<")
    while start != -1:
        close = text.find(">>", start + 2, start + 204)
        if close != -1:
            inside = text[start + 2 : close]
            if inside.strip() and "\n" not in inside and "<<" not in inside:
                return True
        start = text.find("<<", start + 2)
    return False


def placeholders(text: str, c: Constraint) -> bool:
    """At least n placeholders: square brackets around 1-50 characters of one line."""
    return len(PLACEHOLDER.findall(text)) >= int(c["n"])


CHECKS: dict[str, Callable[[str, Constraint], bool]] = {
    "max_words": max_words,
    "min_words": min_words,
    "max_sentences": max_sentences,
    "lowercase": lowercase,
    "uppercase": uppercase,
    "include_keyword": include_keyword,
    "exclude_keyword": exclude_keyword,
    "bullets": bullets,
    "json": json_object,
    "ends_with": ends_with,
    "starts_with": starts_with,
    "no_commas": no_commas,
    "title": title,
    "placeholders": placeholders,
}


class ConstraintError(ValueError):
    """A row's constraint that names no known kind or lacks a parameter (a data bug: the
    reward mix scores the row on_error and says so once)."""


def check(text: str, constraint: Constraint) -> bool:
    """Whether `text` meets one constraint (with `negate`, its opposite). Replies over
    MAX_CHARS characters or under MIN_WORDS words meet none, negated or not."""
    kind = constraint.get("kind") if isinstance(constraint, dict) else None
    if kind not in CHECKS:
        raise ConstraintError(
            f"unknown constraint {constraint!r}: 'kind' must be one of {', '.join(CHECKS)}"
        )
    if len(text) > MAX_CHARS or len(words(text)) < MIN_WORDS:
        return False
    try:
        met = CHECKS[kind](text, constraint)
    except KeyError as err:
        raise ConstraintError(f"constraint {constraint!r} lacks its parameter {err}") from None
    return met != bool(constraint.get("negate", False))


def verdicts(text: str, constraints: Sequence[Constraint]) -> list[bool]:
    """Per constraint, whether `text` meets it."""
    if len(text) > MAX_CHARS:  # before anything scans it
        return [False] * len(constraints)
    return [check(text, c) for c in constraints]


class InstructionsVerifier:
    """Reward function: the fraction of the row's `constraints` the completion meets (None
    for a row without constraints: not applicable).

    `counts` holds each kind's pass rate over its last `window` checks, which the GRPO
    trainer logs as reward/instructions/pass_rate/<kind>.
    """

    __name__ = "instructions"

    def __init__(self, window: int = 512):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(
                f"reward 'instructions' option window (checks per kind its pass rate is "
                f"taken over) must be an integer >= 1, got {window!r}"
            )
        self.recent: dict[str, deque[bool]] = {kind: deque(maxlen=window) for kind in CHECKS}

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        constraints: Sequence[Sequence[Constraint] | None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if constraints is None:
            return [None] * len(completions)
        scores: list[float | None] = []
        for completion, asked in zip(completions, constraints, strict=True):
            if not asked:
                scores.append(None)
                continue
            met = verdicts(str(completion), asked)
            for constraint, ok in zip(asked, met, strict=True):
                if not constraint.get("negate"):  # canary twins say nothing of the policy
                    self.recent[constraint["kind"]].append(ok)
            scores.append(sum(met) / len(met))
        return scores

    @property
    def counts(self) -> dict[str, float]:
        return {
            f"pass_rate/{kind}": sum(seen) / len(seen) for kind, seen in self.recent.items() if seen
        }
