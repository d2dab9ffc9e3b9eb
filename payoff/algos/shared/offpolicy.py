"""What the off-policy agents (DQN, SAC, TD3) share: play into a replay buffer, learn from it.

Per vector step (`iterate`): the algorithm picks actions for the current observations
(`explore`), the envs step, the valid transitions (s, a, r, s', terminated) go into the
replay buffer, and once `learning_starts` env steps are stored, every `train_every` env
steps the algorithm runs `gradient_steps` updates (`train`). Episode returns, evaluation
of the deterministic policy and the final summary are the same for all of them; the
algorithm's own module holds only its networks, how it acts and its update.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from payoff.algos.agent import Agent
from payoff.algos.base import VectorAgentKeys, check_deterministic
from payoff.core.config import MAX_BATCH, MAX_REPLAY, in_range
from payoff.core.device import resolve_device
from payoff.core.errors import ConfigError, EnvError
from payoff.core.schedules import Schedule
from payoff.core.seeding import seed_everything
from payoff.core.state import cpu_state
from payoff.envs.make import EnvConfig
from payoff.envs.observations import observation_batch
from payoff.models.continuous import ActionScaler, QEnsemble, check_continuous
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.replay import ReplayBuffer, TransitionBatch
from payoff.rollout.vector import VectorRunner, evaluate_batched, make_vector_env


@dataclass
class ReplayConfig:
    """enabled: sample uniformly from the last `size` transitions; false = train on the
    latest `batch_size` transitions only. size: capacity in transitions."""

    enabled: bool = True
    size: int = field(default=100_000, metadata=in_range(1, MAX_REPLAY))


@dataclass
class OffPolicyKeys(VectorAgentKeys):
    """VectorAgentKeys plus what the replay-buffer agents share.

    learning_rate: Adam step size of every optimizer (DQN's Q-network; the actor, the
        critics and SAC's temperature): a number, or a schedule over training ({start, end,
        fraction, kind}, as PPO's), applied before each round of updates and logged as
        train/learning_rate.
    batch_size: transitions per gradient step.
    learning_starts: env steps played before the first update (their transitions fill the
        buffer; SAC and TD3 play uniformly random actions until then).
    train_every / gradient_steps: after every `train_every` env steps do this many updates.
        Their ratio is the replay ratio: more updates learn more per sample but cost time.
    replay: see ReplayConfig.
    log_every: write train/... metrics every this many env steps.
    eval_every: evaluate every this many env steps; 0 (off) in Python, 5,000 for `payoff
        train` runs (run_defaults).
    """

    learning_rate: Schedule = field(
        default_factory=lambda: Schedule(start=1e-3, end=1e-3), metadata=in_range(0, low_open=True)
    )
    batch_size: int = field(default=256, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    learning_starts: int = field(default=1_000, metadata=in_range(0))
    train_every: int = field(default=1, metadata=in_range(0, low_open=True))
    gradient_steps: int = field(default=1, metadata=in_range(0, low_open=True))
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    log_every: int = field(default=1_000, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=50_000, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 5_000}  # payoff train runs

    def validate(self) -> None:
        # Ranges of single keys (counts > 0, ...) are checked by core.config.
        if self.replay.enabled and self.replay.size < self.batch_size:
            raise ConfigError(
                f"replay.size {self.replay.size} is smaller than batch_size {self.batch_size}"
            )


class OffPolicyAlgorithm(Agent):
    """The replay loop around an off-policy learner. A subclass implements `build` (its
    networks and optimizers), `explore` (actions to play, as the buffer stores them),
    `greedy` (the deterministic policy for evaluation), `train` (its updates) and
    `train_metrics` (what it logs)."""

    total_key = "total_steps"
    config: OffPolicyKeys

    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self.on_cpu = self.device.type == "cpu"
        self.rng = seed_everything(config.seed)
        self.envs = make_vector_env(config.env, config.num_envs, config.vectorization)
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        try:
            self.check_spaces(self.observation_space, self.action_space)
        except EnvError:
            self.envs.close()
            raise
        self.runner = VectorRunner(
            self.envs, config.env.id, seed=config.seed, check_finite=config.check_finite
        )
        self.build()
        capacity = config.replay.size if config.replay.enabled else config.batch_size
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.buffer = ReplayBuffer(
            capacity,
            tuple(self.observation_space.shape or ()),
            () if discrete else (int(np.prod(self.action_space.shape)),),
            np.int64 if discrete else np.float32,
        )
        self.gradient_updates = 0

    # ---- what an algorithm provides ------------------------------------------------------
    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Raise EnvError naming the space this algorithm cannot handle."""

    def build(self) -> None:
        """Networks and optimizers (called after the envs exist, before the buffer)."""
        raise NotImplementedError

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Actions to play for observations [N, ...], as the replay buffer stores them."""
        raise NotImplementedError

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Stored actions -> what env.step takes (scaling to a Box's bounds, for example)."""
        return actions

    def greedy(self, obs: torch.Tensor) -> np.ndarray:
        """The deterministic policy's env actions for observations on the device."""
        raise NotImplementedError

    def train(self, steps: int) -> None:
        """`steps` gradient steps, on minibatches drawn together (`minibatches`)."""
        batches, size = self.minibatches(steps)
        for k in range(steps):
            self.gradient_step(batches.rows(slice(k * size, (k + 1) * size)))

    def gradient_step(self, batch: TransitionBatch) -> None:
        """One update on one minibatch."""
        raise NotImplementedError

    def train_metrics(self) -> dict[str, Any]:
        """The algorithm's train/... metrics since the last log."""
        return {}

    def optimizers(self) -> list[FlatAdam]:
        """The optimizers whose step size `learning_rate` sets."""
        raise NotImplementedError

    # ---- learning ------------------------------------------------------------------------
    def schedule_learning_rate(self) -> None:
        """Every optimizer's step size at this point of training, from `learning_rate`'s
        schedule (a function of the step: a resumed run goes on where it was, and the
        optimizers' saved step size is the same value)."""
        rate = self.config.learning_rate(self.step / self.config.total_steps)
        for optimizer in self.optimizers():
            optimizer.lr = rate

    def minibatches(self, steps: int) -> tuple[TransitionBatch, int]:
        """The minibatches of `steps` gradient steps, drawn in one go (the buffer does not
        change in between) and moved to the device in one copy, and the rows per step:
        uniform samples of batch_size, or with replay off the latest batch_size transitions
        for every step."""
        config = self.config
        if config.replay.enabled:
            size = config.batch_size
            batches = self.buffer.sample(steps * size, self.rng)
        else:
            size = min(config.batch_size, len(self.buffer))
            batches = self.buffer.latest(size, repeat=steps)
        if not self.on_cpu:
            batches = batches.to(self.device)
        return batches, size

    # ---- acting --------------------------------------------------------------------------
    def tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Observations as a float32 tensor on the device (no copy on the CPU)."""
        tensor = torch.from_numpy(np.asarray(obs, dtype=np.float32))
        return tensor if self.on_cpu else tensor.to(self.device)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """Action(s) for one observation (an int for Discrete actions) or a batch of them."""
        check_deterministic(deterministic, "act")
        batch, single = observation_batch(observation, self.observation_space)
        if deterministic:
            actions = self.greedy(self.tensor(batch))
        else:
            with self.predict_streams():
                actions = self.env_actions(self.explore(batch))
        if not single:
            return actions
        return int(actions[0]) if isinstance(self.action_space, gym.spaces.Discrete) else actions[0]

    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """The deterministic (or exploring) policy on fresh episodes, batched."""
        if deterministic:
            return evaluate_batched(env, self.greedy, episodes, seed, "sync", device=self.device)

        def explore(obs: torch.Tensor) -> np.ndarray:
            return self.env_actions(self.explore(obs.cpu().numpy()))

        with self.predict_streams():
            return evaluate_batched(env, explore, episodes, seed, "sync", device=self.device)

    # ---- the loop's iteration --------------------------------------------------------------
    def iterate(self) -> None:
        """One vector step into the buffer; every train_every env steps, learn."""
        config = self.config
        before = self.step
        obs = self.runner.obs
        actions = self.explore(obs)
        next_obs, rewards, terminated, truncated, valid = self.runner.step(
            self.env_actions(actions)
        )
        # Under NEXT_STEP autoreset a step that only reset an env is no transition.
        self.buffer.add(
            np.asarray(obs)[valid],
            actions[valid],
            rewards[valid],
            np.asarray(next_obs)[valid],
            np.asarray(terminated)[valid],
        )
        self.step = self.runner.env_steps
        # Every multiple of train_every passed trains: a vector step of 4 envs with
        # train_every 1 passes 4 of them (it used to train once, a quarter of the updates
        # per env step that gradient_steps / train_every promises).
        passed = self.step // config.train_every - before // config.train_every
        if self.step >= config.learning_starts and passed:
            self.schedule_learning_rate()
            self.train(passed * config.gradient_steps)

    def log_training(self) -> None:
        returns, lengths = self.runner.drain_episodes()
        self.state.add_returns(returns)
        record: dict[str, Any] = {
            **self.train_metrics(),
            "train/gradient_updates": self.gradient_updates,
            "train/learning_rate": self.optimizers()[0].lr,  # the latest updates' step size
            "perf/sps": self.step / max(self.train_seconds, 1e-9),
        }
        if self.recent_returns:
            record["train/return"] = float(np.mean(self.recent_returns))
        if lengths:
            record["train/episode_length"] = float(np.mean(lengths))
        self.log(self.step, **record)

    def evaluate_now(self) -> None:
        self.evaluate_returns()

    def finish(self) -> None:
        if self.gradient_updates == 0 and self.step <= self.config.learning_starts:
            print(
                f"note: the run ended at step {self.step}, before learning_starts "
                f"({self.config.learning_starts}): its steps only filled the replay buffer and "
                f"the policy was never trained. Give it more steps or a smaller learning_starts",
                file=sys.stderr,
            )
        self.finish_returns(gradient_updates=self.gradient_updates)


class ContinuousActorCritic(OffPolicyAlgorithm):
    """What SAC and TD3 share around their different actors and updates: a bounded Box
    action space, actions kept in [-1, 1] (scaled to the Box for the env), uniformly random
    play until learning_starts, and TwinCritics. A subclass sets `actor_class` and
    implements `policy_actions` and `gradient_step`."""

    actor_class: type[nn.Module]

    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_continuous(observation_space, action_space, type(self).__name__, self.config.env.id)

    def build(self) -> None:
        config = self.config
        self.scaler = ActionScaler(self.action_space)
        self.actor = self.actor_class(
            self.observation_space, self.scaler.dim, config.hidden, config.activation
        ).to(self.device)
        self.actor_flat = FlatParameters(list(self.actor.parameters()))
        self.actor_optimizer = FlatAdam(self.actor_flat, lr=config.learning_rate(0.0))
        self.critics = TwinCritics(
            self.observation_space,
            self.scaler.dim,
            config.hidden,
            config.activation,
            config.learning_rate(0.0),
            config.max_grad_norm,
            self.device,
        )

    def optimizers(self) -> list[FlatAdam]:
        return [self.actor_optimizer, self.critics.optimizer]

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Uniform random actions until learning_starts, then the policy's exploration."""
        if self.step < self.config.learning_starts:
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.scaler.dim)).astype(np.float32)
        return self.policy_actions(obs)

    def policy_actions(self, obs: np.ndarray) -> np.ndarray:
        """Exploring actions in [-1, 1] for observations [N, ...]."""
        raise NotImplementedError

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        return self.scaler.to_env(actions)

    def greedy(self, obs: torch.Tensor) -> np.ndarray:
        return self.scaler.to_env(self.actor.act(obs, deterministic=True))

    def step_actor(self, actor_loss: torch.Tensor) -> None:
        """One Adam step of the actor on `actor_loss`; its gradient reaches only the actor's
        weights (not the critics' it passes through)."""
        self.actor_flat.zero_grad()
        actor_loss.backward(inputs=self.actor_flat.params)
        if self.config.max_grad_norm > 0:
            self.actor_flat.clip_grad_norm(self.config.max_grad_norm)
        self.actor_optimizer.step()


