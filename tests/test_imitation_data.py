"""Experts and demonstrations: Minari's on-disk layout both ways, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from payoff.core.errors import ConfigError, DataError, EnvError, PayoffError
from payoff.envs.make import make_env
from payoff.rollout import demonstrations
from payoff.rollout.experts import (
    CartPoleExpert,
    Expert,
    FunctionExpert,
    KartExpert,
    KeyboardExpert,
    check_expert,
    make_expert,
)


def test_experts_follow_the_protocol_and_fit_their_envs():
    kart = make_env("payoff/KartTrack-v0")
    cartpole = make_env("CartPole-v1")
    for expert, env in ((KartExpert(), kart), (CartPoleExpert(), cartpole)):
        assert isinstance(expert, Expert)
        check_expert(expert, env.observation_space, env.action_space)


def test_expert_and_env_with_mismatched_spaces_is_a_clear_error():
    kart = make_env("payoff/KartTrack-v0")
    cartpole = make_env("CartPole-v1")
    with pytest.raises(EnvError, match="CartPoleExpert returned actions of shape .* do not match"):
        check_expert(CartPoleExpert(), kart.observation_space, kart.action_space)
    with pytest.raises(EnvError, match="KartExpert failed on observations"):
        check_expert(KartExpert(), cartpole.observation_space, cartpole.action_space)
    constant = FunctionExpert(lambda obs: np.zeros((len(obs), 3), dtype=np.float32))
    with pytest.raises(EnvError, match=r"needs \[B, 1\] floats"):
        check_expert(constant, kart.observation_space, kart.action_space)


def test_keyboard_expert_without_a_display_says_so(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    env = make_env("payoff/KartTrack-v0")
    with pytest.raises(PayoffError, match="needs a display"):
        KeyboardExpert(env.action_space)
    with pytest.raises(PayoffError, match="needs a display"):
        make_expert("keyboard", env.action_space)
    with pytest.raises(ConfigError, match="unknown expert 'karts'.*'kart'"):
        make_expert("karts")


def test_record_uses_exactly_the_label_budget():
    demos = demonstrations.record("CartPole-v1", CartPoleExpert(), steps=700, seed=0)
    assert len(demos) == 700
    assert demos.observations.shape == (700, 4) and demos.actions.shape == (700,)
    # The scripted balancer never drops the pole, so the budget cuts a 500-step episode.
    assert demos.num_episodes == 2 and demos.truncations[-1] and not demos.terminations.any()


def test_saved_demonstrations_load_back_and_load_in_minari(tmp_path):
    pytest.importorskip("h5py")  # the imitation extra (payoff[dev] installs it too)
    demos = demonstrations.record("payoff/KartTrack-v0", KartExpert(), episodes=2, seed=0)
    path = demonstrations.save(demos, tmp_path / "kart", dataset_id="payoff/kart-expert-v0")
    back = demonstrations.load(path, env_id="payoff/KartTrack-v0")
    assert np.array_equal(back.observations, demos.observations)
    assert np.array_equal(back.actions, demos.actions)
    assert np.array_equal(back.episode_starts, demos.episode_starts)
    assert back.env_id == "payoff/KartTrack-v0"

    minari = pytest.importorskip("minari")
    dataset = minari.MinariDataset(path / "data")
    assert dataset.total_episodes == 2 and dataset.total_steps == len(demos)
    episode = dataset[0]
    first = demos.episode_starts[1]
    assert np.allclose(episode.actions, demos.actions[:first])
    assert np.allclose(episode.observations[:-1], demos.observations[:first])


def test_datasets_written_by_minari_load_here(tmp_path):
    pytest.importorskip("minari")
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    # Minari's own writer (its DataCollector needs jax; the storage layer below does not).
    env = gym.make("CartPole-v1")
    storage = MinariStorage.new(tmp_path / "data", env_spec=env.spec, data_format="hdf5")
    storage.update_metadata({"dataset_id": "payoff/cartpole-test-v0", "minari_version": "0.5.4"})
    expert, episodes = CartPoleExpert(), []
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        observations, actions = [obs], []
        for _ in range(30):
            action = int(expert.act(obs[None])[0])
            obs, *_ = env.step(action)
            observations.append(obs)
            actions.append(action)
        episodes.append(
            EpisodeBuffer(
                id=seed,
                observations=observations,
                actions=actions,
                rewards=[1.0] * 30,
                terminations=[False] * 30,
                truncations=[False] * 29 + [True],
            )
        )
    storage.update_episodes(episodes)
    demos = demonstrations.load(tmp_path, env_id="CartPole-v1")
    assert len(demos) == 60 and demos.num_episodes == 2
    assert demos.env_id == "CartPole-v1"
    assert np.array_equal(demos.actions[:30], episodes[0].actions)


def test_broken_or_foreign_datasets_are_clear_errors(tmp_path):
    h5py = pytest.importorskip("h5py")
    demos = demonstrations.record("CartPole-v1", CartPoleExpert(), steps=50, seed=0)
    path = demonstrations.save(demos, tmp_path / "cp")
    with pytest.raises(DataError, match="recorded on 'CartPole-v1', not 'payoff/KartTrack-v0'"):
        demonstrations.load(path, env_id="payoff/KartTrack-v0")
    with pytest.raises(DataError, match="already exists"):
        demonstrations.save(demos, path)
    with h5py.File(path / "data" / "main_data.hdf5", "a") as file:
        del file["episode_0"]["actions"]
    with pytest.raises(DataError, match="episode_0 is missing field.*actions"):
        demonstrations.load(path)
    meta = path / "data" / "metadata.json"
    data = json.loads(meta.read_text())
    del data["action_space"]
    meta.write_text(json.dumps(data))
    with pytest.raises(DataError, match="missing 'action_space'"):
        demonstrations.load(path)
    with pytest.raises(DataError, match="not a demonstrations dataset"):
        demonstrations.load(tmp_path / "nothing")
