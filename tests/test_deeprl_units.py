"""Unit tests of the deep-RL math: GAE, returns, the clipped loss, truncation bootstrap, buffers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from payoff.algos.shared.advantages import completed_episodes, gae, returns_to_go
from payoff.algos.shared.policy_loss import clipped_surrogate, value_loss
from payoff.models import CategoricalActor, Critic, GaussianActor, load_policy, save_policy
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.replay import ReplayBuffer
from payoff.rollout.vector import VectorRunner


def test_gae_matches_hand_computed_example():
    # One env, three steps, the episode terminates after step 1 (index 1).
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [2.0]])
    dones = torch.tensor([[False], [True], [False]])
    next_values = torch.tensor([4.0])
    gamma, lam = 0.9, 0.5
    advantages, returns = gae(rewards, values, next_values, dones, gamma, lam)
    # By hand: delta_2 = 3 + 0.9*4 - 2 = 4.6; A_2 = 4.6
    #          delta_1 = 2 + 0 - 1 = 1.0 (terminal); A_1 = 1.0 (nothing flows back past a done)
    #          delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4; A_0 = 1.4 + 0.9*0.5*1.0 = 1.85
    assert advantages[:, 0].tolist() == pytest.approx([1.85, 1.0, 4.6])
    assert returns[:, 0].tolist() == pytest.approx([2.35, 2.0, 6.6])


def test_gae_with_lambda_one_is_n_step_return_minus_value():
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([[0.3], [0.2], [0.1]])
    dones = torch.zeros(3, 1, dtype=torch.bool)
    advantages, returns = gae(rewards, values, torch.tensor([10.0]), dones, 0.5, 1.0)
    assert returns[0, 0].item() == pytest.approx(1 + 0.5 + 0.25 + 0.125 * 10)
    assert advantages[0, 0].item() == pytest.approx(returns[0, 0].item() - 0.3)


def test_returns_to_go_and_completed_mask():
    rewards = torch.tensor([[1.0], [1.0], [1.0], [1.0]])
    dones = torch.tensor([[False], [True], [False], [False]])
    returns = returns_to_go(rewards, dones, 0.5)
    assert returns[:, 0].tolist() == pytest.approx([1.5, 1.0, 1.5, 1.0])
    # Steps 2 and 3 belong to an episode still running at the end: not completed.
    assert completed_episodes(dones)[:, 0].tolist() == [True, True, False, False]


def test_clipped_surrogate_on_tiny_batch():
    old = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    # ratios 1.5, 0.5, 1.1, 0.5 with advantages +1, +1, -1, -1; clip 0.2
    new = torch.log(torch.tensor([0.75, 0.25, 0.55, 0.25]))
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    result = clipped_surrogate(new, old, adv, clip=0.2)
    # per sample max(-A r, -A clip(r)): -1.2, -0.5, 1.1, 0.8 -> mean 0.05
    assert result.loss.item() == pytest.approx((-1.2 - 0.5 + 1.1 + 0.8) / 4)
    assert result.clip_fraction.item() == pytest.approx(0.75)  # 1.5, 0.5 and 0.5 lie outside
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.5])
    assert result.approx_kl.item() == pytest.approx(((ratio - 1) - ratio.log()).mean().item())


def test_clipped_surrogate_gradient_vanishes_outside_clip_region():
    old = torch.zeros(1)
    new = torch.tensor([np.log(1.5)], requires_grad=True)
    clipped_surrogate(new, old, torch.tensor([1.0]), 0.2).loss.backward()
    assert new.grad is not None and new.grad.item() == 0.0


def test_value_loss_clipping():
    values, returns, old = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0])
    assert value_loss(values, returns).item() == pytest.approx(2.0)
    # clipped value 1.2 -> (1.2)^2 = 1.44 < 4, the max keeps the unclipped 4 -> 0.5 * 4
    assert value_loss(values, returns, old, clip=0.2).item() == pytest.approx(2.0)
    values = torch.tensor([0.5])  # moving toward the target beyond the clip: clipped is larger
    assert value_loss(values, returns, old, clip=0.2).item() == pytest.approx(0.5 * 0.8**2)


class _CountingEnv(gym.Env):
    """obs = [steps taken in this episode]; reward 1; terminates at 2 steps when `terminate`."""

    def __init__(self, terminate: bool):
        self.observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate = terminate
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.terminate and self.t == 2, False, {}


@pytest.mark.parametrize("terminate", [False, True])
def test_truncation_bootstraps_from_final_observation_but_termination_does_not(terminate):
    """Gymnasium 1.x NEXT_STEP autoreset: the obs returned with the last step is the final
    obs; the next step only resets (invalid). A time limit bootstraps V(final obs)."""
    max_steps = 2 if terminate else 3
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(_CountingEnv(terminate), max_steps)]
    )
    runner = VectorRunner(envs, "counting", seed=0)
    storage = RolloutStorage.allocate(6, 1, (1,), (), torch.long)

    def policy(obs):
        return torch.zeros(1, dtype=torch.long), np.zeros(1, np.int64), torch.zeros(1)

    # V(s) = 10 * steps so far: the final obs has value 10 * max_steps
    runner.collect(policy, storage, value_fn=lambda obs: 10 * obs[:, 0])
    # Every episode is followed by one reset-only step.
    assert storage.valid[:, 0].tolist() == [t % (max_steps + 1) != max_steps for t in range(6)]
    last = max_steps - 1
    assert bool(storage.dones[last, 0])
    assert storage.rewards[max_steps, 0].item() == 0.0  # the reset step pays nothing
    gamma = 0.9
    storage.bootstrap_truncated(gamma)
    expected = 1.0 if terminate else 1.0 + gamma * 10 * max_steps
    assert storage.rewards[last, 0].item() == pytest.approx(expected)
    assert storage.rewards[0, 0].item() == 1.0
    assert runner.finished_returns[0] == max_steps  # episode stats ignore the reset step


def test_replay_buffer_wraps_and_returns_latest():
    buffer = ReplayBuffer(4, (1,))
    for i in range(6):
        buffer.add(
            np.array([[i]], np.float32),
            np.array([i % 2]),
            np.array([i], np.float32),
            np.array([[i + 1]], np.float32),
            np.array([0.0], np.float32),
        )
    assert len(buffer) == 4
    assert sorted(buffer.rewards.tolist()) == [2.0, 3.0, 4.0, 5.0]
    assert buffer.latest(2).rewards.tolist() == [5.0, 4.0]
    copy = ReplayBuffer(4, (1,))
    copy.load_state_dict(buffer.state_dict())
    assert copy.latest(4).rewards.tolist() == buffer.latest(4).rewards.tolist()


def test_gaussian_actor_log_prob_matches_torch_normal():
    space = gym.spaces.Box(-2, 2, (3,), np.float32)
    actor = GaussianActor(gym.spaces.Box(-1, 1, (4,), np.float32), space, log_std_init=-0.5)
    obs, actions = torch.randn(5, 4), torch.randn(5, 3)
    logprobs, entropy = actor.log_prob_entropy(obs, actions)
    dist = torch.distributions.Normal(actor(obs), actor.log_std.exp())
    assert torch.allclose(logprobs, dist.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, dist.entropy().sum(-1), atol=1e-5)
    assert np.all(np.abs(actor.to_env(actions * 10)) <= 2)


def test_categorical_sampling_matches_probabilities():
    torch.manual_seed(0)
    actor = CategoricalActor(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3))
    with torch.no_grad():
        actor.logits[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
        actor.logits[-1].weight.zero_()
    actions, logprobs = actor.sample(torch.zeros(20_000, 2))
    freq = torch.bincount(actions, minlength=3).float() / 20_000
    probs = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    assert torch.allclose(freq, probs, atol=0.02)
    assert torch.allclose(logprobs, probs.log()[actions], atol=1e-5)


def test_save_and_load_policy_roundtrip(tmp_path):
    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    actor = CategoricalActor(obs_space, gym.spaces.Discrete(2), hidden=(8,), normalize_obs=True)
    actor.normalizer.update(torch.randn(100, 4) * 3 + 1)
    critic = Critic(obs_space, (8,), normalizer=actor.normalizer)
    save_policy(tmp_path / "p.safetensors", actor, critic)
    actor2, critic2 = load_policy(tmp_path / "p.safetensors")
    obs = torch.randn(7, 4)
    assert torch.equal(actor(obs), actor2(obs))
    assert critic2 is not None and torch.equal(critic(obs), critic2(obs))


def test_ppo_target_kl_stops_the_epochs_early():
    """One minibatch per epoch: the first epoch's KL is 0 (the policy has not moved), the
    second's is positive, so a tiny target_kl stops after two optimizer steps, not ten."""
    from payoff.algos.ppo import PPO

    settings = dict(
        env="CartPole-v1",
        num_envs=4,
        num_steps=32,
        minibatch_size=128,
        epochs=10,
        total_steps=128,
        eval_every=0,
        final_eval_episodes=1,
        seed=0,
    )
    plain = PPO(**settings).learn()
    assert plain.optimizer.steps == 10 * plain.updates
    early = PPO(**settings, target_kl=1e-12).learn()
    assert early.optimizer.steps == 2 * early.updates