class TwinCritics:
    """Clipped double Q-learning's critics (Fujimoto et al. 2018), shared by SAC and TD3: two
    Q(s, a) networks trained on one target, their Polyak-averaged copies, and their Adam.

    The two networks are one QEnsemble (one batched matmul per layer) whose weights live in
    one FlatParameters buffer, so zeroing, clipping and the Adam step are one op each.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_dim: int,
        hidden: list[int],
        activation: str,
        learning_rate: float,
        max_grad_norm: float,
        device: torch.device,
    ):
        self.online = QEnsemble(observation_space, action_dim, hidden, activation).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.flat = FlatParameters(list(self.online.parameters()))
        self.optimizer = FlatAdam(self.flat, lr=learning_rate)
        self.max_grad_norm = max_grad_norm

    def regress(
        self, obs: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One Adam step on sum_i mean (Q_i(s, a) - y)^2 / 2; returns the loss and mean Q."""
        q_values = self.online(obs, actions)  # [2, B]
        loss = 0.5 * (q_values - targets).pow(2).mean(1).sum()
        self.flat.zero_grad()
        loss.backward()
        if self.max_grad_norm > 0:
            self.flat.clip_grad_norm(self.max_grad_norm)
        self.optimizer.step()
        return loss.detach(), q_values.detach().mean()

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """Q_target <- (1 - tau) Q_target + tau Q."""
        torch._foreach_lerp_(list(self.target.parameters()), self.flat.params, tau)

    def state_dict(self) -> dict[str, Any]:
        return {
            "online": cpu_state(self.online),
            "target": cpu_state(self.target),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
