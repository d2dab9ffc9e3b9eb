"""Token log-probabilities of completions under a causal LM, in batches, with masks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
    prompt (GRPO's G samples, DPO's chosen/rejected pair): each prompt is then run once and
    its key/value cache shared by its group, which saves the prompt's compute G - 1 times
    in the forward and in the backward (gradients from all G completions meet in the cache).
    """
    if group_size > 1:
        logits = _shared_prompt_logits(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size
        )
    else:
        input_ids = torch.cat([prompt_ids, completion_ids], 1)  # [B, P + T]
        attention = torch.cat([prompt_mask, completion_mask], 1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        length = completion_ids.shape[1]
        logits = model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            logits_to_keep=length + 1,
        ).logits[:, :-1]  # [B, T, V]
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logprobs = gather_token_logprobs(logits, completion_ids)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = token_entropy(logits)
    return CompletionLogprobs(logprobs, entropy)


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
    prompt_ids, prompt_mask = prompt_ids[::group_size], prompt_mask[::group_size]
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    first = out.logits[:, -1:].repeat_interleave(group_size, 0)  # predicts completion token 0
    length = completion_ids.shape[1]
    if length == 1:
        return first
    cache = out.past_key_values
    cache.batch_repeat_interleave(group_size)  # keeps the autograd graph back to the prompt
    prompt_mask = prompt_mask.repeat_interleave(group_size, 0)
    steps = torch.arange(1, length, device=positions.device)
    rest = model(
        input_ids=completion_ids[:, :-1],  # the last token predicts nothing we score
        attention_mask=torch.cat([prompt_mask, completion_mask[:, :-1]], 1),
        position_ids=positions[:, -1:].repeat_interleave(group_size, 0) + steps,
        past_key_values=cache,
        use_cache=True,
    ).logits
    return torch.cat([first, rest], 1)


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
