"""MLP networks for classic RL: actors (categorical, diagonal Gaussian), critics, Q-networks.

Every network is a plain `nn.Module` built from Gymnasium spaces and hidden sizes, so other
parts of payoff (behavior cloning, DAgger) can train an actor and hand it to PPO:

    actor = make_actor(env.observation_space, env.action_space, hidden=(64, 64))
    ...train it by behavior cloning...
    save_policy("bc.safetensors", actor)           # then PPO(init_from="bc.safetensors")
    # or in Python: PPO(env=...).init_policy(actor).learn()

Observations are flattened (Box) or one-hot encoded (Discrete). An optional running
observation normalizer lives inside the actor, so a saved actor carries its statistics.

Devices: a network lives where `.to(device)` put it (the CPU by default). `predict` takes
and returns NumPy on any device, `to_env` hands NumPy to the envs, and saved files always
hold CPU tensors (`load_policy(path, device=...)` puts them back on a device).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from payoff.core.errors import EnvError
from payoff.core.imports import check_weights
from payoff.envs.observations import observation_batch
from payoff.models.encoding import ObsEncoder, ObsNormalizer, obs_dim

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


# ---- building blocks -----------------------------------------------------------------
def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """`tensor` as a NumPy array; one copy to the CPU first when it lives on an accelerator."""
    return tensor.numpy() if tensor.is_cpu else tensor.cpu().numpy()


class MLP(nn.Sequential):
    """nn.Sequential whose forward calls each layer's `forward` directly.

    nn.Module.__call__'s hook bookkeeping, paid per layer and per env step, is a large share
    of a small network's forward pass. Same layers and state_dict keys as nn.Sequential;
    module hooks are not run.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = layer.forward(x)
        return x

    @property
    def plain(self) -> bool:
        """True when every layer is a Linear with bias, ReLU or Tanh: what the fast rollout
        samplers and payoff.accel run."""
        return all(
            isinstance(layer, nn.ReLU | nn.Tanh)
            or (isinstance(layer, nn.Linear) and layer.bias is not None)
            for layer in self
        )


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: str, out_gain: float) -> MLP:
    """Linear layers with `activation` between them, orthogonally initialized.

    Orthogonal init with gain sqrt(2) for hidden layers and a small gain for the policy
    head (so the initial policy is close to uniform) is what PPO implementations use.
    """
    if activation not in ACTIVATIONS:
        raise EnvError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    widths = [int(in_dim), *map(int, hidden), int(out_dim)]
    check_weights(
        sum((a + 1) * b for a, b in zip(widths, widths[1:], strict=False)),
        f"an MLP of widths {widths}",
    )
    layers: list[nn.Module] = []
    width = in_dim
    for size in hidden:
        linear = nn.Linear(width, int(size))
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[activation]()]
        width = int(size)
    head = nn.Linear(width, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return MLP(*layers)


# ---- actors --------------------------------------------------------------------------
def _gumbel(uniform: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise from uniforms in [0, 1), in place: -log(-log(u))."""
    return uniform.clamp_min_(1e-20).log_().neg_().log_().neg_()


def gumbel_noise(*shape: int) -> torch.Tensor:
    """Gumbel(0, 1) noise of `shape`, from one draw of uniforms (torch's CPU generator draws
    them in order, so one [T, N, A] draw holds the numbers of T draws of [N, A])."""
    return _gumbel(torch.rand(*shape))


def _gumbel_max(logits: torch.Tensor, gumbel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions sampled from softmax(logits) by the Gumbel-max trick, and their log-probs."""
    # One fused op, cheaper than building a Categorical per step.
    actions = torch.argmax(logits + gumbel, dim=-1)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, actions[:, None])[:, 0]
    return actions, logprobs


class Actor(nn.Module):
    """A stochastic policy pi(a | s). Subclasses pick the action distribution."""

    kind: str = ""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        normalize_obs: bool = False,
    ):
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.hidden = [int(h) for h in hidden]
        self.activation = activation
        self.encoder = ObsEncoder(
            observation_space, ObsNormalizer(obs_dim(observation_space), normalize_obs)
        )

    @property
    def normalizer(self) -> ObsNormalizer:
        return self.encoder.normalizer

    def distribution(self, obs: torch.Tensor) -> Distribution:
        raise NotImplementedError

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the policy entropy at s, one value per row: ([B], [B])."""
        raise NotImplementedError

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities."""
        raise NotImplementedError

    def rollout_sampler(self, num_steps: int, num_envs: int) -> RolloutSampler | None:
        """A faster `sample` for the next `num_steps` calls on `num_envs` rows (one
        rollout), giving the same actions and log-probabilities, or None where there is
        none (the default; CategoricalActor has one on the CPU)."""
        return None

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely action (deterministic policy)."""
        raise NotImplementedError

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Network actions (on any device) -> what env.step accepts: NumPy, clipped to Box
        bounds; a Discrete space's `start` added to the action's index."""
        start = getattr(self.action_space, "start", 0)
        if isinstance(self.action_space, gym.spaces.Discrete) and start != 0:
            return as_numpy(actions) + int(start)
        return as_numpy(actions)

    @property
    def device(self) -> torch.device:
        """Where the actor's weights are."""
        return next(self.parameters()).device

    @torch.no_grad()
    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations (numpy in, numpy out, whatever the device)."""
        tensor = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=self.device)
        actions = self.mode(tensor) if deterministic else self.sample(tensor)[0]
        return self.to_env(actions)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """The action for one observation (an int for a Discrete space), or the actions for a
        batch of them: what an agent's `act` answers."""
        batch, single = observation_batch(observation, self.observation_space)
        actions = self.predict(batch, deterministic)
        if not single:
            return actions
        return int(actions[0]) if isinstance(self.action_space, gym.spaces.Discrete) else actions[0]

    def spec(self) -> dict[str, Any]:
        """How to rebuild this actor (saved next to its weights)."""
        return {
            "kind": self.kind,
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "hidden": self.hidden,
            "activation": self.activation,
            "normalize_obs": self.normalizer.enabled,
        }


