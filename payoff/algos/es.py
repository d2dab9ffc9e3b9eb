"""Evolution strategies (Salimans, Ho, Chen, Sidor & Sutskever 2017, "Evolution Strategies as
a Scalable Alternative to Reinforcement Learning"): the OpenAI-ES algorithm.

ES needs no backpropagation through time, no value function and no discount. It treats the
return F(theta) of a deterministic policy with parameters theta as a black box and climbs
its Gaussian smoothing, whose gradient is a plain expectation over noise:

    grad E_eps[F(theta + sigma eps)] = (1 / sigma) E_eps[F(theta + sigma eps) eps],  eps ~ N(0, I)

Per generation (one `iterate`):

  1. Sample. Draw `pairs` noise seeds, and the env seeds of their episodes, from the run's
     RNG. A seed *is* its perturbation: eps_i = noise(seed_i, dim)
     (payoff.rollout.population.noise), so workers regenerate it and nothing else is sent.
  2. Evaluate. Play theta + sigma eps_i and theta - sigma eps_i (antithetic, or "mirrored",
     sampling) for `episodes_per_perturbation` episodes each, on the same env seeds. The
     `backend` runs the pairs here (`local`) or on Ray actors that own their envs (`ray`);
     each pair comes back as (seed, F_i+, F_i-) plus observation sums.
  3. Shape. Replace the 2n returns by their centered ranks in [-0.5, 0.5]
     (`centered_ranks`): the update no longer depends on the returns' scale, and one lucky
     outlier cannot dominate it.
  4. Estimate. g = 1 / (2 n sigma) * sum_i (s_i+ - s_i-) eps_i  (`es_gradient`; the learner
     regenerates eps_i from the seeds too).
  5. Step. Adam ascends g, with L2 weight decay: theta <- Adam(theta, -g + weight_decay theta)
     (payoff.models.flat.FlatAdam on the flat vector).
  6. Normalize. Merge the generation's observation sums into the running mean/std (the
     paper's virtual-batch-free normalization); the next generation's policies use them.

The unperturbed policy theta is what `act` and `predict`, the periodic evaluation
(`eval/mean_return`) and the saved model use. Its network is
payoff.models.population.FlatPolicy: a deterministic MLP; argmax for Discrete actions, tanh
scaled to the bounds for Box actions.

Python API:
    es = ES("CartPole-v1", pairs=32, sigma=0.1, total_steps=300_000).learn()
    action, _ = es.predict(obs); es.evaluate(20)
    es.save("es.safetensors"); ES.load("es.safetensors")
    ES("LunarLander-v3", backend="ray", ray={"num_workers": 8})       # pairs on 8 Ray actors
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.agent import Agent
from payoff.algos.base import AgentKeys, check_deterministic
from payoff.core.config import MAX_WIDTH, in_range
from payoff.core.errors import ConfigError
from payoff.core.seeding import seed_everything
from payoff.envs.make import EnvConfig, make_env
from payoff.envs.observations import observation_batch
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.population import FlatPolicy
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.population import (
    SEED_BOUND,
    EpisodePlayer,
    LocalPopulation,
    PairResult,
    PairTask,
    RunningStat,
    noise,
)
from payoff.rollout.ray_pool import RayConfig
from payoff.rollout.ray_population import RayPopulation


@dataclass
class ESConfig(AgentKeys):
    """OpenAI-ES. Shared keys (env, seed, threads, eval_episodes, final_eval_episodes,
    log_every, checkpoint_every) are payoff.algos.base.AgentKeys; intervals count env steps.

    total_steps: training length in env steps (of the perturbed episodes; evaluation
        episodes are not counted).
    pairs: antithetic pairs per generation; the population is 2 x pairs policies. More pairs
        give a less noisy gradient per generation at the same cost per pair.
    sigma: the perturbations' standard deviation, in parameter units. Too small: perturbed
        policies all act alike and the ranks are noise; too large: the smoothed objective no
        longer resembles the policy's own return.
    learning_rate: Adam's step size on theta.
    weight_decay: L2 coefficient added to the step (keeps weights small so no single one
        dominates; the paper uses 0.005). 0 turns it off.
    fitness_shaping: 'centered_rank' (the paper's; returns -> ranks in [-0.5, 0.5]),
        'standardize' (returns minus their mean, over their std) or 'none' (raw returns).
    episodes_per_perturbation: episodes each perturbed policy plays; its fitness is their
        mean (more: less noise per pair on envs with random starts, proportionally more steps).
    hidden / activation: the deterministic MLP policy ('tanh' or 'relu').
    normalize_obs: standardize observations with running statistics gathered from every
        perturbed episode (updated once per generation, fixed within one).
    obs_clip: normalized observations are clipped to +-obs_clip.
    stop_at_return: stop once a periodic evaluation of theta averages at least this;
        null trains for total_steps.
    eval_every: evaluate the unperturbed policy every this many env steps (0 = never: the
        default in Python; `payoff train` runs evaluate every 20,000).
    check_finite: stop with an error when an env returns NaN or inf.
    backend: 'local' (every pair in this process) or 'ray' (Ray actors own the envs and
        rebuild the noise from seeds; needs payoff[distributed]). Same result for the same
        seed either way, with any number of workers.
    ray: address / num_workers / num_cpus / cpus_per_worker / max_restarts /
        startup_timeout of the Ray backend (payoff.rollout.ray_pool.RayConfig; overlap,
        stale and max_lag do not apply).
    """

    total_steps: int = field(default=1_000_000, metadata=in_range(0, low_open=True))
    pairs: int = field(default=32, metadata=in_range(1))
    sigma: float = field(default=0.05, metadata=in_range(0, low_open=True))
    learning_rate: float = field(default=0.01, metadata=in_range(0, low_open=True))
    weight_decay: float = field(default=0.005, metadata=in_range(0))
    fitness_shaping: Literal["centered_rank", "standardize", "none"] = "centered_rank"
    episodes_per_perturbation: int = field(default=1, metadata=in_range(1))
    hidden: list[int] = field(
        default_factory=lambda: [64, 64], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["tanh", "relu"] = "tanh"
    normalize_obs: bool = True
    obs_clip: float = field(default=5.0, metadata=in_range(0, low_open=True))
    stop_at_return: float | None = None
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=100_000, metadata=in_range(0, low_open=True))
    check_finite: bool = True
    backend: Literal["local", "ray"] = "local"
    ray: RayConfig = field(default_factory=RayConfig)

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 20_000}  # payoff train runs

    def validate(self) -> None:
        # Ranges of single keys are checked by core.config; here what spans keys.
        if not self.hidden:
            raise ConfigError("config key 'hidden' needs at least one layer width, e.g. [64, 64]")
        if self.backend == "ray":
            if self.pairs < self.ray.num_workers:
                raise ConfigError(
                    f"pairs ({self.pairs}) must be >= ray.num_workers ({self.ray.num_workers}): "
                    f"every Ray worker needs at least one antithetic pair per generation"
                )
            if self.ray.overlap:
                raise ConfigError(
                    "ray.overlap does not apply to evolution strategies (each generation needs "
                    "the returns of the one before); set ray.overlap=false"
                )


# ---- the math of one generation ---------------------------------------------------------
def centered_ranks(returns: np.ndarray) -> np.ndarray:
    """Each return's rank among all of them (0 = lowest; equal returns ranked by position),
    scaled to [-0.5, 0.5]; same shape as `returns`."""
    flat = np.asarray(returns, dtype=np.float64).ravel()
    ranks = np.empty(flat.size)
    ranks[np.argsort(flat, kind="stable")] = np.arange(flat.size)
    return (ranks / max(flat.size - 1, 1) - 0.5).reshape(np.shape(returns))


def shape_fitness(returns: np.ndarray, method: str) -> np.ndarray:
    """The weights the gradient uses instead of raw returns (config key fitness_shaping)."""
    returns = np.asarray(returns, dtype=np.float64)
    if method == "centered_rank":
        return centered_ranks(returns)
    if method == "standardize":
        return (returns - returns.mean()) / (returns.std() + 1e-8)
    return returns


def es_gradient(
    weights_pos: np.ndarray, weights_neg: np.ndarray, seeds: list[int], sigma: float, dim: int
) -> np.ndarray:
    """g = 1 / (2 n sigma) * sum_i (w_i+ - w_i-) eps_i with eps_i = noise(seeds[i], dim):
    the antithetic estimate of the gradient of E[F(theta + sigma eps)] (float64, [dim])."""
    gradient = np.zeros(dim, dtype=np.float64)
    for difference, seed in zip(
        np.asarray(weights_pos) - np.asarray(weights_neg), seeds, strict=True
    ):
        gradient += float(difference) * noise(seed, dim)
    return gradient / (2 * len(seeds) * sigma)


class ES(Agent):
    """OpenAI-ES on a deterministic MLP policy, local or on Ray workers."""

    total_key = "total_steps"
    config: ESConfig
    saved = ("network", "optimizer", "normalizer", "rng")

    # ---- setup ------------------------------------------------------------------------
    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        if config.device != "cpu":
            raise ConfigError(
                f"evolution strategies run their policies in NumPy on the CPU (many small "
                f"networks at once, no backward pass); device {config.device!r} does not "
                f"apply: set device=cpu"
            )
        self.rng = seed_everything(config.seed)
        probe = make_env(config.env)
        self.observation_space = probe.observation_space
        self.action_space = probe.action_space
        probe.close()
        self.policy = FlatPolicy(
            self.observation_space,
            self.action_space,
            config.hidden,
            config.activation,
            config.obs_clip,
        )
        # theta lives in the flat buffer of a torch MLP of the same layout: FlatAdam steps it,
        # checkpoints save it as the module's weights, and self.theta is a NumPy view of it.
        self.network = self.policy.as_module()
        self.flat = FlatParameters(list(self.network.parameters()))
        self.theta: np.ndarray = self.flat.leaf.data.numpy()
        self.optimizer = FlatAdam(self.flat, lr=config.learning_rate)
        self.normalizer = RunningStat(self.policy.in_dim)
        self.population: LocalPopulation | RayPopulation = (
            RayPopulation(config.ray, config.env, self.policy, config.pairs, config.check_finite)
            if config.backend == "ray"
            else LocalPopulation(config.env, self.policy, config.check_finite)
        )
        self.eval_player = EpisodePlayer(config.env, config.check_finite)

    # ---- acting: the unperturbed policy -----------------------------------------------
    def obs_stats(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The normalizer's (mean, std), or (None, None) with normalize_obs off."""
        return self.normalizer.mean_std() if self.config.normalize_obs else (None, None)

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """The action for one observation (an int for Discrete actions), or for a batch.
        The policy is deterministic whatever `deterministic` says."""
        check_deterministic(deterministic, "act")
        batch, single = observation_batch(observation, self.observation_space)
        actions = self.policy.act(self.theta[None], batch, *self.obs_stats())
        if not single:
            return actions
        return int(actions[0]) if self.policy.discrete else actions[0]

    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """theta on `episodes` fresh episodes (seeded seed, seed + 1, ...), all at once.
        ES's policy has no randomness of its own, so deterministic=False plays the same."""
        player = (
            self.eval_player
            if env is self.config.env
            else EpisodePlayer(env, self.config.check_finite)
        )
        return player.evaluate(self.policy, self.theta.copy(), episodes, seed, *self.obs_stats())

    # ---- one generation ---------------------------------------------------------------
    def sample_tasks(self) -> list[PairTask]:
        """1. Sample: the generation's noise seeds and, per pair, its episodes' env seeds."""
        config = self.config
        seeds = self.rng.integers(0, SEED_BOUND, size=config.pairs)
        base = int(self.rng.integers(0, SEED_BOUND))
        per = config.episodes_per_perturbation
        return [
            PairTask(i, int(seed), [(base + i * per + j) % SEED_BOUND for j in range(per)])
            for i, seed in enumerate(seeds)
        ]

    def iterate(self) -> None:
        """One generation: sample, evaluate the pairs, shape, estimate, step, normalize."""
        config = self.config
        started = time.perf_counter()
        tasks = self.sample_tasks()
        # 2. Evaluate theta +- sigma eps_i on the backend; back come (seed, F+, F-) per pair.
        results: list[PairResult] = self.population.evaluate(
            self.theta.copy(), config.sigma, tasks, *self.obs_stats()
        )
        results.sort(key=lambda r: r.index)
        evaluated = time.perf_counter()

        # 3. Shape each perturbation's fitness (mean over its episodes): centered ranks by default.
        fitness_pos = np.array([r.returns_pos.mean() for r in results])  # [n]
        fitness_neg = np.array([r.returns_neg.mean() for r in results])  # [n]
        shaped = shape_fitness(np.stack([fitness_pos, fitness_neg]), config.fitness_shaping)
        # 4. Estimate g from the shaped fitness and the regenerated noise.
        gradient = es_gradient(
            shaped[0], shaped[1], [r.seed for r in results], config.sigma, self.policy.dim
        )
        # 5. Step: Adam minimizes, so it gets the negative of the ascent direction, plus decay.
        before = self.theta.copy()
        assert self.flat.leaf.grad is not None
        descent = -gradient + config.weight_decay * before
        self.flat.leaf.grad.copy_(torch.from_numpy(descent.astype(np.float32)))
        self.optimizer.lr = config.learning_rate
        self.optimizer.step()

        # 6. Normalize: the generation's observation sums join the running statistics, pair by
        # pair in order, so any split of the pairs between workers adds up alike.
        if config.normalize_obs:
            for r in results:
                self.normalizer.add(r.obs_sum, r.obs_sumsq, r.obs_count)
        steps = sum(r.steps for r in results)
        self.step += steps
        episodes = np.concatenate([np.concatenate([r.returns_pos, r.returns_neg]) for r in results])
        self.state.add_returns(episodes.tolist())
        elapsed = time.perf_counter() - started
        self._record = {
            "train/return": float(np.concatenate([fitness_pos, fitness_neg]).mean()),
            "train/best": float(max(fitness_pos.max(), fitness_neg.max())),
            "train/worst": float(min(fitness_pos.min(), fitness_neg.min())),
            "train/grad_norm": float(np.linalg.norm(gradient)),
            "train/update_norm": float(np.linalg.norm(self.theta - before)),
            "train/param_norm": float(np.linalg.norm(self.theta)),
            "train/episode_length": steps / len(episodes),
            "train/generation": float(self.updates + 1),
            "perf/generation_s": elapsed,
            "perf/evaluate_s": evaluated - started,
            "perf/update_s": time.perf_counter() - evaluated,
            "perf/sps": steps / max(elapsed, 1e-9),
            **self.population.metrics(),
        }

    # ---- the loop's hooks ---------------------------------------------------------------
    def progress_postfix(self) -> dict[str, Any]:
        return {"ret": self._record.get("train/return", 0.0)}

    def evaluate_now(self) -> None:
        self.evaluate_returns()

    def finish(self) -> None:
        self.population.close()  # stop Ray workers; the final evaluation runs here
        self.finish_returns(generations=self.updates, parameters=self.policy.dim)


ALGORITHM = ES
