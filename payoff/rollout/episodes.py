"""Batched multi-turn episode rollouts with a language model, and the token mask for training.

    contexts = [format(reset(task)) for each task]
    loop until every episode is done:
        sample one turn for every live episode in ONE batched generate call
        step each env with its turn; append the observation's text to that context

An episode is kept as segments: the model's turns (the exact sampled token ids and their
logprobs) and everything else (prompt, tool results, template text), tokenized on its own.
Concatenated, they are the training sequence; `model_mask` is 1 exactly on the model's
own tokens, so tool outputs and environment text are context, never targets. The model
samples from those same ids (`LocalSampler.generate_ids`), not from the text re-tokenized.

What the env writes (tasks, tool results, documents) is encoded as text: a tool result
that spells `<|im_end|>\n<|im_start|>assistant` reads as those characters, never as the
tokenizer's special tokens (payoff.models.literal_text); only the format's own text (the
chat template's role headers) is tokenized with them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from payoff.core.errors import EnvError
from payoff.envs.text.env import Message, TextEnv
from payoff.envs.text.formats import Format
from payoff.models.literal_text import literal_ids, spells_reserved
from payoff.models.logprobs import with_bos
from payoff.rollout.generation import Sampler, SamplingConfig


@dataclass
class Segment:
    """A stretch of an episode's text: the model's turn (model=True) or context."""

    text: str
    ids: list[int]
    model: bool
    turn: int = -1  # index of the model turn (-1 for context)


@dataclass
class Episode:
    """One finished episode: its conversation, its tokens, its reward and counters."""

    task: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)  # env reward after each model turn
    # tool calls the env rejected as malformed at each model turn (from its info's running count)
    turn_malformed: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # the env's last info
    done: bool = False

    @property
    def reward(self) -> float:
        return float(sum(self.turn_rewards))

    @property
    def success(self) -> bool:
        return bool(self.info.get("success", False))

    @property
    def turns(self) -> int:
        return len(self.turn_rewards)

    @property
    def tool_calls(self) -> dict[str, int]:
        return dict(self.info.get("tool_calls", {}))

    @property
    def model_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments if s.model)

    def token_ids(self) -> list[int]:
        return [i for s in self.segments for i in s.ids]

    def model_mask(self) -> list[int]:
        """1 on the model's own tokens, 0 on prompt, tool results and template text."""
        return [int(s.model) for s in self.segments for _ in s.ids]

    def turn_index(self) -> list[int]:
        """For each token, the model turn it belongs to (-1 for context)."""
        return [s.turn for s in self.segments for _ in s.ids]

    def text(self) -> str:
        return "".join(s.text for s in self.segments)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _add_context(episode: Episode, tokenizer: Any, text: str, ids: list[int] | None = None) -> None:
    if text:
        ids = _encode(tokenizer, text) if ids is None else ids
        if not episode.segments:  # the conversation's start: BOS where the tokenizer puts one
            ids = with_bos(tokenizer, ids)
        episode.segments.append(Segment(text, ids, False))


_PLACEHOLDER = "PAYOFF-MESSAGE-CONTENT-7f3a9c"


def _message_ids(
    text: str, fmt: Format, message: Message, history: list[Message], tokenizer: Any
) -> list[int]:
    """The ids of `text` (`fmt.message(message, history)`), the message's content as text.

    When the content spells an added token, the format renders a placeholder in its place:
    what surrounds it is the format's own text, tokenized with its special tokens, and what
    stands there in the real rendering is the content (as the template wrote it: trimmed,
    quoted), encoded as text. A format whose text around the content changes with the
    content gets the whole piece as text (its role tokens too: safe, if less faithful).
    """
    content = str(message.get("content", ""))
    if not spells_reserved(tokenizer, content):
        return _encode(tokenizer, text)
    shape = fmt.message({**message, "content": _PLACEHOLDER}, history)
    if shape.count(_PLACEHOLDER) == 1:
        before, after = shape.split(_PLACEHOLDER)
        if (
            len(before) + len(after) <= len(text)
            and text.startswith(before)
            and text.endswith(after)
        ):
            middle = text[len(before) : len(text) - len(after)]
            return [
                *_encode(tokenizer, before),
                *literal_ids(tokenizer, middle),
                *_encode(tokenizer, after),
            ]
    return literal_ids(tokenizer, text)


