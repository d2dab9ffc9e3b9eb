"""What GRPO and agent GRPO share: group-relative advantages (each completion scored against
the others of its prompt: GRPO's, RLOO's leave-one-out, REINFORCE++'s batch-normalized), the
clipped policy loss over completion tokens with its aggregation (GRPO's per sequence, DAPO's
per token, Dr. GRPO's constant, BNPO's per local batch), DAPO's overlong length penalty, and
which rows of a minibatch carry a gradient at all.

The four aggregations of a [B, T] per-token loss l over the completion tokens (mask m),
as the papers and TRL's `loss_type` define them:

    grpo     (1/B) sum_i (1/|o_i|) sum_t l_it           each completion weighs the same
    dapo     sum_i sum_t l_it / sum_i |o_i|              each token of the optimizer step's
                                                         batch weighs the same
    dr_grpo  sum_i sum_t l_it / (B * max_new_tokens)     a constant: no length bias at all
    bnpo     mean over micro-batches k of                each token of a micro-batch (the
             sum_{i in k} sum_t l_it / sum_{i in k} |o_i|   'local batch') weighs the same

dapo and bnpo differ only when an optimizer step accumulates several micro-batches
(`microbatch_size`); 'sequence' and 'token' are accepted as the older names of grpo and dapo.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from payoff.algos.shared.kl import kl_k3
from payoff.core.errors import ConfigError

Aggregation = Literal["grpo", "dapo", "dr_grpo", "bnpo", "sequence", "token"]
AGGREGATIONS = ("grpo", "dapo", "dr_grpo", "bnpo")
ALIASES = {"sequence": "grpo", "token": "dapo"}
Estimator = Literal["grpo", "rloo", "reinforce_pp"]


def canonical_aggregation(how: str) -> str:
    """The paper's name of an aggregation ('sequence' -> 'grpo', 'token' -> 'dapo')."""
    how = ALIASES.get(how, how)
    if how not in AGGREGATIONS:
        raise ConfigError(
            f"unknown loss aggregation {how!r}; valid: {', '.join(AGGREGATIONS)} "
            f"(or the aliases sequence = grpo, token = dapo)"
        )
    return how


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


def flat_groups(rewards: Sequence[float] | torch.Tensor, group_size: int) -> list[bool]:
    """For each group of `group_size` adjacent rewards: are they all equal (no signal)?"""
    return (torch.as_tensor(rewards).view(-1, group_size).std(-1) == 0).tolist()


def advantages_of(
    rewards: torch.Tensor, group_size: int, estimator: Estimator = "grpo", scale: bool = True
) -> torch.Tensor:
    """Advantages [N * G] from rewards [N * G] (groups adjacent) by the named estimator.

    grpo          r_i - mean(group), / std(group) when `scale` (Shao et al. 2024)
    rloo          r_i - mean of the other G - 1 of its group = G / (G - 1) * (r_i - mean)
                  (Ahmadian et al. 2024); `scale` does not apply
    reinforce_pp  r_i - mean(group), then divided by the whole batch's std (its mean is 0)
                  (REINFORCE++-baseline, Hu et al. 2025): a prompt's spread does not set
                  its weight, the batch's does
    """
    if estimator == "grpo":
        return group_advantages(rewards, group_size, scale)
    centred = group_advantages(rewards, group_size, scale=False)
    if estimator == "rloo":
        return centred * group_size / (group_size - 1)
    if estimator == "reinforce_pp":
        return (
            (centred - centred.mean()) / (centred.std() + 1e-4) if centred.numel() > 1 else centred
        )
    raise ConfigError(f"unknown advantage estimator {estimator!r}; valid: grpo, rloo, reinforce_pp")


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), per completion [B].

    0 up to max_tokens - buffer tokens, then falling linearly to -1 at max_tokens:
    ((max_tokens - buffer) - length) / buffer. A completion cannot run past max_tokens here
    (it is cut), so the paper's -1 beyond the limit is reached at the limit.
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_tokens - buffer
    return ((start - lengths.float()) / buffer).clamp(min=-1.0, max=0.0)


def rows_with_gradient(advantages: torch.Tensor, group: int) -> torch.Tensor:
    """Which rows of a minibatch to run: those with a non-zero advantage, [B] bool.

    With group > 1 the rows come in whole groups that share one prompt pass, so a group is
    kept whole when any of its rows counts.
    """
    nonzero = advantages != 0
    if group == 1:
        return nonzero
    return nonzero.view(-1, group).any(-1).repeat_interleave(group)


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
    weights: torch.Tensor | None = None,  # [B, T] or [B, 1] importance weights, no grad
) -> LossParts:
    """Clipped-ratio policy loss with an optional k3 KL penalty, aggregated over tokens.

    rows / tokens: the completions and completion tokens the loss is averaged over (default:
    those given). Larger when rows known to contribute nothing were left out of the batch,
    so that the loss and its gradient stay those of the whole batch.
    weights: the rollout/trainer mismatch correction (payoff.algos.shared.mismatch), which
    multiplies the policy term of each token (not the KL term), as in TRL and verl.
    """
    mask = mask.to(logprobs.dtype)
    ratio = (logprobs - old_logprobs).exp()
    adv = advantages[:, None]  # one advantage per completion, shared by its tokens
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.min(unclipped, clipped)
    if weights is not None:
        per_token = per_token * weights
    policy_per_token = per_token
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
        policy = aggregate(policy_per_token, mask, aggregation, max_tokens, rows, tokens)
    return LossParts(loss, policy, mean_kl, clip_fraction)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    how: Aggregation,
    max_tokens: int | None = None,
    rows: int | None = None,
    tokens: int | None = None,
) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar over the masked tokens (see the module doc).

    rows / tokens: the completions / tokens of the batch the loss is normalized over when the
    rows given are only part of it (skipped rows, micro-batches): for grpo and dr_grpo the
    optimizer step's completions, for dapo its tokens, for bnpo the micro-batch's tokens.
    Summing the parts' losses then gives the whole batch's loss.
    """
    how = canonical_aggregation(how)  # type: ignore[assignment]
    rows = mask.shape[0] if rows is None else rows
    if how == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum() / max(rows, 1)
    if how in ("dapo", "bnpo"):
        total = mask.sum().clamp(min=1) if tokens is None else max(tokens, 1)
        return (per_token * mask).sum() / total
    return (per_token * mask).sum() / (rows * (max_tokens or mask.shape[1]))
