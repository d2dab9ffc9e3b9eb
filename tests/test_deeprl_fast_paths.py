"""The fast paths of classic RL compute what the reference paths compute.

Backpropagation by hand (MLP.backward_into) against autograd, FlatParameters' clip against
torch's, FlatAdam against torch.optim.Adam, and DQN trained both ways.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from payoff.algos.dqn import DQN
from payoff.core.errors import CheckpointError
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import mlp


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_backward_into_equals_autograd_bitwise(activation):
    torch.manual_seed(0)
    net = mlp(6, [32, 16], 3, activation, 1.0)
    assert net.backprop_by_hand
    x = torch.randn(40, 6)
    grad_out = torch.randn(40, 3)
    out, inputs = net.forward_saving(x)
    mine = [torch.empty_like(p) for p in net.parameters()]
    net.backward_into(inputs, grad_out, mine)
    reference = net(x)
    assert torch.equal(out, reference.detach())
    (reference * grad_out).sum().backward()
    for got, param in zip(mine, net.parameters(), strict=True):
        assert torch.equal(got, param.grad)


def test_backprop_by_hand_only_for_what_backward_into_knows():
    assert not mlp(4, [8], 2, "gelu", 1.0).backprop_by_hand
    no_bias = mlp(4, [8], 2, "relu", 1.0)
    no_bias[0] = nn.Linear(4, 8, bias=False)
    assert not no_bias.backprop_by_hand


def _two_layer_params(seed: int) -> list[nn.Parameter]:
    torch.manual_seed(seed)
    return [nn.Parameter(torch.randn(*shape)) for shape in [(8, 3), (8,), (2, 8), (2,)]]


def _loss(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    hidden = torch.tanh(x @ params[0].t() + params[1])
    return ((hidden @ params[2].t() + params[3]) ** 2).sum()


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_flat_parameters_are_views_and_clip_like_torch(max_norm):
    flat_params, reference = _two_layer_params(0), _two_layer_params(0)
    flat = FlatParameters(flat_params)
    x = torch.randn(5, 3)
    for params in (flat_params, reference):
        _loss(params, x).backward()
    # The gradients landed in the flat buffer, through the views.
    assert torch.equal(flat.leaf.grad, torch.cat([p.grad.reshape(-1) for p in reference]))
    norm = flat.clip_grad_norm(max_norm)
    expected = torch.nn.utils.clip_grad_norm_(reference, max_norm)
    assert float(norm) == pytest.approx(float(expected), rel=1e-6)
    for mine, theirs in zip(flat.grads, reference, strict=True):
        torch.testing.assert_close(mine, theirs.grad)
    # In-place weight changes reach the flat tensor; zero_grad keeps the views.
    with torch.no_grad():
        flat_params[2].fill_(7.0)
    assert (flat.leaf.data[32:48] == 7.0).all()
    flat.zero_grad()
    _loss(flat_params, x).backward()
    assert flat.leaf.grad.abs().sum() > 0
    # A module-level zero_grad (set_to_none) detaches the views: said at the next zero_grad.
    flat_params[1].grad = None
    with pytest.raises(RuntimeError, match=r"shape \(8,\) has a new .grad tensor"):
        flat.zero_grad()


def test_flat_adam_equals_torch_adam_bitwise_and_round_trips():
    mine_params, torch_params = _two_layer_params(1), _two_layer_params(1)
    flat = FlatParameters(mine_params)
    mine = FlatAdam(flat, lr=3e-3, eps=1e-5)
    reference_flat = FlatParameters(torch_params)
    reference = torch.optim.Adam([reference_flat.leaf], lr=3e-3, eps=1e-5, foreach=False)
    x = torch.randn(5, 3)
    for step in range(6):
        if step == 3:  # a learning-rate schedule changes lr between steps
            mine.lr = reference.param_groups[0]["lr"] = 1e-3
        for params, group in ((mine_params, flat), (torch_params, reference_flat)):
            group.zero_grad()
            _loss(params, x).backward()
        mine.step()
        reference.step()
        assert torch.equal(flat.leaf.data, reference_flat.leaf.data)

    restored = FlatAdam(FlatParameters(_two_layer_params(2)), lr=1.0)
    restored.load_state_dict(mine.state_dict())
    assert restored.steps == 6 and restored.lr == 1e-3
    assert torch.equal(restored.exp_avg_sq, mine.exp_avg_sq)
    with pytest.raises(CheckpointError, match="payoff-flat-adam/1"):
        restored.load_state_dict(reference.state_dict())
    bigger = FlatAdam(FlatParameters([nn.Parameter(torch.zeros(100))]), lr=1.0)
    with pytest.raises(CheckpointError, match="covers 50 weights, this model has 100"):
        bigger.load_state_dict(mine.state_dict())


@pytest.mark.parametrize("overrides", [{}, {"loss": "mse", "double_q": True, "activation": "tanh"}])
def test_dqn_by_hand_trains_exactly_like_autograd(overrides):
    config = {
        "env": "CartPole-v1",
        "seed": 5,
        "total_steps": 1600,
        "num_envs": 4,
        "learning_starts": 400,
        "train_every": 128,
        "gradient_steps": 8,
        "batch_size": 32,
        "hidden": [32, 32],
        "eval_every": 0,
        "final_eval_episodes": 1,
        "log_every": 400,
        **overrides,
    }
    fast = DQN(**config)
    reference = DQN(**config)
    assert fast.by_hand
    reference.by_hand = False
    fast.learn()
    reference.learn()
    assert fast.gradient_updates == reference.gradient_updates > 0
    for mine, theirs in zip(fast.q_net.parameters(), reference.q_net.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    losses = [r["train/loss"] for r in fast.history if "train/loss" in r]
    assert losses == [r["train/loss"] for r in reference.history if "train/loss" in r]
    assert losses
