"""Recurrent PPO: PPO with GRU actor and critic, for tasks one observation does not reveal.

The policy is pi(a_t | o_1..o_t) through a GRU hidden state h_t = GRU(o_t, h_{t-1}), reset
to zeros where an episode starts (payoff.models.recurrent). Per update:

  1. collect num_envs x num_steps steps, carrying each env's hidden state from step to
     step and from one rollout to the next, and recording the actor's hidden state before
     every step and where episodes start;
  2. the critic's values along the same sequences, in one pass after the rollout;
  3. GAE(lambda) advantages (payoff.algos.shared.advantages.gae) with truncation bootstrap;
  4. `epochs` passes over minibatches of whole sequences: each env's rollout cut into
     chunks of `sequence_length` steps, each chunk replayed from the hidden state recorded
     at its first step (resetting where episodes start inside it), then PPO's clipped
     surrogate + value loss (payoff.algos.shared.policy_loss) on the steps the envs really
     took. This is sb3-contrib's RecurrentPPO and CleanRL's ppo_atari_lstm scheme; at the
     first epoch the replay gives exactly the log-probs the policy acted with.

The hidden states the envs are in (actor and critic, and which envs start an episode at
the next step) are saved in checkpoints (`memory`), so a resumed run continues exactly.

Python API (predict carries the hidden state, as sb3-contrib's RecurrentPPO.predict):
    agent = RecurrentPPO(env="payoff/CartPoleNoVelocity-v1").learn(200_000)
    obs, _ = env.reset(); state, start = None, True
    while True:
        action, state = agent.predict(obs, state=state, episode_start=start)
        obs, reward, terminated, truncated, _ = env.step(action)
        start = terminated or truncated    # the next call resets the state if True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from payoff.algos.base import check_deterministic
from payoff.algos.ppo import PPOConfig
from payoff.algos.shared.advantages import gae, normalize
from payoff.algos.shared.onpolicy import OnPolicyAlgorithm
from payoff.algos.shared.policy_loss import explained_variance, ppo_loss
from payoff.core.config import MAX_BATCH, MAX_TOKENS, MAX_WIDTH, in_range
from payoff.core.errors import ConfigError
from payoff.envs.make import EnvConfig
from payoff.models.recurrent import RecurrentActor, RecurrentCritic
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.evaluate import EvalResult, record_frames
from payoff.rollout.vector import evaluate_batched
from payoff.track.media import write_gif


@dataclass
class RecurrentPPOConfig(PPOConfig):
    """Recurrent PPO. PPO's keys (gae_lambda, epochs, minibatch_size, clip, ...) are in
    payoff.algos.ppo.PPOConfig, the shared ones in payoff.algos.shared.onpolicy; its own:

    rnn_hidden: width of the GRU (the memory) of the actor and of the critic.
    hidden: widths of the MLP after each GRU (may be []); default [64].
    sequence_length: steps per training sequence. Each env's rollout is cut into chunks of
        this length, replayed from the hidden state recorded at the chunk's start; null =
        num_steps (whole rollouts, as CleanRL). Must divide num_steps. Trap: gradients do
        not flow across chunk borders, so a memory needed over longer spans than this
        learns slower.
    minibatch_size: steps per gradient step, in whole sequences: a multiple of
        sequence_length, at most num_envs * num_steps; null = a quarter of the rollout's
        sequences (at least one), CleanRL's 4 minibatches.
    Not supported: continuous actions, backend ray, init_from, accelerate: true (payoff's
    accelerator is for feed-forward MLPs; the GRU's gradients come from autograd).
    """

    hidden: list[int] = field(
        default_factory=lambda: [64], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    rnn_hidden: int = field(default=64, metadata=in_range(most=MAX_WIDTH))
    sequence_length: int | None = field(default=None, metadata=in_range(most=MAX_TOKENS))
    minibatch_size: int | None = field(  # type: ignore[assignment]
        default=None, metadata=in_range(0, most=MAX_BATCH)
    )

    @property
    def sequence_steps(self) -> int:
        """Steps per training sequence: sequence_length, or whole rollouts (num_steps)."""
        return self.sequence_length if self.sequence_length is not None else self.num_steps

    def default_minibatch_size(self) -> int:
        """A quarter of a rollout's sequences (at least one), in steps."""
        length = self.sequence_steps
        return length * max(1, self.num_envs * (self.num_steps // length) // 4)

    def validate(self) -> None:
        length = self.sequence_steps
        if self.num_steps > 0 and (length <= 0 or self.num_steps % length):
            raise ConfigError(
                f"sequence_length {length} must be > 0 and divide num_steps {self.num_steps} "
                f"(e.g. {', '.join(str(d) for d in _divisors(self.num_steps))})"
            )
        if self.minibatch_size is None and self.num_envs > 0 and self.num_steps > 0:
            self.minibatch_size = self.default_minibatch_size()
        super().validate()
        if self.rnn_hidden <= 0:
            raise ConfigError(f"config key 'rnn_hidden' must be > 0, got {self.rnn_hidden}")
        if self.minibatch_size % length:
            raise ConfigError(
                f"minibatch_size {self.minibatch_size} must be a multiple of sequence_length "
                f"{length}: minibatches hold whole sequences"
            )
        if self.backend != "local":
            raise ConfigError(
                f"recurrent_ppo collects rollouts locally only (backend 'local'), got "
                f"{self.backend!r}"
            )
        if self.accelerate is True:
            raise ConfigError(
                "recurrent_ppo has no accelerator: payoff.accel's kernels are for "
                "feed-forward MLPs, the GRU's gradients come from autograd; use accelerate: "
                "auto or false"
            )
        if self.init_from:
            raise ConfigError(
                "recurrent_ppo cannot start from init_from: policy files hold feed-forward "
                "actors; leave init_from unset"
            )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0][-6:]


class Memory:
    """The hidden states the envs are in between steps, saved in checkpoints.

    actor / critic: [num_envs, rnn_hidden] GRU states after the last step taken.
    next_start: [num_envs] bool, the next step starts an episode (h resets to zeros first).
    """

    def __init__(self, num_envs: int, rnn_hidden: int):
        self.actor = torch.zeros(num_envs, rnn_hidden)
        self.critic = torch.zeros(num_envs, rnn_hidden)
        self.next_start = np.ones(num_envs, dtype=bool)

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.clone(),
            "critic": self.critic.clone(),
            "next_start": self.next_start.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        actor = torch.as_tensor(state["actor"], dtype=torch.float32)
        if actor.shape != self.actor.shape:
            raise ValueError(
                f"memory: the checkpoint's hidden state has shape {tuple(actor.shape)}, this "
                f"config {tuple(self.actor.shape)} (num_envs x rnn_hidden)"
            )
        self.actor = actor.clone()
        self.critic = torch.as_tensor(state["critic"], dtype=torch.float32).clone()
        self.next_start = np.asarray(state["next_start"], dtype=bool).copy()


@dataclass
class SequenceRecord:
    """What a recurrent rollout adds to RolloutStorage, [num_steps, num_envs, ...]."""

    starts: torch.Tensor  # [T, N] bool: h resets before this step
    actor_h: torch.Tensor  # [T, N, H] actor's hidden state before the step (before reset)
    critic_h: torch.Tensor  # [T, N, H] critic's, likewise


class RecurrentPPO(OnPolicyAlgorithm):
    """PPO-clip with GRU actor and critic, sequences kept whole through minibatching."""

    config: RecurrentPPOConfig
    saved = (*OnPolicyAlgorithm.saved, "memory")
    actor: RecurrentActor
    critic: RecurrentCritic

    # ---- setup ------------------------------------------------------------------------
    def make_networks(self) -> tuple[RecurrentActor, RecurrentCritic]:  # type: ignore[override]
        config = self.config
        actor = RecurrentActor(
            self.observation_space,
            self.action_space,
            hidden=config.hidden,
            activation=config.activation,
            normalize_obs=config.normalize_obs,
            rnn_hidden=config.rnn_hidden,
        )
        critic = RecurrentCritic(actor.encoder, config.hidden, config.activation, config.rnn_hidden)
        return actor, critic

    def setup(self) -> None:
        if self.config.normalize_reward:  # its rollout loop is its own (iterate below)
            raise ConfigError(
                "recurrent_ppo does not scale rewards (normalize_reward); ppo, a2c and reinforce do"
            )
        super().setup()
        config = self.config
        self.memory = Memory(config.num_envs, config.rnn_hidden)
        shape = (config.num_steps, config.num_envs)
        self.record = SequenceRecord(
            starts=torch.zeros(shape, dtype=torch.bool),
            actor_h=torch.zeros(*shape, config.rnn_hidden),
            critic_h=torch.zeros(*shape, config.rnn_hidden),
        )
        self._t = 0  # the step of the rollout being collected

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.runner.restore_note:  # the envs restarted their episodes: so does the memory
            self.memory.next_start[:] = True

    def init_policy(self, actor: Any, critic: Any = None) -> RecurrentPPO:
        raise ConfigError(
            "recurrent_ppo cannot start from a feed-forward actor (init_policy); its GRU "
            "networks train from scratch"
        )

    # ---- acting: one step of every env, carrying the hidden state -----------------------
    @torch.no_grad()
    def _policy_step(self, obs: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
        t, memory = self._t, self.memory
        starts = torch.from_numpy(memory.next_start.copy())
        self.record.starts[t] = starts
        self.record.actor_h[t] = memory.actor
        logits, h = self.actor.step(obs, starts.to(obs.device), memory.actor.to(obs.device))
        actions, logprobs = self.actor.sample_logits(logits)
        memory.actor = h.cpu()
        # The runner's `resetting`: this step only resets that env, so the next one starts.
        memory.next_start = self.runner.resetting.copy()
        self._t += 1
        if not self.on_cpu:
            actions, logprobs = actions.cpu(), logprobs.cpu()
        return actions, self.actor.to_env(actions), logprobs

    @torch.no_grad()
    def _values(self, obs: torch.Tensor) -> torch.Tensor:
        """V of the rollout's observations and the one after it: obs [(T + 1) * N, ...],
        the critic's GRU run along each env's sequence from its saved state."""
        steps, n = self.config.num_steps, self.config.num_envs
        obs = obs.reshape(steps + 1, n, *obs.shape[1:])
        starts = torch.cat([self.record.starts, torch.from_numpy(self.memory.next_start)[None]])
        h0 = self.memory.critic.to(obs.device)
        values, outputs = self.critic.sequence(obs, starts.to(obs.device), h0)
        outputs = outputs.cpu()
        self.record.critic_h[0] = self.memory.critic
        self.record.critic_h[1:] = outputs[: steps - 1]
        self.memory.critic = outputs[steps - 1].clone()
        return values.reshape(-1)

    def iterate(self) -> None:
        self._t = 0
        super().iterate()

    def predict(
        self,
        observation: Any,
        state: np.ndarray | None = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, np.ndarray]:
        """(action, state) for one observation or (actions, states) for a batch.

        state: what the previous call returned ([batch, rnn_hidden]); None = a fresh
            episode (zeros). episode_start: bool or [batch] bools, True where this
            observation is the first of an episode (its state resets to zeros first).
        deterministic: True by default (sb3-contrib's default is False). There is no act():
            the action alone would drop the state the next call needs.
        """
        check_deterministic(deterministic, "predict")
        with self.predict_streams(exploring=not deterministic):
            return self.actor.predict_step(observation, state, episode_start, deterministic)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """Refused: the action depends on the hidden state, which act() has no way to take
        or give back (an action from a fresh state at every call would be a memoryless
        policy, not this one). Use predict(obs, state, episode_start)."""
        raise ConfigError(
            "RecurrentPPO has no act(): its action depends on a hidden state that act() "
            "cannot carry between calls. Use action, state = agent.predict(obs, state=state, "
            "episode_start=start), passing back the state it returned (None and "
            "episode_start=True at an episode's first step)"
        )

    def _greedy_player(self, batch: int, sampled_by: torch.Generator | None = None) -> Any:
        """act(obs [batch, ...]) -> NumPy actions of the deterministic policy (or, given a
        generator, actions sampled from it), remembering its hidden state between calls (one
        episode per env)."""
        h = [self.actor.initial_state(batch)]
        no_starts = torch.zeros(batch, dtype=torch.bool, device=self.device)

        def act(obs: torch.Tensor) -> np.ndarray:
            logits, h[0] = self.actor.step(obs, no_starts, h[0])
            if sampled_by is None:
                return self.actor.to_env(torch.argmax(logits, -1))
            probs = torch.softmax(logits.float().cpu(), -1)
            return self.actor.to_env(torch.multinomial(probs, 1, generator=sampled_by)[:, 0])

        return act

    @torch.no_grad()
    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """The policy on `episodes` fresh episodes, one per env, batched; each starts from a
        zero hidden state. deterministic: its most likely action (False: sampled ones)."""
        sampled_by = None if deterministic else torch.Generator().manual_seed(seed)
        self.actor.eval()
        try:  # (an evaluation stopped by a signal raises: the actor trains on after it)
            return evaluate_batched(
                env, self._greedy_player(episodes, sampled_by), episodes, seed, device=self.device
            )
        finally:
            self.actor.train()

    @torch.no_grad()
    def record_gif(
        self, path: str | Path, episodes: int = 1, seed: int | None = None, fps: int = 8
    ) -> Path:
        """Render episodes of the deterministic policy, each from a zero hidden state."""
        seed = self.config.seed + 2_000_000 if seed is None else seed
        frames: list[np.ndarray] = []
        for episode in range(episodes):
            act = self._greedy_player(1)

            def policy(obs: Any, act: Any = act) -> Any:
                tensor = torch.as_tensor(np.asarray(obs, dtype=np.float32)[None])
                return act(tensor.to(self.device))[0]

            frames += record_frames(self.config.env, policy, 1, seed + episode)
        return write_gif(frames, path, fps=fps)

    # ---- learning ---------------------------------------------------------------------
    def sequences(self, storage: RolloutStorage) -> tuple[dict[str, torch.Tensor], int]:
        """GAE advantages and returns over the [T, N] rollout (truncated steps bootstrapped
        first), then every field as whole sequences [L, S, ...], S = num_envs * num_steps / L
        (sequence s = chunk k of env n, s = k * num_envs + n), and the hidden states at each
        sequence's first step [S, H]. Returns (fields, L)."""
        config = self.config
        length = config.sequence_steps
        steps, n = storage.num_steps, config.num_envs
        chunks = steps // length

        def cut(tensor: torch.Tensor) -> torch.Tensor:
            # [T, N, ...] -> [chunks, L, N, ...] -> [L, chunks * N, ...]
            rest = tensor.shape[2:]
            return (
                tensor.reshape(chunks, length, n, *rest)
                .transpose(0, 1)
                .reshape(length, chunks * n, *rest)
            )

        gamma = config.gamma
        storage.bootstrap_truncated(gamma)
        advantages, returns = gae(
            storage.rewards,
            storage.values,
            storage.next_values,
            storage.dones,
            gamma,
            config.gae_lambda,
        )
        device = storage.rewards.device
        fields = {
            "obs": cut(storage.obs),
            "actions": cut(storage.actions),
            "old_logprobs": cut(storage.logprobs),
            "old_values": cut(storage.values),
            "advantages": cut(advantages),
            "returns": cut(returns),
            "valid": cut(storage.valid),
            "starts": cut(self.record.starts.to(device)),
            # hidden state at each chunk's first step: rows 0, L, 2L, ... -> [chunks * N, H]
            "actor_h0": self.record.actor_h[::length].reshape(chunks * n, -1).to(device),
            "critic_h0": self.record.critic_h[::length].reshape(chunks * n, -1).to(device),
        }
        return fields, length

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        config = self.config
        fields, length = self.sequences(storage)
        num_sequences = fields["actor_h0"].shape[0]
        minibatch = (
            config.minibatch_size or config.default_minibatch_size()
        )  # config=... skips validate
        per_minibatch = max(1, minibatch // length)
        clip = config.clip(progress)
        time_major = ("obs", "actions", "old_logprobs", "old_values", "advantages", "returns")
        time_major += ("valid", "starts")
        stats: list[torch.Tensor] = []
        for _ in range(config.epochs):
            order = torch.randperm(num_sequences)
            for index in order.split(per_minibatch):
                mb = {k: fields[k][:, index] for k in time_major}  # [L, S_mb, ...]
                valid = mb["valid"]  # steps where the env really acted
                new_logprobs, entropy = self.actor.log_prob_entropy_sequence(
                    mb["obs"], mb["actions"], mb["starts"], fields["actor_h0"][index]
                )
                values, _ = self.critic.sequence(
                    mb["obs"], mb["starts"], fields["critic_h0"][index]
                )
                adv = mb["advantages"][valid]
                if config.normalize_advantages and len(adv) > 1:
                    adv = normalize(adv)
                loss, minibatch_stats = ppo_loss(
                    new_logprobs[valid],
                    mb["old_logprobs"][valid],
                    adv,
                    entropy[valid],
                    values[valid],
                    mb["returns"][valid],
                    mb["old_values"][valid],
                    config,
                    clip,
                )
                self.optimizer_step(loss)
                stats.append(minibatch_stats)
            if config.target_kl is not None and float(stats[-1][3]) > config.target_kl:
                break

        pg, v, ent, kl, clipfrac = torch.stack(stats).mean(0).tolist()
        valid = fields["valid"]
        return {
            "train/policy_loss": pg,
            "train/value_loss": v,
            "train/entropy": ent,
            "train/approx_kl": kl,
            "train/clip_fraction": clipfrac,
            "train/clip_range": clip,
            "train/explained_variance": explained_variance(
                fields["old_values"][valid], fields["returns"][valid]
            ),
        }


ALGORITHM = RecurrentPPO
