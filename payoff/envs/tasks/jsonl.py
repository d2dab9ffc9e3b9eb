"""Bring-your-own data: JSONL rows with `prompt` and `answer` (or `tests`), extra columns kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks.base import Row, Task, held_out


def json_objects(path: str | Path, kind: str = "dataset") -> Iterator[tuple[str, dict[str, Any]]]:
    """(`file:line`, object) for each non-blank line of a JSONL file; DataError on a bad line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"{kind} file {str(path)!r} does not exist")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(
                    f"{where}: not valid JSON ({err.msg} at column {err.colno})"
                ) from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{where}: each line must be a JSON object, got {type(row).__name__}"
                )
            yield where, row


def read_rows(path: str | Path) -> list[Row]:
    """Rows of a JSONL file; a malformed row is a DataError naming `file:line`."""
    rows: list[Row] = []
    for where, row in json_objects(path):
        if not isinstance(row.get("prompt"), str) or not row["prompt"]:
            raise DataError(
                f"{where}: missing a non-empty string 'prompt' (columns: {sorted(row)})"
            )
        if "answer" not in row and "tests" not in row:
            raise DataError(
                f"{where}: needs an 'answer' (checked by the math/exact verifiers) or 'tests' "
                f"(run by the code verifier); columns: {sorted(row)}"
            )
        if "answer" in row and not isinstance(row["answer"], str | int | float):
            raise DataError(f"{where}: 'answer' must be a string or number, got {row['answer']!r}")
        if "tests" in row and not isinstance(row["tests"], str):
            raise DataError(
                f"{where}: 'tests' must be a string of Python asserts, got {row['tests']!r}"
            )
        row.setdefault("key", row["prompt"])
        if "answer" in row:
            row["answer"] = str(row["answer"])
        rows.append(row)
    if not rows:
        raise DataError(f"dataset file {str(path)!r} holds no rows")
    return rows


class JsonlTask(Task):
    """Rows from your JSONL files. Without test_data, 10% of `data` is held out as the test split."""

    name = "jsonl"

    def __init__(self, data: str, test_data: str = "", ood_data: str = ""):
        if not data:
            raise ConfigError("task 'jsonl' needs task.data=<path to a .jsonl file>")
        rows = read_rows(data)
        self.test_rows = read_rows(test_data) if test_data else None
        self.ood_rows = read_rows(ood_data) if ood_data else None
        if self.test_rows is None:
            self.train_rows = [r for r in rows if not held_out(r["key"], self.held_out_percent)]
            self.test_rows = [r for r in rows if held_out(r["key"], self.held_out_percent)]
        else:
            self.train_rows = rows
        if not self.train_rows:
            raise DataError(
                f"dataset {data!r} leaves no training rows after holding out the test split"
            )
        self.default_rewards = ("code",) if "tests" in self.train_rows[0] else ("math",)

    def sample(self, rng: np.random.Generator, n: int) -> list[Row]:
        return [dict(self.train_rows[int(i)]) for i in rng.integers(len(self.train_rows), size=n)]

    def split(self, split: str, n: int, seed: int = 0) -> list[Row]:
        pools = {"train": self.train_rows, "test": self.test_rows, "ood": self.ood_rows}
        if split not in pools:
            raise ConfigError(f"unknown split {split!r}; valid splits: train, test, ood")
        pool = pools[split]
        if not pool:
            raise ConfigError(
                f"split {split!r} has no rows; pass task.{split}_data=<file.jsonl>"
                if split != "train"
                else "no training rows"
            )
        return [dict(r) for r in pool[:n]]
