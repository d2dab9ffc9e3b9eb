"""PettingZoo in payoff: parallel envs as vector slots, AEC play with masks, IPPO learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from payoff.core.errors import ConfigError, EnvError
from payoff.envs.make import EnvConfig, make_env
from payoff.rollout.vector import make_vector_env

pettingzoo = pytest.importorskip("pettingzoo")

RPS = EnvConfig(id="payoff/PettingZoo-v0", kwargs={"env_id": "classic/rps-v2"})


class LeavingEnv(pettingzoo.ParallelEnv):
    """Two agents; 'b' terminates after one step while 'a' plays on (not supported)."""

    metadata = {"name": "leaving"}

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, 1, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        obs = {a: np.zeros(2, np.float32) for a in self.agents}
        rewards = dict.fromkeys(self.agents, 0.0)
        terminations = {"a": False, "b": True}
        truncations = dict.fromkeys(self.agents, False)
        self.agents = ["a"]
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


def leaving_env() -> LeavingEnv:
    return LeavingEnv()


def test_single_agent_view_passes_check_env() -> None:
    env = make_env(RPS)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4 + 2,)  # one-hot of rps' 4 observations + a 2-agent id


def test_agents_vector_env_api_and_autoreset() -> None:
    envs = make_vector_env(RPS, 6, "batched")  # 3 copies x 2 agents
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (6, 6) and envs.single_action_space == gym.spaces.Discrete(3)
    np.testing.assert_array_equal(obs[:, 4:], np.tile(np.eye(2), (3, 1)))  # agent ids
    # Rock (0) against paper (1): the second agent of each copy wins.
    _, rewards, terminated, truncated, _ = envs.step(np.array([0, 1] * 3))
    np.testing.assert_array_equal(rewards, [-1, 1] * 3)
    steps = 1
    while not (terminated | truncated).any():
        _, rewards, terminated, truncated, _ = envs.step(np.zeros(6, dtype=int))
        steps += 1
    assert (terminated | truncated).all() and steps == 15  # rps-v2 lasts 15 cycles by default
    # NEXT_STEP autoreset: the following step only resets (reward 0, action ignored).
    obs, rewards, terminated, truncated, _ = envs.step(np.array([0, 1] * 3))
    assert not rewards.any() and not (terminated | truncated).any()
    with pytest.raises(EnvError, match="multiple of the 2 agents"):
        make_vector_env(RPS, 5, "batched")


def test_agents_leaving_mid_episode_is_a_clear_error() -> None:
    config = EnvConfig(id="payoff/PettingZoo-v0", kwargs={"env_id": f"{__name__}:leaving_env"})
    envs = make_vector_env(config, 2, "batched")
    envs.reset(seed=0)
    with pytest.raises(EnvError, match="agents leaving mid-episode are not supported"):
        envs.step(np.zeros(2, dtype=int))
    with pytest.raises(EnvError, match="cannot make PettingZoo"):
        make_vector_env(
            EnvConfig(id="payoff/PettingZoo-v0", kwargs={"env_id": "classic/nope-v0"}), 2
        )


def test_alphazero_plays_pettingzoo_aec_game() -> None:
    from payoff.algos.alphazero import AlphaZero
    from payoff.envs.pettingzoo import make_pettingzoo, play_aec

    agent = AlphaZero(game="connect4", eval_simulations=30, baselines=["random"])
    env = make_pettingzoo("classic/connect_four-v3", api="aec")
    rng = np.random.default_rng(0)
    policies = {
        "player_0": agent.act,
        "player_1": lambda obs: int(rng.choice(np.flatnonzero(obs["action_mask"]))),
    }
    totals = play_aec(env, policies, seed=0)
    assert set(totals) == {"player_0", "player_1"} and sum(totals.values()) == 0
    rps = make_pettingzoo("classic/rps-v2", api="aec")
    with pytest.raises(EnvError, match="no 'action_mask'"):
        play_aec(rps, {a: (lambda obs: 0) for a in rps.possible_agents})


def test_ippo_config_checks() -> None:
    from payoff.algos.ippo import IPPO

    with pytest.raises(ConfigError, match="payoff/PettingZoo-v0"):
        IPPO(env="CartPole-v1")


@pytest.mark.slow
def test_ippo_learns_simple_spread() -> None:
    """Measured (seed 0): mean return per agent -55.8 untrained, -22.9 after 24k agent steps."""
    pytest.importorskip("mpe2")
    from payoff.algos.ippo import IPPO

    agent = IPPO(
        total_steps=24_000,
        num_envs=24,
        num_steps=50,
        minibatch_size=300,
        epochs=4,
        learning_rate={"start": 1e-3, "end": 1e-3},
        gamma=0.95,
        ent_coef=0.01,
        eval_every=0,
        final_eval_episodes=20,
    )
    before = agent.evaluate(20).mean_return
    agent.learn()
    after = agent.evaluate(20).mean_return
    assert before < -45 and after > -32


def test_ippo_gif_shows_the_whole_team_playing_the_shared_policy(tmp_path, monkeypatch) -> None:
    """Every agent acts by the trained policy in the GIF (not one learner among random
    players, as the single-agent view would show)."""
    pytest.importorskip("mpe2")
    from PIL import Image

    from payoff.algos.ippo import IPPO

    agent = IPPO(num_envs=3, num_steps=8, minibatch_size=24, total_steps=24, eval_every=0)
    seen: list[int] = []
    act = agent.act

    def recorded(obs, deterministic=True):
        seen.append(len(obs))
        return act(obs, deterministic)

    monkeypatch.setattr(agent, "act", recorded)
    path = agent.record_gif(tmp_path / "team.gif")
    with Image.open(path) as gif:
        assert gif.n_frames >= 20  # the reset and max_cycles=25 steps (repeats may merge)
    assert seen == [3] * 25  # one call a step, with the observations of all 3 agents
    assert agent.evaluate(4).episodes == 4  # episodes, not agent-episodes (a mean per agent)


def test_pettingzoo_refusals_point_to_what_works():
    # a turn-based game and agents of different shapes were refused without a way forward
    pytest.importorskip("pettingzoo")
    from payoff.envs.pettingzoo import _Agents, make_pettingzoo

    with pytest.raises(EnvError, match="turn-based game .* AlphaZero"):
        make_pettingzoo("pettingzoo.classic.tictactoe_v3", "parallel")
    pytest.importorskip("mpe2")
    with pytest.raises(EnvError, match="SuperSuit's pad_observations_v0"):
        _Agents("mpe2.simple_adversary_v3", False, {})


def aec_env():
    """A factory that returns PettingZoo's AEC form of rock-paper-scissors."""
    from pettingzoo.classic import rps_v2

    return rps_v2.env()


def test_an_aec_env_from_your_factory_is_named_so() -> None:
    """It failed inside reset with "cannot unpack non-iterable NoneType object"."""
    from payoff.envs.pettingzoo import make_pettingzoo

    with pytest.raises(
        EnvError, match="made an AEC env .* needs a ParallelEnv: return .*aec_to_parallel"
    ):
        make_pettingzoo(f"{__name__}:aec_env")
    assert make_pettingzoo(f"{__name__}:aec_env", api="aec") is not None
