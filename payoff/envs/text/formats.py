"""Turning messages into model text: payoff's plain format for the tiny model, or a chat template.

A format answers two questions for the rollout: what text does a non-model message add to
the context, and what text wraps the model's own turn (before: e.g. '<|assistant|>\\n',
after: e.g. '<|end|>\\n')? Only the model's own turn is ever a training target.
"""

from __future__ import annotations

from typing import Any, Protocol

from payoff.envs.text.tools import RESULT_CLOSE, RESULT_OPEN

Message = dict[str, str]


class Format(Protocol):
    def message(self, message: Message, history: list[Message]) -> str: ...

    def turn_prefix(self, history: list[Message]) -> str: ...

    def turn_suffix(self, history: list[Message], content: str) -> str: ...


class PlainFormat:
    """The tiny model's compact format: one line per message, tool results in <result> tags.

    347*58=?
    <tool>{"name":"calculator","arguments":{"expression":"347*58"}}</tool>
    <result>20126</result>
    <answer>20126</answer>
    """

    def message(self, message: Message, history: list[Message]) -> str:
        if message["role"] == "tool":
            return f"{RESULT_OPEN}{message['content']}{RESULT_CLOSE}\n"
        if message["role"] == "system":
            return message["content"] + "\n" if message["content"] else ""
        return message["content"] + "\n"

    def turn_prefix(self, history: list[Message]) -> str:
        return ""

    def turn_suffix(self, history: list[Message], content: str) -> str:
        return "\n"


class ChatTemplateFormat:
    """A Hugging Face tokenizer's chat template, cut into per-message pieces by prefix differences.

    Each piece is render(history + [message]) minus render(history), so whatever the
    template adds (role headers, end-of-turn tokens, the tool list) lands in context text,
    and only the assistant content is the model's. Tool results use role 'tool'.
    """

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None):
        self.tokenizer, self.tools = tokenizer, tools

    def _render(self, messages: list[Message], generation_prompt: bool = False) -> str:
        if not messages:
            return ""
        from payoff.core.chat_template import render_chat  # within bounds

        return render_chat(self.tokenizer, messages, generation_prompt, self.tools)

    def _diff(self, longer: str, shorter: str) -> str:
        # Templates that rewrite earlier text (rare) fall back to the whole new rendering.
        return longer[len(shorter) :] if longer.startswith(shorter) else longer

    def message(self, message: Message, history: list[Message]) -> str:
        return self._diff(self._render([*history, message]), self._render(history))

    def turn_prefix(self, history: list[Message]) -> str:
        return self._diff(self._render(history, True), self._render(history))

    def turn_suffix(self, history: list[Message], content: str) -> str:
        full = self._render([*history, {"role": "assistant", "content": content}])
        before = self._render(history, True) + content
        return self._diff(full, before) if full.startswith(before) else ""
