"""Token log-probabilities under a causal LM: the one implementation every learner and rollout uses.

- `completion_logprobs`: completions given their prompts, one forward pass; rows that come
  in groups sharing a prompt (GRPO's G samples) run that prompt once (`group_size`).
- `sequence_logprobs`: every token of right-padded whole sequences (multi-turn episodes).
- `pack_shared_prompts` + `packed_completion_logprobs`: groups packed into rows without
  padding, each prompt once (DPO's pairs, a reward model's pairs).
- `prompt_pass`: the prompts' forward pass whose key/value cache sampling and scoring share.

Token tensors may live anywhere: each function moves its inputs to the model's device and
returns results there. Training forward passes ask for no key/value cache (`use_cache=False`).
Forward passes go through `lean_forward.lm_forward` (equal to `model(...)`, less overhead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from payoff.models.lean_forward import lean_supported, lm_forward
from payoff.models.transformers_compat import is_checkpointing


def gather_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] for each position: [B, T, V], [B, T] -> [B, T]."""
    # logsumexp + gather instead of a full log_softmax keeps memory at [B, T] for big vocabularies.
    logits = logits.float()
    return logits.gather(-1, tokens[..., None])[..., 0] - logits.logsumexp(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position: [B, T, V] -> [B, T]."""
    logprobs = torch.log_softmax(logits.float(), -1)
    return -(logprobs.exp() * logprobs).sum(-1)


@dataclass
class CompletionLogprobs:
    logprobs: torch.Tensor  # [B, T] logprob of each completion token
    entropy: torch.Tensor | None  # [B, T] entropy of the distribution it was drawn from


def completion_logprobs(
    model,
    prompt_ids: torch.Tensor,  # [B, P] left-padded
    prompt_mask: torch.Tensor,  # [B, P]
    completion_ids: torch.Tensor,  # [B, T] right-padded
    completion_mask: torch.Tensor,  # [B, T]
    temperature: float = 1.0,
    with_entropy: bool = False,
    group_size: int = 1,
) -> CompletionLogprobs:
    """Logprobs of the completion tokens given their prompts, in one forward pass.

    The logits at position t predict token t + 1, so the completion's logits are those of
    positions P - 1 .. P + T - 2. Only those T positions are materialised (`logits_to_keep`),
    which matters for large vocabularies.

    group_size > 1 says that rows come in consecutive groups of that many completions of one
    prompt (GRPO's G samples, DPO's chosen/rejected pair): each prompt is then run once for
    its group, which saves the prompt's compute G - 1 times in the forward and in the
    backward. Where the lean forward runs the model (payoff.models.lean_forward) each group
    is one packed row, its prompt then its completions' real tokens without padding, in one
    forward pass (`_packed_group_logits`); otherwise the prompts run first and their
    key/value cache is shared by the group's completions (gradients from all G meet in it).
    The two agree to float rounding. With gradient checkpointing on
    (model.gradient_checkpointing) a training pass keeps no cache, so each row then runs
    its prompt itself.
    """
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    lean = group_size > 1 and lean_supported(model)  # never with checkpointing on
    if group_size > 1 and not lean and is_checkpointing(model):
        group_size = 1
    logits = None
    if lean:
        logits = _packed_group_logits(
            model, (prompt_ids, prompt_mask), (completion_ids, completion_mask), group_size
        )
    if logits is None and group_size > 1:
        logits = _shared_prompt_logits(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size
        )
    elif logits is None:
        input_ids = torch.cat([prompt_ids, completion_ids], 1)  # [B, P + T]
        attention = torch.cat([prompt_mask, completion_mask], 1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        length = completion_ids.shape[1]
        logits = lm_forward(model, input_ids, attention, positions, logits_to_keep=length + 1)[0]
        logits = logits[:, :-1]  # [B, T, V]
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logprobs = gather_token_logprobs(logits, completion_ids)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = token_entropy(logits)
    return CompletionLogprobs(logprobs, entropy)


def sequence_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log p(token_t | tokens_<t) for t = 1..L-1 of right-padded sequences: [B, L] -> [B, L-1].

    `completion_logprobs` with the first token as the prompt. Pair it with a mask's `[:, 1:]`:
    the first token has no prediction and is always context.
    """
    return completion_logprobs(
        model,
        input_ids[:, :1],
        attention_mask[:, :1],
        input_ids[:, 1:],
        attention_mask[:, 1:],
        temperature,
    ).logprobs


def prompt_pass(
    model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group: int = 1
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Run left-padded prompts once; each row's cache, last logits and positions, repeated `group` times.

    Returns (key/value cache for B * group rows, next-token logits [B * group, V], position
    ids [B * group, P]). The cache keeps the autograd graph, so gradients from every row of
    a group flow back into its one prompt pass.
    """
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens from 0
    logits, cache = lm_forward(
        model, prompt_ids, prompt_mask, positions, use_cache=True, logits_to_keep=1
    )
    logits = logits[:, -1]
    if group > 1:
        cache.batch_repeat_interleave(group)
        logits = logits.repeat_interleave(group, 0)
        positions = positions.repeat_interleave(group, 0)
    return cache, logits, positions


def groups_of(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int) -> bool:
    """True when rows come in consecutive blocks of `group_size` identical prompts."""
    rows = prompt_ids.shape[0]
    if group_size < 2 or rows % group_size:
        return False
    ids = prompt_ids.view(rows // group_size, group_size, -1)
    mask = prompt_mask.view(rows // group_size, group_size, -1)
    return bool((ids == ids[:, :1]).all() and (mask == mask[:, :1]).all())


def _shared_prompt_logits(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_size: int,
) -> torch.Tensor:
    """Next-token logits [B, T, V] over the completions, running each prompt once per group."""
    if not groups_of(prompt_ids, prompt_mask, group_size):
        raise ValueError(
            f"group_size={group_size} but the rows do not come in consecutive groups of "
            f"{group_size} identical prompts"
        )
    cache, logits, positions = prompt_pass(
        model, prompt_ids[::group_size], prompt_mask[::group_size], group_size
    )
    first = logits[:, None]  # predicts completion token 0
    length = completion_ids.shape[1]
    if length == 1:
        return first
    steps = torch.arange(1, length, device=positions.device)
    rest, _ = lm_forward(
        model,
        completion_ids[:, :-1],  # the last token predicts nothing we score
        torch.cat([prompt_mask, completion_mask[:, :-1]], 1),
        positions[:, -1:] + steps,
        cache,
    )
    return torch.cat([first, rest], 1)


PACKED_ROW_LIMIT = 256  # tokens: longer groups take the two-pass way


def _packed_group_logits(
    model, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor], group_size: int
) -> torch.Tensor | None:
    """Next-token logits [B, T, V] over the completions, each group in one packed row.

    prompts: (ids [B, P] left-padded, mask); completions: (ids [B, T] right-padded, mask).

    Row g holds group g's prompt (its real tokens, positions 0..P-1), then each completion's
    tokens but its last (they are inputs; the last predicts nothing scored), at positions
    P, P+1, ... as if it followed the prompt alone. A completion token attends to the prompt
    and to its own earlier tokens, never to another completion. So the prompt runs once per
    group, no padding is computed inside a row, and attention works on G rows instead of
    B = G x group_size. The logits of completion token t come from the prompt's last
    position (t = 0) or from the completion's token t - 1; positions past a row's real
    tokens get zeros (masked out by the caller). None when the rows do not fit this layout
    (a completion mask with holes, an empty or right-padded prompt, rows not in groups) or
    a group's row would be longer than PACKED_ROW_LIMIT tokens (its attention costs the
    row's length squared, where the two-pass way's costs each completion's length times the
    prompt's and its own): the caller then takes the two-pass way.
    """
    (prompt_ids, prompt_mask), (completion_ids, completion_mask) = prompts, completions
    if not groups_of(prompt_ids, prompt_mask, group_size):
        return None
    rows, width = completion_ids.shape
    device = completion_ids.device
    lengths = completion_mask.sum(1)  # [B] real completion tokens (a prefix of each row)
    steps = torch.arange(width, device=device)[None, :]  # [1, T]
    if not torch.equal(completion_mask.bool(), steps < lengths[:, None]):
        return None
    prompts, prompt_masks = prompt_ids[::group_size], prompt_mask[::group_size]  # [G, P]
    groups, prompt_width = prompts.shape
    prompt_lengths = prompt_masks.sum(1)  # [G]
    prompt_cols = torch.arange(prompt_width, device=device)[None, :] - (
        prompt_width - prompt_lengths[:, None]
    )  # [G, P]: a real token's column in its packed row (left padding: < 0 for padding)
    if bool((prompt_lengths == 0).any()) or not torch.equal(prompt_masks.bool(), prompt_cols >= 0):
        return None
    inputs = (lengths - 1).clamp(min=0)  # [B] tokens each completion feeds in
    per_group = inputs.view(groups, group_size)
    starts = (per_group.cumsum(1) - per_group).reshape(-1)  # [B] within the completions' part
    packed = int((prompt_lengths + per_group.sum(1)).max())
    if packed > PACKED_ROW_LIMIT:  # attention over a row grows with its length squared
        return None
    group_of = torch.arange(rows, device=device) // group_size  # [B]
    first_col = prompt_lengths[group_of][:, None] + starts[:, None] + steps  # [B, T]
    ids = torch.zeros(groups, packed, dtype=completion_ids.dtype, device=device)
    positions = torch.zeros(groups, packed, dtype=torch.long, device=device)
    owner = torch.full((groups, packed), -2, dtype=torch.long, device=device)  # -2: padding
    real = prompt_cols >= 0
    prompt_rows = torch.arange(groups, device=device)[:, None].expand_as(prompt_cols)[real]
    ids[prompt_rows, prompt_cols[real]] = prompts[real]
    positions[prompt_rows, prompt_cols[real]] = prompt_cols[real]
    owner[prompt_rows, prompt_cols[real]] = -1  # the prompt: seen by all its completions
    fed = steps < inputs[:, None]  # [B, T]
    fed_rows = group_of[:, None].expand(rows, width)[fed]
    ids[fed_rows, first_col[fed]] = completion_ids[fed]
    positions[fed_rows, first_col[fed]] = (prompt_lengths[group_of][:, None] + steps)[fed]
    owner[fed_rows, first_col[fed]] = torch.arange(rows, device=device)[:, None].expand(
        rows, width
    )[fed]
    index = torch.arange(packed, device=device)
    causal = index[None, :] <= index[:, None]  # [query, key]
    keys, queries = owner[:, None, :], owner[:, :, None]
    allowed = causal & (keys != -2) & ((keys == -1) | (keys == queries))
    allowed |= torch.eye(packed, dtype=torch.bool, device=device) & (queries == -2)
    logits = lm_forward(model, ids, allowed[:, None], positions)[0]  # [G, L, V]
    scored = steps < lengths[:, None]  # [B, T]: tokens that get logits
    source = torch.where(steps == 0, prompt_lengths[group_of][:, None] - 1, first_col - 1)
    out = logits.new_zeros(rows, width, logits.shape[-1])
    out[scored] = logits[group_of[:, None].expand(rows, width)[scored], source[scored]]
    return out


@torch.no_grad()
def batched_completion_logprobs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    batch_size: int = 64,
    group_size: int = 1,
) -> torch.Tensor:
    """`completion_logprobs` without gradients, `batch_size` rows at a time (e.g. for the reference).

    group_size > 1 (rows in consecutive groups sharing a prompt) needs a batch_size that is
    a multiple of it; otherwise the prompts are simply run once per row.
    """
    if batch_size % group_size:
        group_size = 1
    parts = []
    for i in range(0, prompt_ids.shape[0], batch_size):
        s = slice(i, i + batch_size)
        parts.append(
            completion_logprobs(
                model,
                prompt_ids[s],
                prompt_mask[s],
                completion_ids[s],
                completion_mask[s],
                temperature,
                group_size=group_size,
            ).logprobs
        )
    return torch.cat(parts)


# ---- shared prompts without padding: several completions of a prompt packed into one row ----
@dataclass
class SharedPromptPack:
    """Groups (one prompt, its completions) packed into rows, with the mask that keeps them apart.

    A group is laid out as [prompt | completion 0 | completion 1 | ...]. Completion k sees
    the prompt and its own earlier tokens, never another completion, and its positions
    continue from the prompt's end, so every completion is scored exactly as if it followed
    the prompt alone, while the prompt is run once per group. Several groups share a row
    (block-diagonal mask), so a batch costs its real tokens, not rows x the longest row.
    Completions are numbered group by group: [g0c0, g0c1, g1c0, g1c1, ...].
    """

    input_ids: torch.Tensor  # [R, L]
    position_ids: torch.Tensor  # [R, L]
    allowed: torch.Tensor  # [R, L, L] bool: query i may attend to key j
    token_row: torch.Tensor  # [K] row of each completion token (all completions, flat)
    token_col: torch.Tensor  # [K] its column
    source_col: torch.Tensor  # [K] column of the logits that predict it
    owner: torch.Tensor  # [K] which completion it belongs to
    last_row: torch.Tensor  # [N] row of each completion's last token
    last_col: torch.Tensor  # [N] its column
    completions: int  # N
    prompt_free: bool  # some group has an empty prompt: no logits for its completions' first tokens

    def attention_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The 4D additive mask [R, 1, L, L] (0 = attend) that eager and SDPA attention both take."""
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device)
        mask.masked_fill_(~self.allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def to(self, device: torch.device) -> SharedPromptPack:
        """The same pack with its tensors on `device` (itself when they are there already)."""
        if self.input_ids.device == device:
            return self
        moved = {
            name: value.to(device) if isinstance(value, torch.Tensor) else value
            for name, value in vars(self).items()
        }
        return SharedPromptPack(**moved)


def pack_shared_prompts(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    row_tokens: int = 128,
) -> SharedPromptPack:
    """Pack groups (prompts[g], completions[g]) into rows of about `row_tokens` tokens.

    A row holds as many whole groups as fit in `row_tokens` (a longer group gets a row of
    its own); rows are padded to the longest. Attention inside a row is quadratic in its
    length, so a few hundred tokens is the sweet spot on a CPU. An empty prompt is allowed
    (the completions are then independent sequences, e.g. when a tokenizer merges across
    the prompt/completion boundary), but then the first token of each completion has no
    logits predicting it: use such packs for hidden states, not log-probabilities.
    """
    sizes = [len(p) + sum(len(c) for c in cs) for p, cs in zip(prompts, completions, strict=True)]
    rows = _fill_rows(sizes, row_tokens)
    width = max(sum(size for _, size in row) for row in rows)
    # built as flat Python lists and converted once: this runs every training step
    ids: list[int] = []
    positions: list[int] = []
    group: list[int] = []  # padding: -1, its own group
    segment: list[int] = []  # prompt tokens: -1, seen by every completion of their group
    token_row, token_col, source_col, owner, last_row, last_col = [], [], [], [], [], []
    completion = 0
    for r, row in enumerate(rows):
        start = len(ids)
        for g, _ in row:
            prompt = prompts[g]
            p = len(prompt)
            ids += prompt
            positions += range(p)
            group += [g] * p
            segment += [-1] * p
            prompt_last = len(ids) - start - 1
            for tokens in completions[g]:
                t = len(tokens)
                if t == 0:
                    raise ValueError(f"group {g} has an empty completion; append EOS first")
                col = len(ids) - start
                ids += tokens
                positions += range(p, p + t)
                group += [g] * t
                segment += [completion] * t
                token_row += [r] * t
                token_col += range(col, col + t)
                source_col += [prompt_last, *range(col, col + t - 1)]
                owner += [completion] * t
                last_row.append(r)
                last_col.append(col + t - 1)
                completion += 1
        fill = width - (len(ids) - start)
        ids += [pad_id] * fill
        positions += [0] * fill
        group += [-1] * fill
        segment += [-1] * fill
    n_rows = len(rows)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    return SharedPromptPack(
        input_ids=as_tensor(ids).view(n_rows, width),
        position_ids=as_tensor(positions).view(n_rows, width),
        allowed=_allowed(
            as_tensor(group).view(n_rows, width), as_tensor(segment).view(n_rows, width)
        ),
        token_row=as_tensor(token_row),
        token_col=as_tensor(token_col),
        source_col=as_tensor(source_col),
        owner=as_tensor(owner),
        last_row=as_tensor(last_row),
        last_col=as_tensor(last_col),
        completions=completion,
        prompt_free=any(len(p) == 0 for p in prompts),
    )


def _fill_rows(sizes: Sequence[int], row_tokens: int) -> list[list[tuple[int, int]]]:
    """Groups in order, as many whole ones to a row as fit in `row_tokens` (a longer group
    gets a row of its own): per row, (group, size)."""
    rows: list[list[tuple[int, int]]] = [[]]
    used = 0
    for g, size in enumerate(sizes):
        if rows[-1] and used + size > row_tokens:
            rows.append([])
            used = 0
        rows[-1].append((g, size))
        used += size
    return rows


def _allowed(group: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
    """The attention mask [rows, width, width] of packed rows: causal, within a group, a
    completion seeing its own tokens and its group's prompt (segment -1); padding (group -1)
    sees itself only, so no row of the mask is empty."""
    width = group.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same_group = group[:, :, None] == group[:, None, :]
    same_segment = (segment[:, :, None] == segment[:, None, :]) | (segment[:, None, :] < 0)
    pad = group < 0
    allowed = causal & same_group & same_segment & ~pad[:, None, :]
    allowed |= torch.eye(width, dtype=torch.bool) & pad[:, :, None]
    return allowed


def packable(model) -> bool:
    """True when `model`'s attention takes a custom 4D mask (eager, SDPA), as packing needs."""
    return getattr(model.config, "_attn_implementation", "eager") in ("eager", "sdpa", None)


def _check_packable(model) -> None:
    if not packable(model):
        implementation = getattr(model.config, "_attn_implementation", None)
        raise ValueError(
            f"packed shared-prompt forward needs eager or sdpa attention (a 4D mask), the model "
            f"uses {implementation!r}; use completion_logprobs(group_size=...) instead"
        )


def packed_completion_logprobs(model, pack: SharedPromptPack) -> torch.Tensor:
    """Summed log-probabilities [N] of every completion in `pack` under a causal LM, one forward pass.

    Equal to `completion_logprobs(...).logprobs` summed over each completion's real tokens,
    with gradients; the prompt runs once per group and no padding is computed.
    """
    _check_packable(model)
    if pack.prompt_free:
        raise ValueError("a completion without a prompt has no logits for its first token")
    pack, output = _forward_packed(model, pack)
    logits = output.logits  # [R, L, V]
    token_logprobs = gather_token_logprobs(
        logits[pack.token_row, pack.source_col], pack.input_ids[pack.token_row, pack.token_col]
    )  # [K]
    return torch.zeros(
        pack.completions, dtype=token_logprobs.dtype, device=token_logprobs.device
    ).index_add(0, pack.owner, token_logprobs)


def packed_last_hidden(body, pack: SharedPromptPack) -> torch.Tensor:
    """Final hidden state [N, H] at each completion's last token, from a transformer `body`.

    `body` is a causal LM's decoder (`model.get_decoder()`): what a reward model's scalar
    head reads. Equal to running each prompt + completion on its own.
    """
    pack, output = _forward_packed(body, pack)
    hidden = output.last_hidden_state  # [R, L, H]
    return hidden[pack.last_row, pack.last_col]


def _forward_packed(module: Any, pack: SharedPromptPack) -> tuple[SharedPromptPack, Any]:
    """One forward pass of `module` over the packed rows, on the module's device and dtype."""
    weight = next(module.parameters())
    pack = pack.to(weight.device)
    output = module(
        input_ids=pack.input_ids,
        attention_mask=pack.attention_mask(weight.dtype),
        position_ids=pack.position_ids,
        use_cache=False,
    )
    return pack, output


def tokenize_unique(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text (no special tokens), running the tokenizer once per distinct text.

    Preference data repeats itself (several pairs per prompt, stock completions), and
    tokenizing is a visible share of a small model's training time.
    """
    unique = list(dict.fromkeys(texts))
    ids = dict(zip(unique, tokenizer(unique, add_special_tokens=False)["input_ids"], strict=True))
    return [ids[text] for text in texts]


def leading_bos(tokenizer: Any) -> list[int]:
    """[BOS id] when the tokenizer starts every text with BOS by default (Llama's, Mistral's,
    Gemma's, OPT's post-processor), else []. payoff tokenizes pieces (prompt, completion, a
    turn) without special tokens and puts BOS back itself, once, at the start of a sequence:
    a pretrained model read every text after it, and its saved model is called so again."""
    cached = getattr(tokenizer, "_payoff_leading_bos", None)
    if cached is None:
        bos = getattr(tokenizer, "bos_token_id", None)
        plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
        default = list(tokenizer("a")["input_ids"])
        cached = [bos] if bos is not None and default[:1] == [bos] and plain[:1] != [bos] else []
        try:
            tokenizer._payoff_leading_bos = cached
        except AttributeError:  # a tokenizer that takes no attributes: ask again next time
            pass
    return cached


def tokenize_starts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of texts that begin a sequence (prompts, whole prompt + completion texts):
    `tokenize_unique`'s, each after the tokenizer's BOS where it puts one (`with_bos`)."""
    return [with_bos(tokenizer, ids) for ids in tokenize_unique(tokenizer, list(texts))]


def with_bos(tokenizer: Any, ids: list[int]) -> list[int]:
    """`ids` of a sequence's start with `leading_bos` before them, unless they start with it
    already (a chat template that writes {{ bos_token }})."""
    bos = leading_bos(tokenizer)
    return bos + list(ids) if bos and list(ids[:1]) != bos else list(ids)
