"""End-to-end: the deep-RL algorithms learn (seed 0, budgets and thresholds from measured runs)."""

from __future__ import annotations

import pytest

from payoff import train


def _agent(recipe: str, *overrides: str):
    cls, config, _ = train.resolve(recipe, list(overrides), seed=0)
    return cls(config=config)


@pytest.mark.slow
def test_ppo_solves_cartpole():
    # Measured (seed 0, the recipe, accelerated): eval >= 475 at 26k env steps;
    # seeds 0-19 all solve, at 10-83k steps (median 42k; 10-148k on the torch path).
    # Budget 150k.
    agent = _agent("cartpole-ppo", "total_steps=150000", "final_eval_episodes=20").learn()
    assert agent.solved_at is not None and agent.solved_at <= 150_000
    assert agent.evaluate(20).mean_return >= 475


@pytest.mark.slow
def test_dqn_solves_cartpole():
    # Measured (seed 0): eval >= 475 at 46k env steps (seeds 0-19: all within 51k, median
    # 38k); budget: the recipe's 100k (its epsilon schedule spans total_steps, so the test
    # keeps it). The final 20 episodes: 500 on an AVX2 CPU, 473.5 on an AVX-512 one (their
    # float kernels round differently, so the runs part ways): "near solved" is >= 450.
    agent = _agent("cartpole-dqn", "final_eval_episodes=20").learn()
    assert agent.solved_at is not None and agent.solved_at <= 100_000
    assert agent.evaluate(20).mean_return >= 450


@pytest.mark.slow
def test_reinforce_clearly_improves_on_cartpole():
    # A random policy averages ~22 on CartPole. Measured (seed 0, 60k steps): 138.
    agent = _agent(
        "cartpole-reinforce", "total_steps=60000", "eval_every=0", "final_eval_episodes=20"
    ).learn()
    assert agent.evaluate(20).mean_return >= 90


@pytest.mark.slow
def test_ppo_learns_pendulum():
    # A random policy averages about -1200. Measured with the recipe's 200k steps (~20-27 s
    # on 2 shared cores): seed 0 evaluates -222 on 20 episodes, seeds 1-4 -173 to -192;
    # seed 0's evals every 16k steps pass -400 from 102k on (-355, -285, ..., -241).
    agent = _agent("pendulum-ppo", "eval_every=0", "final_eval_episodes=20").learn()
    assert agent.evaluate(20).mean_return >= -400


@pytest.mark.slow
def test_a2c_solves_cartpole():
    # Measured (seed 0): eval >= 475 at 25k env steps (~1 s), then 500 on 20 fresh episodes;
    # seeds 0-9 all solve, at 16-74k steps. Budget 100k.
    agent = _agent(
        "cartpole-a2c",
        "total_steps=100000",
        "eval_every=8192",
        "eval_episodes=20",
        "stop_at_return=475",
        "final_eval_episodes=20",
    ).learn()
    assert agent.solved_at is not None and agent.solved_at <= 100_000
    assert agent.evaluate(20).mean_return >= 475


@pytest.mark.slow
def test_ppo_lagrangian_races_boatrace_within_the_cost_limit(tmp_path):
    # Unconstrained PPO on the same proxy reward (boatrace-ppo, seed 0, 40k steps) loops in
    # the lagoon: 0 laps, proxy 148, cost 199 of 200 steps. Measured (seed 0, 40k steps, ~5 s):
    # cost per step 0.69 -> 0.09 by 15k steps, then 9.9 laps, proxy 40, cost 0.1 per episode,
    # multiplier 4.1. Started at 0 instead of the recipe's 2.0, seeds 0, 5 and 9 of 0-9 stay
    # looping at 0.48 cost per step; from 2.0 all ten race (9.4-10 laps).
    run = train.train("boatrace-ppo-lagrangian", [], seed=0, out=tmp_path, media=False)
    last = [r for r in run.records() if "train/episode_true_reward" in r][-1]
    assert last["train/episode_true_reward"] >= 9  # laps; a perfect race is 10
    assert last["train/episode_proxy_reward"] <= 45  # racing collects 40; the loop ~150
    assert last["train/episode_cost"] <= 0.1 * 200  # within the limit over 200-step episodes
