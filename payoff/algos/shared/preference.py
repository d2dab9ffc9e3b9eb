"""Preference losses in the papers' terms: Bradley-Terry for reward models, DPO and IPO for policies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(r_chosen - r_rejected), averaged: the Bradley-Terry likelihood of the labels.

    P(chosen > rejected) = sigmoid(r_chosen - r_rejected) (Bradley & Terry 1952; InstructGPT
    eq. 1). Only differences matter, so a reward model's scale and offset are arbitrary.
    """
    return -F.logsigmoid(chosen - rejected).mean()


@dataclass
class DPOLossResult:
    """The DPO loss and what practitioners read: implicit rewards, their margin and accuracy."""

    loss: torch.Tensor  # scalar
    chosen_rewards: torch.Tensor  # [B] beta * (log pi(y_w) - log ref(y_w))
    rejected_rewards: torch.Tensor  # [B]

    @property
    def margin(self) -> torch.Tensor:
        return (self.chosen_rewards - self.rejected_rewards).mean()

    @property
    def accuracy(self) -> torch.Tensor:
        return (self.chosen_rewards > self.rejected_rewards).float().mean()


def dpo_loss(
    chosen_logps: torch.Tensor,  # [B] sum of completion-token logprobs under the policy
    rejected_logps: torch.Tensor,  # [B]
    ref_chosen_logps: torch.Tensor,  # [B] the same under the frozen reference
    ref_rejected_logps: torch.Tensor,  # [B]
    beta: float = 0.1,
    kind: Literal["sigmoid", "ipo"] = "sigmoid",
) -> DPOLossResult:
    """DPO (Rafailov et al. 2023, eq. 7) or IPO (Azar et al. 2023, eq. 17).

        h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))
        sigmoid: loss = -log sigmoid(beta * h)
        ipo:     loss = (h - 1 / (2 * beta))^2     -- a target margin instead of 'ever larger'

    IPO regresses h towards a finite value, so it cannot push the rejected likelihood to zero
    when the labels are deterministic -- the over-fitting DPO shows on small data sets.
    """
    chosen_ratio = chosen_logps - ref_chosen_logps
    rejected_ratio = rejected_logps - ref_rejected_logps
    h = chosen_ratio - rejected_ratio
    if kind == "sigmoid":
        loss = -F.logsigmoid(beta * h).mean()
    elif kind == "ipo":
        loss = ((h - 1.0 / (2.0 * beta)) ** 2).mean()
    else:
        raise ValueError(f"unknown DPO loss {kind!r}; valid: sigmoid, ipo")
    return DPOLossResult(loss, beta * chosen_ratio.detach(), beta * rejected_ratio.detach())