class CategoricalActor(Actor):
    """Discrete actions: logits from an MLP, a categorical distribution over them."""

    kind = "categorical"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any):
        super().__init__(observation_space, action_space, **kwargs)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise EnvError(f"CategoricalActor needs a Discrete action space, got {action_space}")
        self.logits = mlp(self.encoder.dim, self.hidden, int(action_space.n), self.activation, 0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits.forward(self.encoder.forward(obs))  # [B, A]

    def distribution(self, obs: torch.Tensor) -> Categorical:
        return Categorical(logits=self(obs))

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Written out rather than via Categorical: its argument checks cost more than the math.
        logprobs = torch.log_softmax(self(obs), dim=-1)  # [B, A]
        entropy = -(logprobs.exp() * logprobs).sum(-1)
        return logprobs.gather(-1, actions.long()[:, None])[:, 0], entropy

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(obs)
        return _gumbel_max(logits, _gumbel(torch.rand_like(logits)))

    def rollout_sampler(self, num_steps: int, num_envs: int) -> RolloutSampler | None:
        if self.device.type != "cpu" or not self.logits.plain:
            return None
        return RolloutSampler(self, num_steps, num_envs)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self(obs), dim=-1)


class RolloutSampler:
    """`CategoricalActor.sample` over the `num_steps` calls of one rollout, with less work
    per call and the same numbers (tests/test_deeprl_fast_paths.py):

    - On the CPU, torch draws uniforms one after another from one generator, so one
      [T, N, A] draw holds the numbers of T draws of [N, A]: the rollout's Gumbel noise is
      drawn ahead in one call.
    - Each Linear runs as the addmm nn.Linear runs, into buffers, activations in place.
    - A step returns the sampled actions only; `logprobs()` gives log pi(a_t | s_t) of all
      steps after the rollout, from one log_softmax over the logits kept (log_softmax
      works row by row: the same values as T calls).

    Weights are read as they are when the sampler is made: make one per rollout.
    """

    def __init__(self, actor: CategoricalActor, num_steps: int, num_envs: int):
        n = int(actor.action_space.n)  # type: ignore[attr-defined]
        self.step = 0
        self.noise = gumbel_noise(num_steps, num_envs, n)  # [T, N, A]
        self.logits = torch.empty(num_steps, num_envs, n)
        self.actions = torch.empty(num_steps, num_envs, dtype=torch.long)
        self.perturbed = torch.empty(num_envs, n)
        self.encode = actor.encoder.forward
        linears = [layer for layer in actor.logits if isinstance(layer, nn.Linear)]
        # (bias, weight^T, hidden buffer: None for the head, whose output is the logits)
        self.layers = [
            (
                linear.bias.detach(),
                linear.weight.detach().t(),
                torch.empty(num_envs, linear.out_features) if i < len(linears) - 1 else None,
            )
            for i, linear in enumerate(linears)
        ]
        self.activation = torch.tanh_ if actor.activation == "tanh" else torch.relu_

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """The actions [N] sampled for the next step's observations [N, ...]."""
        t = self.step
        x = self.encode(obs)
        for bias, weight_t, hidden in self.layers:
            if hidden is None:
                x = torch.addmm(bias, x, weight_t, out=self.logits[t])
            else:
                x = self.activation(torch.addmm(bias, x, weight_t, out=hidden))
        # Gumbel-max, as _gumbel_max: argmax(logits + noise).
        torch.add(x, self.noise[t], out=self.perturbed)
        self.step += 1
        return torch.argmax(self.perturbed, dim=-1, out=self.actions[t])

    @torch.no_grad()
    def logprobs(self) -> torch.Tensor:
        """log pi(a_t | s_t) of the actions sampled so far: [steps taken, N]."""
        taken = self.step
        logprobs = torch.log_softmax(self.logits[:taken], dim=-1)
        return logprobs.gather(-1, self.actions[:taken, :, None])[..., 0]


