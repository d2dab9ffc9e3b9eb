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
) -> CompletionLogprobs:
    """Logprobs of the completion tokens given their prompts, in one forward pass.

    The logits at position t predict token t + 1, so the completion's logits are those of
    positions P - 1 .. P + T - 2. Only those T positions are materialised (`logits_to_keep`),
    which matters for large vocabularies.
    """
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


@torch.no_grad()
def batched_completion_logprobs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    batch_size: int = 64,
) -> torch.Tensor:
    """`completion_logprobs` without gradients, `batch_size` rows at a time (e.g. for the reference)."""
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
            ).logprobs
        )
    return torch.cat(parts)
