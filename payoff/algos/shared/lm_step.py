"""One optimizer step over gradients accumulated from several backward passes.

    with accumulated_step(optimizer, params, max_grad_norm, scheduler) as step:
        for chunk in micro_batches:
            step.backward(loss_of(chunk))      # gradients add up
    grad_norm = step.grad_norm                 # what train/grad_norm logs

On leaving the block the gradients are clipped and the optimizer and schedule step
(`payoff.models.lm_optim.apply_gradients`, which a trainer with one loss per step reaches
through `train_step`). A block that backpropagated nothing (every row skipped) steps on a
zero gradient: Adam's moments decay and weight decay acts on it too, so skipping rows
changes the work, not the update. A block that raises takes no step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from payoff.models.lm_optim import apply_gradients, zero_gradients


@dataclass
class AccumulatedStep:
    """The backward passes of one optimizer step; `grad_norm` (before clipping) once taken."""

    backward_passes: int = 0
    grad_norm: float = float("nan")

    def backward(self, loss: torch.Tensor) -> None:
        """Add `loss`'s gradient to the step's."""
        loss.backward()
        self.backward_passes += 1


@contextmanager
def accumulated_step(
    optimizer: torch.optim.Optimizer,
    parameters: Sequence[torch.Tensor],
    max_grad_norm: float,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> Iterator[AccumulatedStep]:
    """Clear the gradients, let the block backpropagate into them, then take the step."""
    optimizer.zero_grad(set_to_none=True)
    step = AccumulatedStep()
    yield step
    if not step.backward_passes:  # every row skipped: the gradient is exactly 0
        zero_gradients(parameters)
    step.grad_norm = apply_gradients(optimizer, parameters, max_grad_norm, scheduler)
