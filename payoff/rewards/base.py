"""The reward-function contract and weighted composition.

A reward function is any callable `(prompts, completions, **columns) -> list[float | None]`
-- TRL's convention, so a TRL reward function works unchanged. payoff passes
`prompts`, `completions`, `completion_ids` and every dataset column as keyword arguments;
on conversational rows (chat messages) your functions get TRL's conversational forms, each
prompt a list of messages and each completion `[{"role": "assistant", "content": text}]`,
while the built-in verifiers and payoff's own functions read the text;
a function that does not take `**kwargs` gets only the names it declares. A `None` score
means "does not apply to this row": it is skipped, not counted as zero.

`RewardMix` calls each function, weights and sums the scores, and keeps the run going when
a function misbehaves: one that raises is retried row by row to find the offending sample
(logged as an event, and shown on the console the first time), one that hangs past its
timeout is abandoned; either way those rows get the configured `on_error` score and the
error count shows in the metrics. What cannot be a passing fault stops the run with one
error naming the function: a return value of the wrong length or type (a bug, not a bad
sample), or a function that failed on every row of `max_failed_batches` batches in a row.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import queue
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from payoff.core.config import PYTHON_ONLY, from_dict, in_range
from payoff.core.errors import ConfigError, PayoffError, suggest
from payoff.core.imports import import_module, refuse_untrusted
from payoff.rewards.code import CodeVerifier
from payoff.rewards.instructions import InstructionsVerifier
from payoff.rewards.verifiers import (
    answer_anywhere_reward,
    countdown_reward,
    exact_reward,
    final_answer_reward,
    format_reward,
    math_reward,
)
from payoff.track.progress import say

RewardFn = Callable[..., Sequence[float | None]]
BUILTIN: dict[str, Callable[..., RewardFn]] = {
    "math": lambda **_: math_reward,
    "exact": lambda **_: exact_reward,
    "final_answer": lambda **_: final_answer_reward,
    "answer_anywhere": lambda **_: answer_anywhere_reward,
    "format": lambda **_: format_reward,
    "countdown": lambda **_: countdown_reward,
    "code": lambda **options: CodeVerifier(**options),
    "instructions": lambda **options: InstructionsVerifier(**options),
}


@dataclass
class RewardSpec:
    """One reward function in the mix.

    name: a built-in verifier (math, final_answer, exact, format, countdown, code, instructions;
        answer_anywhere, a deliberately loose checker that can be gamed) or
        your own function as 'package.module:function' or 'path/to/file.py:function'.
    weight: its score is multiplied by this in the total reward (each is also logged alone).
    on_error: the score a row gets when the function raises or hangs (null: not applicable).
    timeout: seconds a call may take before it counts as hung and is abandoned.
    options: keyword arguments for a built-in that takes them (code: timeout, memory_mb, workers,
        sandbox; instructions: window).
    label: the name used in metrics (default: the function name).
    function: set from Python only: `GRPO(rewards=[my_reward, {"name": "math"}])` makes a
        spec of each callable (name = its import path, for the record in config.yaml).
    """

    name: str = "math"
    weight: float = 1.0
    on_error: float | None = 0.0
    timeout: float = field(default=60.0, metadata=in_range(0, low_open=True))
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    function: RewardFn | None = field(default=None, repr=False, compare=False, metadata=PYTHON_ONLY)

    @property
    def key(self) -> str:
        return self.label or self.name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]

    @classmethod
    def from_value(cls, value: object) -> RewardSpec | None:
        """A spec from a Python callable (its function is used as it is) or a name string."""
        if isinstance(value, str):
            return cls(name=value)
        if callable(value):
            return cls(name=_import_path(value), function=value)
        return None

    @classmethod
    def from_mapping(cls, value: dict[str, Any], key: str) -> RewardSpec | None:
        """From Python, a function with its settings: {"function": f, "weight": 0.5,
        "timeout": 5} (or the function as "name"). None for a plain mapping, which the
        config reads field by field (a recipe's YAML cannot hold a function)."""
        function = value.get("function")
        if function is None and callable(value.get("name")):
            function = value["name"]
        if function is None:
            return None
        if not callable(function):
            raise ConfigError(
                f"config key {key + '.function'!r} must be a callable, got {function!r}"
            )
        rest = {k: v for k, v in value.items() if k not in ("function", "name")}
        name = value.get("name")
        rest["name"] = name if isinstance(name, str) else _import_path(function)
        return replace(from_dict(cls, rest, prefix=key + "."), function=function)


def _import_path(function: Any) -> str:
    """'module:qualname' of a Python function (what config.yaml records for it)."""
    module = getattr(function, "__module__", None) or "python"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}"


