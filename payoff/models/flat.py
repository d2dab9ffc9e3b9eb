"""Optimizer helpers for the small MLPs of classic RL, where per-call overhead is the cost."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from payoff.core.errors import CheckpointError


class FlatParameters:
    """Parameters moved into one contiguous tensor, and their gradients into another.

    Each parameter becomes a view of `self.leaf` and its `.grad` a view of `self.leaf.grad`,
    so the modules, autograd and state_dicts work as before, while whole-model operations
    are one op each: zeroing the gradients, their norm and clip, and the optimizer step
    (FlatAdam, or a torch optimizer given `[flat.leaf]`): for the small networks of classic
    control, the per-tensor overhead of those operations is most of their cost.

    Rules that keep the views alive: zero gradients with `zero_grad()` (never
    `set_to_none`), and change weights in place (`load_state_dict`, `copy_`), never by
    assigning `.data` or `.grad`.

    Device: the buffer is made on the device the parameters are on, so move the model
    first (`model.to(device)`) and flatten it after; `.to()` on a flattened model would
    give its parameters new tensors that are no longer views of the buffer.
    """

    def __init__(self, params: list[nn.Parameter]):
        if not params:
            raise ValueError("FlatParameters needs at least one parameter")
        devices = {p.device for p in params}
        if len(devices) > 1:
            raise ValueError(
                f"FlatParameters puts all parameters in one buffer on one device, but they are "
                f"on {sorted(map(str, devices))}; move the model with .to(device) first"
            )
        self.params = params
        self.leaf = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]))
        self.leaf.grad = torch.zeros_like(self.leaf)
        self.grads: list[torch.Tensor] = []  # the gradient views, one per parameter
        offset = 0
        for p in params:
            size = p.numel()
            p.data = self.leaf.data[offset : offset + size].view_as(p)
            p.grad = self.leaf.grad[offset : offset + size].view_as(p)
            self.grads.append(p.grad)
            offset += size

    def zero_grad(self) -> None:
        """Zero all gradients; fails loudly if a parameter's .grad is no longer its view
        (the optimizer would otherwise step on gradients that stay zero)."""
        for param, view in zip(self.params, self.grads, strict=True):
            if param.grad is not view:
                raise RuntimeError(
                    f"a parameter of shape {tuple(param.shape)} has a new .grad tensor, not its "
                    f"view into FlatParameters' buffer (did something call "
                    f"zero_grad(set_to_none=True) on the module?); zero it through "
                    f"FlatParameters.zero_grad() instead"
                )
        assert self.leaf.grad is not None
        self.leaf.grad.zero_()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """As torch.nn.utils.clip_grad_norm_ over all the parameters; returns the norm
        before clipping."""
        grad = self.leaf.grad
        assert grad is not None
        norm = torch.linalg.vector_norm(grad)
        grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        return norm


class FlatAdam:
    """Adam (Kingma & Ba 2015) on the one tensor of a FlatParameters.

    The same arithmetic as torch.optim.Adam's single-tensor path (bitwise equal, tested),
    without its per-call machinery, which on a small network's one tensor costs more than
    the arithmetic. No weight decay or amsgrad. `lr` may be changed between steps (schedules). The moments live on
    the buffer's device; `load_state_dict` copies saved (CPU) moments onto it.
    """

    def __init__(
        self,
        flat: FlatParameters,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.flat = flat
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.steps = 0
        self.exp_avg = torch.zeros_like(flat.leaf.data)
        self.exp_avg_sq = torch.zeros_like(flat.leaf.data)

    @torch.no_grad()
    def step(self) -> None:
        param, grad = self.flat.leaf.data, self.flat.leaf.grad
        assert grad is not None
        beta1, beta2 = self.betas
        self.steps += 1
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1**self.steps
        bias_correction2_sqrt = (1 - beta2**self.steps) ** 0.5
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        param.addcdiv_(self.exp_avg, denom, value=-self.lr / bias_correction1)

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": "payoff-flat-adam/1",
            "steps": self.steps,
            "lr": self.lr,
            "exp_avg": self.exp_avg,
            "exp_avg_sq": self.exp_avg_sq,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != "payoff-flat-adam/1":
            raise CheckpointError(
                "the checkpoint's optimizer state is not payoff's flat Adam (format "
                "payoff-flat-adam/1); it was written by an older payoff version: start a new run"
            )
        if state["exp_avg"].shape != self.exp_avg.shape:
            raise CheckpointError(
                f"the checkpoint's optimizer state covers {state['exp_avg'].numel()} weights, "
                f"this model has {self.exp_avg.numel()}: the network sizes differ"
            )
        self.steps = int(state["steps"])
        self.lr = float(state["lr"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
