"""payoff's native kernels (payoff/accel/_kernels.c): their products, refusals and NaNs, and
the fused CartPole rollout against the runner's step loop and the torch reference.

Where the extension was not built (no C compiler at install), the kernel tests skip and
payoff runs the torch reference; `test_without_the_kernels_payoff_runs_the_reference`
checks that path. tests/test_accel.py compares the PPO step and sampler with autograd's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from payoff.accel.actor_critic import NativeActorCritic, NativeRolloutSampler
from payoff.accel.actor_critic import _net as _native_net
from payoff.accel.cartpole import collect_cartpole
from payoff.accel.native import kernels, native_status
from payoff.algos.ppo import PPO
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import CategoricalActor, Critic
from payoff.rollout.vector import FUSED_COLLECTORS

native = kernels()
needs_kernels = pytest.mark.skipif(native is None, reason=f"native kernels: {native_status()}")


def test_native_status_says_which_path_runs():
    status = native_status()
    assert status.startswith("native kernels") == (native is not None)


def test_without_the_kernels_payoff_runs_the_reference():
    """PAYOFF_NATIVE=0 rules the kernels out; PPO on CartPole then trains in torch."""
    code = (
        "from payoff.accel.native import kernels, native_status\n"
        "from payoff.algos.ppo import PPO\n"
        "assert kernels() is None, native_status()\n"
        "print(native_status())\n"
        "agent = PPO(env='CartPole-v1', total_steps=4096, eval_every=0, final_eval_episodes=1)\n"
        "assert agent.accelerator is None\n"
        "assert agent.learn().step >= 4096\n"
    )
    env = {**os.environ, "PAYOFF_NATIVE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "PAYOFF_NATIVE=0" in out.stdout
    assert "run in torch, the reference path (accelerate: auto, and the native kernels are off" in (
        out.stderr
    )


@needs_kernels
def test_tanh_is_float32_tanh():
    x = np.linspace(-12, 12, 200_001, dtype=np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-30, -3e-4, 5e-4, np.inf, -np.inf])])
    y = x.copy()
    native.tanh(y)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)), rtol=5e-7, atol=5e-7)


@pytest.fixture(params=["avx512", "blas"])
def products(request):
    """Each product test twice: the kernels' own AVX-512 blocks (where the CPU has them) and
    NumPy's BLAS, which the kernels use on CPUs without AVX-512."""
    if native is None:
        pytest.skip(f"native kernels: {native_status()}")
    before = native.use_avx512(request.param == "avx512")
    yield request.param
    native.use_avx512(before)


