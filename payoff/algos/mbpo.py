"""Model-based policy optimization (MBPO: Janner et al. 2019): SAC trained mostly on short
rollouts of a learned world model.

    learn a world model, let it produce the data, keep its rollouts short:

    data      D_env: real transitions, as SAC plays (uniformly random until learning_starts)
    model     every `model.train_every` env steps refit an ensemble of E probabilistic MLPs
              p_e(s' - s, r, terminated | s, a) on D_env (payoff.models.dynamics, the same
              world model as PETS in payoff.algos.mbrl)
    imagine   then start `rollout_batch` rollouts at states drawn from D_env and follow the
              current policy for `rollout_length` steps through the model, each step by one
              member drawn at random per rollout and sampled from its Gaussian; the
              transitions go into D_model, which keeps the last `model_retain` refits' worth
    learn     SAC's update (payoff.algos.sac), on minibatches drawn `real_ratio` from D_env
              and the rest from D_model

Why short rollouts: a model's error compounds with every imagined step, and the policy
learns to exploit whatever the model gets wrong. Branching k-step rollouts off real states
keeps every imagined state within k steps of data (the paper's bound grows with k), so the
policy is trained where the model was fitted, while the imagined data still outnumber the
real ones many times over: that is where MBPO's sample efficiency comes from (many SAC
updates per env step without overfitting the few real transitions).

Logged at each refit: the model's loss, and its one-step error on the real transitions it
has not been trained on yet (model/heldout_...); per rollout round, the ensemble's
disagreement about the imagined next states (train/model_disagreement: the std over members
of their predicted next state, in units of the observation's std). Disagreement that grows
as the policy improves means the policy is heading where the model knows little.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from payoff.algos.sac import SAC, SACConfig
from payoff.core.config import MAX_BATCH, MAX_DEPTH, MAX_WIDTH, in_range
from payoff.core.errors import ConfigError, EnvError
from payoff.models.dynamics import DynamicsEnsemble, model_io
from payoff.models.encoding import is_image
from payoff.rollout.replay import ReplayBuffer, TransitionBatch, interleave


@dataclass
class WorldModelKeys:
    """The world model and when it is refitted.

    ensemble: members E. hidden / activation: each member's MLP.
    learning_rate / weight_decay: its Adam. fit_steps: gradient steps per refit, on all real
        data (each member on its own bootstrap resample). batch_size: rows per member per step.
    train_every: refit (and imagine a new round of rollouts) every this many env steps.
    """

    ensemble: int = field(default=5, metadata=in_range(1, most=MAX_DEPTH))
    hidden: list[int] = field(
        default_factory=lambda: [200, 200], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: str = "silu"
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    weight_decay: float = field(default=1e-5, metadata=in_range(0))
    fit_steps: int = field(default=200, metadata=in_range(1))
    batch_size: int = field(default=256, metadata=in_range(1, most=MAX_BATCH))
    train_every: int = field(default=250, metadata=in_range(1))


@dataclass
class MBPOConfig(SACConfig):
    """SAC's keys (payoff.algos.sac.SACConfig) plus the world model and its rollouts.

    model: see WorldModelKeys.
    rollout_length: imagined steps per rollout (k; MBPO uses 1 on most tasks).
    rollout_batch: rollouts started per round (one round per model refit).
    model_retain: D_model keeps the transitions of this many rounds.
    real_ratio: share of each minibatch drawn from real transitions.
    gradient_steps: as in SAC; MBPO's point is to run many per env step (10-40).
    """

    model: WorldModelKeys = field(default_factory=WorldModelKeys)
    rollout_length: int = field(default=1, metadata=in_range(1))
    rollout_batch: int = field(default=10_000, metadata=in_range(1, most=MAX_BATCH))
    model_retain: int = field(default=5, metadata=in_range(1))
    real_ratio: float = field(default=0.05, metadata=in_range(0, 1))

    def validate(self) -> None:
        super().validate()
        if self.device != "cpu":
            raise ConfigError(
                f"mbpo runs on the CPU (device: cpu); got device {self.device!r}: its world "
                f"model's small batched MLPs are refitted between env steps, where a GPU's "
                f"launch overhead dominates"
            )
        if self.model.activation not in ("silu", "relu", "tanh"):
            raise ConfigError(
                f"model.activation must be one of silu, relu, tanh; got {self.model.activation!r}"
            )
        if self.real_ratio < 1.0 and round(self.real_ratio * self.batch_size) >= self.batch_size:
            raise ConfigError(
                f"real_ratio {self.real_ratio} leaves no room for model data in batch_size "
                f"{self.batch_size}; use real_ratio 1 for plain SAC"
            )


class MBPO(SAC):
    """SAC on a mix of real transitions and short rollouts of a learned dynamics ensemble."""

    config: MBPOConfig
    saved = (
        *SAC.saved,
        "model",
        "model_optimizer",
        "model_buffer",
        "fits",
        "fitted_size",
        "last_fit_step",
    )

    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().check_spaces(observation_space, action_space)
        if is_image(observation_space):  # 3,072 numbers to predict per 32x32 RGB frame
            raise EnvError(
                f"mbpo's dynamics model predicts the next observation number by number, so "
                f"images are out of its reach; {self.config.env.id!r} has {observation_space}: "
                f"use SAC, or give MBPO features instead of pixels"
            )

    def build(self) -> None:
        super().build()  # SAC: actor, twin critics, temperature
        config = self.config
        obs_dim = int(np.prod(self.observation_space.shape))
        m = config.model
        self.model = DynamicsEnsemble(obs_dim, self.scaler.dim, m.ensemble, m.hidden, m.activation)  # type: ignore[arg-type]
        self.model_optimizer = torch.optim.Adam(
            self.model.parameters(), lr=m.learning_rate, weight_decay=m.weight_decay
        )
        capacity = config.rollout_batch * config.rollout_length * config.model_retain
        # observations kept in their own shape, as the real buffer keeps them (MBPO mixes the two)
        self.model_buffer = ReplayBuffer(
            capacity, tuple(self.observation_space.shape or ()), (self.scaler.dim,), np.float32
        )
        self.fits = 0
        self.fitted_size = 0  # real transitions stored at the last refit
        self.last_fit_step = 0
        self._model_record: dict[str, float] = {}

    # ---- the world model ----------------------------------------------------------------
    def model_data(self, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The real transitions start..size as model inputs [N, o + a] (the action in
        [-1, 1]) and targets [N, o + 2] (change of observation, reward, terminated)."""
        b, part = self.buffer, slice(start, len(self.buffer))
        return model_io(
            b.obs[part], b.actions[part], b.rewards[part], b.next_obs[part], b.terminated[part]
        )

    def refit(self) -> None:
        """Score the model on the real transitions it has not seen, then refit it on all."""
        m, record = self.config.model, {}
        size = len(self.buffer)
        # Held-out: what was added since the last refit (while the ring has not wrapped).
        if self.fits and size - self.fitted_size >= 2 and size < self.buffer.capacity:
            held_out = self.model.one_step_error(*self.model_data(self.fitted_size))
            record.update({f"model/heldout_{k}": v for k, v in held_out.items()})
        inputs, targets = self.model_data()
        record["model/train_loss"] = self.model.fit(
            inputs, targets, self.model_optimizer, m.fit_steps, m.batch_size, self.rng
        )
        self.fits += 1
        self.fitted_size = size
        self.last_fit_step = self.step
        record["model/fits"] = float(self.fits)
        self._model_record = record

    @torch.no_grad()
    def imagine(self) -> None:
        """One round of `rollout_batch` k-step rollouts of the policy through the model,
        from real states, into the model buffer."""
        config, model = self.config, self.model
        o = model.obs_dim
        state = self.buffer.sample(config.rollout_batch, self.rng).obs.reshape(-1, o)
        spread = []
        for _ in range(config.rollout_length):
            actions, _ = self.actor.sample(state.reshape(len(state), *self.buffer.obs.shape[1:]))
            inputs = torch.cat([state, actions], dim=1).expand(model.members, -1, -1)
            mean, std = model(inputs)  # [E, N, o + 2]
            spread.append(float((mean[..., :o] / model.in_std[:o]).std(0).mean()))
            member = torch.from_numpy(self.rng.integers(0, model.members, len(state)))
            rows = torch.arange(len(state))
            mean, std = mean[member, rows], std[member, rows]  # one member per rollout
            sample = mean + std * torch.randn(mean.shape)
            next_state, reward = state + sample[:, :o], sample[:, o]
            terminated = mean[:, o + 1] > 0.5
            self.model_buffer.add(
                state.numpy().reshape(len(state), *self.buffer.obs.shape[1:]),
                actions.numpy(),
                reward.numpy(),
                next_state.numpy().reshape(len(state), *self.buffer.obs.shape[1:]),
                terminated.float().numpy(),
            )
            state = next_state[~terminated]
            if not len(state):
                break
        self._model_record["train/model_disagreement"] = float(np.mean(spread))
        self._model_record["train/model_buffer"] = float(len(self.model_buffer))

    # ---- SAC's updates on the mixture ---------------------------------------------------
    def train(self, steps: int) -> None:
        """Refit and imagine when due, then SAC's `steps` updates."""
        if self.fits == 0 or self.step - self.last_fit_step >= self.config.model.train_every:
            self.refit()
            self.imagine()
        super().train(steps)

    def minibatches(self, steps: int) -> tuple[TransitionBatch, int]:
        """Each step's minibatch: round(real_ratio * batch_size) real transitions and the
        rest imagined ones (all real until the model has imagined any)."""
        config = self.config
        if not len(self.model_buffer) or config.real_ratio >= 1.0:
            return super().minibatches(steps)
        size = config.batch_size
        real = max(1, round(config.real_ratio * size))
        batches = interleave(
            self.buffer.sample(steps * real, self.rng),
            self.model_buffer.sample(steps * (size - real), self.rng),
            steps,
        )
        return batches, size

    def train_metrics(self) -> dict[str, float]:
        record = {**super().train_metrics(), **self._model_record}
        self._model_record = {}
        return record


ALGORITHM = MBPO
