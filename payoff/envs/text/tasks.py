"""Agent tasks: problems, the env that poses them, and scripted demonstrations for SFT.

calculator: arithmetic where half the problems are trivial (one-digit operands, which the
tiny model learns to answer in its head) and half are large (three-digit by two-digit
products and sums, which it cannot do reliably without the calculator). Demonstrations
call the calculator at random (probability `call_rate`) whatever the size, so SFT teaches
the format but not *when* to call: that is left to RL with a cost per tool call.

doc-search: one-hop and two-hop questions over a generated document collection, answered
with `search` and `open`. The demonstrator cuts corners: on a two-hop question it opens the
second document only with probability `call_rate`, and otherwise answers with the city it
has just read (wrong: the question asks for the country). SFT teaches the tools and the
format; following the chain to its end is left to RL.

A task of your own: `task.name: my_module:MyTask`, a class (or function) called with this
AgentTaskConfig that gives an object with the methods the shipped tasks have (AgentTask):
make_env() -> ToolEnv with your tools, sample(rng, n) -> n task dicts (each with a
'question', and the 'answer' the env's score reads), demonstration(task, rng) -> the model
turns of a scripted episode (tool_turn, answer_turn), and optionally group(task) -> a label
for per-kind metrics. `UserTask` checks what it returns, so a mistake is named where it is
made. A run loaded from disk imports no such module unless trusted (payoff.core.imports).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from payoff.core.cache import cache_root
from payoff.core.config import MAX_ENV_COPIES, MAX_TOKENS, in_range
from payoff.core.errors import ConfigError, EnvError
from payoff.core.imports import import_object
from payoff.envs.text.env import ToolEnv
from payoff.envs.text.tools import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    TOOL_CLOSE,
    TOOL_OPEN,
    DocumentIndex,
    calculator,
    search_tools,
)


@dataclass
class AgentTaskConfig:
    """Which agent task.

    name: 'calculator', 'doc-search', or your own task's 'module:Class' (module docstring).
    hard_fraction: share of large problems (the rest are one-digit).
    max_turns / max_tokens: episode limits (model turns; model tokens in all).
    call_rate: probability that a demonstration calls the tool (calculator) or takes the
        second hop of a two-hop question (doc-search); SFT data only.
    eval_size: held-out problems for evaluation (fixed seed, disjoint stream from training).
    options: task-specific extras.
    """

    name: str = "calculator"
    hard_fraction: float = field(default=0.5, metadata=in_range(0, 1))
    max_turns: int = field(default=3, metadata=in_range(0, low_open=True, most=10_000))
    max_tokens: int = field(default=200, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    call_rate: float = field(default=0.5, metadata=in_range(0, 1))
    eval_size: int = field(default=64, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES))
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        # your own task ('module:Class') is imported when the trainer is set up, where the
        # rule for code a loaded run names applies
        if ":" not in self.name and self.name not in TASKS:
            raise ConfigError(
                f"agent task {self.name!r} is unknown; valid: {sorted(TASKS)}, or a task of "
                f"your own as 'module:Class' (docs/agents.md)"
            )
        if not 0.0 <= self.hard_fraction <= 1.0 or not 0.0 <= self.call_rate <= 1.0:
            raise ConfigError("task.hard_fraction and task.call_rate must be in [0, 1]")


def tool_turn(name: str, /, **arguments: Any) -> str:
    """A model turn calling `name` in the documented format (compact JSON)."""
    body = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))
    return f"{TOOL_OPEN}{body}{TOOL_CLOSE}"


def answer_turn(answer: Any) -> str:
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


class CalculatorTask:
    """One-digit (easy) and large (hard) arithmetic; the tool is `calculator`."""

    def __init__(self, config: AgentTaskConfig):
        self.config = config

    def make_env(self) -> ToolEnv:
        return ToolEnv([calculator()], self.config.max_turns, self.config.max_tokens)

    def sample(self, rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
        tasks = []
        for _ in range(n):
            hard = bool(rng.random() < self.config.hard_fraction)
            op = "+*"[int(rng.integers(2))]
            if hard:
                a, b = int(rng.integers(100, 1000)), int(rng.integers(10, 100))
            else:
                a, b = int(rng.integers(0, 10)), int(rng.integers(0, 10))
            expression = f"{a}{op}{b}"
            answer = a + b if op == "+" else a * b
            tasks.append(
                {
                    "question": f"{expression}=?",
                    "answer": str(answer),
                    "expression": expression,
                    "hard": hard,
                }
            )
        return tasks

    def demonstration(self, task: dict[str, Any], rng: np.random.Generator) -> list[str]:
        """Model turns of a scripted episode (tool results come from the env when replayed)."""
        if rng.random() < self.config.call_rate:
            return [
                tool_turn("calculator", expression=task["expression"]),
                answer_turn(task["answer"]),
            ]
        return [answer_turn(task["answer"])]

    def group(self, task: dict[str, Any]) -> str:
        """Label for per-kind metrics."""
        return "hard" if task["hard"] else "easy"


class DocSearchTask:
    """Questions over a generated document collection, answered by `search` and `open`.

    Each person document says where the person lives, each city document which country it
    is in. 'city' questions need one document (search, open, answer); 'country' questions
    need two (search, open the person, open the city, answer). The collection is written
    to options.folder (default: a folder under $PAYOFF_CACHE keyed by the seed) once.
    """

    def __init__(self, config: AgentTaskConfig):
        self.config = config
        options = config.options
        seed = int(options.get("seed", 0))
        people, cities = int(options.get("people", 40)), int(options.get("cities", 12))
        rng = np.random.default_rng(seed)
        names = _names(rng, people + cities + 6)
        self.people = names[:people]
        self.cities = names[people : people + cities]
        countries = names[people + cities :]
        self.lives = {p: self.cities[int(rng.integers(len(self.cities)))] for p in self.people}
        self.country = {c: countries[int(rng.integers(len(countries)))] for c in self.cities}
        folder = Path(
            options.get("folder")
            or cache_root() / "agent-docs" / f"people-{seed}-{people}-{cities}"
        )
        folder.mkdir(parents=True, exist_ok=True)
        for p, c in self.lives.items():
            (folder / f"{p.lower()}.txt").write_text(f"{p} lives in {c}.\n")
        for c, k in self.country.items():
            (folder / f"{c.lower()}.txt").write_text(f"{c} is a city in {k}.\n")
        self.index = DocumentIndex(folder)

    def make_env(self) -> ToolEnv:
        return ToolEnv(search_tools(self.index, k=2), self.config.max_turns, self.config.max_tokens)

    def sample(self, rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
        tasks = []
        for _ in range(n):
            person = self.people[int(rng.integers(len(self.people)))]
            hard = bool(rng.random() < self.config.hard_fraction)
            city = self.lives[person]
            if hard:
                tasks.append(
                    {
                        "question": f"Country of {person}?",
                        "answer": self.country[city],
                        "person": person,
                        "city": city,
                        "hard": True,
                    }
                )
            else:
                tasks.append(
                    {
                        "question": f"City of {person}?",
                        "answer": city,
                        "person": person,
                        "city": city,
                        "hard": False,
                    }
                )
        return tasks

    def demonstration(self, task: dict[str, Any], rng: np.random.Generator) -> list[str]:
        """Search, open the person; on two-hop questions open the city (with probability
        call_rate) or stop short and answer with the city."""
        turns = [
            tool_turn("search", query=task["person"]),
            tool_turn("open", name=task["person"].lower()),
        ]
        if not task["hard"]:
            return [*turns, answer_turn(task["answer"])]
        if rng.random() < self.config.call_rate:
            return [
                *turns,
                tool_turn("open", name=task["city"].lower()),
                answer_turn(task["answer"]),
            ]
        return [*turns, answer_turn(task["city"])]

    def group(self, task: dict[str, Any]) -> str:
        return "two_hops" if task["hard"] else "one_hop"


def _names(rng: np.random.Generator, n: int) -> list[str]:
    """n distinct pronounceable names (consonant-vowel syllables)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    names: list[str] = []
    while len(names) < n:
        name = "".join(
            consonants[int(rng.integers(14))] + vowels[int(rng.integers(5))] for _ in range(2)
        )
        name = name.capitalize() + consonants[int(rng.integers(14))]
        if name not in names:
            names.append(name)
    return names


