"""Per-token KL estimators between a policy and a reference, from sampled tokens only.

With r = pi_ref(x) / pi(x) for a token x sampled from pi (http://joschu.net/blog/kl-approx.html):

    k1 = -log r              unbiased for KL(pi || ref), high variance, can be negative
    k3 = (r - 1) - log r     unbiased, always >= 0, low variance (what GRPO uses)
"""

from __future__ import annotations

import torch


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 estimate of KL(pi || ref) per token: logpi - logref."""
    return logprobs - ref_logprobs


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi || ref) per token: exp(logref - logpi) - (logref - logpi) - 1."""
    log_ratio = ref_logprobs - logprobs
    return log_ratio.exp() - log_ratio - 1
