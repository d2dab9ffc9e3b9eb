"""Model-based RL by planning through a learned model (PETS: Chua et al. 2018).

    learn a world model, then plan with it:

    data     D = real transitions (s, a, r, s', terminated), the first `learning_starts`
               from uniformly random actions
    model    every `train_every` env steps refit an ensemble of E probabilistic MLPs
               p_e(s' - s, r, terminated | s, a) on D (Gaussian NLL, each member on its
               own bootstrap resample; payoff.models.dynamics.DynamicsEnsemble)
    act      model-predictive control: at every step search action sequences
               a_t..a_{t+H-1} that maximize the return the model imagines,
                   R(a) = mean_e sum_k alive_k * r_k,   (s_{k+1}, r_k) ~ p_e(. | s_k, a_k)
               by CEM (refit a Gaussian to the `elites` best of `population` samples,
               `iterations` times) or MPPI (average the samples weighted by
               exp(R / temperature)); take the first action, replan at the next step

Trajectory sampling is TS-inf with one particle per member: every candidate sequence is
imagined by each of the E members along its own sampled trajectory (one batched forward
per step: [E, population, ...]), and R averages the E returns. The reward comes from the
model, not from the env's code: nothing about Pendulum or CartPole is written here.

Discrete actions (CartPole): the model reads the action one-hot; the planner's search
distribution over a sequence is one categorical per step instead of a Gaussian, and CEM
refits it to the elites' action frequencies (MPPI: to their exp(R / temperature)-weighted
frequencies). The model also predicts whether the episode ends, from the predicted next
observation (a classifier per member), and an imagined trajectory collects reward only
while it is predicted alive: on CartPole, where every step pays 1, staying alive is the
whole task.

Policy search (`planner.method: policy`): instead of a sequence at every step, CEM searches
the weights of a linear feedback policy at every refit, each candidate scored by its
closed-loop return over `horizon` imagined steps from `starts` real states, and the run acts
with it until the next refit (LinearPolicy, imagine_policy). Open-loop sequences cannot see
a cart drift out over hundreds of steps, even with CartPole's true dynamics; a policy
rolled out for 400 steps can: cartpole-mbrl solves CartPole with it (docs/model-based.md).

Where the planner exploits the model: the search favours whatever the model scores high;
where the model has seen little data, those are its errors. Logged per episode: the return
the planner predicted over its horizon (`train/planned_return`) against what the env paid
over the same steps (`train/realized_return`), and the ensemble's disagreement along the
chosen plans (`train/model_disagreement`: the std over members of their predicted states,
in units of the observation's std). The `model_exploitation` monitor
(payoff.monitor.detectors.ModelExploitation) fires when the first exceeds the second by a
lot while the third is high. Also logged: the model's one-step NLL and error and its
open-loop k-step error on the transitions collected since the last refit (held out: not yet
trained on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from payoff.algos.agent import Agent
from payoff.algos.base import AgentKeys, check_deterministic
from payoff.algos.loop import crossed
from payoff.core.config import MAX_BATCH, MAX_DEPTH, MAX_ENV_COPIES, MAX_WIDTH, in_range
from payoff.core.errors import CheckpointError, ConfigError, EnvError
from payoff.core.seeding import seed_everything
from payoff.envs.make import EnvConfig
from payoff.envs.observations import observation_batch
from payoff.models.dynamics import DynamicsEnsemble, TerminalValue, model_io
from payoff.monitor.detectors import ModelExploitation, ModelExploitationConfig, Monitor
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.vector import VectorRunner, evaluate_batched, make_vector_env


# ---- the search-distribution updates (pure functions of the samples and their scores) ------
def cem_update(
    mean: torch.Tensor,
    std: torch.Tensor,
    samples: torch.Tensor,
    returns: torch.Tensor,
    elites: int,
    alpha: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy method: refit the Gaussian to the `elites` highest-return samples.

    mean, std [B, H, A]; samples [B, P, H, A]; returns [B, P]. The new parameters keep
    `alpha` of the old ones (momentum): alpha * old + (1 - alpha) * elite statistic.
    """
    elite = best_samples(samples, returns, elites)  # [B, K, H, A]
    elite_mean, elite_std = elite.mean(1), elite.std(1, unbiased=False)
    return alpha * mean + (1 - alpha) * elite_mean, alpha * std + (1 - alpha) * elite_std


def mppi_weights(returns: torch.Tensor, temperature: float) -> torch.Tensor:
    """MPPI's weights of the samples: softmax(returns / temperature) over the population.
    returns [B, P] -> [B, P], each row summing to 1."""
    return torch.softmax(returns / temperature, dim=1)