def _add_message(episode: Episode, tokenizer: Any, fmt: Format, message: Message) -> None:
    """Append an env message (task, tool result) as context, its content encoded as text."""
    text = fmt.message(message, episode.messages)
    _add_context(
        episode, tokenizer, text, _message_ids(text, fmt, message, episode.messages, tokenizer)
    )
    episode.messages.append(message)


def start_episode(env: TextEnv, task: dict[str, Any], fmt: Format, tokenizer: Any) -> Episode:
    """Reset `env` on `task` and render the first messages as context."""
    episode = Episode(task=task)
    messages = list(env.reset(task))
    if not messages:  # the model's first turn would follow nothing: an empty prompt
        raise EnvError(
            f"{type(env).__name__}.reset returned no messages: an episode starts from at "
            f"least one (the task put to the model)"
        )
    for message in messages:
        _add_message(episode, tokenizer, fmt, message)
    return episode


def advance(
    episode: Episode,
    env: TextEnv,
    fmt: Format,
    tokenizer: Any,
    turn_text: str,
    turn_ids: list[int] | None = None,
) -> None:
    """Append the model's turn (its sampled ids, or `turn_text` encoded as text: a
    demonstration's turn is never a special token) and step the env."""
    ids = literal_ids(tokenizer, turn_text) if turn_ids is None else turn_ids
    episode.segments.append(Segment(turn_text, ids, True, turn=episode.turns))
    history = list(episode.messages)
    episode.messages.append({"role": "assistant", "content": turn_text})
    _add_context(episode, tokenizer, fmt.turn_suffix(history, turn_text))
    malformed_before = int(episode.info.get("malformed", 0))
    result = env.step(turn_text)
    episode.turn_rewards.append(result.reward)
    episode.turn_malformed.append(int(result.info.get("malformed", 0)) - malformed_before)
    episode.info = result.info
    episode.done = result.done
    for message in result.observation:
        _add_message(episode, tokenizer, fmt, message)
    if not episode.done:
        _add_context(episode, tokenizer, fmt.turn_prefix(episode.messages))


def replay_episode(
    env: TextEnv, task: dict[str, Any], turns: Sequence[str], fmt: Format, tokenizer: Any
) -> Episode:
    """An episode from scripted model turns (demonstrations for SFT); tool results are real."""
    episode = start_episode(env, task, fmt, tokenizer)
    _add_context(episode, tokenizer, fmt.turn_prefix(episode.messages))
    for turn in turns:
        if episode.done:
            break
        advance(episode, env, fmt, tokenizer, turn)
    return episode


MAX_EPISODE_TURNS = 1_000  # for an env that declares no max_turns


def rollout_episodes(
    sampler: Sampler,
    tokenizer: Any,
    tasks: Sequence[dict[str, Any]],
    make_env: Callable[[], TextEnv],
    fmt: Format,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    stop_ids: Sequence[int] | None = None,
) -> list[Episode]:
    """Run one episode per task, all live episodes sampled together turn by turn.
    stop_ids: the tokens that end the model's talking (the sampler stops on them: see
    payoff.rollout.generation.stop_token_ids); default the tokenizer's eos."""
    envs = [make_env() for _ in tasks]
    episodes = [
        start_episode(env, task, fmt, tokenizer) for env, task in zip(envs, tasks, strict=True)
    ]
    for episode in episodes:
        _add_context(episode, tokenizer, fmt.turn_prefix(episode.messages))
    stops = set(stop_ids) if stop_ids is not None else {tokenizer.eos_token_id} - {None}
    # An env ends its episodes at its own turn limit; one that never says done would loop
    # here forever, a generate call a turn. Stop it a turn past that limit (or at 1,000).
    declared = [getattr(env, "max_turns", None) for env in envs]
    limit = max((int(n) + 1 for n in declared if isinstance(n, int)), default=MAX_EPISODE_TURNS)
    for turn in itertools.count():
        live = [i for i, e in enumerate(episodes) if not e.done]
        if not live:
            return episodes
        if turn >= limit:
            raise EnvError(
                f"{type(envs[live[0]]).__name__} has not ended an episode after {turn} turns "
                f"(its max_turns: {declared[live[0]]}): its step() must return done=True at "
                f"the turn limit"
            )
        # The model reads the very ids it is trained on (env text as text); a sampler that
        # takes only strings gets the text, which its tokenizer reads with special tokens.
        generate_ids = getattr(sampler, "generate_ids", None)
        if generate_ids is not None:
            contexts = [episodes[i].token_ids() for i in live]
            generation = generate_ids(contexts, sampling, generator)
        else:
            generation = sampler.generate([episodes[i].text() for i in live], sampling, generator)
        for row, i in enumerate(live):
            length = int(generation.completion_mask[row].sum())
            ids = generation.completion_ids[row, :length].tolist()
            advance(episodes[i], envs[i], fmt, tokenizer, generation.completions[row], ids)
            if ids and ids[-1] in stops and not episodes[i].done:
                # EOS mid-episode: the model stopped talking; nothing more will come.
                episodes[i].done = True


