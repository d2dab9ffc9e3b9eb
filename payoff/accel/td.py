"""DQN's TD-loss gradient by hand, in torch: the Q-network's accelerator.

For a network this small, autograd's bookkeeping (graph nodes, saved tensors, strided
gradient accumulation) costs more than the arithmetic. `TDByHand.backward` runs the ops
autograd runs for `loss(Q(s, a) - y).backward()`, in its order, so the gradient is bitwise
autograd's (tests/test_deeprl_fast_paths.py, on the CPU). The reference is DQN's autograd
path (payoff/algos/dqn.py); docs/benchmarks.md has what this saves.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from payoff.accel.actor_critic import plain_mlp


def td_why_not(q_net: Any, on_cpu: bool) -> str | None:
    """Why the TD gradient by hand cannot run for `q_net` (None: it can)."""
    if not on_cpu:
        return "the Q-network is not on the CPU"
    if not plain_mlp(q_net.q):
        return "the Q-network has layers other than Linear, ReLU and Tanh"
    return None


@torch.no_grad()
def forward_saving(network: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The forward pass, plus each Linear layer's input (what `backward_into` needs)."""
    inputs = []
    for layer in network:
        if isinstance(layer, nn.Linear):
            inputs.append(x)
        x = layer.forward(x)
    return x, inputs


@torch.no_grad()
def backward_into(
    network: nn.Module,
    inputs: list[torch.Tensor],
    grad_out: torch.Tensor,
    grads: list[torch.Tensor],
) -> None:
    """Write the gradient of a loss into `grads` (one tensor per parameter, in
    `parameters()` order), given the loss's gradient `grad_out` with respect to the output
    of `forward_saving(network, x)` and that call's `inputs`. Needs `plain_mlp(network)`.

    Per Linear layer y = x W^T + b, from the last: dW = g^T x, db = sum_batch g, and the
    gradient passed down is g W, times the activation's derivative, read from the
    activation's output (the next layer's input): ReLU 1[out > 0], Tanh 1 - out^2.
    """
    layers = list(network)
    g = grad_out
    linear_index = len(inputs)
    for position in range(len(layers) - 1, -1, -1):
        layer = layers[position]
        if isinstance(layer, nn.Linear):
            linear_index -= 1
            torch.mm(g.t(), inputs[linear_index], out=grads[2 * linear_index])
            torch.sum(g, 0, out=grads[2 * linear_index + 1])
            if linear_index > 0:
                g = g.mm(layer.weight)
        elif isinstance(layer, nn.ReLU):
            g = torch.ops.aten.threshold_backward(g, inputs[linear_index], 0)
        elif isinstance(layer, nn.Tanh):
            g = torch.ops.aten.tanh_backward(g, inputs[linear_index])
        else:
            raise TypeError(f"backward_into cannot differentiate {layer}")


class TDByHand:
    """The TD loss's backward for one QNetwork (payoff.models.mlp.QNetwork)."""

    def __init__(self, q_net: Any):
        self.q_net = q_net

    @torch.no_grad()
    def backward(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        targets: torch.Tensor,
        loss: str,
        grads: list[torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`loss(Q(s, a) - y).backward()` for a TD loss averaged over the batch.

        Writes the gradient into `grads` (one tensor per parameter: the .grad views into
        FlatParameters' buffer) and returns Q(s, a) [B] and the TD errors [B]. loss: 'huber'
        (smooth L1, beta 1) or 'mse'.
        """
        q_net = self.q_net
        all_q, inputs = forward_saving(q_net.q, q_net.encoder.forward(obs))  # [B, A]
        index = actions[:, None]
        q_values = all_q.gather(1, index)[:, 0]
        error = q_values - targets
        n = len(error)
        if loss == "huber":  # d/dx of Huber(x) is x clipped to [-1, 1]
            grad_q = error.clamp(-1.0, 1.0).mul_(1.0 / n)
        else:  # d/dx of x^2 is 2x
            grad_q = error.mul(2.0 / n)
        # Only the taken action's output gets a gradient (the backward of gather).
        grad_out = torch.zeros_like(all_q).scatter_(1, index, grad_q[:, None])
        backward_into(q_net.q, inputs, grad_out, grads)  # overwrites the gradient
        return q_values, error
