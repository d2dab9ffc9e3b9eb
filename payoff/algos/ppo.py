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
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from payoff.algos.shared.advantages import normalize
from payoff.algos.shared.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from payoff.algos.shared.policy_loss import (
    SurrogateResult,
    clipped_surrogate,
    explained_variance,
    value_loss,
)
from payoff.core.errors import ConfigError
from payoff.core.native import MAX_LAYERS, kernels, native_status
from payoff.core.schedules import Schedule
from payoff.models.mlp import CategoricalActor, Critic
from payoff.models.numpy_ac import NumpyActorCritic, NumpyRolloutSampler
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
    fast_backward: compute the gradients with CategoricalActor.surrogate_backward and
        Critic.value_loss_backward, derived by hand in payoff.models (bitwise the same as
        autograd's, tested), where they apply: CPU, discrete actions, ReLU/Tanh MLPs and
        clip_value null; elsewhere, or false, autograd computes them.
    numpy_fast_path: sample the rollout's actions and run each minibatch step (forward,
        losses, gradients, clip, Adam) in NumPy (payoff.models.numpy_ac), where it applies:
        CPU, discrete actions, Box observations for the sampler, tanh/ReLU MLPs, clip_value
        null. ~4x faster per minibatch for 64-64 networks at minibatch 64. Where payoff's
        native kernels were built (payoff/core/_kernels.c; the first run says which path it
        takes), each of those steps is one call into C, and a rollout on payoff's batched
        CartPole is one call for the whole rollout. Equal to the torch path to float32
        rounding, not bit for bit, so a seed's run differs from the same seed without it.
    """

    gae_lambda: float = 0.95
    epochs: int = 10
    minibatch_size: int = 64
    clip: Schedule = field(default_factory=lambda: Schedule(start=0.2, end=0.2))
    clip_value: float | None = None
    normalize_advantages: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    target_kl: float | None = None
    fast_backward: bool = True
    numpy_fast_path: bool = False

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
        config = self.config
        self.by_hand = bool(
            config.fast_backward
            and self.on_cpu
            and config.clip_value is None
            and isinstance(self.actor, CategoricalActor)
            and self.actor.fast_surrogate_backward
            and isinstance(self.critic, Critic)
            and self.critic.fast_value_backward
        )
        self._numpy_ac: NumpyActorCritic | None = None

    @property
    def numpy_ac(self) -> NumpyActorCritic | None:
        """The NumPy minibatch step (numpy_fast_path) over the current networks and optimizer,
        or None where it does not apply. Rebuilt when init_policy made a new optimizer."""
        if not self.config.numpy_fast_path or self.config.clip_value is not None:
            return None
        current = self._numpy_ac
        if current is None or current.flat is not self.flat:
            if not NumpyActorCritic.supports(self.actor, self.critic, self.flat, self.optimizer):
                return None
            assert isinstance(self.actor, CategoricalActor) and isinstance(self.critic, Critic)
            current = NumpyActorCritic(self.actor, self.critic, self.flat, self.optimizer)
            self._numpy_ac = current
            _say_path_once(current)
        return current

    def rollout_sampler(self) -> Any:
        if self.numpy_ac is not None and NumpyRolloutSampler.supports(self.actor):
            assert isinstance(self.actor, CategoricalActor)
            return NumpyRolloutSampler(
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
        numpy_ac = self.numpy_ac
        if numpy_ac is not None:
            return self._update_numpy(
                numpy_ac,
                rollout.obs,
                rollout.actions,
                rollout.old_logprobs,
                advantages,
                returns,
                clip,
                normalize_per_minibatch,
                rollout.old_values,
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
        if self.by_hand:  # where to write the gradients: the views into the flat buffer
            assert isinstance(self.actor, CategoricalActor) and isinstance(self.critic, Critic)
            actor, critic = self.actor, self.critic
            actor_grads = [cast(torch.Tensor, p.grad) for p in actor.parameters()]
            critic_grads = [cast(torch.Tensor, p.grad) for p in critic.parameters()]
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
                if self.by_hand:  # the same gradients, derived by hand in models/
                    *parts, entropy = actor.surrogate_backward(
                        mb_obs,
                        mb_actions,
                        mb_old_logprobs,
                        mb_adv,
                        clip,
                        actor_grads,
                        config.ent_coef,
                    )
                    surrogate = SurrogateResult(*parts)
                    v_loss = critic.value_loss_backward(
                        mb_obs, mb_returns, config.vf_coef, critic_grads
                    )
                    entropy_loss = entropy.mean()
                    self.gradient_step()
                else:
                    new_logprobs, entropy = self.actor.log_prob_entropy(mb_obs, mb_actions)
                    surrogate = clipped_surrogate(new_logprobs, mb_old_logprobs, mb_adv, clip)
                    v_loss = value_loss(
                        self.critic(mb_obs), mb_returns, mb_old_values, config.clip_value
                    )
                    entropy_loss = entropy.mean()
                    loss = surrogate.loss + config.vf_coef * v_loss
                    if config.ent_coef:  # with ent_coef 0 the entropy's backward is skipped
                        loss = loss - config.ent_coef * entropy_loss
                    self.optimizer_step(loss)

                stats.append(
                    torch.stack(
                        [
                            surrogate.loss.detach(),
                            v_loss.detach(),
                            entropy_loss.detach(),
                            surrogate.approx_kl,
                            surrogate.clip_fraction,
                        ]
                    )
                )
            approx_kl = surrogate.approx_kl  # of the epoch's last minibatch, as in CleanRL
            if config.target_kl is not None and float(approx_kl) > config.target_kl:
                break

        pg, v, ent, kl, clipfrac = torch.stack(stats).mean(0).tolist()
        return self._metrics_from(pg, v, ent, kl, clipfrac, clip, rollout.old_values, returns)

    def _update_numpy(
        self,
        numpy_ac: NumpyActorCritic,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        clip: float,
        normalize_per_minibatch: bool,
        old_values: torch.Tensor,
    ) -> dict[str, float]:
        """`update`'s epochs and minibatches with each step in NumPy (numpy_fast_path): the
        same shuffles (torch.randperm), minibatches and per-minibatch normalization."""
        config = self.config
        numpy_ac.pull()
        fields = (
            numpy_ac.encode(obs),
            actions.numpy(),
            old_logprobs.numpy(),
            advantages.numpy(),
            returns.numpy(),
        )
        batch, size = len(fields[1]), min(config.minibatch_size, len(fields[1]))
        stats = []
        for _ in range(config.epochs):
            if batch <= size:  # the mean gradient ignores order: no shuffle
                x, acts, old, adv, ret = fields
            else:
                order = torch.randperm(batch).numpy()
                x, acts, old, adv, ret = (f[order] for f in fields)
            if normalize_per_minibatch:
                adv = _normalize_blocks(adv, size)
            for start in range(0, batch, size):
                end = start + size
                stats.append(
                    numpy_ac.ppo_step(
                        x[start:end],
                        acts[start:end],
                        old[start:end],
                        adv[start:end],
                        ret[start:end],
                        clip,
                        config.ent_coef,
                        config.vf_coef,
                        config.max_grad_norm,
                        self.optimizer.lr,
                    )
                )
            approx_kl = stats[-1][3]  # of the epoch's last minibatch, as in CleanRL
            if config.target_kl is not None and float(approx_kl) > config.target_kl:
                break
        numpy_ac.push()
        pg, v, ent, kl, clipfrac = (sum(stats) / len(stats)).tolist()
        return self._metrics_from(pg, v, ent, kl, clipfrac, clip, old_values.numpy(), fields[4])

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


def _say_path_once(numpy_ac: NumpyActorCritic) -> None:
    """Name, once per process, what runs numpy_fast_path: the native kernels, or NumPy and why
    (`numpy_ac.use_native` is False for networks deeper than the kernels take, MAX_LAYERS)."""
    if not _said:
        _said.append(True)
        where = native_status()
        if kernels() is not None and not numpy_ac.use_native:
            layers = len(numpy_ac.dims) - 1  # its Linear layers
            where = (
                f"NumPy (the networks have {layers} layers; the native kernels take at most "
                f"{MAX_LAYERS})"
            )
        say(f"payoff: numpy_fast_path runs in {where}")


def _normalize_blocks(values: np.ndarray, size: int) -> np.ndarray:
    """`normalize` (zero mean, unit unbiased std) applied to each consecutive block of
    `size` (the minibatches of one epoch) at once; a last block of one value stays as is.
    Means and variances by the ufuncs' reduce: ndarray.mean/.std's Python wrappers cost
    more than their arithmetic here."""
    out = np.empty_like(values)
    full = len(values) // size * size
    blocks = [values[:full].reshape(-1, size), values[full:][None]]
    outs = [out[:full].reshape(-1, size), out[full:][None]]
    for block, block_out in zip(blocks, outs, strict=True):
        count = block.shape[1]
        if count == 1:
            block_out[:] = block
        elif count > 1 and len(block):
            centred = block - np.add.reduce(block, axis=1, keepdims=True) / np.float32(count)
            variance = np.add.reduce(np.square(centred), axis=1, keepdims=True) / np.float32(
                count - 1
            )
            np.divide(centred, np.sqrt(variance) + np.float32(1e-8), out=block_out)
    return out


ALGORITHM = PPO
