"""PPO's accelerator (payoff.accel: the native kernels) computes what the torch reference
computes, to float32 rounding: gradients against autograd, the step against FlatAdam,
sampling against the rollout sampler, and a whole update against the reference update; and
`accelerate` picks it only where it applies."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from payoff.accel import NativeActorCritic, NativeRolloutSampler
from payoff.accel.native import kernels
from payoff.algos.ppo import PPO
from payoff.algos.shared.advantages import normalize
from payoff.algos.shared.policy_loss import clipped_surrogate, value_loss
from payoff.core.errors import ConfigError
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import CategoricalActor, Critic

built = pytest.mark.skipif(kernels() is None, reason="payoff's native kernels were not built")


def _networks(hidden, activation, obs_dim=5, actions=3, seed=0):
    torch.manual_seed(seed)
    space = gym.spaces.Box(-1.0, 1.0, (obs_dim,))
    actor = CategoricalActor(
        space, gym.spaces.Discrete(actions), hidden=hidden, activation=activation
    )
    critic = Critic(space, hidden, activation, normalizer=actor.normalizer)
    with torch.no_grad():  # away from the near-uniform initial policy: some ratios clip
        for param in [*actor.parameters(), *critic.parameters()]:
            param.add_(0.3 * torch.randn_like(param))
    flat = FlatParameters([*actor.parameters(), *critic.parameters()])
    return actor, critic, flat, FlatAdam(flat, lr=3e-3, eps=1e-5)


@built
@pytest.mark.parametrize(
    ("hidden", "activation", "batch", "vf_coef", "ent_coef", "max_grad_norm"),
    [
        ([64, 64], "tanh", 64, 0.5, 0.0, 0.0),
        ([64, 64], "tanh", 37, 0.5, 0.01, 0.5),
        ([32], "relu", 50, 0.3, 0.2, 0.0),
        ([16, 24, 8], "relu", 64, 0.5, 0.01, 0.5),
        ([16, 24, 8], "tanh", 1, 0.5, 0.01, 0.0),
        ([100, 64], "tanh", 77, 0.5, 0.01, 0.5),  # a 64-column panel and a masked edge
    ],
)
def test_ppo_step_equals_autograd_and_flat_adam(
    hidden, activation, batch, vf_coef, ent_coef, max_grad_norm
):
    actor, critic, flat, optimizer = _networks(hidden, activation)
    native = NativeActorCritic(actor, critic, flat, optimizer)
    native.pull()
    obs, actions = torch.randn(batch, 5), torch.randint(0, 3, (batch,))
    with torch.no_grad():
        old_logprobs = actor.log_prob_entropy(obs, actions)[0] + 0.3 * torch.randn(batch)
    advantages = normalize(torch.randn(batch)) if batch > 1 else torch.randn(1)
    returns = 5 * torch.randn(batch)

    # The torch path: autograd, the joint clip, FlatAdam.
    new_logprobs, entropy = actor.log_prob_entropy(obs, actions)
    surrogate = clipped_surrogate(new_logprobs, old_logprobs, advantages, 0.2)
    v_loss = value_loss(critic(obs), returns)
    loss = surrogate.loss + vf_coef * v_loss - ent_coef * entropy.mean()
    flat.zero_grad()
    loss.backward()
    expected_grads = flat.leaf.grad.clone()
    if max_grad_norm > 0:
        flat.clip_grad_norm(max_grad_norm)
    optimizer.step()

    stats = native.step(
        native.encode(obs),
        actions.numpy(),
        old_logprobs.numpy(),
        advantages.numpy(),
        returns.numpy(),
        0.2,
        ent_coef,
        vf_coef,
        max_grad_norm,
        3e-3,
    )
    if batch > 1:
        assert 0 < float(surrogate.clip_fraction) < 1  # both branches of the clip are tested
    expected_stats = [
        surrogate.loss,
        v_loss,
        entropy.mean(),
        surrogate.approx_kl,
        surrogate.clip_fraction,
    ]
    np.testing.assert_allclose(stats, [s.item() for s in expected_stats], rtol=1e-5, atol=1e-6)
    grads = native.grads[native.index]
    if max_grad_norm > 0:  # the step clipped its gradient in place: undo the scale
        norm = float(expected_grads.norm())
        grads = grads / min(max_grad_norm / (norm + 1e-6), 1.0)
    np.testing.assert_allclose(grads, expected_grads.numpy(), rtol=1e-4, atol=1e-6)
    native.push()  # the modules now hold the native step's weights
    np.testing.assert_allclose(native.params[native.index], flat.leaf.data.numpy(), rtol=0, atol=0)
    padding = np.ones(len(native.params), bool)
    padding[native.index] = False  # the critic's head padded to the actor's width
    assert padding.any() and not native.params[padding].any() and not native.grads[padding].any()


@built
def test_pull_and_push_round_trip():
    actor, critic, flat, optimizer = _networks([8, 8], "tanh")
    optimizer.exp_avg.uniform_()
    optimizer.exp_avg_sq.uniform_()
    before = [t.clone() for t in (flat.leaf.data, optimizer.exp_avg, optimizer.exp_avg_sq)]
    native = NativeActorCritic(actor, critic, flat, optimizer)
    native.pull()
    flat.leaf.data.zero_()
    optimizer.exp_avg.zero_()
    optimizer.exp_avg_sq.zero_()
    native.push()
    for tensor, saved in zip(
        (flat.leaf.data, optimizer.exp_avg, optimizer.exp_avg_sq), before, strict=True
    ):
        assert torch.equal(tensor, saved)
    assert len(native.index) == len(set(native.index.tolist())) == flat.leaf.numel()


@built
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_native_sampler_samples_like_the_rollout_sampler(activation):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,))
    actor = CategoricalActor(
        observation_space, gym.spaces.Discrete(4), hidden=[16, 8], activation=activation
    )
    with torch.no_grad():
        for param in actor.parameters():
            param.add_(0.5 * torch.randn_like(param))
    actor.normalizer.enabled = True
    actor.normalizer.update(torch.randn(50, 3) * 2 + 1)
    observations = torch.randn(6, 5, 3)
    torch.manual_seed(11)
    reference = actor.rollout_sampler(6, 5)
    expected = torch.stack([reference(obs).clone() for obs in observations])
    expected_after = torch.rand(3)
    torch.manual_seed(11)
    sampler = NativeRolloutSampler(actor, 6, 5)
    actions = torch.stack(
        [torch.from_numpy(sampler.act(obs.numpy()).copy()) for obs in observations]
    )
    assert torch.equal(torch.rand(3), expected_after)  # the same draws from the generator
    assert torch.equal(actions, expected)
    assert len({tuple(a.tolist()) for a in actions}) > 1  # it did sample
    torch.testing.assert_close(sampler.logprobs(), reference.logprobs(), rtol=1e-5, atol=1e-6)
    assert sampler.value_fn is None  # made without a critic


@built
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_native_sampler_values_are_the_critics(activation):
    """Given the critic, the sampler's values (the runner's pass over a rollout) are the torch
    critic's, normalizer included; a critic it cannot run leaves value_fn None."""
    actor, critic, _, _ = _networks([16, 8], activation, obs_dim=3)
    actor.normalizer.enabled = True
    actor.normalizer.update(torch.randn(50, 3) * 2 + 1)
    obs = torch.randn(40, 3) * 3
    sampler = NativeRolloutSampler(actor, 2, 4, critic)
    torch.testing.assert_close(sampler.value_fn(obs), critic(obs).detach(), rtol=1e-5, atol=1e-6)
    other = Critic(gym.spaces.Box(-1.0, 1.0, (3,)), [16, 8], activation)  # its own normalizer
    assert NativeRolloutSampler(actor, 2, 4, other).value_fn is None