def categorical_update(
    probs: torch.Tensor,
    samples: torch.Tensor,
    weights: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """Discrete actions: refit per-step categoricals to the samples' weighted action counts.

    probs [B, H, n]; samples [B, P, H] (action indices); weights [B, P] summing to 1 over P
    (CEM: 1/K on each elite, 0 elsewhere; MPPI: mppi_weights).
    """
    counts = F.one_hot(samples, probs.shape[-1]).to(probs.dtype)  # [B, P, H, n]
    frequencies = (weights[:, :, None, None] * counts).sum(1)
    return alpha * probs + (1 - alpha) * frequencies


def elite_weights(returns: torch.Tensor, elites: int) -> torch.Tensor:
    """1/elites on each of the `elites` best samples of each row, 0 elsewhere. [B, P]."""
    top = returns.topk(elites, dim=1).indices
    return torch.zeros_like(returns).scatter_(1, top, 1.0 / elites)


def best_samples(samples: torch.Tensor, returns: torch.Tensor, count: int) -> torch.Tensor:
    """The `count` highest-return samples of each row, best first: samples [B, P, H, A],
    returns [B, P] -> [B, count, H, A]."""
    top = returns.topk(count, dim=1).indices
    return samples.gather(1, top[:, :, None, None].expand(-1, -1, *samples.shape[2:]))


def colored_noise(shape: tuple[int, ...], beta: float, generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise [..., H, A] whose power along the horizon H falls as 1/f^beta (iCEM:
    Pinneri et al. 2020): beta 0 is white noise (torch.randn itself), larger beta gives
    smoother, lower-frequency sequences (2: Brownian-like), which reach farther states, as
    a swing-up needs. Each value has unit variance in expectation, as white noise does.
    Built in the frequency domain: random complex amplitudes scaled by f^(-beta/2), the
    lowest frequency standing in for f = 0, then an inverse real FFT."""
    if beta == 0:
        return torch.randn(shape, generator=generator)
    *batch, horizon, actions = shape
    frequencies = torch.fft.rfftfreq(horizon).clamp(min=1.0 / horizon)
    scale = frequencies ** (-beta / 2)
    # The std the inverse FFT gives these amplitudes at each step: a complex bin adds 4
    # s^2 / H^2 to the variance (its real and imaginary parts and its mirror at -f), a real
    # one (f = 0, and the Nyquist bin of an even horizon) 2 s^2 / H^2.
    power = 4 * scale.pow(2)
    power[0] /= 2
    if horizon % 2 == 0:
        power[-1] /= 2
    sigma = power.sum().sqrt() / horizon
    real = torch.randn((*batch, actions, len(scale)), generator=generator) * scale
    imaginary = torch.randn((*batch, actions, len(scale)), generator=generator) * scale
    imaginary[..., 0] = 0.0
    real[..., 0] *= 2**0.5
    if horizon % 2 == 0:
        imaginary[..., -1] = 0.0
        real[..., -1] *= 2**0.5
    noise = torch.fft.irfft(torch.complex(real, imaginary), n=horizon) / sigma  # [..., A, H]
    return noise.transpose(-1, -2).contiguous()


# ---- imagination -------------------------------------------------------------------------
def _roll(
    model: DynamicsEnsemble,
    state: torch.Tensor,
    horizon: int,
    actions_for: Callable[[int, torch.Tensor], torch.Tensor],
    generator: torch.Generator | None,
    value: TerminalValue | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll start states [E, N, o] `horizon` steps through every member; actions_for(t,
    state) -> [E, N, a] gives the model's action inputs at step t. Returns the returns
    [E, N] (reward collected while predicted alive, plus gamma^H * V(end) with a value) and
    the states [H, E, N, o]."""
    o = model.obs_dim
    total = torch.zeros(state.shape[:2])
    alive = torch.ones(state.shape[:2])
    states = []
    for t in range(horizon):
        mean, std = model(torch.cat([state, actions_for(t, state)], dim=-1))
        if generator is not None:  # each member samples its own trajectory (TS-inf)
            sample = mean + std * torch.randn(mean.shape, generator=generator)
        else:
            sample = mean
        total = total + alive * sample[..., o]
        alive = alive * (1.0 - mean[..., o + 1].clamp(0.0, 1.0))
        state = state + sample[..., :o]
        states.append(state)
    if value is not None:
        total = total + value.gamma**horizon * alive * value(state)
    return total, torch.stack(states)


@torch.no_grad()
def imagine(
    model: DynamicsEnsemble,
    obs: torch.Tensor,
    action_inputs: torch.Tensor,
    generator: torch.Generator | None = None,
    value: TerminalValue | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll action sequences through every member of the ensemble.

    obs [B, o]; action_inputs [B, P, H, a] (Box actions, or one-hot discrete ones).
    With a generator, each member samples its next state and reward from its Gaussian
    (trajectory sampling, TS-inf: a particle stays with its member); without, it follows
    its mean. With a value, each return also gets gamma^H * V(the state it ends in) while
    still alive. Returns the imagined returns [E, B, P] and states [H, E, B, P, o].
    """
    members, o = model.members, model.obs_dim
    batch, population, horizon, _ = action_inputs.shape
    state = obs[:, None, :].expand(batch, population, o).reshape(1, -1, o).expand(members, -1, o)
    sequences = action_inputs.reshape(1, batch * population, horizon, -1)
    total, states = _roll(
        model,
        state,
        horizon,
        lambda t, _: sequences[:, :, t].expand(members, -1, -1),
        generator,
        value,
    )
    return total.reshape(members, batch, population), states.reshape(
        horizon, members, batch, population, o
    )


def action_layout(space: gym.Space) -> tuple[int | None, torch.Tensor, torch.Tensor]:
    """(n, -, -) for Discrete(n); (None, low, high) as float32 tensors for a Box (the
    placeholders of a Discrete space are empty tensors)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n), torch.empty(0), torch.empty(0)
    low = torch.as_tensor(space.low, dtype=torch.float32)  # type: ignore[attr-defined]
    high = torch.as_tensor(space.high, dtype=torch.float32)  # type: ignore[attr-defined]
    return None, low, high


class LinearPolicy:
    """A linear feedback policy, what `planner.method: policy` searches for: scores
    z = [(s - mean) / std, 1] @ W, W [o + 1, k]; the action is argmax z (Discrete, k = n)
    or low + (high - low) * (tanh z + 1) / 2 (Box, k = the action's size). mean and std
    are the model's observation normalizer at the time of the search, kept with W."""

    def __init__(
        self, space: gym.Space, weights: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
    ):
        self.weights, self.mean, self.std = weights, mean, std
        self.actions, self.low, self.high = action_layout(space)

    def inputs(self, obs: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """What the model reads for obs [..., N, o] under this policy's weights, or under
        `weights` [N, o + 1, k] (one matrix per row: the search's candidates): one-hot
        actions, or the actions' values."""
        weights = self.weights if weights is None else weights
        features = torch.cat([(obs - self.mean) / self.std, torch.ones_like(obs[..., :1])], -1)
        if weights.dim() == 2:
            scores = features @ weights
        else:
            scores = torch.einsum("...ni,nik->...nk", features, weights)
        if self.actions is not None:
            return F.one_hot(scores.argmax(-1), self.actions).float()
        return self.low + (self.high - self.low) * (torch.tanh(scores) + 1) / 2


@torch.no_grad()
def imagine_policy(
    model: DynamicsEnsemble,
    starts: torch.Tensor,
    policy: LinearPolicy,
    weights: torch.Tensor,
    horizon: int,
    generator: torch.Generator | None = None,
    value: TerminalValue | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll candidate policies closed-loop through every member: `policy`'s normalizer and
    action map under each of the P weights [P, o + 1, k], from each of the start states
    [S, o] for `horizon` steps, choosing from the state it is in. Returns the returns
    [E, S, P] and states [H, E, S, P, o]."""
    members, o = model.members, model.obs_dim
    count, population = len(starts), len(weights)
    state = starts[:, None, :].expand(count, population, o).reshape(1, -1, o)
    state = state.expand(members, -1, o)
    rows = (
        weights[None].expand(count, *weights.shape).reshape(count * population, *weights.shape[1:])
    )
    total, states = _roll(
        model, state, horizon, lambda _, now: policy.inputs(now, rows), generator, value
    )
    return total.reshape(members, count, population), states.reshape(
        horizon, members, count, population, o
    )


@dataclass
class PlannerConfig:
    """Model-predictive control: how each action is searched for.

    method: cem (cross-entropy method: refit the search distribution to the `elites` best
        samples) or mppi (average all samples weighted by exp(return / temperature)): both
        search action sequences at every env step. policy: search a linear feedback policy
        (LinearPolicy) by CEM at every model refit instead, scoring each candidate by its
        closed-loop return over `horizon` steps from `starts` real states in every member,
        and act with it until the next refit (policy search in the model, as PILCO). Open-
        loop sequences cannot see a cart drift out over hundreds of steps; a policy rolled
        out for hundreds of imagined steps can.
    horizon: steps imagined ahead. Longer sees further (a swing-up needs to see the top)
        but compounds the model's errors, and a longer search finds more of them to exploit.
    population: action sequences sampled per iteration.
    iterations: refits of the search distribution per env step.
    elites: (cem) the best samples refit to.
    alpha: weight of the old distribution in each refit (momentum; 0 = the elites only).
    temperature: (mppi) in return units: small = greedy, large = plain average.
    init_std: (Box actions) the search's starting std as a fraction of the action range's
        half-width; (policy) the starting std of the policy's weights.
    starts: (policy) real states, drawn from all data at each search, that every candidate
        is rolled out from.
    Under method policy, population, iterations, elites, alpha and init_std are the CEM
    search's over the policy's weights, run once per model refit; temperature is unused.
    report_every: score the chosen plan (train/planned_return, train/model_disagreement)
        every this many env steps of training. Each score is one more imagined rollout of
        the horizon, `horizon` sequential model calls: next to a policy's cheap actions,
        200 calls at every step took longer than the searches (method policy).
    risk: score a sequence by the members' mean return minus `risk` times their std
        (pessimism where the model is unsure; 0 = PETS' plain mean). Counters exploitation
        where the members disagree, e.g. on CartPole's terminations in states never seen.
    sample: trajectory sampling (PETS' TS-inf): each member samples its next state and
        reward from its Gaussian; false follows each member's mean (only the members'
        disagreement remains, not their predicted noise).
    The improved CEM (iCEM: Pinneri et al. 2020), for Box actions; the defaults are PETS':
    noise_beta: the samples' noise is colored along the horizon, its power falling as
        1/f^noise_beta (colored_noise): 0 = white noise; 2-2.5 = smooth sequences that
        swing far, which CEM finds with fewer samples.
    keep_elites: (cem) the share of each iteration's elites that joins the next
        iteration's samples, and, shifted one step, the next env step's first iteration
        (the search keeps its best candidates instead of sampling them again).
    act: mean (the search distribution's final mean, PETS) or best (the best-scoring
        sequence the search has seen at this step, iCEM). best is an argmax over scored
        samples: with sample true, over noisy scores, so it is more optimistic.
    """

    method: Literal["cem", "mppi", "policy"] = "cem"
    horizon: int = field(default=15, metadata=in_range(1))
    population: int = field(default=150, metadata=in_range(2))
    iterations: int = field(default=3, metadata=in_range(1))
    elites: int = field(default=15, metadata=in_range(1))
    alpha: float = field(default=0.1, metadata=in_range(0, 1, high_open=True))
    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    init_std: float = field(default=0.5, metadata=in_range(0, low_open=True))
    risk: float = field(default=0.0, metadata=in_range(0))
    sample: bool = True
    starts: int = field(default=32, metadata=in_range(1))
    report_every: int = field(default=1, metadata=in_range(1))
    noise_beta: float = field(default=0.0, metadata=in_range(0))
    keep_elites: float = field(default=0.0, metadata=in_range(0, 1))
    act: Literal["mean", "best"] = "mean"

    @property
    def icem(self) -> bool:
        """Whether any of iCEM's keys is off its PETS default."""
        return bool(self.noise_beta or self.keep_elites or self.act != "mean")


@dataclass
class ValueKeys:
    """A learned terminal value (payoff.models.dynamics.TerminalValue): the planner adds
    gamma^horizon * V(the imagined final state) to each sequence's return, so it sees past
    its horizon. Fitted by TD(0) on the real transitions at every model refit.

    enabled: off by default (PETS plans on the horizon's return alone).
    gamma: the value's discount. hidden: its MLP's widths (tanh).
    fit_steps / batch_size / learning_rate: its Adam steps per refit.
    tau: how fast its target copy follows (Polyak, per step).
    """

    enabled: bool = False
    gamma: float = field(default=0.99, metadata=in_range(0, 1, low_open=True, high_open=True))
    hidden: list[int] = field(
        default_factory=lambda: [64, 64], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    fit_steps: int = field(default=200, metadata=in_range(1))
    batch_size: int = field(default=256, metadata=in_range(1, most=MAX_BATCH))
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    tau: float = field(default=0.01, metadata=in_range(0, 1, low_open=True))


@dataclass
class ExploitationKeys(ModelExploitationConfig):
    """The model_exploitation monitor's settings (ModelExploitationConfig), and whether the
    run gets it (enabled)."""

    enabled: bool = True


@dataclass
class MBRLConfig(AgentKeys):
    """PETS-style model-based RL on one env (Box or Discrete actions, a flat Box
    observation). The shared keys (env, seed, threads, eval_every, eval_episodes,
    final_eval_episodes, checkpoint_every, log_every) are payoff.algos.base.AgentKeys.

    total_steps: env steps (real ones: the imagined ones are free, apart from compute).
    learning_starts: env steps of uniformly random actions before the first model fit.
    train_every: refit the model every this many env steps (on all data so far).
    ensemble: members E of the dynamics ensemble. hidden / activation: each member's MLP.
    learning_rate / weight_decay: the model's Adam (weight decay as L2 on the weights).
    fit_steps: gradient steps per refit. batch_size: transitions per member per step.
    planner: see PlannerConfig.
    value: a learned terminal value for the planner (see ValueKeys; off by default).
    multistep_horizon: the longest open-loop horizon of the model-error diagnostic
        (model/open_loop_mse_hK): the model predicts K steps from a real state with the real
        actions, without seeing the states in between.
    exploitation: the `model_exploitation` monitor every run gets (see
        payoff.monitor.detectors.ModelExploitationConfig); `enabled: false` drops it.
    stop_at_return: stop once a periodic evaluation averages at least this.
    check_finite: stop with an error when the env returns NaN or inf.
    Evaluation plans with the model, which costs ~`population * iterations * horizon`
    model rows per step: keep eval_episodes small (they run batched, one planner for all).
    """

    total_steps: int = field(default=1_000, metadata=in_range(0, low_open=True))
    learning_starts: int = field(default=200, metadata=in_range(1))
    train_every: int = field(default=100, metadata=in_range(0, low_open=True))
    ensemble: int = field(default=5, metadata=in_range(0, low_open=True, most=MAX_DEPTH))
    hidden: list[int] = field(
        default_factory=lambda: [128, 128], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["silu", "relu", "tanh"] = "silu"
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    weight_decay: float = field(default=1e-5, metadata=in_range(0))
    fit_steps: int = field(default=300, metadata=in_range(1))
    batch_size: int = field(default=256, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    value: ValueKeys = field(default_factory=ValueKeys)
    multistep_horizon: int = field(default=10, metadata=in_range(1))
    exploitation: ExploitationKeys = field(default_factory=ExploitationKeys)
    stop_at_return: float | None = None
    check_finite: bool = True
    log_every: int = field(default=200, metadata=in_range(0, low_open=True))
    eval_episodes: int = field(default=3, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES))
    final_eval_episodes: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    checkpoint_every: int = field(default=1_000, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"final_eval_episodes": 5}  # payoff train runs

    def validate(self) -> None:
        planner = self.planner
        if planner.method in ("cem", "policy") and planner.elites > planner.population:
            raise ConfigError(
                f"planner.elites {planner.elites} is more than planner.population "
                f"{planner.population}: CEM keeps the best elites of the population"
            )
        if planner.keep_elites and planner.method != "cem":
            raise ConfigError(
                f"planner.keep_elites {planner.keep_elites} needs planner.method cem (the "
                f"elites CEM refits to are what it keeps); method is {planner.method!r}"
            )
        if planner.method == "policy" and planner.icem:  # (keep_elites: refused above)
            raise ConfigError(
                "planner.noise_beta and planner.act shape the search over action sequences "
                "(method cem or mppi); method policy searches a policy's weights"
            )


class TransitionStore:
    """Real transitions in growing arrays (model-based RL keeps them all): obs, the action as
    the model reads it (Box values or one-hot), reward, next obs, terminated, and whether
    the episode ended there (terminated or truncated: open-loop windows stop at it)."""

    def __init__(self, obs_dim: int, action_dim: int, capacity: int = 1024):
        self.size = 0
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros((capacity, action_dim), dtype=np.float32)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.ended = np.zeros(capacity, dtype=bool)
        self.planned = np.full(capacity, np.nan, dtype=np.float32)  # the plan's predicted return

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "ended", "planned")

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated, ended, planned) -> None:  # type: ignore[no-untyped-def]
        if self.size == len(self.rewards):  # double the arrays
            for name in self.FIELDS:
                array = getattr(self, name)
                fill = np.nan if name == "planned" else 0
                grown = np.full((2 * len(array), *array.shape[1:]), fill, dtype=array.dtype)
                grown[: self.size] = array
                setattr(self, name, grown)
        i = self.size
        self.obs[i], self.actions[i], self.rewards[i] = obs, action, reward
        self.next_obs[i], self.terminated[i], self.ended[i] = next_obs, terminated, ended
        self.planned[i] = planned
        self.size += 1

    def model_data(self, start: int = 0, end: int | None = None) -> tuple[torch.Tensor, ...]:
        """Model inputs [N, o + a] and targets [N, o + 2] of transitions start..end."""
        part = slice(start, self.size if end is None else end)
        return model_io(
            self.obs[part],
            self.actions[part],
            self.rewards[part],
            self.next_obs[part],
            self.terminated[part],
        )

    def state_dict(self) -> dict[str, Any]:
        return {"size": self.size, **{n: getattr(self, n)[: self.size].copy() for n in self.FIELDS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        for name in self.FIELDS:
            array = getattr(self, name)
            if len(array) < n:
                array = np.zeros((n, *array.shape[1:]), dtype=array.dtype)
            array[:n] = np.asarray(state[name]).reshape(n, *array.shape[1:])
            setattr(self, name, array)
        self.size = n


class Planner:
    """MPC with CEM or MPPI over action sequences imagined by the model (see the module
    docstring). Keeps each batch row's last solution, shifted by one step, as the next
    search's start (warm start)."""

    def __init__(
        self,
        model: DynamicsEnsemble,
        action_space: gym.Space,
        config: PlannerConfig,
        value: TerminalValue | None = None,
    ) -> None:
        self.model, self.config, self.value = model, config, value
        actions, self.low, self.high = action_layout(action_space)
        self.discrete = actions is not None
        self.num_actions = actions or 0  # (Box: unused)
        self.warm: torch.Tensor | None = None  # [B, H, A] means, or [B, H, n] probabilities
        self.kept: torch.Tensor | None = None  # keep_elites: the last search's, shifted
        if self.discrete and config.icem:
            raise ConfigError(
                f"planner.noise_beta, keep_elites and act: best search sequences of Box "
                f"actions (iCEM); this env's actions are {action_space}: leave them at "
                f"0, 0 and mean"
            )
        # method policy: the policy acted with; zero weights until the first search. Its
        # weights are also the next search's mean (warm start across searches).
        o = model.obs_dim
        outputs = self.num_actions if self.discrete else int(action_space.shape[0])  # type: ignore[index]
        self.policy_shape = (o + 1, outputs)
        self.action_space = action_space
        self.policy = LinearPolicy(
            action_space, torch.zeros(self.policy_shape), torch.zeros(o), torch.ones(o)
        )

    def reset(self) -> None:
        self.warm = self.kept = None

    def _initial(self, batch: int) -> torch.Tensor:
        horizon = self.config.horizon
        if self.discrete:
            return torch.full((batch, horizon, self.num_actions), 1.0 / self.num_actions)
        return ((self.low + self.high) / 2).expand(batch, horizon, -1).clone()

    def _inputs(self, samples: torch.Tensor) -> torch.Tensor:
        """What the model reads: one-hot actions for a discrete space, else the values."""
        if self.discrete:
            return F.one_hot(samples, self.num_actions).float()
        return samples

    @torch.no_grad()
    def plan(
        self, obs: torch.Tensor, generator: torch.Generator, report: bool = True
    ) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """The first action of the best plan for each of obs [B, o] (method policy: the
        searched policy's action); and, with `report`, per row the plan's predicted return
        over the horizon (the members' mean), the members' spread of that return, and their
        disagreement along it (the std over members of the predicted states, in
        observation-std units, averaged over steps and dimensions)."""
        c = self.config
        if c.method == "policy":
            policy = self.policy
            chosen = policy.inputs(obs)
            actions = (chosen.argmax(-1) if self.discrete else chosen).numpy()
            if not report:
                return actions, {}
            # The policy imagined closed-loop by each member's mean: what the planner expects.
            return actions, self._expectations(
                *imagine_policy(self.model, obs, policy, policy.weights[None], c.horizon)
            )
        batch = len(obs)
        noise = generator if c.sample else None  # trajectory sampling, or the members' means
        if self.warm is None or len(self.warm) != batch:
            self.warm = self._initial(batch)
        if self.discrete:
            probs = self.warm
            for _ in range(c.iterations):
                samples = torch.multinomial(
                    probs.reshape(-1, self.num_actions), c.population, True, generator=generator
                )  # [B * H, P]
                samples = samples.reshape(batch, c.horizon, c.population).transpose(1, 2)
                imagined = imagine(self.model, obs, self._inputs(samples), noise, self.value)
                returns = self._score(imagined[0])
                weights = (
                    elite_weights(returns, c.elites)
                    if c.method == "cem"
                    else mppi_weights(returns, c.temperature)
                )
                probs = categorical_update(probs, samples, weights, c.alpha)
            plan = probs.argmax(-1)  # [B, H]
            actions = plan[:, 0].numpy()
            uniform = torch.full((batch, 1, self.num_actions), 1.0 / self.num_actions)
            self.warm = torch.cat([probs[:, 1:], uniform], dim=1)
        else:
            mean = self.warm
            std = (c.init_std * (self.high - self.low) / 2).expand_as(mean)
            kept = self.kept if self.kept is not None and len(self.kept) == batch else None
            keep = max(1, round(c.keep_elites * c.elites)) if c.keep_elites else 0
            best, best_return = mean, torch.full((batch,), -torch.inf)
            for _ in range(c.iterations):
                steps = colored_noise(
                    (batch, c.population, *mean.shape[1:]), c.noise_beta, generator
                )
                samples = torch.maximum(
                    torch.minimum(mean[:, None] + std[:, None] * steps, self.high), self.low
                )  # [B, P, H, A]
                if kept is not None:
                    samples = torch.cat([samples, kept], dim=1)
                returns = self._score(imagine(self.model, obs, samples, noise, self.value)[0])
                if c.act == "best":
                    top_return, top = returns.max(1)
                    better = top_return > best_return
                    chosen = samples[torch.arange(batch), top]
                    best = torch.where(better[:, None, None], chosen, best)
                    best_return = torch.where(better, top_return, best_return)
                if c.method == "cem":
                    mean, std = cem_update(mean, std, samples, returns, c.elites, c.alpha)
                    kept = best_samples(samples, returns, keep) if keep else None
                else:
                    weights = mppi_weights(returns, c.temperature)
                    mean = (weights[:, :, None, None] * samples).sum(1)
            plan = best if c.act == "best" else mean
            actions = plan[:, 0].numpy()
            middle = ((self.low + self.high) / 2).expand(batch, 1, -1)
            self.warm = torch.cat([plan[:, 1:], middle], dim=1)
            if kept is not None:  # shifted like the plan: the step just taken drops out
                self.kept = torch.cat(
                    [kept[:, :, 1:], middle[:, None].expand_as(kept[:, :, :1])], 2
                )
        if not report:
            return actions, {}
        # The chosen plan imagined by each member's mean: what the planner expects of it.
        return actions, self._expectations(*imagine(self.model, obs, self._inputs(plan)[:, None]))

    def _expectations(
        self, member_returns: torch.Tensor, states: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """`plan`'s report from the chosen plan's imagined returns [E, B, 1] and states
        [H, E, B, 1, o]."""
        obs_std = self.model.in_std[: self.model.obs_dim]
        disagreement = (states / obs_std).std(1, unbiased=False).mean(dim=(0, 3))[:, 0]
        return {
            "planned_return": member_returns.mean(0)[:, 0],
            "return_disagreement": member_returns.std(0, unbiased=False)[:, 0],
            "disagreement": disagreement,
        }

    @torch.no_grad()
    def search(self, starts: torch.Tensor, generator: torch.Generator) -> float:
        """method policy: CEM over the linear policy's weights, each candidate scored by its
        imagined return from the real states `starts` [S, o] (mean over them). Starts from
        the last search's mean and `init_std`; acts with the final mean from now on.
        Returns the mean imagined return of the last iteration's elites."""
        c = self.config
        noise = generator if c.sample else None
        o = self.model.obs_dim
        # the candidates read observations normalized as the model now does
        normalizer = (self.model.in_mean[:o].clone(), self.model.in_std[:o].clone())
        candidate = LinearPolicy(self.action_space, self.policy.weights, *normalizer)
        # the last search's mean: cem_update's [batch 1, H = the flat weights, 1]
        mean = self.policy.weights.reshape(1, -1, 1)
        std = torch.full_like(mean, c.init_std)
        for _ in range(c.iterations):
            steps = torch.randn((1, c.population, mean.shape[1], 1), generator=generator)
            samples = mean[:, None] + std[:, None] * steps  # [1, P, d, 1]
            weights = samples.reshape(c.population, *self.policy_shape)
            member_returns = imagine_policy(
                self.model, starts, candidate, weights, c.horizon, noise, self.value
            )[0]
            returns = self._score(member_returns).mean(0, keepdim=True)  # [1, P]
            elite_return = float(returns.topk(c.elites, dim=1).values.mean())
            mean, std = cem_update(mean, std, samples, returns, c.elites, c.alpha)
        self.policy = LinearPolicy(self.action_space, mean.reshape(self.policy_shape), *normalizer)
        return elite_return

    def _score(self, member_returns: torch.Tensor) -> torch.Tensor:
        """What the search maximizes: the members' mean return, less `risk` times their
        spread. [E, B, P] -> [B, P]."""
        score = member_returns.mean(0)
        if self.config.risk:
            score = score - self.config.risk * member_returns.std(0, unbiased=False)
        return score

    def state_dict(self) -> dict[str, Any]:
        policy = self.policy
        return {
            "warm": None if self.warm is None else self.warm.clone(),
            "kept": None if self.kept is None else self.kept.clone(),
            "policy": [policy.weights.clone(), policy.mean.clone(), policy.std.clone()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        warm = state.get("warm")
        self.warm = None if warm is None else torch.as_tensor(warm).clone()
        kept = state.get("kept")  # (absent from checkpoints before keep_elites)
        self.kept = None if kept is None else torch.as_tensor(kept).clone()
        if "policy" not in state:  # saved before method policy existed: no policy searched
            return
        # (checkpoints up to 2026-11-27 also hold "search_mean": the same numbers as the
        # policy's weights, flattened)
        weights, mean, std = (torch.as_tensor(t).clone() for t in state["policy"])
        if weights.shape != self.policy_shape:
            raise CheckpointError(
                f"the checkpoint's policy weights are {tuple(weights.shape)}; this run's "
                f"planner needs {self.policy_shape}: a checkpoint of another env's run?"
            )
        self.policy = LinearPolicy(self.action_space, weights, mean, std)


class MBRL(Agent):
    """PETS: an ensemble of probabilistic dynamics models and MPC (CEM/MPPI) through it."""

    total_key = "total_steps"
    config: MBRLConfig
    saved = (
        "model",
        "optimizer",
        "store",
        "rng",
        "generator",
        "runner",
        "planner",
        "fits",
        "fitted_size",
        "gap_cursor",
        "model_errors",
        "value",
        "value_optimizer",
        "_disagreements",  # what the next log averages: a resume between logs keeps it
        "_return_spreads",
    )

    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        if config.device != "cpu":
            raise ConfigError(
                f"mbrl runs on the CPU (device: cpu); got device {config.device!r}: its small "
                f"models plan one env step at a time, where a GPU's launch overhead dominates"
            )
        self.rng = seed_everything(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.envs = make_vector_env(config.env, 1, "sync")
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        obs_shape = self.observation_space.shape
        if not isinstance(self.observation_space, gym.spaces.Box) or len(obs_shape or ()) != 1:
            self.envs.close()
            raise EnvError(
                f"mbrl's dynamics model predicts a flat vector observation, so it needs a 1-D Box "
                f"observation space; {config.env.id!r} has {self.observation_space}"
            )
        if isinstance(self.action_space, gym.spaces.Discrete):
            if int(self.action_space.start) != 0:  # the planner's actions are indices 0..n-1
                self.envs.close()
                raise EnvError(
                    f"mbrl plans with action indices 0..n-1; {config.env.id!r} has "
                    f"{self.action_space} (start {int(self.action_space.start)}). Shift the "
                    f"env's actions to start at 0 (a gymnasium ActionWrapper), or use PPO or "
                    f"A2C, which add the start"
                )
            action_dim = int(self.action_space.n)
        elif isinstance(self.action_space, gym.spaces.Box) and len(self.action_space.shape) == 1:
            action_dim = int(self.action_space.shape[0])
            if not (
                np.isfinite(self.action_space.low).all()
                and np.isfinite(self.action_space.high).all()
            ):
                self.envs.close()
                raise EnvError(
                    f"mbrl's planner samples actions within the action space's bounds; "
                    f"{config.env.id!r} has unbounded actions {self.action_space}"
                )
        else:
            self.envs.close()
            raise EnvError(
                f"mbrl plans over a Discrete or a 1-D Box action space; {config.env.id!r} has "
                f"{self.action_space}"
            )
        obs_dim = int(obs_shape[0])  # type: ignore[index]
        self.runner = VectorRunner(
            self.envs, config.env.id, seed=config.seed, check_finite=config.check_finite
        )
        self.model = DynamicsEnsemble(
            obs_dim, action_dim, config.ensemble, config.hidden, config.activation
        )
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.store = TransitionStore(obs_dim, action_dim)
        keys = config.value
        self.value = TerminalValue(obs_dim, keys.hidden, keys.gamma)
        self.value_optimizer = torch.optim.Adam(self.value.net.parameters(), lr=keys.learning_rate)
        try:
            self.planner = self._planner()
        except ConfigError:  # a search the action space cannot take: close the env first
            self.envs.close()
            raise
        self.fits = 0  # model refits so far
        self.fitted_size = 0  # transitions the model was last fitted on
        self.gap_cursor = 0  # first transition whose planned-vs-realized window is not scored
        self.model_errors: list[list[Any]] = []  # [step, [open-loop MSE at 1..K steps]]
        self._model_record: dict[str, float] = {}  # the last refit's diagnostics, until logged
        # along each plan since the last log: the ensemble's disagreement, its return spread
        self._disagreements: list[float] = []
        self._return_spreads: list[float] = []

    def default_monitors(self) -> list[Monitor]:
        keys = self.config.exploitation
        if not keys.enabled:
            return []
        settings = {k: v for k, v in vars(keys).items() if k != "enabled"}
        return [ModelExploitation(ModelExploitationConfig(**settings))]

    # ---- acting -----------------------------------------------------------------------
    def _act_space(self, actions: np.ndarray) -> np.ndarray:
        return actions.astype(np.int64) if self.planner.discrete else actions.astype(np.float32)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """The planner's action for one observation or a batch [B, o] (a planner of its own,
        warm-started from the previous call's plan when the batch size is the same, with a
        random stream of its own: predicting changes nothing in training).

        The planner is a random search whichever `deterministic` says: the same observation
        twice can get two actions (the second search starts from the first's plan)."""
        check_deterministic(deterministic, "act")
        batch, single = observation_batch(observation, self.observation_space)
        if not hasattr(self, "_predict_planner"):
            self._predict_planner = self._planner()
            self._predict_generator = torch.Generator().manual_seed(self.config.seed + 3_000_000)
        self._predict_planner.policy = self.planner.policy  # method policy: the latest search
        actions, _ = self._predict_planner.plan(
            torch.from_numpy(batch), self._predict_generator, report=False
        )
        actions = self._act_space(actions)
        return actions[0] if single else actions

    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """The planner on `episodes` fresh episodes of the real env, all planned in one batch.
        Its search draws its samples from a generator seeded `seed` either way:
        deterministic=False plays the same."""
        planner = self._planner()
        generator = torch.Generator().manual_seed(seed)

        def act(obs: torch.Tensor) -> np.ndarray:
            return self._act_space(planner.plan(obs.float(), generator, report=False)[0])

        return evaluate_batched(env, act, episodes, seed, "sync")

    def _planner(self) -> Planner:
        """A planner over the current model (evaluation and predict keep their own warm
        starts); under method policy it acts with the run's latest searched policy."""
        value = self.value if self.config.value.enabled else None
        planner = Planner(self.model, self.action_space, self.config.planner, value)
        if hasattr(self, "planner"):  # not while setup builds the run's own planner
            planner.policy = self.planner.policy
        return planner

    def _model_input(self, action: Any) -> np.ndarray:
        if self.planner.discrete:
            return np.eye(self.planner.num_actions, dtype=np.float32)[int(action)]
        return np.asarray(action, dtype=np.float32).reshape(-1)

    # ---- learning ---------------------------------------------------------------------
    def iterate(self) -> None:
        """One real env step: random before learning_starts, then MPC; refit when due."""
        config = self.config
        before = self.step
        obs = np.asarray(self.runner.obs, dtype=np.float32)
        planned = np.nan
        if self.fits == 0:
            if self.planner.discrete:
                action = self.rng.integers(0, self.planner.num_actions, size=1)
            else:
                space = self.action_space
                action = self.rng.uniform(space.low, space.high)[None].astype(np.float32)  # type: ignore[attr-defined]
        else:
            report = self.step % config.planner.report_every == 0
            action, info = self.planner.plan(torch.from_numpy(obs), self.generator, report)
            action = self._act_space(action)
            if report:
                planned = float(info["planned_return"][0])
                self._disagreements.append(float(info["disagreement"][0]))
                self._return_spreads.append(float(info["return_disagreement"][0]))
        next_obs, rewards, terminated, truncated, valid = self.runner.step(action)
        if valid[0]:
            ended = bool(terminated[0] or truncated[0])
            self.store.add(
                obs[0],
                self._model_input(action[0]),
                float(rewards[0]),
                np.asarray(next_obs[0], dtype=np.float32),
                float(terminated[0]),
                ended,
                planned,
            )
            if ended:
                self.planner.reset()
        self.step = self.runner.env_steps
        if self.step >= config.learning_starts and (
            self.fits == 0 or crossed(before, self.step, config.train_every)
        ):
            self._refit()

    def _refit(self) -> None:
        """Score the model on the transitions it has not seen, then refit it on all."""
        config, store = self.config, self.store
        record: dict[str, float] = {}
        if self.fits > 0 and store.size - self.fitted_size >= 2:
            inputs, targets = store.model_data(self.fitted_size)
            for key, value in self.model.one_step_error(inputs, targets).items():
                record[f"model/heldout_{key}"] = value
            errors = self.open_loop_errors(self.fitted_size, store.size)
            if errors:
                self.model_errors.append([self.step, errors])
                for k in sorted({1, 5, len(errors)}):
                    if k <= len(errors):
                        record[f"model/open_loop_mse_h{k}"] = errors[k - 1]
        inputs, targets = store.model_data()
        record["model/train_loss"] = self.model.fit(
            inputs, targets, self.optimizer, config.fit_steps, config.batch_size, self.rng
        )
        keys = config.value
        if keys.enabled:
            n = store.size
            seen = torch.from_numpy(store.obs[:n])
            record["value/td_loss"] = self.value.fit(
                seen,
                torch.from_numpy(store.rewards[:n]),
                torch.from_numpy(store.next_obs[:n]),
                torch.from_numpy(store.terminated[:n]),
                self.value_optimizer,
                keys.fit_steps,
                keys.batch_size,
                self.rng,
                keys.tau,
            )
            with torch.no_grad():
                record["value/mean"] = float(self.value(seen).mean())
        if config.planner.method == "policy":
            starts = self.rng.choice(store.size, size=config.planner.starts)
            record["planner/search_return"] = self.planner.search(
                torch.from_numpy(store.obs[starts]), self.generator
            )
        self.fits += 1
        self.fitted_size = store.size
        record["model/fits"] = float(self.fits)
        self._model_record = record

    @torch.no_grad()
    def open_loop_errors(self, start: int, end: int) -> list[float]:
        """Mean squared error of the next observation predicted k = 1..K steps ahead
        (K = multistep_horizon) from each real state in start..end, with the real actions
        and no real states in between: each member follows its own mean, and the prediction
        is their average. Windows that cross an episode's end are left out; [] when none fit."""
        store, horizon = self.store, self.config.multistep_horizon
        starts = [
            s for s in range(start, end - horizon + 1) if not store.ended[s : s + horizon - 1].any()
        ]
        if not starts:
            return []
        index = np.asarray(starts)[:, None] + np.arange(horizon)  # [S, K]
        members = self.model.members
        state = torch.from_numpy(store.obs[index[:, 0]]).expand(members, -1, -1)
        actions = torch.from_numpy(store.actions[index])  # [S, K, a]
        truth = torch.from_numpy(store.next_obs[index])  # [S, K, o]
        errors = []
        for k in range(horizon):
            inputs = torch.cat([state, actions[:, k].expand(members, -1, -1)], dim=-1)
            mean, _ = self.model(inputs)
            state = state + mean[..., : self.model.obs_dim]
            errors.append(float((state.mean(0) - truth[:, k]).pow(2).mean()))
        return errors

    def _plan_vs_real(self) -> dict[str, float]:
        """Mean planned and realized H-step return over the planned steps whose horizon has
        passed since the last call. A window that a termination cuts short counts what the
        env paid until then (the model predicts terminations too); one cut by a time limit
        is skipped (the planner did not know of it)."""
        store, horizon = self.store, self.config.planner.horizon
        planned, realized = [], []
        s = self.gap_cursor
        while s < store.size:
            stop = s + horizon
            ends = np.flatnonzero(store.ended[s : min(stop, store.size)])
            if len(ends):
                end = s + int(ends[0])
                if end < stop - 1 and not store.terminated[end]:  # a time limit
                    s += 1
                    continue
                stop = end + 1
            elif stop > store.size:  # the window is not over yet
                break
            if not np.isnan(store.planned[s]):
                planned.append(float(store.planned[s]))
                realized.append(float(store.rewards[s:stop].sum()))
            s += 1
        self.gap_cursor = s
        if not planned:
            return {}
        mean_planned, mean_realized = float(np.mean(planned)), float(np.mean(realized))
        return {
            "train/planned_return": mean_planned,
            "train/realized_return": mean_realized,
            "train/plan_gap": mean_planned - mean_realized,
        }

    def log_training(self) -> None:
        returns, lengths = self.runner.drain_episodes()
        self.state.add_returns(returns)
        record: dict[str, Any] = {"perf/sps": self.step / max(self.train_seconds, 1e-9)}
        if returns:
            record["train/episode_return"] = float(np.mean(returns))
            record["train/episode_length"] = float(np.mean(lengths))
        if self.recent_returns:
            record["train/return"] = float(np.mean(self.recent_returns))
        record.update(self._plan_vs_real())
        if self._disagreements:
            record["train/model_disagreement"] = float(np.mean(self._disagreements))
            record["train/return_disagreement"] = float(np.mean(self._return_spreads))
            self._disagreements, self._return_spreads = [], []
        record.update(self._model_record)
        self._model_record = {}
        self.log(self.step, **record)

    def evaluate_now(self) -> None:
        self.evaluate_returns()

    def finish(self) -> None:
        self.finish_returns(model_fits=self.fits, transitions=self.store.size)


ALGORITHM = MBRL
