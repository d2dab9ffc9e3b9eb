"""What GRPO and agent GRPO share: group-relative advantages (each completion scored against
the others of its prompt) and the clipped policy loss over completion tokens, with its
aggregation (per sequence, per token, or Dr. GRPO's constant normaliser)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from payoff.algos.shared.kl import kl_k3

Aggregation = Literal["sequence", "token", "dr_grpo"]


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """A_i = r_i - mean(group), divided by std(group) + eps when `scale` (Shao et al. 2024, eq. 3).

    rewards: [N * G], the G completions of each prompt next to each other. A group whose
    completions all scored the same gets advantage 0: it carries no learning signal.
    Dr. GRPO (Liu et al. 2025) argues for scale=False, since dividing by the std up-weights
    prompts that are nearly always right or nearly always wrong.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.view(-1, group_size)  # [N, G]
    centred = grouped - grouped.mean(-1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(-1, keepdim=True) + eps)
    return centred.reshape(-1)


@dataclass
class LossParts:
    """The GRPO loss of one minibatch and its diagnostics (all scalars)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    clip_fraction: torch.Tensor


def grpo_loss(
    logprobs: torch.Tensor,  # [B, T] under the policy being trained (with grad)
    old_logprobs: torch.Tensor,  # [B, T] under the policy that sampled
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T] 1 = completion token
    ref_logprobs: torch.Tensor | None = None,  # [B, T] under the frozen reference
    beta: float = 0.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "sequence",
    max_tokens: int | None = None,
    rows: int | None = None,
    tokens: int | None = None,
) -> LossParts:
    """Clipped-ratio policy loss with an optional k3 KL penalty, aggregated over tokens.

    rows / tokens: the completions and completion tokens the loss is averaged over (default:
    those given). Larger when rows known to contribute nothing were left out of the batch,
    so that the loss and its gradient stay those of the whole batch.
    """
    mask = mask.to(logprobs.dtype)
    ratio = (logprobs - old_logprobs).exp()
    adv = advantages[:, None]  # one advantage per completion, shared by its tokens
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.min(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if beta > 0 and ref_logprobs is not None:
        kl = kl_k3(logprobs, ref_logprobs)
        per_token = per_token + beta * kl
    loss = aggregate(per_token, mask, aggregation, max_tokens, rows, tokens)
    with torch.no_grad():
        total_tokens = mask.sum().clamp(min=1) if tokens is None else max(tokens, 1)
        was_clipped = ((ratio < 1 - clip_low) & (adv < 0)) | ((ratio > 1 + clip_high) & (adv > 0))
        clip_fraction = (was_clipped.to(mask.dtype) * mask).sum() / total_tokens
        mean_kl = (kl * mask).sum() / total_tokens
        policy = aggregate(
            -torch.min(unclipped, clipped), mask, aggregation, max_tokens, rows, tokens
        )
    return LossParts(loss, policy, mean_kl, clip_fraction)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    how: Aggregation,
    max_tokens: int | None = None,
    rows: int | None = None,
    tokens: int | None = None,
) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar over the masked tokens.

    rows / tokens override the number of completions / tokens divided by (see grpo_loss).
    """
    rows = mask.shape[0] if rows is None else rows
    if how == "sequence":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum() / max(rows, 1)
    if how == "token":
        total = mask.sum().clamp(min=1) if tokens is None else max(tokens, 1)
        return (per_token * mask).sum() / total
    if how == "dr_grpo":
        return (per_token * mask).sum() / (rows * (max_tokens or mask.shape[1]))
    raise ValueError(f"unknown loss aggregation {how!r}; valid: sequence, token, dr_grpo")
