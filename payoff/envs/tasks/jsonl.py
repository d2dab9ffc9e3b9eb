"""Bring-your-own problems: rows with a prompt and a reference answer, from any file `datasets.py` reads.

TRL's formats, standard or conversational, each becoming {"prompt": text, "answer": text, ...}:

    {"prompt": "2+2=", "answer": "4"}                    also 'solution', 'ground_truth' or
                                                         'completion' as the reference
    {"prompt": [{"role": "user", "content": "2+2="}], "completion": [{"role": "assistant", "content": "4"}]}
    {"messages": [..., {"role": "assistant", "content": "4"}]}   the last assistant turn answers
    {"text": "The sky is blue."}                          language modelling (SFT): no prompt
    {"prompt": "def f(x):", "tests": "assert f(1) == 2"}  code, checked by running the tests

A conversational prompt is rendered as text with `render_chat` for the tiny model; its
messages stay in the row as `prompt_messages`. Every other column is kept and reaches
the reward functions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks.base import Row, Task, held_out
from payoff.envs.tasks.datasets import (
    columns,
    dataset_splits,
    held_out_split,
    is_conversation,
    messages,
    read_records,
    render_chat,
    reply,
)

REFERENCES = ("answer", "solution", "ground_truth", "completion")
PROBLEM_FORMATS = (
    "prompt with answer (or solution, ground_truth, completion; or tests for code), "
    "messages ending in an assistant turn, or text (SFT only)"
)


def _present(row: Row, column: str) -> bool:
    return row.get(column) is not None


# Reward functions get the batch under these names and every other column by its own, so a
# column may not take one of them (`self`: RewardMix's own argument).
RESERVED_COLUMNS = ("prompts", "completions", "completion_ids", "self")


def problem_row(where: str, row: dict[str, Any]) -> Row:
    """One row in TRL's formats as {"prompt", "answer" | "tests", ...}; DataError naming `where`."""
    row = dict(row)
    taken = [c for c in RESERVED_COLUMNS if c in row]
    if taken:
        raise DataError(
            f"{where}: column {taken[0]!r} has a name reward functions already get for the "
            f"batch ({', '.join(RESERVED_COLUMNS[:3])}); rename it, e.g. to 'my_{taken[0]}'"
        )
    conversation: list[dict[str, str]] | None = None
    if _present(row, "prompt"):
        if is_conversation(row["prompt"]):
            conversation = messages(where, "prompt", row["prompt"])
            row["prompt"] = render_chat(conversation)
        elif not isinstance(row["prompt"], str) or not row["prompt"]:
            raise DataError(
                f"{where}: missing a non-empty string 'prompt' (or a list of chat messages), "
                f"got {row['prompt']!r}; a problem row has {PROBLEM_FORMATS}"
            )
    elif _present(row, "messages"):
        turns = messages(where, "messages", row["messages"])
        if turns[-1]["role"] != "assistant" or len(turns) < 2:
            raise DataError(
                f"{where}: column 'messages' must end with an assistant turn (the answer) after "
                f"at least one other message; roles: {[m['role'] for m in turns]}"
            )
        conversation = turns[:-1]
        row["prompt"] = render_chat(conversation)
        row.setdefault("answer", turns[-1]["content"])
    elif _present(row, "text"):
        if not isinstance(row["text"], str) or not row["text"]:
            raise DataError(
                f"{where}: column 'text' must be a non-empty string, got {row['text']!r}"
            )
        row["prompt"], row["answer"] = "", row["text"]  # language modelling: all of it is learnt
    else:
        raise DataError(
            f"{where}: missing a non-empty string 'prompt'; a problem row has {PROBLEM_FORMATS}; "
            f"this row's columns: {columns(row)}"
        )
    if conversation is not None:
        row["prompt_messages"] = conversation
    reference = next((c for c in REFERENCES if _present(row, c)), None)
    if reference is not None:
        value = row[reference]
        conversational = reference == "completion" and is_conversation(value)
        if isinstance(value, float) and not math.isfinite(value):  # NaN: a missing value
            raise DataError(
                f"{where}: {reference!r} is {value} (an empty cell or a missing value?); give "
                f"each row its reference answer or drop the row"
            )
        if not (isinstance(value, str | int | float) or conversational):
            raise DataError(
                f"{where}: {reference!r} must be a string or number"
                + (" (or one assistant message)" if reference == "completion" else "")
                + f", got {value!r}"
            )
        row["answer"] = (
            str(value) if isinstance(value, int | float) else reply(where, reference, value)
        )
        if not row["answer"].strip():  # a verifier would pay an empty completion for it
            raise DataError(
                f"{where}: {reference!r} is {value!r}, an empty answer; give each row its "
                f"reference answer, or drop the row"
            )
    if _present(row, "tests") and not isinstance(row["tests"], str):
        raise DataError(
            f"{where}: 'tests' must be a string of Python asserts, got {row['tests']!r}"
        )
    # The key names the problem for the held-out split: a string, whatever the file stored.
    row["key"] = str(row["key"]) if _present(row, "key") else row["prompt"] or row["answer"]
    return row


def has_reference(row: Row) -> bool:
    """Whether a problem row carries what a verifier checks: an answer, or tests for code."""
    return _present(row, "answer") or _present(row, "tests")