@needs_kernels
@pytest.mark.parametrize(
    ("dims", "rows", "activation"),
    [
        ([4, 64, 64, 2], 2112, 1),  # cartpole-ppo's critic pass: 64-column panels
        ([5, 100, 64, 3], 13, 2),  # a panel plus a masked edge; rows not a multiple of 6
        ([8, 16, 24, 1], 1, 1),  # one row, 16-column and narrower edges
        ([3, 130, 7], 64, 0),  # two panels and an edge; no activation
    ],
)
def test_forward_is_the_mlp(products, dims, rows, activation):
    """The kernels' forward pass (their own AVX-512 products where the CPU has them) equals
    NumPy's x W^T + b with the activation, to float32 rounding."""
    rng = np.random.default_rng(0)
    layers = [
        (
            (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
            rng.standard_normal(o).astype(np.float32),
        )
        for i, o in zip(dims[:-1], dims[1:], strict=True)
    ]
    x = rng.standard_normal((rows, dims[0])).astype(np.float32)
    expected = x.astype(np.float64)
    for k, (weight_t, bias) in enumerate(layers):
        expected = expected @ weight_t + bias
        if k < len(layers) - 1:
            expected = np.tanh(expected) if activation == 1 else expected
            expected = np.maximum(expected, 0) if activation == 2 else expected
    out = np.full((rows, dims[-1]), np.nan, np.float32)
    native.forward(*_native_net(layers), activation, x, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("hidden", [[64, 64], [100, 24]])
def test_ppo_step_by_either_product_ends_in_the_same_place(hidden):
    """One PPO minibatch step in the kernels, their products by AVX-512 blocks (where the
    CPU has them) or by the BLAS, ends in the same place: weights, Adam's moments, losses."""
    results = []
    before = native.use_avx512(True)
    try:
        for avx512 in (True, False):
            native.use_avx512(avx512)
            torch.manual_seed(0)
            space = gym.spaces.Box(-1.0, 1.0, (4,))
            actor = CategoricalActor(space, gym.spaces.Discrete(3), hidden=hidden)
            critic = Critic(space, hidden, "tanh", normalizer=actor.normalizer)
            flat = FlatParameters([*actor.parameters(), *critic.parameters()])
            step = NativeActorCritic(actor, critic, flat, FlatAdam(flat, lr=1e-3, eps=1e-5))
            step.pull()
            rng = np.random.default_rng(5)
            batch = 70
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            actions = rng.integers(0, 3, batch)
            old = (rng.standard_normal(batch) * 0.3 - 1.1).astype(np.float32)
            advantages = rng.standard_normal(batch).astype(np.float32)
            returns = rng.standard_normal(batch).astype(np.float32)
            stats = step.step(x, actions, old, advantages, returns, 0.2, 0.01, 0.5, 0.5, 1e-3)
            results.append((stats, step.params.copy(), step.exp_avg.copy()))
    finally:
        native.use_avx512(before)
    (stats_a, params_a, avg_a), (stats_b, params_b, avg_b) = results
    np.testing.assert_allclose(stats_a, stats_b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params_a, params_b, rtol=0, atol=2e-6)
    np.testing.assert_allclose(avg_a, avg_b, rtol=1e-4, atol=1e-7)


@needs_kernels
def test_kernels_refuse_buffers_too_short():
    layers = [(np.ones((4, 8), np.float32), np.ones(8, np.float32))]
    x = np.ones((10, 4), np.float32)
    with pytest.raises(ValueError, match="out holds 288 bytes, needs 320"):
        native.forward(*_native_net(layers), 1, x, np.empty((9, 8), np.float32))
    with pytest.raises(TypeError, match="takes 26 arguments"):
        native.rollout_cartpole(np.zeros((4, 4)))


def _ppo(seed: int, **overrides) -> PPO:
    config = {
        "env": "CartPole-v1",
        "num_envs": 16,
        "num_steps": 64,
        "eval_every": 0,
        "final_eval_episodes": 1,
        "seed": seed,
        **overrides,
    }
    return PPO(**config)


@needs_kernels
@pytest.mark.parametrize("max_episode_steps", [500, 30])
def test_the_fused_rollout_collects_what_the_step_loop_collects(max_episode_steps, monkeypatch):
    """The fused collector (actor, CartPole and the runner's books in C) against the runner's
    loop of steps with the same sampler (the kernels' act, NumPy's CartPole): the same
    storage, bit for bit, the same finished episodes, counters and env state, over rollouts
    with resets (and time limits at 30 steps)."""
    fused, looped = _ppo(3), _ppo(3)
    for agent in (fused, looped):
        agent.runner.envs.max_episode_steps = max_episode_steps
    envs_type = type(fused.runner.envs)
    assert FUSED_COLLECTORS[envs_type] is collect_cartpole
    fused_ran = []

    def recording(runner, sampler, storage):
        fused_ran.append(collect_cartpole(runner, sampler, storage))
        return fused_ran[-1]

    for step in range(3):
        torch.manual_seed(step)  # the same Gumbel noise for both
        monkeypatch.setitem(FUSED_COLLECTORS, envs_type, recording)
        fused.collect()
        torch.manual_seed(step)
        monkeypatch.delitem(FUSED_COLLECTORS, envs_type)  # the step loop
        looped.collect()
        for name in ("obs", "actions", "logprobs", "rewards", "terminated", "truncated", "valid"):
            a, b = getattr(fused.storage, name), getattr(looped.storage, name)
            assert torch.equal(a, b), name
        torch.testing.assert_close(fused.storage.values, looped.storage.values, rtol=0, atol=0)
    a, b = fused.runner, looped.runner
    assert fused_ran == [True] * 3
    assert a.finished_returns == b.finished_returns and len(a.finished_returns) > 20
    assert a.finished_lengths == b.finished_lengths
    assert a.env_steps == b.env_steps
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.episode_return, b.episode_return)
    np.testing.assert_array_equal(a.episode_length, b.episode_length)
    np.testing.assert_array_equal(a.resetting, b.resetting)
    np.testing.assert_array_equal(a.envs.state, b.envs.state)
    np.testing.assert_array_equal(a.envs.elapsed, b.envs.elapsed)
    if max_episode_steps == 30:
        assert fused.storage.truncated.any()


@needs_kernels
def test_the_fused_rollout_applies_only_where_it_can():
    """Another env, or info keys to record, take the step loop (and still train)."""
    agent = _ppo(0, env="Acrobot-v1", num_envs=4, num_steps=8, minibatch_size=16)
    assert type(agent.runner.envs) not in FUSED_COLLECTORS
    assert not collect_cartpole(agent.runner, agent.rollout_sampler(), agent.storage)
    cartpole = _ppo(0)
    cartpole.runner.info_keys = ("cost",)
    assert not collect_cartpole(cartpole.runner, cartpole.rollout_sampler(), cartpole.storage)


def test_a_cartpole_vector_env_still_copies():
    """The env keeps whether it uses the kernels, not the module: copy.deepcopy (payoff copies
    env instances a user passes) still works."""
    import copy

    from payoff.envs.cartpole import CartPoleVectorEnv

    envs = CartPoleVectorEnv(3)
    envs.reset(seed=1)
    twin = copy.deepcopy(envs)
    actions = np.array([0, 1, 1])
    np.testing.assert_array_equal(envs.step(actions)[0], twin.step(actions)[0])


def _step_pair(hidden, activation, poison):
    """One PPO step in the kernels and one by the torch reference (autograd, the joint clip,
    FlatAdam), from the same networks, after `poison(actor, returns)` put a NaN somewhere."""
    from payoff.algos.shared.policy_loss import clipped_surrogate, value_loss

    out = []
    for use_native in (True, False):
        torch.manual_seed(0)
        space = gym.spaces.Box(-1.0, 1.0, (4,))
        actor = CategoricalActor(
            space, gym.spaces.Discrete(2), hidden=hidden, activation=activation
        )
        critic = Critic(space, hidden, activation, normalizer=actor.normalizer)
        returns = np.ones(16, np.float32)
        poison(actor, returns)
        flat = FlatParameters([*actor.parameters(), *critic.parameters()])
        optimizer = FlatAdam(flat, lr=1e-3, eps=1e-5)
        x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
        actions = np.arange(16) % 2
        zeros = np.zeros(16, np.float32)
        if use_native:
            step = NativeActorCritic(actor, critic, flat, optimizer)
            step.pull()
            stats = step.step(x, actions, zeros - 0.7, zeros + 1, returns, 0.2, 0.0, 0.5, 0.5, 1e-3)
            step.push()
        else:
            obs, acts = torch.from_numpy(x), torch.from_numpy(actions)
            logprobs, entropy = actor.log_prob_entropy(obs, acts)
            surrogate = clipped_surrogate(
                logprobs, torch.from_numpy(zeros - 0.7), torch.from_numpy(zeros + 1), 0.2
            )
            v_loss = value_loss(critic(obs), torch.from_numpy(returns))
            flat.zero_grad()
            (surrogate.loss + 0.5 * v_loss).backward()
            flat.clip_grad_norm(0.5)
            optimizer.step()
            stats = np.array(
                [
                    float(surrogate.loss),
                    float(v_loss),
                    float(entropy.mean()),
                    float(surrogate.approx_kl),
                    float(surrogate.clip_fraction),
                ]
            )
        out.append((stats, flat.leaf.data.numpy().copy()))
    return out


@needs_kernels
def test_nan_spreads_as_in_the_reference():
    """A diverged network or return must show as NaN (payoff stops on a NaN loss), as it does
    in torch: ReLU keeps a NaN input, a NaN gradient norm spreads through the clip."""

    def nan_weight(actor, returns):
        with torch.no_grad():
            actor.logits[0].weight[:, 1] = float("nan")

    def nan_return(actor, returns):
        returns[3] = np.nan

    for poison in (nan_weight, nan_return):
        (native_stats, native_params), (torch_stats, torch_params) = _step_pair(
            [8, 8], "relu", poison
        )
        np.testing.assert_array_equal(np.isnan(native_stats[:2]), np.isnan(torch_stats[:2]))
        np.testing.assert_array_equal(np.isnan(native_params), np.isnan(torch_params))
        assert np.isnan(native_stats).any() or np.isnan(native_params).all()


@needs_kernels
def test_sampling_takes_the_first_nan_as_argmax_does():
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (4,))
    actor = CategoricalActor(space, gym.spaces.Discrete(3), hidden=[8])
    with torch.no_grad():
        actor.logits[-1].bias[1] = float("nan")
    sampler = NativeRolloutSampler(actor, 1, 5)
    obs = np.zeros((5, 4), np.float32)
    assert sampler.act(obs).tolist() == [1] * 5 == np.argmax(sampler.logits[0], axis=1).tolist()