@dataclass
class PackedEpisodes:
    """Episodes as right-padded tensors for one forward pass."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] 1 = real token
    model_mask: torch.Tensor  # [B, L] 1 = the model's own token (a training target)
    turn_index: torch.Tensor  # [B, L] model turn of each token, -1 for context and padding


def pack_episodes(
    episodes: Sequence[Episode], pad_id: int, device: torch.device | str | None = None
) -> PackedEpisodes:
    """The episodes' tokens right-padded into tensors on `device` (default: the CPU)."""
    width = max(len(e.token_ids()) for e in episodes)

    def pad(values: list[int], fill: int) -> list[int]:
        return values + [fill] * (width - len(values))

    def tensor(rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor(rows, device=device)

    return PackedEpisodes(
        input_ids=tensor([pad(e.token_ids(), pad_id) for e in episodes]),
        attention_mask=tensor([pad([1] * len(e.token_ids()), 0) for e in episodes]),
        model_mask=tensor([pad(e.model_mask(), 0) for e in episodes]),
        turn_index=tensor([pad(e.turn_index(), -1) for e in episodes]),
    )


def episode_metrics(episodes: Sequence[Episode], prefix: str = "") -> dict[str, float]:
    """success, turns, tool calls (all and by tool), malformed calls, tools' own errors and
    model tokens per episode, and the share of episodes cut at the turn or token limit."""
    n = max(1, len(episodes))
    calls: Counter[str] = Counter()
    for e in episodes:
        calls.update(e.tool_calls)
    metrics = {
        f"{prefix}success": sum(e.success for e in episodes) / n,
        f"{prefix}turns": sum(e.turns for e in episodes) / n,
        f"{prefix}tool_calls": sum(calls.values()) / n,
        f"{prefix}malformed": sum(int(e.info.get("malformed", 0)) for e in episodes) / n,
        f"{prefix}tool_errors": sum(int(e.info.get("tool_errors", 0)) for e in episodes) / n,
        f"{prefix}cut_at_limit": sum(
            e.info.get("end") in ("turn_limit", "token_budget") for e in episodes
        )
        / n,
        f"{prefix}tokens": sum(e.model_tokens for e in episodes) / n,
    }
    for name, count in sorted(calls.items()):
        metrics[f"{prefix}calls/{name}"] = count / n
    return metrics


def render_markdown(episode: Episode) -> str:
    """The episode as a conversation: who said what, tool calls and results, the outcome."""
    lines = []
    for m in episode.messages:
        who = {"user": "task", "assistant": "model", "tool": "tool result", "system": "system"}[
            m["role"]
        ]
        lines.append(f"**{who}:** `{m['content']}`  ")
    outcome = "success" if episode.success else f"failure ({episode.info.get('end', '?')})"
    lines.append(f"*{outcome}; reward {episode.reward:g}; {episode.turns} turns*")
    return "\n".join(lines)
