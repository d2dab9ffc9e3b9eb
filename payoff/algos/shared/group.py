"""Group-relative advantages (GRPO): each completion is scored against the others of its prompt."""

from __future__ import annotations

import torch


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
