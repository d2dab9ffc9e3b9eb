"""The optimizer, learning-rate schedule and optimizer step of every language-model trainer.

optimizer = adamw(model.parameters(), learning_rate, weight_decay)
scheduler = warmup_scheduler(optimizer, warmup_steps)          # linear warmup, then flat
lr        = scheduled_lr(step, learning_rate, warmup, total)   # ... or cosine decay to 10%
grad_norm = train_step(loss, optimizer, params, max_grad_norm, scheduler)   # one loss
# ... or, over micro-batches: optimizer.zero_grad(set_to_none=True); each loss.backward();
grad_norm = apply_gradients(optimizer, params, max_grad_norm, scheduler)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


def adamw(
    parameters: Iterable[torch.nn.Parameter],
    learning_rate: float,
    weight_decay: float = 0.01,
    fused: bool = False,
) -> torch.optim.AdamW:
    """AdamW over the parameters that train (with LoRA: the adapters only).

    weight_decay: 0.01 is torch's default, which trainers without a weight_decay key use.
    fused: one kernel for the whole step (faster on CPU for a small model); its
        rounding differs from the default implementation's, so a trainer keeps one or the other.
    """
    trainable = [p for p in parameters if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=weight_decay, fused=fused)


def scheduled_lr(
    step: int,
    learning_rate: float,
    warmup_steps: int,
    total_steps: int | None = None,
    final_fraction: float = 0.1,
) -> float:
    """The learning rate at optimizer step `step` (from 0).

    Linear warmup over `warmup_steps` (Adam's first steps move every weight by about lr
    whatever the gradient, which can wreck a small model), then constant; with `total_steps`,
    a cosine from the full rate down to `final_fraction` of it at `total_steps`.
    """
    lr = learning_rate * min(1.0, (step + 1) / max(1, warmup_steps))
    if total_steps is None:
        return lr
    top, bottom = (1 + final_fraction) / 2, (1 - final_fraction) / 2
    return lr * (top + bottom * np.cos(np.pi * step / total_steps))


def warmup_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """`scheduled_lr` as a torch scheduler (its state is saved with the trainer's checkpoint)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: scheduled_lr(step, 1.0, warmup_steps)
    )


def apply_gradients(
    optimizer: torch.optim.Optimizer,
    parameters: Iterable[torch.Tensor],
    max_grad_norm: float,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> float:
    """The gradients in place become a step: their joint norm clipped to `max_grad_norm`,
    the optimizer's step, then the schedule's. Returns the norm before clipping (what
    trainers log as train/grad_norm)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return float(grad_norm)


def train_step(
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    parameters: Iterable[torch.Tensor],
    max_grad_norm: float,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> float:
    """One optimizer step on one loss: the gradients cleared, `loss` backpropagated, then
    `apply_gradients`. Returns the gradient norm before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return apply_gradients(optimizer, parameters, max_grad_norm, scheduler)


def zero_gradients(parameters: Iterable[torch.Tensor]) -> None:
    """A zero gradient for each parameter: a step whose rows were all skipped still steps
    (Adam's moments decay and weight decay act on a zero gradient too)."""
    for param in parameters:
        param.grad = torch.zeros_like(param)
