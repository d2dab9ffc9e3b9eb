"""evaluate() as Stable-Baselines3's evaluate_policy is used: each episode's return and
length, sampled actions (deterministic=False), and another env of the same spaces."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from payoff import PPO
from payoff.cli import main
from payoff.core.errors import ConfigError, EnvError


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
    # sampled with a seed: the same episodes each time, whatever predict() drew in between
    agent.predict(np.zeros(4, np.float32), deterministic=False)
    assert (
        agent.evaluate(10, seed=7, deterministic=False).episode_returns == sampled.episode_returns
    )
    assert (
        agent.evaluate(10, seed=8, deterministic=False).episode_returns != sampled.episode_returns
    )


@pytest.mark.parametrize("name", ["dqn", "sac", "bc", "dagger"])
def test_sampled_evaluation_repeats_under_its_seed_and_imitation_takes_its_keywords(name):
    import payoff

    if name == "sac":
        agent = payoff.SAC("Pendulum-v1", learning_starts=50, batch_size=32, hidden=[16])
        agent.learn(100)
        short = {"id": "Pendulum-v1", "max_episode_steps": 30}
    else:
        make = getattr(payoff, name.upper() if name != "dagger" else "DAgger")
        settings = {"dqn": {"learning_starts": 50}, "bc": {"epochs": 1}, "dagger": {"rounds": 2}}
        if name != "dqn":
            settings[name].update(expert="cartpole", label_budget=100)
        agent = make("CartPole-v1", **settings[name])
        agent.learn(100 if name == "dqn" else None)
        short = {"id": "CartPole-v1", "max_episode_steps": 12}
    first = agent.evaluate(4, seed=3, deterministic=False, env=short)
    agent.predict(agent.observation_space.sample(), deterministic=False)
    assert agent.evaluate(4, seed=3, deterministic=False, env=short).episode_returns == (
        first.episode_returns
    )
    assert max(first.episode_lengths) <= short["max_episode_steps"]
    with pytest.raises(ConfigError, match="takes True or False"):
        agent.evaluate(2, deterministic="false")
    with pytest.raises(ConfigError, match=r"predict\(deterministic=...\) takes True or False"):
        agent.predict(agent.observation_space.sample(), deterministic="false")


def test_another_env_of_the_same_spaces_and_one_of_other_spaces(agent):
    short = agent.evaluate(3, env=gym.make("CartPole-v1", max_episode_steps=20))
    assert max(short.episode_lengths) <= 20
    assert agent.evaluate(2, env={"id": "CartPole-v1"}).episodes == 2
    with pytest.raises(EnvError, match=r"env 'MountainCar-v0' has observation_space Box.*trained"):
        agent.evaluate(2, env="MountainCar-v0")
    # a wrapper that changes only the Box's bounds (to -inf, inf) keeps the layout
    normalized = gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))
    assert agent.evaluate(2, env=normalized).episodes == 2


def test_layouts_match_by_kind_and_shape_not_bounds():
    from payoff.algos.base import same_layout

    box = gym.spaces.Box(-1.0, 1.0, (3,))
    assert same_layout(box, gym.spaces.Box(-np.inf, np.inf, (3,), np.float64))
    assert not same_layout(box, gym.spaces.Box(-1.0, 1.0, (4,)))
    assert not same_layout(gym.spaces.Discrete(3), gym.spaces.Discrete(4))
    assert not same_layout(gym.spaces.Discrete(3), box)
    nested = gym.spaces.Dict({"a": box, "b": gym.spaces.Discrete(2)})
    assert same_layout(
        nested, gym.spaces.Dict({"a": gym.spaces.Box(0, 5, (3,)), "b": gym.spaces.Discrete(2)})
    )
    assert not same_layout(nested, gym.spaces.Dict({"a": box}))


def test_the_cli_samples_with_stochastic(tmp_path, capsys):
    from payoff.train import train

    run = train("frozenlake-q", ["total_episodes=200"], out=tmp_path, media=False)
    capsys.readouterr()
    assert main(["eval", str(run.path), "--episodes", "5", "--stochastic", "--json"]) == 0
    assert '"episodes": 5' in capsys.readouterr().out
    # --seed picks the episodes; --json lists each one's return and length
    seeded = []
    for seed in ("3", "3", "40"):
        assert main(["eval", str(run.path), "--episodes", "30", "--seed", seed, "--json"]) == 0
        seeded.append(json.loads(capsys.readouterr().out))
    assert len(seeded[0]["episode_returns"]) == len(seeded[0]["episode_lengths"]) == 30
    assert seeded[0] == seeded[1] and seeded[0]["episode_lengths"] != seeded[2]["episode_lengths"]
    assert main(["eval", str(run.path), "--seed", "-1"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err
    # the plain line names the env it played: the checkpoint's, whatever config.yaml says
    assert main(["eval", str(run.path), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("FrozenLake-v1 (the env in the checkpoint's config): mean return")


def test_sb3_evaluate_keywords(agent):
    assert agent.evaluate(n_eval_episodes=3).episodes == 3
    with pytest.raises(ConfigError, match="result.episode_returns and result.episode_lengths"):
        agent.evaluate(5, return_episode_rewards=True)


def test_learn_after_a_stop_trains_on_only_once_the_stop_is_off(tmp_path):
    agent = PPO(
        "CartPole-v1",
        num_envs=16,
        num_steps=64,
        minibatch_size=256,
        epochs=4,
        learning_rate=3e-3,
        stop_at_return=300,
        eval_every=2048,
        eval_episodes=5,
        final_eval_episodes=5,
        seed=0,
    ).learn(60_000)
    solved = agent.step
    assert solved < 60_000  # measured: 2,975 (seed 0)
    with pytest.warns(RuntimeWarning, match=r"stop_at_return=300.0\) at step .* agent.config"):
        agent.learn(5_000)
    assert agent.step == solved
    agent.save(tmp_path / "stopped.safetensors")
    again = PPO.load(tmp_path / "stopped.safetensors", stop_at_return=None).learn(5_000)
    assert again.step >= solved + 5_000


def test_a_vector_env_that_autoresets_on_the_same_step_is_refused():
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * 4, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    with pytest.raises(EnvError, match="autoreset mode SAME_STEP; payoff's runner needs NEXT_STEP"):
        PPO(envs)


def test_a_run_made_in_python_records_the_agents_config(tmp_path):
    from payoff.track.run import Run

    run = Run.create(tmp_path, "mine", {"algo": "ppo", "env": {"id": "CartPole-v1"}})
    PPO(
        "Acrobot-v1",
        run=run,
        hidden=[32, 32],
        num_envs=4,
        total_steps=256,
        eval_every=0,
        final_eval_episodes=1,
    )
    recorded = Run(run.path).config
    assert recorded["env"]["id"] == "Acrobot-v1" and recorded["hidden"] == [32, 32]


def _small(name: str):
    from payoff import ES, MBRL, RecurrentPPO

    if name == "es":
        return ES("CartPole-v1", pairs=4, hidden=[8], total_steps=400, final_eval_episodes=1)
    if name == "mbrl":
        planner = {"horizon": 3, "population": 10, "iterations": 2, "elites": 3}
        return MBRL(
            "CartPole-v1",
            total_steps=40,
            learning_starts=20,
            train_every=20,
            fit_steps=5,
            hidden=[8],
            ensemble=2,
            planner=planner,
            final_eval_episodes=1,
        )
    return RecurrentPPO(
        env="CartPole-v1", num_envs=4, num_steps=16, minibatch_size=32, rnn_hidden=8, hidden=[8]
    )


@pytest.mark.parametrize("name", ["es", "mbrl", "recurrent_ppo"])
def test_es_mbrl_and_recurrent_ppo_take_evaluate_s_env_and_keywords(name):
    agent = _small(name).learn(64)
    short = agent.evaluate(3, env=gym.make("CartPole-v1", max_episode_steps=12))
    assert short.episodes == 3 and max(short.episode_lengths) <= 12
    again = agent.evaluate(n_eval_episodes=3, env={"id": "CartPole-v1", "max_episode_steps": 12})
    assert again.episode_returns == short.episode_returns  # the same seeds, the same episodes
    assert (
        agent.evaluate(
            2, deterministic=False, env=gym.make("CartPole-v1", max_episode_steps=12)
        ).episodes
        == 2
    )
    with pytest.raises(EnvError, match=r"env 'MountainCar-v0' has observation_space"):
        agent.evaluate(2, env="MountainCar-v0")


def test_sb3_num_timesteps_and_get_env(agent):
    from payoff import QLearning

    assert agent.num_timesteps == agent.step >= 2_048
    env = agent.get_env()  # a fresh vector env like the training one: stepping it is safe
    assert env is not agent.runner.envs and env.num_envs == agent.config.num_envs
    obs, _ = env.reset(seed=0)
    before = agent.step
    for _ in range(3):
        actions, _ = agent.predict(obs)
        obs, *_ = env.step(actions)
    assert obs.shape == (agent.config.num_envs, 4) and agent.step == before
    q = QLearning("FrozenLake-v1", seed=0).learn(30)
    assert q.step == 30 and q.num_timesteps == q.env_steps > 30  # episodes vs env steps
    assert q.get_env().observation_space == q.env.observation_space and q.get_env() is not q.env


def test_save_into_a_folder_says_to_name_a_file(agent, tmp_path):
    with pytest.raises(ConfigError, match=r"save\(\) writes one file.*ppo.safetensors"):
        agent.save(tmp_path)
    assert agent.save(tmp_path / "ppo.safetensors").is_file()


def test_conflicting_or_mistyped_evaluate_arguments_are_refused(agent, tmp_path, capsys):
    with pytest.raises(ConfigError, match="got episodes=3 and n_eval_episodes=4: give one"):
        agent.evaluate(3, n_eval_episodes=4)
    assert agent.evaluate(4, n_eval_episodes=4).episodes == 4
    with pytest.raises(ConfigError, match="got episodes=100 and n_eval_episodes=2"):
        agent.evaluate(100, n_eval_episodes=2)  # 100 given, not the default: a conflict
    with pytest.raises(ConfigError, match="takes True or False, got 'false'"):
        agent.evaluate(2, deterministic="false")
    run = agent.save(tmp_path / "a.safetensors")
    assert main(["eval", str(run), "--episodes", "2"]) == 2  # a file where a run folder goes
    assert "is a file, not a run directory" in capsys.readouterr().err


class _SaysSuccess(gym.Wrapper):
    """CartPole whose final info says is_success when the pole stood 40 steps or more."""

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if terminated or truncated:
            info = {**info, "is_success": self.steps >= 40}
        return obs, reward, terminated, truncated, info


def test_batched_evaluation_reads_success_from_each_env_s_final_info():
    from payoff.envs.make import EnvConfig
    from payoff.rollout.evaluate import evaluate_policy
    from payoff.rollout.vector import evaluate_batched

    gym.register("payoff-test/SaysSuccess-v0", lambda **kw: _SaysSuccess(gym.make("CartPole-v1")))
    try:
        env = EnvConfig(id="payoff-test/SaysSuccess-v0")
        batched = evaluate_batched(env, lambda obs: (obs[:, 2] > 0).long().numpy(), 20, 3)
        one_by_one = evaluate_policy(env, lambda obs: int(obs[2] > 0), 20, 3)
        assert batched.episode_lengths == one_by_one.episode_lengths
        expected = np.mean([n >= 40 for n in batched.episode_lengths])
        assert 0 < expected < 1
        assert batched.success_rate == one_by_one.success_rate == pytest.approx(expected)
        # FrozenLake's success is reaching the goal; CartPole defines none
        frozen = PPO("FrozenLake-v1", seed=0, num_steps=16, num_envs=2, minibatch_size=16).learn(32)
        assert frozen.evaluate(4).success_rate is not None
        assert (
            evaluate_batched(
                EnvConfig(id="CartPole-v1"), lambda o: np.zeros(len(o), int), 2, 0
            ).success_rate
            is None
        )
    finally:
        gym.registry.pop("payoff-test/SaysSuccess-v0", None)
