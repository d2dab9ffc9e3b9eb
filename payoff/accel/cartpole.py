"""The fused CartPole rollout: payoff's batched CartPole and a small MLP actor stepped
together in the native kernels, registered with the vector runner as the collector for
`CartPoleVectorEnv` (payoff.rollout.vector.register_fused_collector)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from payoff.accel.native import kernels
from payoff.envs.cartpole import CartPoleVectorEnv
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.vector import VectorRunner, register_fused_collector


def collect_cartpole(runner: VectorRunner, sampler: Any, storage: RolloutStorage) -> bool:
    """`runner.collect` for a NativeRolloutSampler on payoff's batched CartPole, in the
    native kernels (_kernels.c's rollout_cartpole): actor, env and the runner's books in one
    call, which comes back here only after a step where envs reset, for their draws from
    the envs' own generators. The same steps, actions, rewards and episodes as the runner's
    step loop (tests/test_native.py). False where it does not apply (no kernels, info keys,
    a device, another actor), and nothing was done."""
    native, envs = kernels(), runner.envs
    actor = sampler.native_actor() if hasattr(sampler, "native_actor") else None
    steps, n = storage.num_steps, runner.num_envs
    if (
        native is None
        or actor is None
        or type(envs) is not CartPoleVectorEnv
        or runner.info_keys
        or runner.device is not None
        or sampler.step != 0
        or sampler.noise.shape != (steps, n, 2)
        or storage.obs.dtype != torch.float32
        or tuple(storage.obs.shape) != (steps, n, 4)
        or not envs.state.flags.c_contiguous
        # the env's own "resets next step" and the runner's (one array for both in C)
        or not np.array_equal(envs.needs_reset, runner.resetting)
    ):
        return False
    current = np.array(runner.obs, dtype=np.float32, order="C")
    obs_np = storage.obs.numpy()
    rewards, terminated = storage.rewards.numpy(), storage.terminated.numpy()
    truncated, valid = storage.truncated.numpy(), storage.valid.numpy()
    finished_returns, finished_lengths = np.empty(steps * n), np.empty(steps * n, np.int64)
    episode_length = np.ascontiguousarray(runner.episode_length, dtype=np.int64)
    episode_return = np.ascontiguousarray(runner.episode_return, dtype=np.float64)
    resetting = np.empty(n, np.int64)
    envs.needs_reset = np.ascontiguousarray(envs.needs_reset, dtype=bool)
    t = finished = 0
    not_finite = False
    while t < steps and not not_finite:
        t, resets, finished, valid_steps, not_finite = native.rollout_cartpole(
            *actor,
            sampler.noise,
            sampler.logits,
            sampler.actions_np,
            envs.state,
            envs.elapsed,
            envs.needs_reset,
            envs.max_episode_steps,
            current,
            obs_np,
            rewards,
            terminated,
            truncated,
            valid,
            episode_return,
            episode_length,
            finished_returns,
            finished_lengths,
            resetting,
            t,
            finished,
            runner.check_finite,
        )
        envs.redraw(resetting[:resets].tolist(), current)
        runner.env_steps += valid_steps
    # the books as the step loop leaves them, also when a step was not finite
    sampler.step = t
    runner.episode_return, runner.episode_length = episode_return, episode_length
    runner.finished_returns += finished_returns[:finished].tolist()
    runner.finished_lengths += finished_lengths[:finished].tolist()
    runner.resetting = envs.needs_reset.copy()
    runner.obs = current
    if not_finite:
        runner.check_step(current, rewards[t - 1], runner.env_steps)
    return True


register_fused_collector(CartPoleVectorEnv, collect_cartpole)