def _unavailable(*args: Any, **kwargs: Any) -> list[float | None]:
    """Stands in for a reward function that could not be loaded; never called (RewardMix
    stops first, naming why)."""
    raise AssertionError("an unavailable reward function was called")


def _conversational(available: dict[str, Any]) -> dict[str, Any] | None:
    """TRL's arguments for conversational rows (those with `prompt_messages`): the prompt as
    its list of messages and the completion as [{"role": "assistant", "content": text}];
    plain rows keep their strings, the rest is as given. None when no row is a chat."""
    messages = available.get("prompt_messages") or []
    chat = [isinstance(m, list) and bool(m) for m in messages]
    if not any(chat):
        return None
    return {
        **available,
        "prompts": [
            list(m) if is_chat else p
            for m, p, is_chat in zip(messages, available["prompts"], chat, strict=True)
        ],
        "completions": [
            [{"role": "assistant", "content": c}] if is_chat else c
            for c, is_chat in zip(available["completions"], chat, strict=True)
        ],
    }


def _reads_text(spec: RewardSpec) -> bool:
    """Whether a function reads prompts and completions as text even on conversational rows:
    the built-in verifiers and payoff's own functions do; yours get TRL's message lists."""
    if spec.function is None and spec.name in BUILTIN:
        return True
    return spec.name.split(":", 1)[0].split(".", 1)[0] == "payoff"


class RewardFunctionError(PayoffError):
    """A reward function that cannot be trusted to score: a bug in its return value, or one
    that failed on every row batch after batch. Training stops instead of learning from zeros."""


def resolve_reward(spec: RewardSpec) -> RewardFn:
    """The callable a spec names; clear errors for unknown names and bad import paths."""
    if spec.function is not None:
        return spec.function
    if spec.name in BUILTIN:
        try:
            return BUILTIN[spec.name](**spec.options)
        except TypeError as err:
            raise ConfigError(
                f"reward {spec.name!r} rejected its options {spec.options}: {err}"
            ) from None
    if ":" not in spec.name:
        raise ConfigError(
            f"unknown reward {spec.name!r}.{suggest(spec.name, BUILTIN)} Built-in rewards: "
            f"{', '.join(BUILTIN)}; or name your own as 'module:function' or 'file.py:function'"
        )
    if spec.options:
        raise ConfigError(f"reward {spec.name!r}: options are only for built-in rewards")
    target, attr = spec.name.rsplit(":", 1)
    refuse_untrusted("reward", spec.name)  # a reward named by a loaded file runs its code
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser()
            if not path.is_file():
                raise ConfigError(f"reward file {target!r} does not exist")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:  # the working folder counts, as for envs (`rewards: [{name: my_rewards:fn}]`)
            module = import_module(target, "reward", spec.name)
    except ImportError as err:
        raise ConfigError(f"cannot import reward module {target!r}: {err}") from None
    except SyntaxError as err:  # the user's file: its line, not our traceback
        raise ConfigError(
            f"reward module {target!r} has a syntax error at line {err.lineno}: {err.msg}"
        ) from None
    except ConfigError:
        raise
    except Exception as err:  # raised while the module's top level ran
        raise ConfigError(
            f"reward module {target!r} raised {type(err).__name__} when imported: {err}"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"reward {spec.name!r}: {target!r} has no function {attr!r}")
    return fn