class MultiCategoricalActor(Actor):
    """Several discrete choices at once (MultiDiscrete, MultiBinary): one block of logits per
    choice from one MLP, independent categoricals. log pi(a|s) and the entropy are sums over
    the choices (SB3's MultiCategoricalDistribution, CleanRL's MultiDiscrete PPO)."""

    kind = "multi_categorical"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any):
        super().__init__(observation_space, action_space, **kwargs)
        self.choices, starts = choices_of(action_space)
        self.register_buffer("start", torch.as_tensor(starts, dtype=torch.long))
        self.logits = mlp(self.encoder.dim, self.hidden, sum(self.choices), self.activation, 0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits.forward(self.encoder.forward(obs))  # [B, sum of choices]

    def _blocks(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each choice's logits: [B, n_i] for choice i."""
        return torch.split(self(obs), self.choices, dim=-1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        raise NotImplementedError(
            "a MultiDiscrete policy is several categoricals: use log_prob_entropy and sample"
        )

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logprob = torch.zeros(obs.shape[0], device=obs.device)
        entropy = torch.zeros(obs.shape[0], device=obs.device)
        chosen = actions.long()  # [B, choices]
        for i, logits in enumerate(self._blocks(obs)):
            logprobs = torch.log_softmax(logits, dim=-1)
            logprob = logprob + logprobs.gather(-1, chosen[:, i : i + 1])[:, 0]
            entropy = entropy - (logprobs.exp() * logprobs).sum(-1)
        return logprob, entropy

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actions, logprob = [], torch.zeros(obs.shape[0], device=obs.device)
        for logits in self._blocks(obs):
            action, logprobs = _gumbel_max(logits, _gumbel(torch.rand_like(logits)))
            actions.append(action)
            logprob = logprob + logprobs
        return torch.stack(actions, dim=-1), logprob  # [B, choices], [B]

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([logits.argmax(-1) for logits in self._blocks(obs)], dim=-1)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Choice indices -> the space's values (MultiDiscrete's `start` added), its dtype."""
        values = as_numpy(actions.long() + self.start.to(actions.device))
        return values.astype(self.action_space.dtype, copy=False)


def choices_of(space: gym.Space) -> tuple[list[int], list[int]]:
    """How many values each choice of a MultiDiscrete / MultiBinary space has, and the
    value its first option stands for; EnvError for any other space."""
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return [2] * int(space.shape[0]), [0] * int(space.shape[0])
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return [int(n) for n in space.nvec], [int(s) for s in space.start]
    raise EnvError(
        f"MultiCategoricalActor needs a one-dimensional MultiDiscrete or MultiBinary action "
        f"space, got {space}"
    )


class GaussianActor(Actor):
    """Continuous actions: a diagonal Gaussian with an MLP mean and a state-independent log-std.

    Actions are sampled unbounded and clipped to the Box only when sent to the env (the
    log-probability is of the unclipped sample, as in SB3 and CleanRL).
    """

    kind = "gaussian"
    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        log_std_init: float = 0.0,
        **kwargs: Any,
    ):
        super().__init__(observation_space, action_space, **kwargs)
        if not isinstance(action_space, gym.spaces.Box):
            raise EnvError(f"GaussianActor needs a Box action space, got {action_space}")
        refuse_integer_box(action_space, "a Gaussian policy")
        act_dim = int(np.prod(action_space.shape))
        self.mean = mlp(self.encoder.dim, self.hidden, act_dim, self.activation, 0.01)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))
        # flat, as the actions are: a Box of shape (2, 2) or () is acted on as 4 or 1 numbers
        self.register_buffer(
            "low", torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
        )
        self.register_buffer(
            "high", torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean.forward(self.encoder.forward(obs))  # [B, act_dim]

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self(obs)
        return Normal(mean, self.log_std.exp().expand_as(mean))

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._log_prob(self(obs), actions), self._entropy().expand(obs.shape[0])

    def _log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Diagonal Gaussian log-density, summed over action dimensions: [B]."""
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _HALF_LOG_2PI).sum(-1)

    def _entropy(self) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum()

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self(obs)
        actions = mean + torch.randn_like(mean) * self.log_std.exp()
        return actions, self._log_prob(mean, actions)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        clipped = torch.maximum(torch.minimum(actions, self.high), self.low)
        shape = tuple(self.action_space.shape or ())
        return as_numpy(clipped.reshape(actions.shape[0], *shape))

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "log_std_init": float(self.log_std.detach().mean())}