def read_rows(path: Any, split: str = "train") -> list[Row]:
    """Problem rows of a dataset file or folder; a malformed row is a DataError naming `file:line`.

    Either every row has a reference (an answer or tests) or none has: prompt-only rows,
    as TRL's GRPO takes them, are scored by the run's reward functions alone.
    split: the split to read from a DatasetDict folder.
    """
    rows: list[Row] = []
    for where, record in read_records(path, split):
        row = problem_row(where, record)
        if rows and has_reference(row) != has_reference(rows[0]):
            either = (
                "give every row its reference, or none (prompt-only rows, scored by your "
                f"reward functions alone); columns: {columns(record)}"
            )
            if has_reference(rows[0]):
                raise DataError(
                    f"{where}: needs an 'answer' (or {', '.join(map(repr, REFERENCES[1:]))}; "
                    f"checked by the math/exact verifiers) or 'tests' (run by the code "
                    f"verifier), as the first row has; {either}"
                )
            raise DataError(
                f"{where}: has a reference (an answer or tests) where the first row has none; "
                + either
            )
        rows.append(row)
    if not rows:
        raise DataError(f"dataset {_name(path)} holds no rows")
    return rows


def _given(data: Any) -> Any:
    """The data if any was given (a path, or rows from Python), else None."""
    if data is None or (isinstance(data, str | Path) and not str(data)):
        return None
    return data


def _name(data: Any) -> str:
    return repr(str(data)) if isinstance(data, str | Path) else f"({type(data).__name__})"


class JsonlTask(Task):
    """Rows from your files (any format `read_rows` reads, not only JSONL).

    The test split is `test_data`; else the 'test' (or 'validation', 'valid', 'dev') split
    of a DatasetDict folder in `data`; else 10% of `data`, held out by a hash of each prompt. The ood split is `ood_data` (or
    the folder's 'ood' split); without one there is no ood split (`has_split` says so).
    """

    name = "jsonl"

    def __init__(self, data: Any, test_data: Any = "", ood_data: Any = ""):
        if data is None or (isinstance(data, str) and not data):
            raise ConfigError(
                "task 'jsonl' needs task.data=<a .jsonl, .json, .csv or .parquet file, "
                "or a save_to_disk folder>"
            )
        rows = read_rows(data, "train")
        splits = dataset_splits(data)
        # a DatasetDict's held-out split: 'test', else 'validation' (or 'valid', 'dev')
        held = held_out_split(splits)
        test_split = "test" if _given(test_data) else held or "test"  # a file's own, or data's
        test_data = _given(test_data) or (data if held else "")
        ood_data = _given(ood_data) or (data if "ood" in splits else "")
        self.test_rows = read_rows(test_data, test_split) if _given(test_data) else None
        self.ood_rows = read_rows(ood_data, "ood") if _given(ood_data) else None
        if self.test_rows is None:
            self.train_rows = [r for r in rows if not held_out(r["key"], self.held_out_percent)]
            self.test_rows = [r for r in rows if held_out(r["key"], self.held_out_percent)]
        else:
            self.train_rows = rows
        if not self.train_rows:
            raise DataError(
                f"dataset {_name(data)} leaves no training rows after holding out the test split"
            )
        first = self.train_rows[0]
        for split, pool, source in (
            ("test", self.test_rows, test_data),
            ("ood", self.ood_rows, ood_data),
        ):
            if pool and has_reference(pool[0]) != has_reference(first):
                held, trained = (
                    ("have", "have none") if has_reference(pool[0]) else ("lack", "have")
                )
                raise DataError(
                    f"the {split} rows of {_name(source)} {held} reference answers (or tests), "
                    f"which the training rows of {_name(data)} {trained}; give both splits the "
                    f"same kind of rows"
                )
        # Prompt-only rows have no verifier: the run's reward functions are all that score them.
        self.default_rewards = (
            ("code",) if _present(first, "tests") else ("math",) if has_reference(first) else ()
        )

    def has_split(self, split: str) -> bool:
        return bool(self._pools().get(split))

    def _pools(self) -> dict[str, list[Row] | None]:
        return {"train": self.train_rows, "test": self.test_rows, "ood": self.ood_rows}

    def sample(self, rng: np.random.Generator, n: int) -> list[Row]:
        return [dict(self.train_rows[int(i)]) for i in rng.integers(len(self.train_rows), size=n)]

    def split(self, split: str, n: int, seed: int = 0) -> list[Row]:
        pools = self._pools()
        if split not in pools:
            raise ConfigError(f"unknown split {split!r}; valid splits: train, test, ood")
        pool = pools[split]
        if not pool:
            why = ""
            if split == "test":  # rows read as a test split are never empty: held out by hash
                keys = len({r["key"] for r in self.train_rows})
                why = (
                    f" ({self.held_out_percent:g}% of the problems are held out by a hash of each "
                    f"row's 'key' column, else its prompt, and none of the rows' "
                    f"{keys:,} distinct key{'s' if keys > 1 else ''} "
                    f"fell there: rows that share a key stay together)"
                )
            raise ConfigError(
                f"split {split!r} has no rows{why}; pass task.{split}_data=<file or folder>"
                if split != "train"
                else "no training rows"
            )
        rows = [dict(r) for r in pool[:n]]
        if any(not row["prompt"] for row in rows):
            key = "task.data" if split == "train" else f"task.{split}_data"
            raise DataError(
                f"the {split!r} split holds 'text' rows: they have no prompt to answer, so they "
                f"can train (SFT) but not be evaluated; pass {key} with prompt and answer rows"
            )
        return rows
