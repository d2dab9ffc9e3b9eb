import gymnasium as gym
import numpy as np
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


class _DictObservations(gym.Env):
    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "room": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return {"position": np.zeros(2, np.float32), "room": 0}, {}

    def step(self, action):
        observation = {"position": np.full(2, 0.5, np.float32), "room": int(action)}
        return observation, float(action), False, True, {}


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_dict_observations_say_how_to_flatten_and_flattened_train(algo):
    import payoff

    cls = getattr(payoff, algo)
    settings = {"total_steps": 256, "eval_every": 0, "final_eval_episodes": 1}
    with pytest.raises(EnvError, match=r"Dict\(.*env.wrappers=\[\{name: FlattenObservation\}\]"):
        cls(env=_DictObservations(), **settings).learn()
    agent = cls(
        env=lambda: gym.wrappers.FlattenObservation(_DictObservations()), **settings
    ).learn()
    flat = gym.spaces.flatten(
        _DictObservations.observation_space, {"position": np.zeros(2, np.float32), "room": 1}
    )
    action, _ = agent.predict(flat)
    assert action in (0, 1)


class _BrokenStep(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, problem: str = "raise"):
        self.problem = problem

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        if self.problem == "raise":
            raise KeyError("the door is locked")
        return np.zeros(4, np.float32), 0.0, False, False, {}  # 4 values for a (3,) space


def test_an_env_that_fails_in_step_is_named_with_its_error():
    import payoff

    settings = {"total_steps": 64, "eval_every": 0, "final_eval_episodes": 1}
    with pytest.raises(EnvError, match=r"_BrokenStep' raised KeyError in step during training"):
        payoff.PPO(env=_BrokenStep(), **settings).learn()
    with pytest.raises(EnvError, match=r"does not fit the env's observation_space \(Box"):
        payoff.PPO(env=_BrokenStep("shape"), **settings).learn()
