"""payoff's batched NumPy CartPole against Gymnasium's CartPole-v1, step by step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from payoff.envs.cartpole import CartPoleVectorEnv
from payoff.envs.make import EnvConfig, make_env
from payoff.rollout.vector import make_vector_env


def test_batched_cartpole_matches_gymnasium_step_by_step():
    """Same seeds, same actions: the same observations (bit for bit), rewards, terminations,
    truncations and NEXT_STEP autoresets as a SyncVectorEnv of Gymnasium's CartPole-v1, over
    many episodes. (The native kernels' fused rollout is held to this env in
    tests/test_native.py.)"""
    num_envs, steps = 16, 3000
    ours = CartPoleVectorEnv(num_envs)
    theirs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    obs_a, _ = ours.reset(seed=123)
    obs_b, _ = theirs.reset(seed=123)
    np.testing.assert_array_equal(obs_a, obs_b)
    rng = np.random.default_rng(0)
    episodes = truncations = 0
    for step in range(steps):
        # A mostly-balancing policy with noise, so both falls and 500-step time limits occur.
        balance = (obs_b[:, 2] + 0.5 * obs_b[:, 3] > 0).astype(np.int64)
        actions = np.where(rng.random(num_envs) < 0.1, 1 - balance, balance)
        if step < 400:
            actions = rng.integers(0, 2, num_envs)
        obs_a, rew_a, term_a, trunc_a, _ = ours.step(actions)
        obs_b, rew_b, term_b, trunc_b, _ = theirs.step(actions)
        np.testing.assert_array_equal(obs_a, obs_b, err_msg=f"step {step}")
        np.testing.assert_array_equal(ours.state, [env.unwrapped.state for env in theirs.envs])
        np.testing.assert_array_equal(rew_a, rew_b)
        np.testing.assert_array_equal(term_a, term_b)
        np.testing.assert_array_equal(trunc_a, trunc_b)
        episodes += int((term_b | trunc_b).sum())
        truncations += int(trunc_b.sum())
    assert episodes > 100 and truncations > 0  # the comparison covered both kinds of ending


# Gymnasium's CartPole-v1 has infinite velocity bounds too; the checker warns about both.
@pytest.mark.filterwarnings("ignore:.*infinity")
def test_payoff_cartpole_passes_env_checker_and_is_the_default_for_cartpole():
    env = make_env(EnvConfig("payoff/CartPole-v1"))
    check_env(env.unwrapped)
    obs, _ = env.reset(seed=0)
    reference = gym.make("CartPole-v1")
    ref_obs, _ = reference.reset(seed=0)
    np.testing.assert_array_equal(obs, ref_obs)
    terminated = False
    while not terminated:  # push right until the pole falls: same states, same ending
        a, b = env.step(1), reference.step(1)
        np.testing.assert_allclose(a[0], b[0], atol=1e-6)
        assert a[1:4] == b[1:4]
        terminated = bool(a[2])
    assert env.spec is not None and env.spec.max_episode_steps == 500
    assert env.observation_space == reference.observation_space
    assert repr(env.observation_space) == repr(reference.observation_space)
    assert isinstance(make_vector_env(EnvConfig("CartPole-v1"), 4), CartPoleVectorEnv)
    assert isinstance(
        make_vector_env(EnvConfig("CartPole-v1"), 4, "sync"), gym.vector.SyncVectorEnv
    )
