"""The part PPO, A2C and REINFORCE share: envs, actor/critic, the rollout-update loop, state.

Each algorithm module supplies its config (a subclass of `OnPolicyConfig`) and `update()`,
the loss math. The loop here is: collect a [num_steps, num_envs] rollout -> update ->
log -> evaluate -> checkpoint, until total_steps env steps.

Devices (config key `device`): actor, critic and the flat optimizer buffer live on it. The
rollout storage stays on the CPU, where the envs write it; each step's observations go to
the device once and the actions come back once, and `update` gets one copy of the whole
rollout on the device. On the CPU none of these copies happen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.agent import Agent
from payoff.algos.base import ROLLOUT_STEPS, VectorAgentKeys, check_deterministic
from payoff.algos.shared.advantages import gae
from payoff.algos.shared.reward_scaling import RewardScaler
from payoff.core.config import MAX_WIDTH, absolute_path, in_range
from payoff.core.device import resolve_device
from payoff.core.errors import CheckpointError, ConfigError
from payoff.core.schedules import Schedule
from payoff.core.seeding import seed_everything
from payoff.envs.make import EnvConfig
from payoff.models.encoding import warn_box_far_from_zero
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import Actor, Critic, actor_for
from payoff.models.policy_file import is_policy_payload, policy_from_payload
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.ray_pool import RayConfig
from payoff.rollout.ray_runner import RayRunner
from payoff.rollout.vector import VectorRunner, evaluate_batched, make_vector_env
from payoff.track.checkpoint import load_state
from payoff.track.run import Run


@dataclass
class OnPolicyConfig(VectorAgentKeys):
    """Keys every on-policy algorithm (PPO, A2C, REINFORCE) shares, beyond VectorAgentKeys
    (env, seed, threads, total_steps, num_envs, vectorization, gamma, max_grad_norm,
    eval_every, eval_episodes, final_eval_episodes, stop_at_return, checkpoint_every,
    check_finite; see payoff.algos.base). Intervals count env steps; the deterministic
    policy is evaluated, and evaluation steps are not counted as training steps.

    num_steps: each update learns from num_envs x num_steps steps.
    learning_rate: Adam step size, a schedule over training ({start, end, fraction, kind}).
    hidden / activation: MLP widths and nonlinearity of actor and critic (separate nets).
    normalize_obs: keep running mean/std of observations and standardize them (stored in
        the actor, so saved policies carry it). Helps envs with badly scaled observations.
    normalize_reward: divide each reward by the running std of the discounted return, then
        clip to [-10, 10] (SB3's VecNormalize norm_reward; payoff.algos.shared.
        reward_scaling). Logged returns and evaluations stay in the env's units. Helps envs
        whose rewards are large (value losses in the thousands).
    log_std_init: initial log-std of the Gaussian policy (continuous actions only).
    init_from: start from the actor (and critic, if saved) in a policy file written by
        payoff.models.save_policy (e.g. after behavior cloning), or a saved PPO / A2C /
        REINFORCE model. Its spaces must match the env's.
    episode_info: numeric `info` keys (e.g. true_reward, cost) summed over each episode and
        logged as train/episode_<key>, next to the return. This is how a true objective the
        agent never sees reaches the metrics and the reward-hacking monitors.
    backend: where rollouts are collected: 'local' (in this process, the default) or
        'ray' (Ray actor workers owning the envs; needs payoff[distributed]).
    ray: address / num_workers / overlap / stale / ... of the Ray backend; see
        payoff.rollout.ray_pool.RayConfig and docs/scaling.md.
    """

    num_steps: int = field(default=128, metadata=in_range(0, low_open=True, product=ROLLOUT_STEPS))
    learning_rate: Schedule = field(
        default_factory=lambda: Schedule(start=3e-4, end=3e-4), metadata=in_range(0, low_open=True)
    )
    hidden: list[int] = field(
        default_factory=lambda: [64, 64], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["tanh", "relu", "gelu"] = "tanh"
    normalize_obs: bool = False
    normalize_reward: bool = False
    log_std_init: float = 0.0
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=100_000, metadata=in_range(0, low_open=True))
    init_from: str | None = None
    episode_info: list[str] = field(default_factory=list)
    backend: Literal["local", "ray"] = "local"
    ray: RayConfig = field(default_factory=RayConfig)

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 25_000}  # payoff train runs

    def __post_init__(self) -> None:
        self.init_from = absolute_path(self.init_from)  # saved absolute: found from any folder

    def validate(self) -> None:
        # Ranges of single keys (counts > 0, gamma in [0, 1], ...) are checked by core.config.
        if not self.hidden:
            raise ConfigError("config key 'hidden' needs at least one layer width, e.g. [64, 64]")
        if self.backend == "ray" and self.num_envs < self.ray.num_workers:
            raise ConfigError(
                f"num_envs ({self.num_envs}) must be >= ray.num_workers "
                f"({self.ray.num_workers}): every Ray worker needs at least one env"
            )


@dataclass
class FlatRollout:
    """One rollout's learning data, each [B, ...] over the valid steps."""

    obs: torch.Tensor
    actions: torch.Tensor
    old_logprobs: torch.Tensor  # [B] the policy's log-probs when it acted
    old_values: torch.Tensor  # [B] the critic's values when it acted
    advantages: torch.Tensor  # [B]
    returns: torch.Tensor  # [B] advantages + old values: the critic's targets


