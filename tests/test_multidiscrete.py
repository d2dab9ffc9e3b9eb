"""MultiDiscrete and MultiBinary actions: independent categoricals from one MLP (PPO, A2C),
their math against torch's Categorical, learning, saving, policy files, and clear errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from payoff import A2C, BC, PPO
from payoff.core.errors import CheckpointError, EnvError
from payoff.models.mlp import MultiCategoricalActor, make_actor
from payoff.models.policy_file import load_policy, save_policy, space_from_data, space_to_data

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class Pick(gym.Env):
    """Two choices a step, 20 steps an episode: choice 0 (values -1, 0, 1) should be the sign
    of obs[0], choice 1 (0 or 1) whether obs[1] > 0; one reward point for each right one."""

    observation_space = OBS
    action_space: gym.Space = gym.spaces.MultiDiscrete([3, 2], start=[-1, 0])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        reward = float(action[0] == np.sign(self.obs[0])) + float(action[1] == (self.obs[1] > 0))
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, reward, False, self.t >= 20, {}


class Bits(Pick):
    """Two switches: switch i on exactly when obs[i] > 0."""

    action_space = gym.spaces.MultiBinary(2)

    def step(self, action):
        reward = float(action[0] == (self.obs[0] > 0)) + float(action[1] == (self.obs[1] > 0))
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, reward, False, self.t >= 20, {}


def test_log_probs_and_entropy_are_sums_over_independent_categoricals():
    torch.manual_seed(0)
    actor = make_actor(OBS, gym.spaces.MultiDiscrete([3, 2, 4], start=[-1, 0, 5]))
    assert isinstance(actor, MultiCategoricalActor)
    obs = torch.rand(6, 2) * 2 - 1
    actions, logprobs = actor.sample(obs)
    assert actions.shape == (6, 3) and actions.dtype == torch.long
    blocks = torch.split(actor(obs), [3, 2, 4], dim=-1)
    dists = [Categorical(logits=b) for b in blocks]
    expected = sum(d.log_prob(actions[:, i]) for i, d in enumerate(dists))
    torch.testing.assert_close(logprobs, expected)
    again, entropy = actor.log_prob_entropy(obs, actions.float())  # storage may hold floats
    torch.testing.assert_close(again, expected)
    torch.testing.assert_close(entropy, sum(d.entropy() for d in dists))
    mode = actor.mode(obs)
    assert torch.equal(mode, torch.stack([b.argmax(-1) for b in blocks], dim=-1))
    values = actor.to_env(mode)  # the space's values: each choice's start added
    np.testing.assert_array_equal(values, mode.numpy() + np.array([-1, 0, 5]))
    assert all(actor.action_space.contains(v) for v in values)
    bits = make_actor(OBS, gym.spaces.MultiBinary(3))
    assert bits.to_env(bits.mode(obs)).dtype == np.int8


@pytest.mark.parametrize(
    ("algo", "env", "steps", "floor"),
    [(PPO, Pick, 8_000, 38.0), (A2C, Pick, 20_000, 37.0), (PPO, Bits, 8_000, 38.0)],
    ids=["ppo-multidiscrete", "a2c-multidiscrete", "ppo-multibinary"],
)
def test_on_policy_agents_learn_several_choices_at_once(algo, env, steps, floor, tmp_path):
    # Random choices score 40 * (1/3 + 1/2) / 2 = 16.7 (Pick) or 20 (Bits) of 40. Measured
    # with seed 0: PPO 39.0 (Pick) and 39.05 (Bits) after 8k steps (39.55 and 39.45 after
    # 20k), A2C 38.55 after 20k (37.15 after 8k).
    agent = algo(env=env(), total_steps=steps, eval_every=0, final_eval_episodes=1, seed=0)
    agent.learn()
    assert agent.evaluate(20).mean_return >= floor
    obs = np.array([0.5, -0.5], np.float32)
    expected = [1, 0]  # the sign of 0.5; -0.5 is not > 0
    action, _ = agent.predict(obs)
    np.testing.assert_array_equal(action, expected)
    loaded = algo.load(agent.save(tmp_path / "agent.safetensors"), env=env())
    batch = np.array([[0.5, -0.5], [-0.5, 0.5]], np.float32)
    actions, _ = loaded.predict(batch)
    np.testing.assert_array_equal(actions, agent.act(batch))
    save_policy(tmp_path / "policy.safetensors", agent.actor)
    actor, _ = load_policy(tmp_path / "policy.safetensors")
    assert actor.action_space == env.action_space
    np.testing.assert_array_equal(actor.predict(batch), agent.act(batch))


def test_policy_files_refuse_a_malformed_multidiscrete_space():
    data = space_to_data(Pick.action_space)
    assert space_from_data(data, "p") == Pick.action_space
    for bad in (
        {**data, "nvec": np.array([3, 0])},  # a choice with no options
        {**data, "nvec": np.array([[3, 2]])},  # not one-dimensional
        {**data, "start": np.array([0])},  # start's shape differs
        {**data, "nvec": np.array([10**9, 10**9])},  # far too many options
        {"type": "MultiBinary", "n": -2, "dtype": "int8"},
    ):
        with pytest.raises(CheckpointError, match="policy file 'p' is malformed"):
            space_from_data(bad, "p")


def test_spaces_no_actor_takes_are_named():
    with pytest.raises(EnvError, match=r"one-dimensional MultiDiscrete or MultiBinary"):
        make_actor(OBS, gym.spaces.MultiDiscrete([[2, 2], [2, 2]]))
    with pytest.raises(
        EnvError,
        match=r"behavior cloning and DAgger take Discrete \(starting at 0\) or Box actions",
    ):
        BC(env=Pick(), expert="cartpole", label_budget=10, epochs=1)


class Shifted(Pick):
    """One choice with values 1, 2, 3: the right one is 3 when obs[0] > 0, else 1."""

    action_space = gym.spaces.Discrete(3, start=1)

    def step(self, action):
        assert self.action_space.contains(action), action  # the env's values, never 0
        reward = float(action == (3 if self.obs[0] > 0 else 1))
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, reward, False, self.t >= 20, {}


def test_a_discrete_space_with_a_start_gets_its_own_values():
    from payoff import DQN

    agent = PPO(env=Shifted(), total_steps=10_000, eval_every=0, final_eval_episodes=1, seed=0)
    assert agent.learn().evaluate(20).mean_return >= 18.0  # of 20; random scores 6.7
    action, _ = agent.predict(np.array([0.5, 0.0], np.float32))
    assert action == 3
    with pytest.raises(EnvError, match=r"DQN stores and acts with action indices.*start 1"):
        DQN(env=Shifted())
    with pytest.raises(EnvError, match=r"Discrete \(starting at 0\) or Box actions"):
        BC(env=Shifted(), expert="cartpole", label_budget=10, epochs=1)
