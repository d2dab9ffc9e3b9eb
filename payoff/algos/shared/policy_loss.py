"""Policy-gradient losses in the papers' terms: PPO's clipped surrogate and value loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class SurrogateResult:
    """The clipped surrogate loss and the diagnostics PPO users read first."""

    loss: torch.Tensor  # scalar, to minimize
    approx_kl: torch.Tensor  # scalar, KL(old || new) estimate
    clip_fraction: torch.Tensor  # scalar, share of samples whose ratio was clipped


def clipped_surrogate(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
) -> SurrogateResult:
    """PPO-clip (Schulman et al. 2017, https://arxiv.org/abs/1707.06347), eq. 7, negated:

        ratio = pi_new(a|s) / pi_old(a|s)
        loss  = mean( max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)) )

    approx_kl is the low-variance estimator mean((ratio - 1) - log ratio) from
    http://joschu.net/blog/kl-approx.html.
    """
    log_ratio = new_logprobs - old_logprobs
    ratio = log_ratio.exp()
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip).float().mean()
    return SurrogateResult(pg_loss, approx_kl, clip_fraction)


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """0.5 * mean((V - R)^2); with `clip`, PPO2's pessimistic clipped version around old V."""
    unclipped = (values - returns) ** 2
    if clip is None or old_values is None:
        return 0.5 * unclipped.mean()
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.max(unclipped, (clipped - returns) ** 2).mean()


def ppo_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None,
    settings: Any,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's minibatch loss, clipped surrogate + vf_coef * value loss - ent_coef * mean
    entropy (settings: a config with vf_coef, ent_coef and clip_value), and its diagnostics
    [policy loss, value loss, entropy, approx_kl, clip fraction], detached."""
    surrogate = clipped_surrogate(new_logprobs, old_logprobs, advantages, clip)
    v_loss = value_loss(values, returns, old_values, settings.clip_value)
    entropy_loss = entropy.mean()
    loss = surrogate.loss + settings.vf_coef * v_loss
    if settings.ent_coef:  # with ent_coef 0 the entropy's backward is skipped
        loss = loss - settings.ent_coef * entropy_loss
    stats = torch.stack(
        [
            surrogate.loss.detach(),
            v_loss.detach(),
            entropy_loss.detach(),
            surrogate.approx_kl,
            surrogate.clip_fraction,
        ]
    )
    return loss, stats


def explained_variance(predicted: Any, target: Any) -> float:
    """1 - Var(target - predicted) / Var(target): 1 is a perfect critic, <= 0 a useless one.

    Tensors or NumPy arrays (torch's var divides by n - 1, NumPy's by n: the ratio is the
    same)."""
    var = target.var()
    return float("nan") if var == 0 else float(1 - (target - predicted).var() / var)
