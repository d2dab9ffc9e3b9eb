"""evaluate() as Stable-Baselines3's evaluate_policy is used: each episode's return and
length, sampled actions (deterministic=False), and another env of the same spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from payoff import PPO
from payoff.cli import main
from payoff.core.errors import EnvError


@pytest.fixture(scope="module")
def agent():
    return PPO("CartPole-v1", seed=0).learn(2_048)


def test_each_episode_is_in_the_result_but_not_in_its_summary(agent):
    result = agent.evaluate(5)
    assert len(result.episode_returns) == len(result.episode_lengths) == 5
    assert result.mean_return == pytest.approx(np.mean(result.episode_returns))
    assert result.episode_returns == [float(n) for n in result.episode_lengths]  # CartPole: +1/step
    assert "episode_returns" not in result.to_dict()


def test_sampled_actions_are_not_the_greedy_ones(agent):
    greedy = agent.evaluate(10, seed=7)
    assert agent.evaluate(10, seed=7).episode_returns == greedy.episode_returns
    sampled = agent.evaluate(10, seed=7, deterministic=False)
    assert sampled.episode_returns != greedy.episode_returns


def test_another_env_of_the_same_spaces_and_one_of_other_spaces(agent):
    short = agent.evaluate(3, env=gym.make("CartPole-v1", max_episode_steps=20))
    assert max(short.episode_lengths) <= 20
    assert agent.evaluate(2, env={"id": "CartPole-v1"}).episodes == 2
    with pytest.raises(EnvError, match=r"env 'MountainCar-v0' has observation_space Box.*trained"):
        agent.evaluate(2, env="MountainCar-v0")


def test_the_cli_samples_with_stochastic(tmp_path, capsys):
    from payoff.train import train

    run = train("frozenlake-q", ["total_episodes=200"], out=tmp_path, media=False)
    capsys.readouterr()
    assert main(["eval", str(run.path), "--episodes", "5", "--stochastic", "--json"]) == 0
    assert '"episodes": 5' in capsys.readouterr().out
