"""Proximal Policy Optimization (Schulman et al. 2017), discrete and continuous actions.

Per update:
  1. collect num_envs x num_steps steps with the current policy (payoff.rollout.vector);
  2. add gamma * V(final obs) to rewards cut by a time limit (not to terminal ones);
  3. GAE(lambda) advantages and value targets (payoff.algos.shared.advantages.gae);
  4. `epochs` passes over shuffled minibatches of the clipped surrogate
     (payoff.algos.shared.policy_loss.clipped_surrogate) + value loss - entropy bonus.

Python API:
    agent = PPO(env="CartPole-v1", total_steps=100_000).learn()
    agent.save("ppo.safetensors"); agent = PPO.load("ppo.safetensors")
    action, _ = agent.predict(obs)                  # SB3's (action, state); agent.act(obs)
    PPO(env=..., init_from="bc_policy.safetensors")          # start from a saved actor (+critic)
    PPO(env=...).init_policy(actor, critic).learn()  # ... or from modules in memory
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from payoff.accel import NativeActorCritic, NativeRolloutSampler, ppo_accelerator
from payoff.algos.shared.advantages import normalize
from payoff.algos.shared.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from payoff.algos.shared.policy_loss import explained_variance, ppo_loss
from payoff.core.config import MAX_BATCH, REPLACED, in_range
from payoff.core.errors import ConfigError
from payoff.core.schedules import Schedule
from payoff.models.mlp import CategoricalActor
from payoff.rollout.buffers import RolloutStorage
from payoff.track.progress import say


@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO. Shared keys (env, num_envs, num_steps, learning_rate, ...) are described in
    payoff.algos.shared.onpolicy.OnPolicyConfig; PPO's own:

    gae_lambda: GAE's lambda: 1 = Monte Carlo-like (high variance), 0 = one-step TD (biased).
    epochs: passes over each rollout. More reuses data more but drifts further from the
        policy that collected it (watch train/approx_kl and train/clip_fraction).
    minibatch_size: samples per gradient step. Trap: num_envs * num_steps should be a
        multiple of it, or the last minibatch of each epoch is smaller.
    clip: the surrogate's clip range epsilon, a schedule (anneal it with end < start).
    clip_value: clip the value update around the old value by this much (PPO2 style);
        null turns it off. Trap: its scale depends on the reward scale.
    normalize_advantages: standardize advantages per minibatch.
    ent_coef: entropy bonus weight (keeps exploring; too high never commits).
    vf_coef: value-loss weight (actor and critic are separate nets, so it mainly rescales
        the critic's step under the shared gradient clipping).
    target_kl: stop an update's epochs early once approx_kl exceeds this; null = never.
    accelerate: auto runs the rollout's sampling and each minibatch step (forward,
        losses, gradients, clip, Adam) in payoff's native kernels (payoff.accel) where they
        apply: CPU, Discrete actions, tanh/ReLU MLPs with the same hidden sizes, clip_value
        null, the kernels built at install; elsewhere the torch reference runs. true
        requires the kernels and says why they cannot run; false runs the reference. The
        kernels equal the reference to float32 rounding, not bit for bit, so a seed's run
        differs between false and true. The first run says which path it takes.
    numpy_fast_path / fast_backward: the keys `accelerate` replaced; old configs and runs
        still load (numpy_fast_path true is auto, otherwise false: the old by-hand
        gradients were autograd's bit for bit).
    """

    gae_lambda: float = field(default=0.95, metadata=in_range(0, 1))
    epochs: int = field(default=10, metadata=in_range(0, low_open=True))
    minibatch_size: int = field(default=64, metadata=in_range(0, most=MAX_BATCH))
    clip: Schedule = field(
        default_factory=lambda: Schedule(start=0.2, end=0.2), metadata=in_range(0, low_open=True)
    )
    clip_value: float | None = field(default=None, metadata=in_range(0, low_open=True))
    normalize_advantages: bool = True
    ent_coef: float = field(default=0.0, metadata=in_range(0))
    vf_coef: float = field(default=0.5, metadata=in_range(0))
    target_kl: float | None = None
    accelerate: bool | Literal["auto"] = "auto"
    numpy_fast_path: bool | None = field(default=None, metadata=REPLACED)
    fast_backward: bool | None = field(default=None, metadata=REPLACED)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.numpy_fast_path is None and self.fast_backward is None:
            return
        given = {"numpy_fast_path": self.numpy_fast_path, "fast_backward": self.fast_backward}
        self.accelerate = "auto" if self.numpy_fast_path else False
        self.numpy_fast_path = self.fast_backward = None
        old = ", ".join(f"{k}: {str(v).lower()}" for k, v in given.items() if v is not None)
        now = str(self.accelerate).lower()
        say(f"payoff: {old} is now accelerate: {now} (the key that replaced them)")

    def validate(self) -> None:
        super().validate()
        if self.minibatch_size <= 0:
            raise ConfigError(f"config key 'minibatch_size' must be > 0, got {self.minibatch_size}")
        batch = self.num_envs * self.num_steps
        if self.minibatch_size > batch:
            raise ConfigError(
                f"minibatch_size {self.minibatch_size} is larger than a rollout "
                f"(num_envs * num_steps = {batch}); lower it or collect more steps"
            )


