"""The fast paths of classic RL compute what the reference paths compute.

DQN's TD gradient by hand (payoff.accel.td) against autograd, FlatParameters' clip against
torch's, FlatAdam against torch.optim.Adam, the rollout sampler against `Actor.sample`, and
DQN and PPO trained both ways. PPO's native kernels: tests/test_accel.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from payoff.accel.td import backward_into, forward_saving
from payoff.algos.dqn import DQN
from payoff.algos.ppo import PPO
from payoff.algos.shared.advantages import gae
from payoff.core.errors import CheckpointError
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import CategoricalActor, mlp
from payoff.rollout.buffers import RolloutStorage


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_backward_into_equals_autograd_bitwise(activation):
    torch.manual_seed(0)
    net = mlp(6, [32, 16], 3, activation, 1.0)
    assert net.plain
    x = torch.randn(40, 6)
    grad_out = torch.randn(40, 3)
    out, inputs = forward_saving(net, x)
    mine = [torch.empty_like(p) for p in net.parameters()]
    backward_into(net, inputs, grad_out, mine)
    reference = net(x)
    assert torch.equal(out, reference.detach())
    (reference * grad_out).sum().backward()
    for got, param in zip(mine, net.parameters(), strict=True):
        assert torch.equal(got, param.grad)


def test_backprop_by_hand_only_for_what_backward_into_knows():
    assert not mlp(4, [8], 2, "gelu", 1.0).plain
    no_bias = mlp(4, [8], 2, "relu", 1.0)
    no_bias[0] = nn.Linear(4, 8, bias=False)
    assert not no_bias.plain
    assert DQN(env="CartPole-v1", activation="gelu").by_hand is None


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
    reference = DQN(**config, accelerate=False)
    assert fast.by_hand is not None and reference.by_hand is None
    fast.learn()
    reference.learn()
    assert fast.gradient_updates == reference.gradient_updates > 0
    for mine, theirs in zip(fast.q_net.parameters(), reference.q_net.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    losses = [r["train/loss"] for r in fast.history if "train/loss" in r]
    assert losses == [r["train/loss"] for r in reference.history if "train/loss" in r]
    assert losses


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"activation": "relu", "epochs": 2, "vf_coef": 0.3, "normalize_obs": True},
        {"env": "LunarLander-v3", "ent_coef": 0.01, "num_envs": 3, "total_steps": 1500},
    ],
)
def test_ppo_rollout_sampler_trains_exactly_like_sample(overrides):
    """The reference path's rollout sampler against `Actor.sample` step by step, over a
    run: the same weights and logged losses (to float32 rounding: the sampler's addmm and
    nn.Linear may round differently in some BLAS kernels)."""
    config = {
        "env": "CartPole-v1",
        "seed": 3,
        "total_steps": 3000,
        "num_envs": 7,
        "num_steps": 64,
        "minibatch_size": 100,
        "epochs": 1,
        "learning_rate": 1e-2,
        "eval_every": 0,
        "final_eval_episodes": 1,
        "log_every": 448,
        **overrides,
    }
    # One after the other: sampling draws from torch's global generator, seeded in setup.
    fast = PPO(**config, accelerate=False)
    assert fast.actor.logits.plain  # it has the rollout sampler (which draws its noise)
    fast.learn()
    reference = PPO(**config, accelerate=False)
    reference.actor.rollout_sampler = lambda num_steps, num_envs: None  # type: ignore[method-assign]
    reference.learn()
    for mine, theirs in zip(fast.flat.params, reference.flat.params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=3e-4)
    keys = ("train/policy_loss", "train/value_loss", "train/approx_kl", "train/entropy")
    logged = [[r[k] for k in keys] for r in fast.history if "train/policy_loss" in r]
    expected = [[r[k] for k in keys] for r in reference.history if "train/policy_loss" in r]
    assert len(logged) == len(expected) > 2
    np.testing.assert_allclose(logged, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_rollout_sampler_samples_exactly_like_sample(activation):
    """The same actions, log-probs and generator state after a rollout, step by step."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,))
    actor = CategoricalActor(
        observation_space, gym.spaces.Discrete(4), hidden=[16, 8], activation=activation
    )
    actor.normalizer.enabled = True
    actor.normalizer.update(torch.randn(50, 3) * 2 + 1)
    observations = torch.randn(6, 5, 3)
    torch.manual_seed(11)
    sampler = actor.rollout_sampler(6, 5)
    assert sampler is not None
    fast_actions = torch.stack([sampler(obs).clone() for obs in observations[:4]])
    assert sampler.logprobs().shape == (4, 5)  # the steps taken so far
    fast_actions = torch.cat(
        [fast_actions, torch.stack([sampler(obs) for obs in observations[4:]])]
    )
    fast_logprobs = sampler.logprobs()
    fast_after = torch.rand(3)
    torch.manual_seed(11)
    with torch.no_grad():
        reference = [actor.sample(obs) for obs in observations]
    assert torch.equal(torch.rand(3), fast_after)
    assert torch.equal(fast_actions, torch.stack([actions for actions, _ in reference]))
    assert torch.equal(fast_logprobs, torch.stack([logprobs for _, logprobs in reference]))
    assert len({tuple(a.tolist()) for a in fast_actions}) > 1  # it did sample
    assert (
        CategoricalActor(
            observation_space, gym.spaces.Discrete(2), activation="gelu"
        ).rollout_sampler(2, 2)
        is None
    )


@pytest.mark.parametrize("steps", [1, 32, 129])
def test_gae_numpy_recursion_equals_torch_bitwise(steps):
    """gae's CPU recursion (NumPy views) against the same recursion in torch ops."""
    generator = torch.Generator().manual_seed(steps)
    rewards = 3 * torch.rand(steps, 7, generator=generator)
    values = 10 * torch.randn(steps, 7, generator=generator)
    next_values = torch.randn(7, generator=generator)
    dones = torch.rand(steps, 7, generator=generator) < 0.1
    advantages, returns = gae(rewards, values, next_values, dones, 0.99, 0.95)

    not_done = 1.0 - dones.float()
    following = torch.cat([values[1:], next_values[None]])
    deltas = rewards + 0.99 * following * not_done - values
    discounts = 0.99 * 0.95 * not_done
    expected = torch.empty_like(rewards)
    last = torch.zeros_like(next_values)
    for t in reversed(range(steps)):
        last = torch.add(deltas[t], discounts[t] * last, out=expected[t])
    assert torch.equal(advantages, expected)
    assert torch.equal(returns, expected + values)


def test_gae_and_truncation_bootstrap_keep_a_torch_path_off_the_cpu():
    """On the CPU they run on NumPy views; elsewhere the same ops in torch. The meta device
    runs those torch ops without data (what a GPU run would call), so the branch is tried."""
    steps, envs = 5, 3
    meta = {"device": "meta"}
    advantages, returns = gae(
        torch.rand(steps, envs, **meta),
        torch.rand(steps, envs, **meta),
        torch.rand(envs, **meta),
        torch.zeros(steps, envs, dtype=torch.bool, **meta),
        0.99,
        0.95,
    )
    assert advantages.device.type == returns.device.type == "meta"
    assert advantages.shape == returns.shape == (steps, envs)
    storage = RolloutStorage.for_spaces(
        steps, envs, gym.spaces.Box(-1.0, 1.0, (2,)), gym.spaces.Discrete(2)
    ).to(torch.device("meta"))
    storage.bootstrap_truncated(0.99)
    assert storage.rewards.device.type == "meta"