def refuse_integer_box(action_space: gym.spaces.Box, algorithm: str, env: str = "the env") -> None:
    """EnvError for a Box of integers: a continuous policy samples real numbers, which such
    an env would get as floats (its action_space.contains says no) or truncate. `env` names
    the env in the message ("'Pendulum-v1'")."""
    if not np.issubdtype(action_space.dtype, np.floating):
        raise EnvError(
            f"{algorithm} samples real-valued actions, but {env} has {action_space}, a Box of "
            f"{action_space.dtype} values: declare the actions as gymnasium.spaces.MultiDiscrete "
            f"(one choice per dimension; PPO, A2C and REINFORCE take it), or as a float Box "
            f"whose values the env rounds itself"
        )


def make_actor(
    observation_space: gym.Space,
    action_space: gym.Space,
    hidden: Sequence[int] = (64, 64),
    activation: str = "tanh",
    normalize_obs: bool = False,
    log_std_init: float = 0.0,
) -> Actor:
    """The actor that fits `action_space`: categorical for Discrete, Gaussian for Box,
    independent categoricals for a one-dimensional MultiDiscrete or MultiBinary."""
    kwargs: dict[str, Any] = {
        "hidden": hidden,
        "activation": activation,
        "normalize_obs": normalize_obs,
    }
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalActor(observation_space, action_space, **kwargs)
    if isinstance(action_space, gym.spaces.Box):
        return GaussianActor(observation_space, action_space, log_std_init=log_std_init, **kwargs)
    multi = isinstance(action_space, gym.spaces.MultiDiscrete | gym.spaces.MultiBinary)
    if multi and len(action_space.shape) == 1:
        return MultiCategoricalActor(observation_space, action_space, **kwargs)
    raise EnvError(
        f"payoff's actors handle Discrete, Box and one-dimensional MultiDiscrete or MultiBinary "
        f"action spaces, got {action_space}"
    )


def actor_for(settings: Any, observation_space: gym.Space, action_space: gym.Space) -> Actor:
    """`make_actor` with the `hidden`, `activation`, `normalize_obs` and `log_std_init` of a
    config (PPO's, behavior cloning's: the keys match so that one hands its actor over)."""
    return make_actor(
        observation_space,
        action_space,
        hidden=settings.hidden,
        activation=settings.activation,
        normalize_obs=settings.normalize_obs,
        log_std_init=settings.log_std_init,
    )


# ---- critics -------------------------------------------------------------------------
class Critic(nn.Module):
    """State value V(s). Pass the actor's normalizer so both see the same inputs."""

    def __init__(
        self,
        observation_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        normalizer: ObsNormalizer | None = None,
    ):
        super().__init__()
        self.observation_space = observation_space
        self.hidden = [int(h) for h in hidden]
        self.activation = activation
        self.encoder = ObsEncoder(observation_space, normalizer)
        self.value = mlp(self.encoder.dim, self.hidden, 1, activation, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value.forward(self.encoder.forward(obs))[:, 0]  # [B]


class QNetwork(nn.Module):
    """Action values Q(s, .) for a Discrete action space: one output per action."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        activation: str = "relu",
    ):
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise EnvError(f"QNetwork needs a Discrete action space, got {action_space}")
        self.encoder = ObsEncoder(observation_space, None)
        self.q = mlp(self.encoder.dim, hidden, int(action_space.n), activation, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q.forward(self.encoder.forward(obs))  # [B, A]