def _call_arguments(fn: RewardFn, available: dict[str, Any], key: str) -> dict[str, Any]:
    """The keyword arguments `fn` accepts out of `available` (all of them if it takes **kwargs)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return available
    positional = [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_POSITIONAL]
    missing = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in available
    ]
    if missing:
        raise ConfigError(
            f"reward function {key!r} needs {missing}, but payoff passes keyword arguments "
            f"{sorted(available)} (the dataset's columns among them). Add the missing column to "
            f"the data, or give the parameter a default"
        )
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return available  # (prompts, completions, *args, **kwargs) too: all by keyword
    if positional:
        raise ConfigError(
            f"reward function {key!r} takes *args, but payoff passes keyword arguments "
            f"{sorted(available)}. Write it as def {key}(prompts, completions, **kwargs) and read "
            f"dataset columns from kwargs (the TRL convention)"
        )
    return {name: value for name, value in available.items() if name in parameters}


def unscored_rows(scores: Mapping[str, Sequence[float | None]]) -> list[bool]:
    """Per row, whether no function scored it (each returned None or NaN): its total is 0.0
    by default, not a verdict."""
    columns = list(scores.values())
    rows = len(columns[0]) if columns else 0
    return [all(column[i] is None for column in columns) for i in range(rows)]


@dataclass
class RewardResult:
    """Scores of one batch: the weighted total, each function's own scores, and error counts."""

    total: list[float]
    scores: dict[str, list[float | None]]
    errors: dict[str, int]

    @property
    def not_applicable(self) -> int:
        """Rows no function scored (their total is 0.0)."""
        return sum(unscored_rows(self.scores))

    def mean(self, key: str) -> float | None:
        values = [v for v in self.scores[key] if v is not None]
        return sum(values) / len(values) if values else None


