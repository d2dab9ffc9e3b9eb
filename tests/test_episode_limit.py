"""Whole-episode loops end: an env that never returns terminated or truncated is cut at a
step limit with a warning that says how to give it a time limit, instead of running forever."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from payoff import PPO, QLearning
from payoff.envs.make import EnvConfig
from payoff.rollout.evaluate import EPISODE_STEP_LIMIT, evaluate_policy
from payoff.rollout.population import EpisodePlayer
from payoff.rollout.vector import evaluate_batched

UNENDED = r"episodes of env '(test_episode_limit:)?NeverEnds(Tabular)?' had not ended after {steps} steps.*max_episode_steps"


class NeverEnds(gym.Env):
    """Reward 1 a step, and no step ever ends the episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 1.0, False, False, {}


class NeverEndsTabular(NeverEnds):
    observation_space = gym.spaces.Discrete(4)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return int(action), 1.0, False, False, {}


def _env(cls: type[gym.Env] = NeverEnds) -> EnvConfig:
    return EnvConfig(id="NeverEnds", factory=cls)


def test_evaluation_cuts_unended_episodes_and_says_so():
    with pytest.warns(RuntimeWarning, match=UNENDED.format(steps=50)):
        result = evaluate_policy(_env(), lambda obs: 0, episodes=2, seed=0, step_limit=50)
    assert result.mean_length == 50 and result.mean_return == 50.0
    with pytest.warns(RuntimeWarning, match=UNENDED.format(steps=40)):
        batched = evaluate_batched(
            _env(), lambda obs: np.zeros(len(obs), np.int64), 3, seed=0, step_limit=40
        )
    assert batched.mean_length == 40 and batched.episodes == 3


def test_long_evaluation_episodes_are_said_early_not_only_at_the_cut(capsys):
    # MBRL's planner at 18 steps/s spent ~1.5 h on 5 such episodes before a word
    for evaluate in (
        lambda: evaluate_policy(_env(), lambda obs: 0, episodes=1, seed=0, step_limit=10_050),
        lambda: evaluate_batched(
            _env(), lambda obs: np.zeros(len(obs), np.int64), 2, seed=0, step_limit=10_050
        ),
    ):
        with pytest.warns(RuntimeWarning):
            evaluate()
        err = capsys.readouterr().err
        assert err.count("still running after 10,000 steps") == 1 and "cut at 10,050" in err


def test_evolution_strategies_episodes_are_cut_too():
    player = EpisodePlayer(_env())
    try:
        with pytest.warns(RuntimeWarning, match=UNENDED.format(steps=30)):
            played = player.play(
                lambda obs, rows: np.zeros(len(rows), np.int64), [0, 1], step_limit=30
            )
    finally:
        player.close()
    assert played.lengths.tolist() == [30, 30] and played.returns.tolist() == [30.0, 30.0]


def test_training_on_an_env_without_a_time_limit_finishes():
    # PPO's training is counted in steps; its final evaluation is whole episodes.
    with pytest.warns(RuntimeWarning, match=UNENDED.format(steps=f"{EPISODE_STEP_LIMIT:,}")):
        agent = PPO(env=NeverEnds(), total_steps=256, eval_every=0, final_eval_episodes=1).learn()
    assert agent.step >= 256
    # Q-learning's training is counted in episodes.
    with pytest.warns(RuntimeWarning, match=UNENDED.format(steps=f"{EPISODE_STEP_LIMIT:,}")):
        tabular = QLearning(
            env=NeverEndsTabular(), total_episodes=1, eval_every=0, final_eval_episodes=1
        ).learn()
    assert tabular.env_steps == EPISODE_STEP_LIMIT


def test_an_evaluation_whose_episodes_never_end_stops_after_a_few_cut_ones():
    """Q-learning's final evaluation of 1,000 episodes on an env without a time limit, each
    cut at 100,000 steps, would take 40 minutes: it stops after 5 cut episodes."""
    with pytest.warns(RuntimeWarning, match="stopped after 5 of 1000 episodes: 5 of them never"):
        result = evaluate_policy(_env(), lambda obs: 0, episodes=1000, seed=0, step_limit=30)
    assert result.episodes == 5 and result.mean_length == 30
