"""Multi-turn text environments: Gymnasium's reset/step, with messages instead of arrays.

    env = ToolEnv(tools=[calculator()], max_turns=4)
    messages = env.reset({"question": "347*58=?", "answer": "20126"})
    result = env.step('<tool>{"name":"calculator","arguments":{"expression":"347*58"}}</tool>')
    result.observation  -> [{"role": "tool", "content": "20126"}]   (reward 0, done False)
    result = env.step("<answer>20126</answer>")                      (reward 1, done True)

A model turn either calls a tool (the first `<tool>` block is run, its result is the next
observation), gives a final answer (`<answer>...</answer>`, which ends the episode), or does
neither, which also ends it (nothing to reply to; reward 0). Episodes are also cut at
`max_turns` model turns or when the model has written `max_tokens` tokens in all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from payoff.core.errors import ConfigError, EnvError
from payoff.envs.text.tools import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    MALFORMED,
    OK,
    TOOL_ERROR,
    Tool,
    parse_tool_call,
    run_tool_call,
)

Message = dict[str, str]  # {"role": "system" | "user" | "assistant" | "tool", "content": ...}


@dataclass
class StepResult:
    """What `step` returns: the new messages for the model, the reward, whether it ended."""

    observation: list[Message]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def extract_answer(text: str) -> str | None:
    """The text inside the first <answer>...</answer>, or None."""
    start = text.find(ANSWER_OPEN)
    if start < 0:
        return None
    end = text.find(ANSWER_CLOSE, start)
    if end < 0:
        return None
    return text[start + len(ANSWER_OPEN) : end].strip()


def exact_match(answer: str, task: dict[str, Any]) -> float:
    """1.0 when the answer equals task['answer'] (numbers compared as numbers), else 0.0."""
    expected = str(task["answer"]).strip()
    if answer == expected:
        return 1.0
    try:
        return float(float(answer) == float(expected))
    except ValueError:
        return float(answer.lower() == expected.lower())


class TextEnv:
    """Base protocol: reset(task) -> messages; step(model_turn) -> StepResult."""

    def reset(self, task: dict[str, Any]) -> list[Message]:
        raise NotImplementedError

    def step(self, model_turn: str) -> StepResult:
        raise NotImplementedError


class ToolEnv(TextEnv):
    """A question, tools to call, and a final answer checked by `score(answer, task)`.

    tools: what the model may call (by name); a tool with state gets a fresh copy at every
        reset (`Tool.per_episode`), so nothing carries from one episode to the next.
    max_turns: model turns before the episode is cut (reward 0 unless answered).
    max_tokens: total model tokens before the episode is cut; `count_tokens` measures a turn
        (default: characters, exact for payoff's character tokenizer).
    system: an optional system message listing the tools (real models need one; the tiny
        model learns the format from demonstrations instead).
    """

    def __init__(
        self,
        tools: list[Tool],
        max_turns: int = 4,
        max_tokens: int = 512,
        score: Callable[[str, dict[str, Any]], float] = exact_match,
        count_tokens: Callable[[str], int] = len,
        system: str = "",
    ):
        if max_turns <= 0 or max_tokens <= 0:
            raise ConfigError(
                f"max_turns and max_tokens must be > 0, got {max_turns}, {max_tokens}"
            )
        self.tools = {t.name: t for t in tools}
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.score, self.count_tokens, self.system = score, count_tokens, system
        self.task: dict[str, Any] | None = None

    def reset(self, task: dict[str, Any]) -> list[Message]:
        if "question" not in task:
            raise EnvError(f"a task needs a 'question' key, got keys {sorted(task)}")
        self.task = task
        # Tools with state (the memory) start each episode empty, and not shared by two envs.
        self.tools = {name: tool.for_episode() for name, tool in self.tools.items()}
        self.turns = 0
        self.tokens = 0
        self.tool_calls: Counter[str] = Counter()
        self.malformed = 0
        self.tool_errors = 0
        self.done = False
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return [*messages, {"role": "user", "content": str(task["question"])}]

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "tokens": self.tokens,
            "tool_calls": dict(self.tool_calls),
            "malformed": self.malformed,
            "tool_errors": self.tool_errors,
            **extra,
        }

    def step(self, model_turn: str) -> StepResult:
        if self.task is None or self.done:
            raise EnvError("step() called before reset() or after the episode ended")
        self.turns += 1
        self.tokens += self.count_tokens(model_turn)
        answer = extract_answer(model_turn)
        call = parse_tool_call(model_turn) if answer is None else None
        if answer is not None:
            self.done = True
            reward = self.score(answer, self.task)
            if isinstance(reward, bool) or not isinstance(reward, int | float) or reward != reward:
                name = getattr(self.score, "__qualname__", type(self.score).__name__)
                raise EnvError(  # NaN read as a diverged update; None as a TypeError
                    f"the env's score function {name} returned {reward!r} for answer "
                    f"{answer[:40]!r}: it must return a number (1.0 for a right answer)"
                )
            return StepResult(
                [], reward, True, self._info(answer=answer, success=reward >= 1.0, end="answer")
            )
        if call is None:
            self.done = True
            return StepResult(
                [], 0.0, True, self._info(answer=None, success=False, end="no_action")
            )
        result, status = run_tool_call(self.tools, call)
        ok = status == OK
        self.tool_calls[call.name or "?"] += 1
        self.malformed += status == MALFORMED
        self.tool_errors += status == TOOL_ERROR
        end = ""
        if self.turns >= self.max_turns:
            end = "turn_limit"
        elif self.tokens >= self.max_tokens:
            end = "token_budget"
        if end:
            self.done = True
            return StepResult([], 0.0, True, self._info(answer=None, success=False, end=end))
        observation = [{"role": "tool", "content": result}]
        return StepResult(observation, 0.0, False, self._info(tool=call.name, ok=ok))