class RewardMix:
    """Weighted sum of reward functions, robust to functions that raise or hang.

    on_event(kind, message, **evidence) receives one record per misbehaving call (the
    trainer writes it to metrics.jsonl as an event).
    """

    def __init__(
        self,
        specs: Sequence[RewardSpec],
        on_event: Callable[..., None] | None = None,
        max_failed_batches: int = 3,
        defer_unavailable: bool = False,
    ):
        if not specs:
            raise ConfigError("at least one reward function is needed (config key 'rewards')")
        self.specs = list(specs)
        keys = [s.key for s in self.specs]
        if len(set(keys)) != len(keys):
            raise ConfigError(
                f"reward labels must be unique, got {keys}; set 'label' to tell them apart"
            )
        # A function that cannot be had (its file gone, or named by a file not trusted to
        # run code) stops the first call instead, with defer_unavailable: a loaded run
        # evaluates with its verifier alone, and only training needs every reward.
        self.unavailable: ConfigError | None = None
        self.functions: list[RewardFn] = []
        for spec in self.specs:
            try:
                self.functions.append(resolve_reward(spec))
            except ConfigError as err:
                if not defer_unavailable:
                    raise
                self.unavailable = self.unavailable or err
                self.functions.append(_unavailable)
        self.on_event = on_event or (lambda *a, **k: None)
        self.error_totals = {s.key: 0 for s in self.specs}
        self.max_failed_batches = max_failed_batches
        self._failed_batches = {s.key: 0 for s in self.specs}  # in a row, every row failing
        self._unscored_batches = 0  # in a row, no row scored by any function
        self._shown: set[str] = set()  # functions whose first error was shown on the console
        self._worker: _RewardWorker | None = None

    def check_available(self) -> None:
        """ConfigError naming the reward function this mix was built without (see
        defer_unavailable); nothing when it has them all."""
        if self.unavailable is not None:
            raise ConfigError(
                f"{self.unavailable}. (The run was loaded without it: evaluating needs only "
                f"its verifier, training needs every reward function.)"
            )

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Sequence[Any],
    ) -> RewardResult:
        self.check_available()
        n = len(completions)
        available = {
            "prompts": list(prompts),
            "completions": list(completions),
            "completion_ids": list(completion_ids) if completion_ids is not None else [[]] * n,
            **{k: list(v) for k, v in columns.items()},
        }
        chat = _conversational(available)
        total = [0.0] * n
        scores: dict[str, list[float | None]] = {}
        errors: dict[str, int] = {}
        for spec, fn in zip(self.specs, self.functions, strict=True):
            given = available if chat is None or _reads_text(spec) else chat
            values, error_count = self._score(spec, fn, given, n)
            self._count_failed_batch(spec, error_count, n)
            scores[spec.key], errors[spec.key] = values, error_count
            self.error_totals[spec.key] = self.error_totals.get(spec.key, 0) + error_count
            for i, value in enumerate(values):
                if value is not None:
                    total[i] += spec.weight * value
        result = RewardResult(total, scores, errors)
        self._count_unscored_batch(result.not_applicable, n)
        return result

    def _score(
        self, spec: RewardSpec, fn: RewardFn, available: dict[str, Any], n: int
    ) -> tuple[list[float | None], int]:
        kwargs = _call_arguments(fn, available, spec.key)
        outcome = self._timed_call(spec, fn, kwargs, n)
        if isinstance(outcome, RewardFunctionError):
            raise outcome
        if not isinstance(outcome, BaseException):
            return outcome, 0
        if isinstance(outcome, TimeoutError):
            self._say_once(
                spec.key,
                f"payoff: reward function {spec.key!r} ran past its timeout of "
                f"{spec.timeout:g} s on a batch of {n}; the batch scores {spec.on_error} "
                f"(later hangs are counted in the metrics, reward_errors/{spec.key})",
            )
            self.on_event(
                "reward_hung",
                f"reward function {spec.key!r} ran past {spec.timeout:g} s on a batch of {n}; "
                f"scored {spec.on_error} and moved on",
                function=spec.key,
                prompt=str(available["prompts"][0])[:500],
                completion=str(available["completions"][0])[:500],
            )
            return [spec.on_error] * n, n
        # It raised: retry row by row so only the offending samples get on_error.
        values: list[float | None] = []
        errors, first_error = 0, None
        for i in range(n):
            row = {k: v[i : i + 1] for k, v in kwargs.items()}
            result = self._timed_call(spec, fn, row, 1)
            if isinstance(result, RewardFunctionError):
                raise result
            if isinstance(result, BaseException):
                errors += 1
                first_error = first_error or (i, result)
                values.append(spec.on_error)
            else:
                values.append(result[0])
        if first_error is not None:
            i, err = first_error
            self._say_once(
                spec.key,
                f"payoff: reward function {spec.key!r} raised {type(err).__name__}: {err}\n"
                f"  on prompt {str(available['prompts'][i])[:200]!r}\n"
                f"  completion {str(available['completions'][i])[:200]!r}\n"
                f"  ({errors} of {n} rows in this batch; those score {spec.on_error}; later "
                f"errors are counted in the metrics, reward_errors/{spec.key})",
            )
            self.on_event(
                "reward_error",
                f"reward function {spec.key!r} raised {type(err).__name__}: {err} on {errors} of {n} samples; "
                f"scored {spec.on_error}",
                function=spec.key,
                prompt=str(available["prompts"][i])[:500],
                completion=str(available["completions"][i])[:500],
            )
        return values, errors

    def _say_once(self, key: str, message: str) -> None:
        """Show `message` for reward function `key`'s first hang or error only (the later
        ones are counted in the metrics)."""
        if key not in self._shown:
            self._shown.add(key)
            say(message)

    def _count_unscored_batch(self, unscored: int, n: int) -> None:
        """Say so when no function scored any row of a batch (each returned None or NaN, so
        every row totals 0.0 and a GRPO group learns nothing), and stop the run after
        max_failed_batches such batches in a row, rather than train on 0.0 silently."""
        self._unscored_batches = self._unscored_batches + 1 if n and unscored == n else 0
        if not self._unscored_batches:
            return
        names = ", ".join(repr(s.key) for s in self.specs)
        if self._unscored_batches == 1 and "(unscored)" not in self._shown:
            self._shown.add("(unscored)")
            print(
                f"payoff: no reward function ({names}) scored any of the {n} completions of this "
                f'batch: each returned None or NaN ("does not apply"), so every row totals 0.0; '
                f"after {self.max_failed_batches} such batches in a row the run stops",
                file=sys.stderr,
            )
        self.on_event(
            "reward_unscored",
            f"no reward function ({names}) scored any of the {n} completions of a batch "
            f"(None or NaN for every row)",
        )
        if self._unscored_batches >= self.max_failed_batches:
            raise RewardFunctionError(
                f"no reward function ({names}) scored any completion in "
                f"{self.max_failed_batches} batches in a row: each returned None or NaN for "
                f"every row. None (or NaN) means 'does not apply to this row'; the run stops "
                f"rather than train on 0.0 for every sample. Check that the functions apply to "
                f"this data (their column names, the completion format)"
            )

    def _count_failed_batch(self, spec: RewardSpec, errors: int, n: int) -> None:
        """Stop the run when a function has failed on every row of several batches in a row."""
        self._failed_batches[spec.key] = self._failed_batches[spec.key] + 1 if errors == n else 0
        if self._failed_batches[spec.key] >= self.max_failed_batches:
            raise RewardFunctionError(
                f"reward function {spec.key!r} failed on every row of {self.max_failed_batches} "
                f"batches in a row ({self.error_totals[spec.key] + errors} errors so far); the "
                f"run stops rather than train on {spec.on_error} for every sample. The first "
                f"failure was shown above and is in metrics.jsonl as a reward_error (raised) or "
                f"reward_hung (ran past its timeout) event."
            )

    def _timed_call(
        self, spec: RewardSpec, fn: RewardFn, kwargs: dict[str, Any], n: int
    ) -> list[float | None] | BaseException:
        worker = self._worker = self._worker or _RewardWorker()

        def scored(**columns: Any) -> list[float | None] | BaseException:
            # the scores are read inside the timed call too: a returned object whose
            # __float__ or __iter__ never ends is the function hanging
            return _check_scores(fn(**columns), n, spec.key)

        outcome = worker.call(scored, kwargs, spec.timeout)
        if outcome is None:
            self._worker = None  # abandoned with the hung call; the next call gets a fresh one
            cancel = getattr(fn, "cancel", None)
            if callable(cancel):  # a judge stops its retries instead of running on unseen
                cancel()
            return TimeoutError(f"ran past {spec.timeout:g} s")
        return outcome[1]  # the checked scores, the error they hold, or the one raised

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_worker": None}  # a thread does not travel (Ray, pickling)

    def counters(self) -> dict[str, float]:
        """Extra counts kept by stateful reward functions (the code verifier's outcomes)."""
        metrics: dict[str, float] = {}
        for spec, fn in zip(self.specs, self.functions, strict=True):
            counts = getattr(fn, "counts", None)
            if counts:
                for outcome, count in counts.items():
                    metrics[f"reward/{spec.key}/{outcome}"] = float(count)
        return metrics


