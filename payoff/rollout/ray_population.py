"""Evolution strategies on Ray: actor workers that own envs and rebuild the noise from seeds.

`RayPopulation` is a drop-in for `payoff.rollout.population.LocalPopulation` on the learner
side: `evaluate(theta, sigma, tasks, obs_mean, obs_std) -> [PairResult]`, `metrics()`,
`close()`. Behind it, `ray.num_workers` actors (`PopulationWorker`) each hold an
`EpisodePlayer` (their envs, kept between generations) and the policy's shapes. Per generation:

- the learner `ray.put`s theta once (one flat float32 vector; ~20 KB for a 64-64 MLP) and
  the normalizer's mean and std; every worker gets the same reference;
- the generation's pairs are cut into even contiguous ranges, one per worker; a worker
  receives only its (index, noise seed, env seeds) triples, rebuilds each epsilon with
  `noise(seed, dim)` and runs the local `evaluate_pairs` on them;
- it sends back `PairResult`s: the seed, both returns, the steps, observation sums. No
  perturbed parameters travel either way (Salimans et al.'s point: workers exchange scalars).

A pair's result depends only on theta, sigma and its seeds, so any number of workers gives
exactly the local backend's generation (tested). A worker that dies is replaced and its
pairs are played again by the new one, with the same result (its envs hold nothing a
generation needs: every episode starts from a seeded reset); `ray/worker_restarts` counts
it, and after `ray.max_restarts` the run stops with an error.

Connecting, startup, restarts and `RayConfig` are `payoff.rollout.ray_pool`'s. Ray is imported
lazily: this module loads without Ray installed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.make import EnvConfig
from payoff.models.population import FlatPolicy, flat_policy_from_spec
from payoff.rollout.population import EpisodePlayer, PairResult, PairTask, evaluate_pairs
from payoff.rollout.ray_pool import (
    RayConfig,
    connect,
    gather_restarting,
    import_ray,
    kill_workers,
    retire_worker,
    split_ranges,
    wait_until_ready,
)
from payoff.rollout.vector import check_picklable


class PopulationWorker:
    """One Ray actor: envs of its own and the policy's shapes; plays the pairs it is sent."""

    def __init__(self, env: EnvConfig, policy: dict[str, Any], check_finite: bool):
        self.policy = flat_policy_from_spec(policy)
        self.player = EpisodePlayer(env, check_finite)

    def ready(self) -> bool:
        return True

    def evaluate(
        self,
        shared: list[Any],
        sigma: float,
        tasks: list[PairTask],
    ) -> list[PairResult]:
        """Play `tasks`; shared = [ObjectRef of (theta, obs_mean, obs_std)]."""
        import ray

        theta, obs_mean, obs_std = ray.get(shared[0])
        return evaluate_pairs(self.player, self.policy, theta, sigma, tasks, obs_mean, obs_std)


class RayPopulation:
    """Learner-side stand-in for LocalPopulation that plays the pairs on Ray actors."""

    def __init__(
        self,
        config: RayConfig,
        env: EnvConfig,
        policy: FlatPolicy,
        pairs: int,
        check_finite: bool = True,
    ):
        config.validate()
        if config.overlap:
            raise ConfigError(
                "ray.overlap does not apply to evolution strategies: every generation needs "
                "the returns of the one before; set ray.overlap=false"
            )
        if pairs < config.num_workers:
            raise ConfigError(
                f"pairs ({pairs}) must be >= ray.num_workers ({config.num_workers}): every "
                f"worker needs at least one antithetic pair per generation"
            )
        import_ray()  # fail at setup, not at the first generation, when Ray is missing
        check_picklable(env, "backend 'ray' runs the envs in Ray's workers", "backend 'local'")
        self.config = config
        self.env, self.policy, self.check_finite = env, policy, check_finite
        self.workers: list[Any] = []  # spawned lazily: `payoff eval` never starts Ray
        self.restarts = 0
        self.startup_seconds = 0.0
        self.last_wait_seconds = 0.0

    # ---- workers --------------------------------------------------------------------------
    def _spawn(self) -> Any:
        ray = connect(self.config)
        remote = ray.remote(num_cpus=self.config.cpus_per_worker)(PopulationWorker)
        return remote.remote(self.env, self.policy.spec(), self.check_finite)

    def start(self) -> None:
        """Connect to Ray and start the workers (once; later calls do nothing)."""
        if self.workers:
            return
        started = time.perf_counter()
        self.workers = [self._spawn() for _ in range(self.config.num_workers)]
        wait_until_ready(self.workers, self.config, "ES workers", self.close)
        self.startup_seconds = time.perf_counter() - started

    def _restart(self, k: int, error: Exception) -> None:
        retire_worker(self.workers, k, self.restarts, self.config, "ES worker", error)
        self.restarts += 1
        self.workers[k] = self._spawn()

    def close(self) -> None:
        """Stop the workers (Ray itself stays up for the next run in this process)."""
        kill_workers(self.workers)
        self.workers = []

    # ---- one generation ---------------------------------------------------------------------
    def evaluate(
        self,
        theta: np.ndarray,
        sigma: float,
        tasks: list[PairTask],
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> list[PairResult]:
        self.start()
        waited = time.perf_counter()
        ray = connect(self.config)
        shared = ray.put((np.asarray(theta, dtype=np.float32), obs_mean, obs_std))
        parts = [tasks[a:b] for a, b in split_ranges(len(tasks), len(self.workers))]

        def submit(k: int) -> Any:
            return self.workers[k].evaluate.remote([shared], sigma, parts[k])

        futures = {k: submit(k) for k in range(len(self.workers))}
        results = gather_restarting(futures, self.config, self._restart, submit)
        self.last_wait_seconds = time.perf_counter() - waited
        return [result for k in range(len(self.workers)) for result in results[k]]

    def metrics(self) -> dict[str, float]:
        """ray/... metrics logged with every generation."""
        return {
            "ray/workers": float(self.config.num_workers),
            "ray/worker_restarts": float(self.restarts),
            "perf/ray_wait_s": self.last_wait_seconds,
        }
