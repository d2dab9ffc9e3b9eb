import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from payoff.core.errors import EnvError
from payoff.envs.make import make_env
from payoff.envs.registry import PAYOFF_ENVS


def test_any_gymnasium_id_works():
    env = make_env("FrozenLake-v1")
    assert isinstance(env.observation_space, gym.spaces.Discrete)


def test_unknown_env_id_suggests_close_matches():
    with pytest.raises(
        EnvError, match=r"unknown environment id 'CartPole-v2'.*Did you mean 'CartPole-v1'"
    ):
        make_env("CartPole-v2")


def test_payoff_envs_pass_the_gymnasium_checker():
    for env_id in PAYOFF_ENVS:
        env = gym.make(env_id).unwrapped
        check_env(env, skip_render_check=True)
        env.close()