def _config(**overrides):
    return {
        "env": "LunarLander-v3",
        "seed": 3,
        "num_envs": 3,
        "num_steps": 200,
        "minibatch_size": 64,
        "epochs": 3,
        "ent_coef": 0.01,
        "learning_rate": 3e-3,
        "eval_every": 0,
        "final_eval_episodes": 1,
        **overrides,
    }


@built
def test_a_native_update_ends_where_the_reference_update_ends():
    """Same rollout, then one update (3 epochs of 10 minibatches, the last one short) each
    way: weights, Adam's moments and logged losses agree to float32 rounding."""
    runs = []
    for accelerate in (False, True):
        agent = PPO(**_config(accelerate=accelerate))
        agent.collect()
        torch.manual_seed(0)  # the minibatch shuffles
        metrics = agent.update(agent.storage, 0.0)
        runs.append((agent, metrics))
    (torch_agent, torch_metrics), (numpy_agent, numpy_metrics) = runs
    assert torch_agent.accelerator is None and numpy_agent.accelerator is not None
    assert torch.equal(torch_agent.storage.actions, numpy_agent.storage.actions)
    torch.testing.assert_close(
        numpy_agent.storage.logprobs, torch_agent.storage.logprobs, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        numpy_agent.flat.leaf.data, torch_agent.flat.leaf.data, rtol=0, atol=2e-5
    )
    torch.testing.assert_close(numpy_agent.optimizer.exp_avg, torch_agent.optimizer.exp_avg)
    assert numpy_agent.optimizer.steps == torch_agent.optimizer.steps == 3 * 10
    for key, value in torch_metrics.items():
        assert numpy_metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@built
