"""normalize_reward: rewards divided by the running std of the discounted return (SB3's
VecNormalize norm_reward), inside the learner, so logs and evaluations keep the env's units."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from payoff import PPO, RecurrentPPO
from payoff.algos.shared.reward_scaling import RewardScaler
from payoff.core.errors import ConfigError


class _Scaled(gym.Wrapper):
    """CartPole paying 1000 per step instead of 1."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, 1000.0 * reward, terminated, truncated, info


def _cartpole_x1000() -> gym.Env:
    return _Scaled(gym.make("CartPole-v1"))


def test_scaled_rewards_do_not_depend_on_the_reward_scale():
    rng = np.random.default_rng(0)
    rewards = rng.normal(1.0, 2.0, (200, 4))
    done = rng.random((200, 4)) < 0.05
    valid = rng.random((200, 4)) < 0.97
    rewards[~valid] = 0.0
    small, large = rewards.copy(), 1000.0 * rewards
    for scaled in (small, large):
        RewardScaler(4, gamma=0.99).scale(scaled, done, valid)
    np.testing.assert_allclose(small[20:], large[20:], rtol=1e-3)  # after a few steps of stats
    assert np.abs(large).max() <= 10.0 and np.all((large == 0) == (rewards == 0))


def test_off_by_default_and_saved_when_on():
    settings = {"env": "CartPole-v1", "total_steps": 1024, "num_envs": 4, "num_steps": 128}
    settings |= {"eval_every": 0, "final_eval_episodes": 1, "seed": 0}
    assert "reward_scaler" not in PPO(**settings).saved
    agent = PPO(**settings, normalize_reward=True).learn()
    assert agent.reward_scaler.count > 1000  # every valid step's return went in
    # resume exactness: tests/test_deeprl_errors.py::test_resume_from_saved_state_continues_exactly


@pytest.mark.slow
def test_ppo_learns_a_thousandfold_reward_only_with_it():
    # Measured (seeds 0-2, 50k steps, 8 envs x 128): 500 / 500 / 500 of 500 with
    # normalize_reward, 127 / 117 / 129 without; the value loss in the millions eats the
    # joint gradient clip.
    settings = {"env": _cartpole_x1000, "total_steps": 50_000, "num_envs": 8, "num_steps": 128}
    settings |= {"eval_every": 0, "final_eval_episodes": 1, "seed": 0}
    scaled = PPO(**settings, normalize_reward=True).learn()
    assert scaled.evaluate(10).mean_return >= 475_000  # the env's own units
    logged = [r["train/return"] for r in scaled.history if "train/return" in r]
    assert max(logged) >= 100_000  # training returns are logged in the env's units too
    assert PPO(**settings).learn().evaluate(10).mean_return <= 250_000


def test_recurrent_ppo_says_it_does_not_scale_rewards():
    with pytest.raises(ConfigError, match="recurrent_ppo does not scale rewards"):
        RecurrentPPO(env="CartPole-v1", normalize_reward=True, minibatch_size=128)


def test_the_normalize_reward_wrapper_is_pointed_at_the_key():
    wrapped = {"id": "CartPole-v1", "wrappers": [{"name": "NormalizeReward"}]}
    with pytest.warns(UserWarning, match="normalize_reward=true"):
        PPO(env=wrapped, total_steps=64, num_envs=2, num_steps=32, minibatch_size=32)
