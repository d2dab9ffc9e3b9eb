"""Deep Q-Network (Mnih et al. 2015) with the switches that show why its parts matter.

Per vector step: act epsilon-greedily on Q(s, .), store (s, a, r, s', terminated) in a
replay buffer. Every `train_every` env steps: `gradient_steps` updates of

    y    = r + gamma * (1 - terminated) * max_a' Q_target(s', a')
           (double_q: Q_target(s', argmax_a' Q(s', a')), van Hasselt et al. 2016)
    loss = Huber(Q(s, a) - y)

with the target network copied (tau = 1) or Polyak-averaged (tau < 1) every
`target_network.update_every` gradient steps. A time-limit truncation is not terminal, so
the target still bootstraps from s' there.

Ablations: `replay.enabled=false` learns from the latest transitions only (correlated,
forgetful); `target_network.enabled=false` bootstraps from the network being trained
(a moving target). `payoff train dqn-ablation` plots all four.

Devices (config key `device`): the Q-networks and the flat optimizer buffer live on it; the
replay buffer is NumPy on the CPU. Each vector step's observations go to the device once,
each `train_every` block's minibatches once, and the greedy actions come back as NumPy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from payoff.accel import td_accelerator
from payoff.algos.base import check_deterministic
from payoff.algos.shared.offpolicy import OffPolicyAlgorithm, OffPolicyKeys
from payoff.core.config import MAX_BATCH, MAX_ENV_COPIES, MAX_WIDTH, REPLACED, in_range
from payoff.core.errors import EnvError
from payoff.core.schedules import Schedule
from payoff.envs.observations import observation_batch
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import QNetwork, as_numpy
from payoff.track.progress import say


@dataclass
class TargetNetworkConfig:
    """enabled: bootstrap from a lagged copy of the Q-network; false = from itself.
    update_every: gradient steps between target updates. tau: 1 copies the weights (hard
    update), < 1 moves them that fraction of the way (Polyak averaging)."""

    enabled: bool = True
    update_every: int = field(default=100, metadata=in_range(0, low_open=True))
    tau: float = field(default=1.0, metadata=in_range(0, 1, low_open=True))


@dataclass
class DQNConfig(OffPolicyKeys):
    """DQN on vectorized envs with a Discrete action space. The shared keys (env, seed,
    threads, total_steps, num_envs, vectorization, gamma, max_grad_norm, eval_every,
    eval_episodes, final_eval_episodes, stop_at_return, checkpoint_every, check_finite) are
    payoff.algos.base.VectorAgentKeys; the replay keys (learning_rate, batch_size,
    learning_starts, train_every, gradient_steps, replay, log_every) are
    payoff.algos.shared.offpolicy.OffPolicyKeys. The greedy policy is evaluated.

    learning_starts: env steps of epsilon-greedy play (epsilon near 1 early) before the
        first update.
    epsilon: exploration rate, a schedule over training (fraction = share of training
        spent decaying it).
    hidden / activation: Q-network MLP.
    double_q: pick the next action with the online net, evaluate it with the target net
        (reduces the max operator's overestimation).
    loss: 'huber' (robust to the large TD errors early on) or 'mse'.
    accelerate: auto computes the loss's gradient by hand (payoff.accel.td: autograd's
        ops in its order, bitwise the same gradient) where it applies: the CPU, ReLU/Tanh
        MLPs; elsewhere autograd, the reference, runs. true requires it, false runs autograd.
    fast_backward: the key `accelerate` replaced; old configs and runs still load (true is
        auto, false is false).
    target_network: see TargetNetworkConfig.
    """

    total_steps: int = field(default=50_000, metadata=in_range(0, low_open=True))
    num_envs: int = field(default=4, metadata=in_range(1, MAX_ENV_COPIES))
    max_grad_norm: float = field(default=10.0, metadata=in_range(0))
    batch_size: int = field(default=64, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    train_every: int = field(default=64, metadata=in_range(0, low_open=True))
    gradient_steps: int = field(default=16, metadata=in_range(0, low_open=True))
    epsilon: Schedule = field(
        default_factory=lambda: Schedule(start=1.0, end=0.05, fraction=0.2),
        metadata=in_range(0, 1),
    )
    hidden: list[int] = field(
        default_factory=lambda: [128, 128], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["tanh", "relu", "gelu"] = "relu"
    double_q: bool = False
    loss: Literal["huber", "mse"] = "huber"
    accelerate: bool | Literal["auto"] = "auto"
    fast_backward: bool | None = field(default=None, metadata=REPLACED)
    target_network: TargetNetworkConfig = field(default_factory=TargetNetworkConfig)

    def __post_init__(self) -> None:
        if self.fast_backward is not None:
            self.accelerate = "auto" if self.fast_backward else False
            say(
                f"payoff: fast_backward: {str(self.fast_backward).lower()} is now accelerate: "
                f"{str(self.accelerate).lower()} (the key that replaced it)"
            )
            self.fast_backward = None


class DQN(OffPolicyAlgorithm):
    """DQN / double DQN with replay and target-network switches."""

    config: DQNConfig
    # (_td_errors, _q_values: what the next log averages, kept so that a checkpoint between
    # two logs resumes to the same record)
    saved = (
        "q_net",
        "target_net",
        "optimizer",
        "buffer",
        "rng",
        "runner",
        "gradient_updates",
        "_td_errors",
        "_q_values",
    )

    def check_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        if isinstance(action_space, gym.spaces.Discrete) and int(action_space.start) != 0:
            raise EnvError(
                f"DQN stores and acts with action indices 0..n-1; {self.config.env.id!r} has "
                f"{action_space} (start {int(action_space.start)}). Shift the env's actions to "
                f"start at 0 (a gymnasium ActionWrapper), or use PPO or A2C, which add the start"
            )
        if not isinstance(action_space, gym.spaces.Discrete):
            raise EnvError(
                f"DQN takes the action with the largest Q-value, so it needs a Discrete action "
                f"space; {self.config.env.id!r} has {action_space}. "
                + (
                    "Use SAC or TD3 (algo: sac, td3) or PPO (algo: ppo) for continuous actions "
                    "(e.g. `payoff train pendulum-sac`)."
                    if isinstance(action_space, gym.spaces.Box)
                    else "Use PPO or A2C (algo: ppo, a2c), which take MultiDiscrete and "
                    "MultiBinary actions as one choice per dimension."
                )
            )

    def build(self) -> None:
        config = self.config
        self.num_actions = int(self.action_space.n)
        self.q_net = QNetwork(
            self.observation_space, self.action_space, config.hidden, config.activation
        ).to(self.device)  # before the optimizer flattens the weights into one buffer there
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        # All weights in one tensor and all gradients in another: zeroing, clipping and
        # the Adam step are one op each instead of one per layer.
        self.flat = FlatParameters(list(self.q_net.parameters()))
        self.optimizer = FlatAdam(self.flat, lr=config.learning_rate(0.0))
        # The same gradients as autograd's, computed by hand where `accelerate` allows.
        self.by_hand = td_accelerator(config.accelerate, self.q_net, self.on_cpu)
        self._epsilon = config.epsilon(0.0)
        # Each gradient step's Q(s, a) and TD errors, kept until the next log.
        self._q_values: list[torch.Tensor] = []
        self._td_errors: list[torch.Tensor] = []

    def optimizers(self) -> list[FlatAdam]:
        return [self.optimizer]

    # ---- acting -----------------------------------------------------------------------
    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> np.ndarray:
        """argmax_a Q(s, a) for observations on the device, as NumPy."""
        return as_numpy(self.q_net(obs).argmax(-1))

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions, epsilon from its schedule at this point of training."""
        self._epsilon = self.config.epsilon(self.step / self.config.total_steps)
        return self._epsilon_greedy(obs, self._epsilon)

    def _epsilon_greedy(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        actions = self.greedy(self.tensor(obs))
        explore = self.rng.random(len(actions)) < epsilon
        if explore.any():
            actions[explore] = self.rng.integers(0, self.num_actions, size=int(explore.sum()))
        return actions

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """Greedy action(s); deterministic=False: epsilon-greedy at the schedule's end."""
        check_deterministic(deterministic, "act")
        if deterministic:
            return super().act(observation, deterministic=True)
        # Exploration as at the end of training, not at the schedule's current point.
        batch, single = observation_batch(observation, self.observation_space)
        with self.predict_streams():
            actions = self._epsilon_greedy(batch, self.config.epsilon.end)
        return int(actions[0]) if single else actions

    # ---- learning ---------------------------------------------------------------------
    def train(self, steps: int) -> None:
        """`steps` gradient steps. Their minibatches are drawn in one go (the buffer does not
        change in between), and while the target network stays fixed (between two target
        updates) the bootstrap targets of all those minibatches come from one forward pass:
        the same math as one step at a time, with a fraction of the small-op overhead."""
        config = self.config
        batches, size = self.minibatches(steps)
        fixed_target = config.target_network.enabled and not config.double_q
        done = 0
        while done < steps:
            # Steps until (and including) the next target update, or all of them.
            count = steps - done
            if fixed_target:
                every = config.target_network.update_every
                count = min(count, every - self.gradient_updates % every)
            rows = slice(done * size, (done + count) * size)
            targets = (
                self._targets(
                    batches.rewards[rows], batches.next_obs[rows], batches.terminated[rows]
                )
                if fixed_target
                else None
            )
            for k in range(count):
                part = slice((done + k) * size, (done + k + 1) * size)
                self._gradient_step(
                    batches.obs[part],
                    batches.actions[part],
                    targets[k * size : (k + 1) * size]
                    if targets is not None
                    else self._targets(
                        batches.rewards[part], batches.next_obs[part], batches.terminated[part]
                    ),
                )
            done += count

    @torch.no_grad()
    def _targets(
        self, rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor
    ) -> torch.Tensor:
        """y = r + gamma * (1 - terminated) * Q_target(s', a*)."""
        config = self.config
        bootstrap_net = self.target_net if config.target_network.enabled else self.q_net
        next_q = bootstrap_net(next_obs)  # [B, A]
        if config.double_q:
            next_actions = self.q_net(next_obs).argmax(-1, keepdim=True)
            next_value = next_q.gather(1, next_actions)[:, 0]
        else:
            next_value = next_q.max(-1).values
        return rewards + config.gamma * (1.0 - terminated) * next_value

    def _gradient_step(
        self, obs: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor
    ) -> None:
        config = self.config
        if self.by_hand is not None:  # the same gradient, by hand (payoff.accel.td)
            q_values, td_error = self.by_hand.backward(
                obs, actions, targets, config.loss, self.flat.grads
            )
        else:
            self.flat.zero_grad()
            q_values = self.q_net(obs).gather(1, actions[:, None])[:, 0]  # [B]
            td_error = q_values - targets
            self._loss(td_error).backward()
        if config.max_grad_norm > 0:
            self.flat.clip_grad_norm(config.max_grad_norm)
        self.optimizer.step()
        self.gradient_updates += 1
        if config.target_network.enabled and (
            self.gradient_updates % config.target_network.update_every == 0
        ):
            self._update_target(config.target_network.tau)
        # The loss is computed at the next log, for all these steps at once: one reduction
        # instead of one per gradient step.
        self._q_values.append(q_values.detach())
        self._td_errors.append(td_error.detach())

    def _loss(self, td_error: torch.Tensor) -> torch.Tensor:
        """Mean Huber (smooth L1) or squared TD error."""
        zeros = torch.zeros_like(td_error)
        if self.config.loss == "huber":
            return nn.functional.smooth_l1_loss(td_error, zeros)
        return nn.functional.mse_loss(td_error, zeros)

    @torch.no_grad()
    def _update_target(self, tau: float) -> None:
        if tau >= 1.0:
            self.target_net.load_state_dict(self.q_net.state_dict())
            return
        torch._foreach_lerp_(list(self.target_net.parameters()), self.flat.params, tau)

    def train_metrics(self) -> dict[str, Any]:
        record: dict[str, Any] = {"train/epsilon": self._epsilon}
        if self._td_errors:
            # The loss over every transition the steps trained on since the last log.
            record["train/loss"] = float(self._loss(torch.cat(self._td_errors)))
            record["train/mean_q"] = float(torch.cat(self._q_values).mean())
            self._q_values, self._td_errors = [], []
        return record


ALGORITHM = DQN
