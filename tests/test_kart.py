"""KartTrack-v0: Gymnasium's checker, rendering, determinism by seed, tracks, the scripted expert."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from payoff.core.errors import EnvError
from payoff.envs.kart import FAMILIES, KartBatch, get_track, procedural_track
from payoff.envs.make import make_env
from payoff.rollout.experts import KartExpert


@pytest.mark.parametrize("kwargs", [{}, {"throttle": True, "track": "heldout"}, {"track": "oval"}])
def test_passes_gymnasium_env_checker(kwargs):
    env = make_env("payoff/KartTrack-v0", **kwargs)
    check_env(env.unwrapped, skip_render_check=False)


def test_renders_rgb_frames_that_follow_the_kart():
    env = make_env("payoff/KartTrack-v0", render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    for _ in range(10):
        env.step(np.array([0.3], dtype=np.float32))
    later = env.render()
    assert first.shape == (320, 320, 3) and first.dtype == np.uint8
    assert (first != later).any()


def test_same_seed_same_episode_different_seed_different():
    def episode(seed: int) -> np.ndarray:
        env = make_env("payoff/KartTrack-v0")
        obs, _ = env.reset(seed=seed)
        rows = [obs]
        for t in range(50):
            obs, *_ = env.step(np.array([0.1 * np.sin(t / 5)], dtype=np.float32))
            rows.append(obs)
        return np.stack(rows)

    assert np.array_equal(episode(3), episode(3))
    assert not np.array_equal(episode(3), episode(4))


def test_vector_env_is_deterministic_and_autoresets_next_step():
    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        envs = gym.make_vec(
            "payoff/KartTrack-v0", num_envs=4, vectorization_mode="vector_entry_point"
        )
        obs, _ = envs.reset(seed=seed)
        actions = np.full((4, 1), 1.0, dtype=np.float32)  # full lock: leaves the track soon
        dones, trace = [], [obs]
        for _ in range(60):
            obs, reward, terminated, truncated, _ = envs.step(actions)
            dones.append(terminated | truncated)
            trace.append(obs)
        return np.stack(trace), np.stack(dones)

    trace, dones = run(1)
    assert np.array_equal(trace, run(1)[0])
    t, i = np.argwhere(dones)[0]
    # The step after the end returns the fresh episode's first observation: on the centre line.
    assert abs(trace[t + 2, i, 0]) < 1e-6 and abs(trace[t + 1, i, 0]) > 1.0


def test_track_families_and_specs():
    train = [procedural_track("train", s) for s in range(20)]
    heldout = [procedural_track("heldout", s) for s in range(20)]
    assert procedural_track("train", 5).points.tolist() == train[5].points.tolist()
    # held-out tracks bend both ways, more often: the training family mostly bends left.
    right_train = np.mean([(t.curvature < 0).mean() for t in train])
    right_heldout = np.mean([(t.curvature < 0).mean() for t in heldout])
    assert right_heldout > right_train + 0.1
    for track in train + heldout:
        assert np.abs(track.curvature).max() <= 0.3 + 1e-9
        assert 60 < track.length < 130
    assert get_track("heldout:7").name == "heldout:7"
    assert set(FAMILIES) == {"train", "heldout"}
    with pytest.raises(EnvError, match="unknown track 'ovall'.*'oval'"):
        get_track("ovall")
    with pytest.raises(EnvError, match="seed after ':'"):
        get_track("train:x")


@pytest.mark.parametrize("track", ["train", "heldout"])
def test_scripted_expert_completes_laps_near_the_centre(track):
    batch = KartBatch(64, track=track)
    rng = np.random.default_rng(0)
    obs = batch.reset(rng)
    expert = KartExpert()
    running = np.ones(64, dtype=bool)
    success = np.zeros(64, dtype=bool)
    worst = np.zeros(64)
    while running.any():
        obs, _, terminated, truncated = batch.step(expert.act(obs), rng)
        worst = np.where(running, np.maximum(worst, np.abs(batch.offset)), worst)
        success |= running & batch.lap_completed()
        running &= ~(terminated | truncated)
    assert success.mean() == 1.0
    assert worst.mean() < 0.35  # metres, of a 1 m half-width: near-centre demonstrations


def test_lap_reward_sums_to_about_100():
    env = make_env("payoff/KartTrack-v0", track="oval")
    obs, _ = env.reset(seed=0)
    expert, total, done = KartExpert(), 0.0, False
    info = {}
    while not done:
        obs, reward, terminated, truncated, info = env.step(expert.act(obs[None])[0])
        total += reward
        done = terminated or truncated
    assert info["is_success"] and 100.0 <= total < 101.0


def test_bad_render_mode_is_a_clear_error():
    with pytest.raises(EnvError, match="rgb_array"):
        make_env("payoff/KartTrack-v0", render_mode="ansi")


def test_vector_env_state_round_trip_continues_exactly():
    def make():
        return gym.make_vec(
            "payoff/KartTrack-v0", num_envs=3, vectorization_mode="vector_entry_point"
        )

    steer = np.full((3, 1), 0.4, dtype=np.float32)
    envs = make()
    envs.reset(seed=5)
    for _ in range(25):
        envs.step(steer)
    saved = envs.get_state()
    first = [envs.step(steer)[0] for _ in range(40)]
    other = make()
    other.reset(seed=99)
    other.set_state(saved)
    second = [other.step(steer)[0] for _ in range(40)]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