class OnPolicyAlgorithm(Agent):
    """Vector-env rollouts into preallocated storage, then the subclass's `update`."""

    total_key = "total_steps"
    config: OnPolicyConfig
    uses_critic = True  # REINFORCE without a baseline sets this False
    saved: tuple[str, ...] = ("actor", "critic", "optimizer", "rng", "runner")

    # ---- setup ------------------------------------------------------------------------
    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self.on_cpu = self.device.type == "cpu"
        if config.backend == "ray" and not self.on_cpu:
            raise ConfigError(
                f"backend 'ray' sends the actor and critic to CPU worker processes, so it trains "
                f"on the CPU only; device {config.device!r} is {self.device} here: set device=cpu"
            )
        self.rng = seed_everything(config.seed)
        if config.backend == "ray":  # the envs live in the Ray workers; one here for spaces
            self.envs = make_vector_env(config.env, 1, "sync")
        else:
            self.envs = make_vector_env(config.env, config.num_envs, config.vectorization)
            self.runner: VectorRunner | RayRunner = VectorRunner(
                self.envs,
                config.env.id,
                seed=config.seed,
                check_finite=config.check_finite,
                info_keys=tuple(config.episode_info),
                device=self.device,
            )
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        self.actor, self.critic = self.make_networks()
        if self.critic is None:  # REINFORCE without a baseline: nothing to save for it
            self.saved = tuple(n for n in self.saved if n != "critic")
        self.reward_scaler: RewardScaler | None = None
        if config.normalize_reward:
            self.reward_scaler = RewardScaler(self.runner.num_envs, config.gamma)
            self.saved = (*self.saved, "reward_scaler")
        # On the device before the optimizer flattens the weights into one buffer there.
        self.actor.to(self.device)
        if self.critic is not None:
            self.critic.to(self.device)
        if config.init_from:
            self._init_from_file(config.init_from)
        if config.backend == "ray":
            self.runner = RayRunner(
                config.ray,
                config.env,
                config.num_envs,
                config.num_steps,
                config.vectorization,
                config.seed,
                self.actor,
                self.critic,
                check_finite=config.check_finite,
                info_keys=tuple(config.episode_info),
                threads=config.threads,
            )
        self._make_optimizer()
        self.storage = RolloutStorage.for_spaces(
            config.num_steps,
            config.num_envs,
            self.observation_space,
            self.action_space,
            info_keys=tuple(config.episode_info),
        )
        self._metrics: dict[str, float] = {}  # the last update's, until they are logged

    def make_networks(self) -> tuple[Actor, Critic | None]:
        """The actor and (unless uses_critic is False) the critic: MLPs from the config's
        hidden/activation; recurrent PPO builds GRU networks here instead."""
        config = self.config
        warn_box_far_from_zero(self.action_space)
        actor = actor_for(config, self.observation_space, self.action_space)
        if not self.uses_critic:
            return actor, None
        critic = Critic(
            self.observation_space, config.hidden, config.activation, normalizer=actor.normalizer
        )
        return actor, critic

    def _make_optimizer(self) -> None:
        actor_params = list(self.actor.parameters())
        critic_params = (
            [p for p in self.critic.parameters() if all(p is not q for q in actor_params)]
            if self.critic is not None
            else []
        )
        # All weights in one tensor and all gradients in another (FlatParameters): zeroing,
        # clipping and the Adam step are one op each instead of one per layer.
        self.flat = FlatParameters(actor_params + critic_params)
        self.optimizer = FlatAdam(self.flat, lr=self.config.learning_rate(0.0), eps=1e-5)

    def _init_from_file(self, path: str) -> None:
        """Copy actor (and critic) weights from a policy file, a saved on-policy model, or a
        run folder (its policy.safetensors where it wrote one, else its latest checkpoint)."""
        if Path(path).is_dir():
            folder = Path(path)
            policy = folder / "policy.safetensors"
            path = str(policy if policy.is_file() else Run.open(folder).checkpoint_path("latest"))
        payload = load_state(path, "init_from file")
        if is_policy_payload(payload):
            actor, critic = policy_from_payload(payload, path)
            self.init_policy(actor, critic)
            return
        saved = payload.get("state") if isinstance(payload, dict) else None
        state = saved.get("state") if isinstance(saved, dict) else None
        if not isinstance(state, dict) or not isinstance(state.get("actor"), dict):
            raise CheckpointError(
                f"init_from {path!r} holds no actor: pass a policy file "
                f"(payoff.models.save_policy) or a saved PPO/A2C/REINFORCE model"
            )
        spaces = saved.get("spaces", {})  # type: ignore[union-attr]
        self._check_spaces(path, spaces if isinstance(spaces, dict) else {})
        try:
            self.actor.load_state_dict(state["actor"])
            if self.critic is not None and isinstance(state.get("critic"), dict):
                self.critic.load_state_dict(state["critic"])
        except (RuntimeError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"init_from {path!r}: its weights do not fit this model ({err})"
            ) from None

    def _check_spaces(self, source: str, saved: dict[str, str]) -> None:
        for key, value in self.spaces().items():
            if key in saved and saved[key] != value:
                raise CheckpointError(
                    f"{source} was trained with {key} {saved[key]}, but env "
                    f"{self.config.env.id!r} has {key} {value}"
                )

    def init_policy(self, actor: Actor, critic: Critic | None = None) -> OnPolicyAlgorithm:
        """Start from given actor (and optionally critic) weights, e.g. a behavior-cloned
        policy. Architectures (hidden sizes, activation) must match this config's."""
        self._check_spaces(
            "the given actor",
            {
                "observation_space": repr(actor.observation_space),
                "action_space": repr(actor.action_space),
            },
        )
        if actor.hidden != self.actor.hidden or actor.activation != self.actor.activation:
            raise ConfigError(
                f"the given actor has hidden={actor.hidden}, activation={actor.activation!r}, "
                f"but this config has hidden={self.actor.hidden}, activation={self.actor.activation!r}; "
                f"set hidden/activation to match it"
            )
        self.actor.normalizer.enabled = actor.normalizer.enabled
        self.actor.load_state_dict(actor.state_dict())
        if critic is not None and self.critic is not None:
            self.critic.load_state_dict(critic.state_dict())
        if hasattr(self, "optimizer"):
            self._make_optimizer()  # fresh moments for the new weights
        return self

    # ---- acting -----------------------------------------------------------------------
    @torch.no_grad()
    def _policy_step(self, obs: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
        # No values: the runner evaluates the critic on the whole rollout in one pass.
        actions, logprobs = self.actor.sample(obs)
        if not self.on_cpu:  # the storage and the envs are on the CPU
            actions, logprobs = actions.cpu(), logprobs.cpu()
        return actions, self.actor.to_env(actions), logprobs

    @torch.no_grad()
    def _values(self, obs: torch.Tensor) -> torch.Tensor:
        assert self.critic is not None
        return self.critic(obs)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """Action(s) for one observation or a batch of them."""
        check_deterministic(deterministic, "act")
        with self.predict_streams(exploring=not deterministic):
            return self.actor.act(observation, deterministic)

    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """The policy's most likely (or sampled) actions on fresh episodes, batched."""
        vectorization: Literal["sync", "async"] = (
            "async" if self.config.vectorization == "async" else "sync"
        )

        def act(obs: torch.Tensor) -> np.ndarray:
            return self.actor.to_env(
                self.actor.mode(obs) if deterministic else self.actor.sample(obs)[0]
            )

        self.actor.eval()
        try:  # (an evaluation stopped by a signal raises: the actor trains on after it)
            with self.predict_streams(exploring=not deterministic):
                return evaluate_batched(env, act, episodes, seed, vectorization, device=self.device)
        finally:
            self.actor.train()

    # ---- learning ---------------------------------------------------------------------
    def advantage_batch(self, storage: RolloutStorage, gae_lambda: float) -> FlatRollout:
        """GAE over a full rollout, then [T, N] flattened to [B]: the steps the envs really took.

        Truncated episodes bootstrap from the critic first (storage.bootstrap_truncated).
        """
        gamma = self.config.gamma
        storage.bootstrap_truncated(gamma)
        advantages, returns = gae(
            storage.rewards, storage.values, storage.next_values, storage.dones, gamma, gae_lambda
        )
        # The valid steps' positions once, then one take per field (a boolean mask per field
        # would find them six times); on the CPU through NumPy views, cheaper calls.
        if storage.valid.device.type == "cpu":
            positions = np.flatnonzero(storage.valid.numpy())

            def flat(tensor: torch.Tensor) -> torch.Tensor:
                rows = tensor.numpy().reshape(-1, *tensor.shape[2:])
                return torch.from_numpy(rows.take(positions, axis=0))

        else:
            valid = storage.valid.reshape(-1).nonzero()[:, 0]

            def flat(tensor: torch.Tensor) -> torch.Tensor:
                return tensor.reshape(-1, *tensor.shape[2:]).index_select(0, valid)

        return FlatRollout(
            obs=flat(storage.obs),
            actions=flat(storage.actions),
            old_logprobs=flat(storage.logprobs),
            old_values=flat(storage.values),
            advantages=flat(advantages),
            returns=flat(returns),
        )

    def optimizer_step(self, loss: torch.Tensor) -> None:
        """Backpropagate `loss` and take one Adam step, clipping the joint gradient norm.

        Trap: the clip is over actor and critic together (as in SB3 and CleanRL), so a large
        value loss (large, unscaled returns) shrinks the policy's step too; raise
        max_grad_norm or lower vf_coef when train/value_loss is in the thousands.
        """
        self.flat.zero_grad()
        loss.backward()
        self.gradient_step()

    def gradient_step(self) -> None:
        """Clip the joint gradient norm and take one Adam step, from the gradients in place."""
        if self.config.max_grad_norm > 0:
            self.flat.clip_grad_norm(self.config.max_grad_norm)
        self.optimizer.step()

    def update(self, storage: RolloutStorage, progress: float) -> dict[str, float]:
        """One learning step from a full rollout; returns train/... metrics."""
        raise NotImplementedError

    def iterate(self) -> None:
        """Collect one rollout of num_envs x num_steps, then the subclass's update."""
        started, before = time.perf_counter(), self.step
        fraction = self.step / self.config.total_steps
        self.optimizer.lr = self.config.learning_rate(fraction)
        self.collect()
        self.step = self.runner.env_steps
        # The runner filled the CPU storage; the update learns from one copy on the device.
        storage = self.storage if self.on_cpu else self.storage.to(self.device)
        self._metrics = self.update(storage, fraction)
        if self.actor.normalizer.enabled:
            self.actor.normalizer.update(self.storage.obs[self.storage.valid])
        self._metrics["train/learning_rate"] = self.config.learning_rate(fraction)
        self._metrics["perf/sps"] = (self.step - before) / max(time.perf_counter() - started, 1e-9)

    def collect(self) -> None:
        """One rollout of num_envs x num_steps into self.storage, acting with `_policy_step`,
        or with the actor's rollout sampler where it has one (local runner on the CPU; a
        Ray runner's workers sample for themselves): the same actions and log-probs, with
        the log-probs of the whole rollout computed in one call after it."""
        value_fn = self._values if self.critic is not None else None
        sampler = self.rollout_sampler() if isinstance(self.runner, VectorRunner) else None
        if sampler is None:
            self.runner.collect(self._policy_step, self.storage, value_fn)
        else:
            # A Discrete space's `start` as Actor.to_env adds it, looked up once per rollout.
            start = int(getattr(self.actor.action_space, "start", 0))
            # A sampler that runs the critic too (NumPy's) gives the values, with the same
            # weights: the critic does not change during the rollout.
            value_fn = getattr(sampler, "value_fn", None) or value_fn
            act = getattr(sampler, "act", None)
            if act is not None:  # NumPy in, env actions out; its actions copied after
                self.runner.collect(
                    None,
                    self.storage,
                    value_fn,
                    lambda obs: act(obs, start),
                    sampler=sampler if start == 0 else None,
                )
                self.storage.actions.copy_(sampler.actions[: self.storage.num_steps])
            else:

                def policy(obs: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, None]:
                    actions = sampler(obs)
                    env_actions = actions.numpy()
                    return actions, env_actions + start if start else env_actions, None

                self.runner.collect(policy, self.storage, value_fn)
            self.storage.logprobs.copy_(sampler.logprobs())
        if self.reward_scaler is not None:  # the runner logged the episodes' raw returns
            storage = self.storage
            self.reward_scaler.scale(
                storage.rewards.numpy(),
                (storage.terminated | storage.truncated).numpy(),
                storage.valid.numpy(),
            )

    def rollout_sampler(self) -> Any:
        """The fast sampler for the next local rollout (the actor's), or None."""
        return self.actor.rollout_sampler(self.config.num_steps, self.runner.num_envs)

    def log_training(self) -> None:
        returns, lengths = self.runner.drain_episodes()
        self.state.add_returns(returns)
        record: dict[str, Any] = dict(self._metrics)
        record.update(self.runner.metrics())
        if returns:
            record["train/return"] = float(np.mean(self.recent_returns))
            record["train/episode_length"] = float(np.mean(lengths))
            for key, sums in self.runner.drain_episode_info().items():
                record[f"train/episode_{key}"] = float(np.mean(sums))
        self.log(self.step, **record)

    def evaluate_now(self) -> None:
        self.evaluate_returns()

    def finish(self) -> None:
        self.finish_returns(updates=self.updates)