class _RewardWorker:
    """A daemon thread that runs reward calls, so that a hung function can be timed out.

    One thread serves every call (starting a thread per call is slow once torch is
    imported). A call that runs past its timeout is abandoned together with this worker:
    its thread stays busy, and being a daemon it cannot block the process at exit.
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[RewardFn, dict[str, Any]]] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="payoff-reward", daemon=True).start()

    def _serve(self) -> None:
        while True:
            fn, kwargs = self.jobs.get()
            try:
                self.results.put((True, fn(**kwargs)))
            except Exception as err:
                self.results.put((False, err))

    def call(self, fn: RewardFn, kwargs: dict[str, Any], timeout: float) -> tuple[bool, Any] | None:
        """(True, return value) or (False, the exception raised); None if it ran past timeout."""
        self.jobs.put((fn, kwargs))
        try:
            return self.results.get(timeout=timeout)
        except queue.Empty:
            return None


def _check_scores(raw: Any, n: int, key: str) -> list[float | None] | BaseException:
    """Validate a reward function's return value: n numbers or None."""
    if isinstance(raw, str | bytes | dict) or not hasattr(raw, "__len__"):
        return RewardFunctionError(
            f"reward function {key!r} returned {type(raw).__name__}, not a list with one score "
            f"(float or None) per completion"
        )
    values = list(raw)
    if len(values) != n:
        return RewardFunctionError(
            f"reward function {key!r} returned {len(values)} scores for {n} completions; it "
            f"must return one score (float or None) per completion, in order"
        )
    out: list[float | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        try:
            if isinstance(value, str | bytes):  # float("1") works, but text is not a score
                raise TypeError
            number = float(value)
        except (TypeError, ValueError, ArithmeticError):  # 10**400: an OverflowError
            return TypeError(f"reward function {key!r} returned {value!r}, not a number or None")
        if math.isinf(number):  # an infinite advantage would turn every weight into NaN
            return ValueError(  # as a bad value: shown once, the row scores on_error
                f"reward function {key!r} returned {number}: scores must be finite (None or "
                f"NaN for 'not applicable')"
            )
        out.append(None if math.isnan(number) else number)
    return out
