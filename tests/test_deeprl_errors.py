"""Bad input to the deep-RL algorithms gives one clear error; resume continues exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from payoff.algos.a2c import A2C
from payoff.algos.dqn import DQN
from payoff.algos.ppo import PPO
from payoff.algos.reinforce import Reinforce
from payoff.core.errors import CheckpointError, ConfigError, EnvError
from payoff.models import make_actor, save_policy

TINY = {"eval_every": 0, "final_eval_episodes": 2, "hidden": [16, 16]}


class _BrokenEnv(gym.Env):
    """Returns a NaN observation (or an inf reward) at its 5th step."""

    def __init__(self, bad: str = "obs"):
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.bad = bad
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.zeros(2, np.float32)
        reward = 1.0
        if self.t == 5:
            if self.bad == "obs":
                obs[1] = np.nan
            else:
                reward = float("inf")
        return obs, reward, self.t >= 8, False, {}


if "test/Broken-v0" not in gym.registry:
    gym.register("test/Broken-v0", entry_point=_BrokenEnv)


def test_dqn_on_continuous_actions_suggests_ppo():
    with pytest.raises(EnvError, match=r"Discrete action space.*Pendulum-v1.*Box.*PPO"):
        DQN(env="Pendulum-v1")


@pytest.mark.parametrize("bad", ["obs", "reward"])
def test_non_finite_env_output_names_env_and_step(bad):
    env = {"id": "test/Broken-v0", "kwargs": {"bad": bad}}
    agent = PPO(env=env, num_envs=2, num_steps=16, minibatch_size=8, total_steps=64, **TINY)
    with pytest.raises(
        EnvError, match=r"'test/Broken-v0'.*non-finite.*step \d+.*check_finite=false"
    ):
        agent.learn()


def test_check_finite_false_skips_the_check():
    env = {"id": "test/Broken-v0", "kwargs": {"bad": "reward"}}
    agent = Reinforce(env=env, num_envs=2, num_steps=16, total_steps=32, check_finite=False, **TINY)
    agent.runner.collect(agent._policy_step, agent.storage, agent._values)
    assert torch.isinf(agent.storage.rewards).any()


def test_checkpoint_against_env_with_other_spaces_names_both(tmp_path):
    agent = PPO(env="CartPole-v1", num_envs=4, num_steps=8, minibatch_size=16, **TINY)
    path = agent.save(tmp_path / "ppo.safetensors")
    with pytest.raises(
        CheckpointError, match=r"observation_space Box.*'Acrobot-v1' has observation_space Box"
    ):
        PPO.load(path, env="Acrobot-v1")


def test_init_from_policy_with_other_spaces_names_both(tmp_path):
    actor = make_actor(
        gym.spaces.Box(-1, 1, (6,), np.float32), gym.spaces.Discrete(3), hidden=(16, 16)
    )
    save_policy(tmp_path / "policy.safetensors", actor)
    with pytest.raises(CheckpointError, match=r"observation_space.*'CartPole-v1' has"):
        PPO(env="CartPole-v1", init_from=str(tmp_path / "policy.safetensors"), **TINY)


def test_init_from_policy_copies_the_actor(tmp_path):
    env = gym.make("CartPole-v1")
    actor = make_actor(env.observation_space, env.action_space, hidden=(16, 16))
    save_policy(tmp_path / "policy.safetensors", actor)
    agent = PPO(env="CartPole-v1", init_from=str(tmp_path / "policy.safetensors"), **TINY)
    obs = torch.randn(5, 4)
    assert torch.equal(agent.actor(obs), actor(obs))
    in_memory = PPO(env="CartPole-v1", **TINY).init_policy(actor)
    assert torch.equal(in_memory.actor(obs), actor(obs))


def test_ppo_config_errors_explain_themselves():
    with pytest.raises(ConfigError, match=r"minibatch_size 512 is larger than a rollout .* = 64"):
        PPO(env="CartPole-v1", num_envs=8, num_steps=8, minibatch_size=512)
    with pytest.raises(ConfigError, match=r"unknown config key 'gae_lamda'.*gae_lambda"):
        PPO(env="CartPole-v1", gae_lamda=0.9)


def _train_metrics(history):
    return [
        {k: v for k, v in r.items() if k.startswith("train/")}
        for r in history
        if "train/entropy" in r or "train/loss" in r
    ]


@pytest.mark.parametrize(
    "cls, config",
    [
        (PPO, {"num_envs": 4, "num_steps": 64, "minibatch_size": 64, "epochs": 2}),
        (
            PPO,
            {
                "num_envs": 4,
                "num_steps": 64,
                "minibatch_size": 64,
                "epochs": 2,
                "accelerate": False,
            },
        ),
        (A2C, {"num_envs": 4, "num_steps": 8}),
        (
            PPO,  # the reward scaler's running statistics and per-env returns come back too
            {"num_envs": 4, "num_steps": 64, "minibatch_size": 64, "normalize_reward": True},
        ),
        (
            DQN,
            {
                "num_envs": 4,
                "learning_starts": 200,
                "train_every": 64,
                "gradient_steps": 4,
                "log_every": 256,
            },
        ),
        (  # saved between two logs: the episodes finished since the last one come back too
            DQN,
            {
                "num_envs": 4,
                "learning_starts": 200,
                "train_every": 64,
                "gradient_steps": 4,
                "log_every": 300,
            },
        ),
    ],
)
def test_resume_from_saved_state_continues_exactly(tmp_path, cls, config):
    """Train 2N steps in one go, or N steps + save + load + N more: same metrics."""
    config = {**config, "eval_every": 0, "final_eval_episodes": 1, "hidden": [16, 16]}
    straight = cls(env="CartPole-v1", seed=3, total_steps=2048, **config).learn()
    first = cls(env="CartPole-v1", seed=3, total_steps=2048, **config).learn(total=1024)
    path = first.save(tmp_path / "half.safetensors")
    resumed = cls.load(path).learn()  # the rest of total_steps
    expected = _train_metrics(straight.history)
    got = _train_metrics(first.history) + _train_metrics(resumed.history)
    assert len(expected) == len(got) > 2
    assert got == expected
