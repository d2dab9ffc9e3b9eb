"""MBPO: the real/imagined minibatch mix, the model's rollouts, its errors, exact resume,
and learning on Pendulum-v1 (seed 0, budget and threshold from measured runs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from payoff import train
from payoff.algos.mbpo import MBPO
from payoff.core.errors import ConfigError
from payoff.rollout.replay import TransitionBatch, interleave

TINY = {
    "env": "Pendulum-v1",
    "hidden": [16, 16],
    "learning_starts": 64,
    "batch_size": 20,
    "gradient_steps": 2,
    "real_ratio": 0.25,
    "rollout_batch": 50,
    "model_retain": 2,
    "model": {"ensemble": 3, "hidden": [16], "fit_steps": 5, "batch_size": 32, "train_every": 50},
    "eval_every": 0,
    "final_eval_episodes": 1,
    "log_every": 50,
}


def _rows(array: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in np.asarray(array, dtype=np.float32)}


def test_interleave_puts_each_steps_parts_together():
    first = TransitionBatch(*(torch.arange(6.0) for _ in TransitionBatch.FIELDS))
    second = TransitionBatch(*(100 + torch.arange(9.0) for _ in TransitionBatch.FIELDS))
    mixed = interleave(first, second, steps=3)
    expected = [0, 1, 100, 101, 102, 2, 3, 103, 104, 105, 4, 5, 106, 107, 108]
    for name in TransitionBatch.FIELDS:
        assert getattr(mixed, name).tolist() == expected


def test_minibatches_draw_real_ratio_of_real_transitions():
    agent = MBPO(seed=0, total_steps=120, **TINY).learn()
    assert agent.fits >= 2 and len(agent.model_buffer) == 2 * 50  # two rounds retained
    real_obs, imagined_obs = (
        _rows(agent.buffer.obs[: len(agent.buffer)]),
        _rows(agent.model_buffer.obs[: len(agent.model_buffer)]),
    )
    batches, size = agent.minibatches(4)
    assert size == 20 and len(batches.obs) == 80
    real = round(0.25 * 20)
    for k in range(4):
        rows = batches.obs[k * size : (k + 1) * size].numpy()
        assert all(row.tobytes() in real_obs for row in rows[:real])
        assert all(row.tobytes() in imagined_obs for row in rows[real:])
        # the imagined rows are the model's next states, which no real step produced
        nexts = batches.next_obs[k * size + real : (k + 1) * size].numpy()
        assert not any(row.tobytes() in _rows(agent.buffer.next_obs) for row in nexts)


def test_one_step_rollouts_start_at_real_states_and_follow_a_member():
    agent = MBPO(seed=1, total_steps=110, **TINY).learn()  # one refit (at 64), one round
    assert agent.fits == 1 and len(agent.model_buffer) == 50
    b, m = agent.buffer, agent.model_buffer
    real_obs = _rows(b.obs[: len(b)])
    assert all(row.tobytes() in real_obs for row in m.obs[: len(m)])
    # Each imagined step is one member's sample: within a few of its stds of its mean.
    o = agent.model.obs_dim
    inputs = torch.cat([torch.from_numpy(m.obs[:50]), torch.from_numpy(m.actions[:50])], 1)
    with torch.no_grad():
        mean, std = agent.model(inputs.expand(agent.model.members, -1, -1))
    delta = torch.from_numpy(m.next_obs[:50] - m.obs[:50])
    z = ((delta - mean[..., :o]) / std[..., :o]).abs().amax(-1)  # [E, N]
    assert bool((z.min(0).values < 6).all())
    assert np.all(np.abs(m.actions[:50]) <= 1.0)
    logged = [r for r in agent.history if "train/model_disagreement" in r]
    assert logged and logged[0]["train/model_buffer"] == 50
    assert logged[0]["train/model_disagreement"] > 0


def test_resume_from_saved_state_continues_exactly(tmp_path):
    straight = MBPO(seed=3, total_steps=200, **TINY).learn()
    first = MBPO(seed=3, total_steps=200, **TINY).learn(total=100)
    resumed = MBPO.load(first.save(tmp_path / "half.safetensors")).learn()
    keys = ("train/critic_loss", "model/train_loss")

    def metrics(history):
        return [(r["step"], *(r.get(k) for k in keys)) for r in history if keys[0] in r]

    expected, got = metrics(straight.history), metrics(first.history) + metrics(resumed.history)
    assert len(expected) == len(got) > 2
    assert got == expected


def test_bad_settings_name_the_value():
    with pytest.raises(ConfigError, match="real_ratio 0.99"):
        MBPO(seed=0, total_steps=10, **{**TINY, "real_ratio": 0.99})
    with pytest.raises(ConfigError, match="model.activation"):
        MBPO(seed=0, total_steps=10, **{**TINY, "model": {"activation": "swish"}})
    with pytest.raises(ConfigError, match="rollout_length"):
        MBPO(seed=0, total_steps=10, **{**TINY, "rollout_length": 0})
    with pytest.raises(ConfigError, match="mbpo runs on the CPU"):
        MBPO(seed=0, total_steps=10, device="cuda", **TINY)


@pytest.mark.slow
def test_mbpo_solves_pendulum_in_1400_steps():
    # Measured with recipe pendulum-mbpo, evals of 5 episodes every 200 steps: seeds 0, 1, 2
    # first at -200 or better at 800, 800 and 600 steps; each dips once more before it stays
    # there, from 1000-1400 steps. Seed 0 after 1,400 steps: -154.6 on 20 fresh episodes.
    # pendulum-sac needs 4000-5000 steps to first reach -200 (test_continuous_control).
    cls, config, _ = train.resolve(
        "pendulum-mbpo", ["total_steps=1400", "eval_every=0", "final_eval_episodes=1"], seed=0
    )
    agent = cls(config=config).learn()
    assert agent.evaluate(20).mean_return >= -250
