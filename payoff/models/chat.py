"""Prompts and examples through a tokenizer's chat template, when the model has one.

    model.chat_template: auto   a tokenizer with a `chat_template` renders every prompt
                                (and SFT/DPO example) with `apply_chat_template`
                         none   the row's plain text, as payoff's tiny model is trained on

A row's conversation is its `prompt_messages` (kept by the dataset readers for
conversational data), else its text prompt as one user message:

    prompt_text(tokenizer, row)          = template(messages, add_generation_prompt=True)
    completion_text(tokenizer, row, c)   = template(messages + [assistant: c]) - prompt_text

so prompt + completion is exactly the rendered conversation, and the completion is the
assistant turn with the template's end-of-turn text (the trainers append EOS themselves,
so a template that ends the turn with the EOS token does not get it twice).

A chat template is code from the model folder's author: it is rendered within bounds
(payoff.core.chat_template).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from payoff.core.chat_template import Message, render_chat
from payoff.core.errors import ConfigError


def has_chat_template(tokenizer: Any) -> bool:
    """True when the tokenizer ships a chat template (payoff's tiny model has none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def uses_chat_template(tokenizer: Any, mode: str) -> bool:
    """Whether prompts go through the template: mode 'auto' and a template, never for 'none'."""
    if mode not in ("auto", "none"):
        raise ConfigError(f"config key 'model.chat_template' must be auto or none, got {mode!r}")
    if mode == "none" or not has_chat_template(tokenizer):
        return False
    _render(tokenizer, [{"role": "user", "content": "1+1="}], generation_prompt=True)  # parses?
    return True


def conversation(row: Mapping[str, Any]) -> list[Message]:
    """The row's prompt as chat messages: its `prompt_messages`, else one user message."""
    messages = row.get("prompt_messages")
    if messages:
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    return [{"role": "user", "content": row["prompt"]}]


def _render(tokenizer: Any, messages: list[Message], generation_prompt: bool) -> str:
    return render_chat(tokenizer, messages, add_generation_prompt=generation_prompt)


def prompt_text(tokenizer: Any, row: Mapping[str, Any], template: bool) -> str:
    """What the model reads for `row`: the rendered conversation, ready for the assistant's
    turn (template=True), or the row's own text. A row without a prompt (plain language
    modelling) is never templated."""
    if not template or not (row.get("prompt") or row.get("prompt_messages")):
        return row["prompt"]
    return _render(tokenizer, conversation(row), generation_prompt=True)


def completion_text(tokenizer: Any, row: Mapping[str, Any], completion: str, template: bool) -> str:
    """The text that follows `prompt_text` when the assistant answers `completion`."""
    if not template or not (row.get("prompt") or row.get("prompt_messages")):
        return completion
    messages = conversation(row)
    prompt = _render(tokenizer, messages, generation_prompt=True)
    full = _render(tokenizer, [*messages, {"role": "assistant", "content": completion}], False)
    if not full.startswith(prompt):
        # A template that renders earlier turns differently once an answer follows (rare):
        # the answer alone keeps prompt + completion a faithful pair.
        return completion
    turn = full[len(prompt) :]
    eos = getattr(tokenizer, "eos_token", None)
    if eos and turn.rstrip().endswith(eos):
        turn = turn.rstrip()[: -len(eos)]
    return turn