@needs_kernels
def test_kernels_refuse_degenerate_sizes_with_a_message():
    layers = [(np.ones((4, 8), np.float32), np.ones(8, np.float32))]
    empty = np.zeros((0, 4), np.float32)
    native.forward(*_native_net(layers), 1, empty, np.zeros((0, 8), np.float32))  # no rows: fine
    dims, ptrs = _native_net(layers)
    with pytest.raises(ValueError, match="layer size 0"):
        native.forward(np.array([0, 8], np.int64), ptrs, 1, empty, np.zeros((0, 8), np.float32))
    assert dims.tolist() == [4, 8]


@needs_kernels
def test_a_sampler_given_other_rows_is_refused():
    torch.manual_seed(0)
    actor = CategoricalActor(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2), hidden=[8])
    sampler = NativeRolloutSampler(actor, 2, 3)
    with pytest.raises(ValueError, match="made for 3 envs, got 1 rows"):
        sampler.act(np.zeros((1, 4), np.float32))


def test_the_cartpole_env_takes_an_unlimited_episode():
    from payoff.envs.cartpole import CartPoleVectorEnv

    envs = CartPoleVectorEnv(2, max_episode_steps=float("inf"))
    envs.reset(seed=0)
    _, rewards, _, truncated, _ = envs.step(np.array([0, 1]))
    assert rewards.tolist() == [1.0, 1.0] and not truncated.any()


@needs_kernels
def test_the_fused_rollout_matches_the_reference():
    """Against the torch reference (accelerate false: torch's rollout sampler and critic,
    NumPy's CartPole step): the same actions and episodes, observations equal, log-probs
    and values to float32 rounding."""
    fused, plain = _ppo(5), _ppo(5, accelerate=False)
    assert plain.accelerator is None and fused.accelerator is not None
    for _ in range(2):
        for agent in (fused, plain):
            torch.manual_seed(9)
            agent.collect()
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "valid"):
            assert torch.equal(getattr(fused.storage, name), getattr(plain.storage, name)), name
        torch.testing.assert_close(fused.storage.logprobs, plain.storage.logprobs)
        torch.testing.assert_close(fused.storage.values, plain.storage.values)
    assert fused.runner.finished_returns == plain.runner.finished_returns
    assert len(fused.runner.finished_returns) > 10
