"""The rollout/trainer mismatch: the sampler's and the trainer's log-probs of the same tokens.

The tokens a learner trains on were sampled by another copy of the policy: a stale one
(asynchronous generation), another engine (vLLM, other kernels), another precision (bf16).
The trainer's probabilities of those tokens then differ from the sampler's, and the
policy-gradient estimate is biased. With log-probs s (sampler) and t (trainer, the weights
the update starts from) of each sampled token, and the ratio w_t = exp(t - s):

    mismatch_kl            mean over tokens of k3 = (w - 1) - log w, an estimate of
                           KL(sampler || trainer) from the sampler's own tokens
    mismatch_max_logp_diff max over tokens of |t - s|

and the correction multiplies each token's policy-loss term by a weight:

    none            1
    token_tis       min(w_t, cap)                   truncated importance sampling per token
    sequence_tis    min(prod_t w_t, cap)            per completion (one weight for its tokens)
    sequence_mask   prod_t w_t when it lies in [1/cap, cap], else 0: the completion leaves
                    the loss (masked importance sampling)

(TRL's `vllm_importance_sampling_mode` and verl's `rollout_is` offer the same family.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from payoff.algos.shared.kl import kl_k3
from payoff.core.errors import ConfigError

Correction = Literal["none", "token_tis", "sequence_tis", "sequence_mask"]
CORRECTIONS = ("none", "token_tis", "sequence_tis", "sequence_mask")


@dataclass
class Mismatch:
    """One batch's mismatch: its statistics and the correction weights ([B, T], no grad)."""

    weights: torch.Tensor | None  # None when the correction is 'none'
    kl: float
    max_logp_diff: float
    masked: float  # share of completions a 'sequence_mask' weight removed
    mean_weight: float  # mean weight over the completion tokens (1 when 'none')


def mismatch(
    trainer_logprobs: torch.Tensor,  # [B, T] of the sampled tokens, weights the update starts from
    sampler_logprobs: torch.Tensor,  # [B, T] the same tokens under the sampler
    mask: torch.Tensor,  # [B, T] 1 = completion token
    correction: Correction = "none",
    cap: float = 2.0,
) -> Mismatch:
    """Statistics and correction weights of the sampler/trainer mismatch (see the module doc)."""
    if correction not in CORRECTIONS:
        raise ConfigError(
            f"unknown mismatch correction {correction!r}; valid: {', '.join(CORRECTIONS)}"
        )
    with torch.no_grad():
        m = mask.to(trainer_logprobs.dtype)
        log_w = (trainer_logprobs - sampler_logprobs) * m  # 0 on padding
        tokens = m.sum().clamp(min=1)
        kl = float((kl_k3(sampler_logprobs, trainer_logprobs) * m).sum() / tokens)
        max_diff = float(log_w.abs().max()) if log_w.numel() else 0.0
        masked = 0.0
        weights: torch.Tensor | None = None
        if correction == "token_tis":
            weights = log_w.exp().clamp(max=cap)
        elif correction in ("sequence_tis", "sequence_mask"):
            sequence = log_w.sum(1, keepdim=True).exp()  # [B, 1]
            if correction == "sequence_tis":
                sequence = sequence.clamp(max=cap)
            else:
                outside = (sequence > cap) | (sequence < 1.0 / cap)
                masked = float(outside.float().mean())
                sequence = sequence.masked_fill(outside, 0.0)
            weights = sequence.expand_as(log_w)
        mean_weight = 1.0 if weights is None else float((weights * m).sum() / tokens)
    return Mismatch(weights, kl, max_diff, masked, mean_weight)
