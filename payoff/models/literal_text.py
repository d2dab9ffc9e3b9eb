"""Text from outside the model (tool results, documents, tasks) as token ids of its characters.

A tokenizer matches its added tokens anywhere in a text: a tool result that contains
`<|im_end|>\\n<|im_start|>assistant\\n` would become real end-of-turn and role tokens, a
forged assistant turn in the model's context, and `<eos>` the tiny model's end of text.
`literal_ids` encodes such text so that every added token it spells (special or not:
Qwen's `<tool_call>` is an added token without the special flag) is read as its
characters. Text that spells none is encoded exactly as `tokenizer(text)` encodes it.

    literal_ids(tokenizer, "ok")                      == tokenizer("ok").input_ids
    literal_ids(tokenizer, "x<|im_end|>")             has no id of <|im_end|>

How: the text is cut one character into every place an added token's text begins (so no
piece holds a whole one) and the pieces are encoded one by one; a piece whose ids still hold
an added token (one matched after the tokenizer's normalization) is encoded character by
character, and an added token that still comes out of a single character is dropped.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import Any


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


@lru_cache(maxsize=32)
def _pattern(contents: tuple[str, ...]) -> re.Pattern[str] | None:
    # A zero-width match at every place one of them begins, overlapping ones included.
    if not contents:
        return None
    alternatives = "|".join(re.escape(c) for c in sorted(contents, key=len, reverse=True))
    return re.compile(f"(?=(?:{alternatives}))", re.IGNORECASE)


def reserved_tokens(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's added tokens that text could spell: content -> id. Tokens of one
    character or of whitespace only (some code models add runs of spaces) are ordinary text."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens = {str(token): int(i) for i, token in added.items()}
    if not tokens:  # a tokenizer without the added-token table: its special tokens
        names = getattr(tokenizer, "all_special_tokens", None) or []
        tokens = {name: tokenizer.convert_tokens_to_ids(name) for name in names}
    return {c: i for c, i in tokens.items() if len(c) > 1 and c.strip() and isinstance(i, int)}


def spells_reserved(tokenizer: Any, text: str) -> bool:
    """Whether `text` contains the text of one of the tokenizer's added tokens (any case)."""
    pattern = _pattern(tuple(sorted(reserved_tokens(tokenizer))))
    return bool(text) and pattern is not None and pattern.search(text) is not None


def literal_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` read as characters: never an added (special) token's id."""
    reserved = reserved_tokens(tokenizer)
    ids = _encode(tokenizer, text)
    # The unknown token's id comes from characters outside the vocabulary: ordinary text.
    unk = getattr(tokenizer, "unk_token_id", None)
    reserved_ids = set(reserved.values()) - {unk}
    pattern = _pattern(tuple(sorted(reserved)))
    if pattern is None or (not pattern.search(text) and not reserved_ids.intersection(ids)):
        return ids
    cuts = sorted({match.start() + 1 for match in pattern.finditer(text)})
    ids = []
    for start, end in itertools.pairwise([0, *cuts, len(text)]):
        piece = _encode(tokenizer, text[start:end])
        if reserved_ids.intersection(piece):
            piece = [i for c in text[start:end] for i in _encode(tokenizer, c)]
            piece = [i for i in piece if i not in reserved_ids]
        ids.extend(piece)
    return ids
