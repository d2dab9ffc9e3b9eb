"""predict returns Stable-Baselines3's (action, state) pair for every agent, so the SB3 loop
`action, _ = model.predict(obs)` runs as written; act() returns the action alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from payoff import PPO, SAC, QLearning, RecurrentPPO
from payoff.core.errors import ConfigError


def _sb3_episode(model, env_id: str, seed: int = 0, steps: int = 500) -> list:
    """An SB3 user's loop, verbatim: reset, predict, step; the actions it played."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    actions = []
    for _ in range(steps):
        action, _ = model.predict(obs)
        actions.append(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    env.close()
    return actions


def test_discrete_ppo_in_an_sb3_loop_and_after_load(tmp_path) -> None:
    model = PPO("CartPole-v1", num_envs=2, num_steps=64, minibatch_size=64, seed=0, eval_every=0)
    model.learn(256)
    actions = _sb3_episode(model, "CartPole-v1")
    assert actions and all(isinstance(a, int) and a in (0, 1) for a in actions)
    obs, _ = gym.make("CartPole-v1").reset(seed=3)
    action, state = model.predict(obs)
    assert state is None and action == model.act(obs)  # act: the same action, alone
    sampled, state = model.predict(obs, deterministic=False)
    assert sampled in (0, 1) and state is None
    loaded = PPO.load(model.save(tmp_path / "ppo.safetensors"))
    assert _sb3_episode(loaded, "CartPole-v1") == actions


def test_continuous_sac_in_an_sb3_loop() -> None:
    model = SAC("Pendulum-v1", learning_starts=100, batch_size=32, seed=0, eval_every=0)
    model.learn(200)
    actions = _sb3_episode(model, "Pendulum-v1", steps=20)
    assert len(actions) == 20
    for action in actions:  # the action array itself, not unpacked into its elements
        assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
    obs, _ = gym.make("Pendulum-v1").reset(seed=1)
    assert np.array_equal(model.predict(obs)[0], model.act(obs))


def test_qlearning_in_an_sb3_loop() -> None:
    model = QLearning("FrozenLake-v1", seed=0).learn(50)
    actions = _sb3_episode(model, "FrozenLake-v1")
    assert actions and all(isinstance(a, int) and 0 <= a < 4 for a in actions)
    assert model.act(0) == model.predict(0)[0]


def test_a_batch_of_observations_gets_a_batch_of_actions_and_no_state() -> None:
    model = PPO("CartPole-v1", num_envs=2, num_steps=16, minibatch_size=32, seed=0, eval_every=0)
    batch = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    actions, state = model.predict(batch)
    assert actions.shape == (3,) and state is None
    assert np.array_equal(actions, model.act(batch))
    # SB3's VecEnv loop passes the state and episode starts back: accepted while state is None
    again, state = model.predict(batch, state=state, episode_start=np.ones(3, bool))
    assert np.array_equal(again, actions) and state is None


def test_recurrent_ppo_passes_its_state_back_and_has_no_act() -> None:
    model = RecurrentPPO(
        "payoff/CartPoleNoVelocity-v1",
        num_envs=2,
        num_steps=16,
        minibatch_size=16,
        rnn_hidden=8,
        hidden=[8],
        seed=0,
        eval_every=0,
    )
    env = gym.make("payoff/CartPoleNoVelocity-v1")
    obs, _ = env.reset(seed=0)
    state, start = None, True
    for _ in range(5):
        action, state = model.predict(obs, state, start)  # SB3's positional order
        assert action in (0, 1) and state.shape == (1, 8)
        obs, _, terminated, truncated, _ = env.step(action)
        start = terminated or truncated
    with pytest.raises(
        ConfigError, match=r"RecurrentPPO has no act\(\).*agent\.predict\(obs, state"
    ):
        model.act(obs)


def test_a_feed_forward_policy_refuses_a_state() -> None:
    model = PPO("CartPole-v1", num_envs=2, num_steps=16, minibatch_size=32, seed=0, eval_every=0)
    obs = np.zeros(4, np.float32)
    with pytest.raises(ConfigError, match=r"PPO's policy is feed-forward .* shape \(1, 8\)"):
        model.predict(obs, np.zeros((1, 8)))
    # the old call predict(obs, False) now reads False as SB3's state: refused, by name
    with pytest.raises(ConfigError, match=r"state=False.*predict\(obs, deterministic=False\)"):
        model.predict(obs, False)
    with pytest.raises(ConfigError, match=r"predict\(deterministic=...\) takes True or False"):
        model.predict(obs, deterministic="false")


def test_act_returns_the_single_value() -> None:
    model = PPO("CartPole-v1", num_envs=2, num_steps=16, minibatch_size=32, seed=0, eval_every=0)
    action = model.act(np.zeros(4, np.float32))
    assert isinstance(action, int) and action in (0, 1)
    with pytest.raises(ConfigError, match=r"act\(deterministic=...\) takes True or False"):
        model.act(np.zeros(4, np.float32), deterministic="false")