def test_accelerate_picks_the_kernels_only_where_they_apply():
    assert PPO(**_config(accelerate=False)).accelerator is None
    assert PPO(**_config(clip_value=0.2)).accelerator is None  # auto: the reference
    assert PPO(**_config(activation="gelu")).accelerator is None
    assert PPO(**_config(env="Pendulum-v1")).accelerator is None
    # `true` says at construction why the kernels cannot run
    with pytest.raises(ConfigError, match="accelerate: true, but .*clip_value is set"):
        PPO(**_config(accelerate=True, clip_value=0.2))
    with pytest.raises(ConfigError, match="layers other than Linear, ReLU and Tanh"):
        PPO(**_config(accelerate=True, activation="gelu"))
    # Discrete observations: the update in the kernels, the rollout with the torch sampler.
    frozen = PPO(**_config(env="FrozenLake-v1"))
    assert frozen.accelerator is not None
    assert not isinstance(frozen.rollout_sampler(), NativeRolloutSampler)
    agent = PPO(**_config())
    assert isinstance(agent.rollout_sampler(), NativeRolloutSampler)
    # init_policy builds a new optimizer: the accelerator follows it.
    before = agent.accelerator
    agent.init_policy(CategoricalActor(agent.observation_space, agent.action_space))
    assert agent.accelerator is not None and agent.accelerator is not before
    assert agent.accelerator.flat is agent.flat


def test_the_keys_accelerate_replaced_still_load(capsys):
    """Configs and runs from before `accelerate` name numpy_fast_path and fast_backward: they
    load as the path they ran (the old by-hand gradients were autograd's bit for bit), say
    so in one line, and are not written back."""
    from payoff.core.config import to_dict

    old_default = PPO(**_config(fast_backward=True, numpy_fast_path=False))
    assert old_default.config.accelerate is False
    assert "numpy_fast_path: false, fast_backward: true is now accelerate: false" in (
        capsys.readouterr().err
    )
    assert PPO(**_config(numpy_fast_path=True)).config.accelerate == "auto"
    written = to_dict(old_default.config)
    assert written["accelerate"] is False
    assert "numpy_fast_path" not in written and "fast_backward" not in written
    with pytest.raises(ConfigError, match="unknown config key 'fast_backwards'") as err:
        PPO(**_config(fast_backwards=True))
    assert "numpy_fast_path" not in str(err.value)  # not offered as a valid key


@pytest.mark.slow
def test_ppo_with_the_accelerator_solves_cartpole():
    # Measured (seed 0): see the recipe test in test_deeprl_learning; budget 150k.
    agent = PPO(
        env="CartPole-v1",
        seed=0,
        total_steps=150_000,
        num_envs=64,
        num_steps=32,
        minibatch_size=512,
        epochs=1,
        learning_rate=1e-2,
        eval_every=8192,
        eval_episodes=20,
        stop_at_return=475,
        final_eval_episodes=20,
        accelerate="auto",
    ).learn()
    assert agent.solved_at is not None and agent.solved_at <= 150_000
    assert agent.evaluate(20).mean_return >= 475