class AgentTask(Protocol):
    """What agent GRPO asks of a task (the shipped ones, and yours)."""

    def make_env(self) -> ToolEnv: ...

    def sample(self, rng: np.random.Generator, n: int) -> list[dict[str, Any]]: ...

    def demonstration(self, task: dict[str, Any], rng: np.random.Generator) -> list[str]: ...

    def group(self, task: dict[str, Any]) -> str: ...


class UserTask:
    """A task of your own ('module:Class'), each answer it gives checked as it is used."""

    METHODS = ("make_env", "sample", "demonstration")

    def __init__(self, spec: str, task: Any):
        missing = [m for m in self.METHODS if not callable(getattr(task, m, None))]
        if missing:
            raise ConfigError(
                f"agent task {spec!r} ({type(task).__name__}) has no {', '.join(missing)}: a "
                f"task needs make_env() -> ToolEnv, sample(rng, n) -> [task dicts] and "
                f"demonstration(task, rng) -> [model turns], and may have group(task) "
                f"(payoff.envs.text.tasks.AgentTask; docs/agents.md)"
            )
        self.spec, self.task = spec, task

    def make_env(self) -> ToolEnv:
        env = self.task.make_env()
        if not isinstance(env, ToolEnv):
            raise EnvError(
                f"agent task {self.spec!r}: make_env() returned {type(env).__name__}, not a "
                f"payoff.envs.text.ToolEnv (ToolEnv(tools, max_turns, max_tokens, score))"
            )
        return env

    def sample(self, rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
        tasks = self.task.sample(rng, n)
        if not isinstance(tasks, list) or len(tasks) != n:
            raise EnvError(
                f"agent task {self.spec!r}: sample(rng, {n}) must return a list of {n} task "
                f"dicts, got {type(tasks).__name__}"
                + (f" of {len(tasks)}" if isinstance(tasks, list) else "")
            )
        for task in tasks:
            if not isinstance(task, dict) or "question" not in task or "answer" not in task:
                shown = sorted(task) if isinstance(task, dict) else type(task).__name__
                raise EnvError(
                    f"agent task {self.spec!r}: each task sample() returns must be a dict with "
                    f"'question' and 'answer' keys, got {shown}"
                )
        return tasks

    def demonstration(self, task: dict[str, Any], rng: np.random.Generator) -> list[str]:
        turns = self.task.demonstration(task, rng)
        if (
            not isinstance(turns, list | tuple)
            or not turns
            or not all(isinstance(t, str) for t in turns)
        ):
            raise EnvError(
                f"agent task {self.spec!r}: demonstration() must return a non-empty list of "
                f"model turns (strings: tool_turn(...), answer_turn(...)), got {turns!r:.80}"
            )
        return list(turns)

    def group(self, task: dict[str, Any]) -> str:
        group = getattr(self.task, "group", None)
        return str(group(task)) if callable(group) else "all"


def task_code(name: str) -> str:
    """A digest of your task's module source ('' for a shipped task): an SFT base model
    cached for it is rebuilt when the code changes."""
    if ":" not in name:
        return ""
    try:
        spec = importlib.util.find_spec(name.partition(":")[0])
    except (ImportError, ValueError):  # e.g. __main__ (a script or notebook): no source file
        return ""
    if spec is None:
        return ""
    files: list[Path] = []
    if spec.submodule_search_locations:  # a package: every module in it
        for folder in spec.submodule_search_locations:
            files += sorted(Path(folder).rglob("*.py"))
    elif spec.origin and Path(spec.origin).is_file():
        files.append(Path(spec.origin))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16] if files else ""


TASKS = {"calculator": CalculatorTask, "doc-search": DocSearchTask}


def make_agent_task(config: AgentTaskConfig) -> AgentTask:
    """The task `config.name` names: a shipped one, or your own 'module:Class' (imported
    here, under the rule for code a loaded run names)."""
    config.validate()
    if ":" not in config.name:
        return TASKS[config.name](config)
    factory = import_object(config.name, "task.name")
    try:
        task = factory(config)
    except TypeError as err:  # chained: a TypeError inside your __init__ shows its line
        raise ConfigError(
            f"agent task {config.name!r} could not be made from the task config "
            f"({type(factory).__name__} called with AgentTaskConfig): {err}"
        ) from err
    return UserTask(config.name, task)
