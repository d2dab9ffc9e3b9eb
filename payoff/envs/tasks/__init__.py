"""Verifiable tasks for language-model RL: generators with held-out and OOD splits, or your data.

task = make_task(TaskConfig(name="addition", options={"digits": 2}))
rows = task.sample(rng, 8)        # [{"prompt": "12+34=", "answer": "46", ...}, ...]
test = task.split("test", 200)    # fixed, disjoint from training
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.core.config import MAX_ENV_COPIES, PYTHON_ONLY, absolute_path, in_range
from payoff.core.errors import ConfigError, suggest
from payoff.envs.tasks import (  # noqa: F401  (registers)
    arithmetic,
    instructions,
    preferences,
    puzzles,
    python_examples,
    python_functions,
)
from payoff.envs.tasks.base import SPLITS, TASKS, Row, Task, held_out
from payoff.envs.tasks.datasets import read_records, rows_of_frame
from payoff.envs.tasks.jsonl import JsonlTask, read_rows


@dataclass
class TaskConfig:
    """Which problems to train and evaluate on.

    name: addition | multiplication | countdown | sorting | python | python_examples |
        styled_addition | instructions | jsonl.
    options: the generator's difficulty knobs (e.g. {digits: 2, ood_digits: 3}); unknown
        keys are errors listing the valid ones.
    data / test_data / ood_data: your data for name 'jsonl': .jsonl, .json, .csv, .parquet
        files or save_to_disk folders (a DatasetDict folder gives its train, test and ood
        splits), in TRL's formats (see payoff/envs/tasks/jsonl.py); every other column
        reaches the reward functions. Without test_data, 10% of data is held out; without
        ood_data there is no ood split.
    eval_size: problems in the test and ood splits used for evaluation during training.
    dataset / test_dataset: set from Python only: rows as a list of dicts, a pandas
        DataFrame, a datasets.Dataset or a DatasetDict, e.g. `GRPO(task=my_rows)` or
        `SFT(task=hf_dataset)` (a task given as rows is task 'jsonl' on them). Not written
        to config.yaml.
    """

    name: str = "addition"
    options: dict[str, Any] = field(default_factory=dict)
    data: str = ""
    test_data: str = ""
    ood_data: str = ""
    eval_size: int = field(default=200, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES))
    dataset: Any = field(default=None, repr=False, compare=False, metadata=PYTHON_ONLY)
    test_dataset: Any = field(default=None, repr=False, compare=False, metadata=PYTHON_ONLY)

    def __post_init__(self) -> None:
        # saved absolute: a run evaluated or resumed from another folder finds its files
        self.data = absolute_path(self.data)
        self.test_data = absolute_path(self.test_data)
        self.ood_data = absolute_path(self.ood_data)

    @classmethod
    def from_value(cls, value: object) -> TaskConfig | None:
        """`task=<rows>` from Python: a list of dicts, a datasets.Dataset or a DatasetDict;
        or a string: a built-in task's name, else your data's file or folder."""
        if isinstance(value, list | tuple) or hasattr(value, "column_names"):
            return cls(name="jsonl", dataset=value)
        if (rows := rows_of_frame(value)) is not None:  # a pandas DataFrame
            return cls(name="jsonl", dataset=rows)
        if isinstance(value, str | Path):
            text = str(value)
            named = text in TASKS or not (Path(text).suffix or "/" in text or Path(text).exists())
            # a bare word that is no file: a task's name (mistyped: validate suggests one)
            return cls(name=text) if named else cls(name="jsonl", data=text)
        return None

    def validate(self) -> None:
        valid = [*TASKS, "jsonl"]
        if self.name not in valid:
            raise ConfigError(
                f"unknown task {self.name!r}.{suggest(self.name, valid)} Valid tasks: {', '.join(valid)}"
            )
        if self.eval_size <= 0:
            raise ConfigError(f"config key 'task.eval_size' must be > 0, got {self.eval_size}")


def data_fingerprint(config: TaskConfig) -> str | None:
    """A digest of the rows passed from Python (None when the config's keys name all the data),
    so that whatever is cached per task config (a pretrained base model) tells datasets apart."""
    given = [d for d in (config.dataset, config.test_dataset) if d is not None]
    if not given:
        return None
    rows = [[row for _, row in read_records(d, "train")] for d in given]
    return hashlib.sha1(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def make_task(config: TaskConfig) -> Task:
    """The task generator (or your data) `config` names."""
    if config.name == "jsonl":
        if config.options:
            raise ConfigError(
                f"task 'jsonl' takes no options, got {config.options}; set task.options={{}} "
                "(a recipe's options for its own task stay when task.name is overridden) and "
                "use task.data/test_data/ood_data"
            )
        data = config.dataset if config.dataset is not None else config.data
        test = config.test_dataset if config.test_dataset is not None else config.test_data
        return JsonlTask(data, test, config.ood_data)
    if config.data:
        raise ConfigError(
            f"task.data is only read by task 'jsonl', not {config.name!r}: add task.name=jsonl "
            f"to train on your file (in Python, task={{'name': 'jsonl', 'data': ...}} or "
            f"task=rows)"
        )
    return TASKS[config.name](**config.options)


__all__ = [
    "SPLITS",
    "TASKS",
    "JsonlTask",
    "Row",
    "Task",
    "TaskConfig",
    "data_fingerprint",
    "held_out",
    "make_task",
    "read_rows",
]