class PPO(OnPolicyAlgorithm):
    """PPO-clip with GAE, separate actor and critic MLPs, on vectorized envs."""

    config: PPOConfig

    def setup(self) -> None:
        super().setup()
        self._accelerator: NativeActorCritic | None = None
        self._accelerated_flat: Any = None
        _ = self.accelerator  # chosen now: `accelerate: true` that cannot run fails here

    @property
    def accelerator(self) -> NativeActorCritic | None:
        """The native PPO step over the current networks and optimizer (`accelerate`), or
        None where the reference runs. Chosen again when init_policy made a new optimizer."""
        if self._accelerated_flat is not self.flat:
            self._accelerated_flat = self.flat
            config = self.config
            self._accelerator, path = ppo_accelerator(
                config.accelerate,
                self.actor,
                self.critic,
                self.flat,
                self.optimizer,
                config.clip_value,
            )
            _say_path_once(path)
        return self._accelerator

    def rollout_sampler(self) -> Any:
        if self.accelerator is not None and NativeRolloutSampler.supports(self.actor):
            assert isinstance(self.actor, CategoricalActor)
            return NativeRolloutSampler(
                self.actor, self.config.num_steps, self.runner.num_envs, self.critic
            )
        return super().rollout_sampler()

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        config = self.config
        assert self.critic is not None
        rollout = self.advantage_batch(storage, config.gae_lambda)
        advantages, returns = rollout.advantages, rollout.returns

        clip = config.clip(progress)
        batch = len(returns)
        normalize_per_minibatch = (
            config.normalize_advantages and min(batch, config.minibatch_size) > 1
        )
        if batch <= config.minibatch_size and normalize_per_minibatch:
            # One minibatch holds the whole rollout: normalize once, not once per epoch.
            advantages, normalize_per_minibatch = normalize(advantages), False
        accelerator = self.accelerator
        if accelerator is not None:  # the same epochs, each minibatch step in the kernels
            native_stats = accelerator.update(
                rollout.obs,
                rollout.actions,
                rollout.old_logprobs,
                advantages,
                returns,
                config,
                clip,
                normalize_per_minibatch,
            )
            return self._metrics_from(
                *native_stats.tolist(), clip, rollout.old_values.numpy(), returns.numpy()
            )
        fields = (
            rollout.obs,
            rollout.actions,
            rollout.old_logprobs,
            rollout.old_values,
            advantages,
            returns,
        )
        # Diagnostics stay tensors until the end: one conversion per update, not five per step.
        stats: list[torch.Tensor] = []
        for _ in range(config.epochs):
            if batch <= config.minibatch_size:  # the mean gradient ignores order: no shuffle
                minibatches: Any = [fields]
            else:  # shuffle once per epoch, then take contiguous slices (views, no copies)
                order = torch.randperm(batch)
                minibatches = zip(
                    *(f[order].split(config.minibatch_size) for f in fields), strict=True
                )
            for (
                mb_obs,
                mb_actions,
                mb_old_logprobs,
                mb_old_values,
                mb_adv,
                mb_returns,
            ) in minibatches:
                if normalize_per_minibatch and len(mb_adv) > 1:
                    mb_adv = normalize(mb_adv)
                new_logprobs, entropy = self.actor.log_prob_entropy(mb_obs, mb_actions)
                loss, minibatch_stats = ppo_loss(
                    new_logprobs,
                    mb_old_logprobs,
                    mb_adv,
                    entropy,
                    self.critic(mb_obs),
                    mb_returns,
                    mb_old_values,
                    config,
                    clip,
                )
                self.optimizer_step(loss)
                stats.append(minibatch_stats)
            approx_kl = stats[-1][3]  # of the epoch's last minibatch, as in CleanRL
            if config.target_kl is not None and float(approx_kl) > config.target_kl:
                break

        pg, v, ent, kl, clipfrac = torch.stack(stats).mean(0).tolist()
        return self._metrics_from(pg, v, ent, kl, clipfrac, clip, rollout.old_values, returns)

    def _metrics_from(
        self,
        pg: float,
        v: float,
        ent: float,
        kl: float,
        clipfrac: float,
        clip: float,
        old_values: torch.Tensor | np.ndarray,
        returns: torch.Tensor | np.ndarray,
    ) -> dict[str, float]:
        metrics = {
            "train/policy_loss": pg,
            "train/value_loss": v,
            "train/entropy": ent,
            "train/approx_kl": kl,
            "train/clip_fraction": clipfrac,
            "train/clip_range": clip,
            "train/explained_variance": explained_variance(old_values, returns),
        }
        if isinstance(self.action_space, gym.spaces.Box):
            metrics["train/std"] = float(self.actor.log_std.detach().exp().mean())  # type: ignore[operator]
        return metrics


_said: list[bool] = []


def _say_path_once(path: str) -> None:
    """Name, once per process, the path PPO's update takes."""
    if not _said:
        _said.append(True)
        say(f"payoff: PPO's rollout and update run in {path}")


ALGORITHM = PPO
