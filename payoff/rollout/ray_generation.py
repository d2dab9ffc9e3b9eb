"""LLM generation on Ray: actors that each hold a copy of the policy and sample completions.

`RaySampler` implements the `Sampler` protocol of `payoff.rollout.generation`
(`generate(prompts, sampling, generator) -> Generation`), so GRPO uses it exactly like the
in-process `LocalSampler`. Behind it, `num_workers` Ray actors (`GenerationWorker`) each load
the policy from the model folder the learner started from (on CPU, torch threads =
ray.cpus_per_worker) and run payoff's own `LocalSampler` on their shard of the prompts; the
shards come back as `Generation`s and are joined in prompt order with `concat_generations`.

Weights. The sampler holds the learner's model. On each `generate` it broadcasts the
trainable parameters when a new version is due (`WeightVersions` in
payoff.rollout.generation, shared with the second-process sampler: after
`weights_updated()`, which GRPO calls after every optimizer step, or when torch's
per-tensor write counter moved), and then `ray.put`s them once under that version number. A worker `ray.get`s them only when the
version it is asked to use differs from the one it holds. Frozen weights (a LoRA base) are
never sent: the worker loaded the same ones from disk.

Asynchronous use. `submit(prompts, sampling, generator=None, seed=None) -> Pending` sends
the shards and returns at once; `pending.result()` gathers them (`generate` is the two in a
row). A batch is sampled with the weights version current when it was submitted
(`pending.version`): each worker gets its calls in order and loads the version each call
names, so a batch submitted before an update keeps the old weights (their object stays in
the store while the batch needs it). See `payoff.rollout.async_generation`.

Randomness. The torch Generator state travels with the call. With one worker the learner's
generator state is sent, the worker samples with it and sends it back, so `backend: ray`
with `ray.num_workers: 1` reproduces `backend: local` bit for bit (when
`ray.cpus_per_worker` equals the learner's threads: float sums depend on the thread count).
With W > 1 workers one 62-bit seed is drawn from the learner's generator per call and shard
k samples with `Generator().manual_seed(SeedSequence([seed, k]))`: reproducible for a given
seed and W, but not equal to local or to another W. `submit(..., seed=s)` samples shard k
from `shard_seed(s, k)` for any W, so batches in flight together have streams of their own.

Faults. A worker that dies (killed, node lost, out of memory) is replaced by a fresh actor
and its shard is generated again with the same weights and the same RNG stream, so the
result is exactly what the dead worker would have returned; restarts are counted
(`ray/worker_restarts`). payoff errors raised inside a worker are raised as themselves.

Ray is imported lazily: this module loads without Ray installed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from payoff.core.errors import ConfigError
from payoff.models.lm import ModelConfig
from payoff.rollout import ray_pool
from payoff.rollout.async_generation import Pending
from payoff.rollout.generation import (
    Generation,
    LocalSampler,
    SamplingConfig,
    WeightVersions,
    concat_generations,
    continue_stream,
    load_weights,
    sampling_stream,
)
from payoff.rollout.ray_pool import RayConfig


def validate_generation_config(config: RayConfig) -> None:
    """RayConfig checks plus the options generation workers do not support."""
    config.validate()
    if config.overlap:
        raise ConfigError(
            "ray.overlap is not supported for LLM generation; to overlap GRPO's sampling "
            "with its update set async_generation: true (and max_staleness) instead of "
            "ray.overlap"
        )


def shard_seed(seed: int, shard: int) -> int:
    """Seed of shard `shard`'s sampling stream, well mixed from (seed, shard)."""
    return int(np.random.SeedSequence([seed, shard]).generate_state(1, np.uint64)[0] >> 1)


class GenerationWorker:
    """One Ray actor: a copy of the policy and tokenizer, and payoff's LocalSampler."""

    def __init__(self, model: ModelConfig, seed: int, threads: int, batch_size: int):
        from payoff.models.lm import load_lm

        torch.set_num_threads(threads)
        # The parameters keep requires_grad as in the learner (sampling runs under no_grad
        # anyway): torch's CPU linear takes another path for a weight that does not require
        # grad, and the logprobs would differ from local sampling in the last bit.
        self.model, self.tokenizer = load_lm(model, seed=seed)
        self.sampler = LocalSampler(self.model, self.tokenizer, batch_size)
        self.version = -1

    def generate(
        self,
        version: int,
        weights: list[Any],
        prompts: list[str],
        sampling: SamplingConfig,
        rng_state: torch.Tensor | None,
        seed: int | None,
    ) -> tuple[Generation, torch.Tensor | None]:
        """Completions of `prompts` under policy `version` (weights = [ObjectRef], fetched
        only when new); samples from `rng_state` (and returns where it ended) or `seed`."""
        import ray

        if version != self.version:
            load_weights(self.model, ray.get(weights[0]), "the worker's model")
            self.version = version
        generator = sampling_stream(rng_state, seed)
        generation = self.sampler.generate(prompts, sampling, generator)
        return generation, generator.get_state() if rng_state is not None else None

    def ready(self) -> bool:
        return True


class RaySampler:
    """A `Sampler` whose generation runs on Ray actors, each with its own model copy.

    config: the Ray settings (address, num_workers, cpus_per_worker, max_restarts, ...).
    model_config: how the workers build the model (its `path` must be a folder every node
        can read: the learner's starting model). The learner's current weights are sent on
        top of it.
    model: the learner's model; its trainable weights are broadcast when they change.
    pad_token_id: padding id used to join shards of different widths.
    seed: model seed for load_lm (only matters for a fresh tiny model without a path).
    group_size: rows per prompt group; shards are cut at group boundaries so a prompt's G
        completions are generated by one worker (order is kept either way).
    batch_size: rows per forward inside a worker (LocalSampler's batch_size).
    """

    def __init__(
        self,
        config: RayConfig,
        model_config: ModelConfig,
        model: torch.nn.Module,
        pad_token_id: int,
        seed: int = 0,
        group_size: int = 1,
        batch_size: int = 256,
    ):
        validate_generation_config(config)
        if group_size <= 0:
            raise ConfigError(f"group_size must be > 0, got {group_size}")
        ray_pool.import_ray()  # fail at setup, not at the first step, when Ray is missing
        self.config, self.model_config, self.model = config, model_config, model
        self.pad_token_id, self.seed = pad_token_id, seed
        self.group_size, self.batch_size = group_size, batch_size
        self.threads = max(1, int(config.cpus_per_worker))
        self.workers: list[Any] = []  # spawned on the first generate: `payoff eval` needs none
        self.weights = WeightVersions(model)
        self._weights: Any = None  # ObjectRef of the current version's weights
        self.counters = {"worker_restarts": 0, "weight_broadcasts": 0}
        self.startup_seconds = 0.0
        self.last_seconds = 0.0

    # ---- workers --------------------------------------------------------------------------
    def _spawn(self) -> Any:
        ray = ray_pool.connect(self.config)
        remote = ray.remote(num_cpus=self.config.cpus_per_worker)(GenerationWorker)
        return remote.remote(self.model_config, self.seed, self.threads, self.batch_size)

    def start(self) -> None:
        """Connect to Ray and start the workers (once; later calls do nothing)."""
        if self.workers:
            return
        started = time.perf_counter()
        self.workers = [self._spawn() for _ in range(self.config.num_workers)]
        ray_pool.wait_until_ready(self.workers, self.config, "generation workers", self.close)
        self.startup_seconds = time.perf_counter() - started

    def _restart(self, k: int, error: Exception) -> None:
        ray_pool.retire_worker(
            self.workers,
            k,
            self.counters["worker_restarts"],
            self.config,
            "generation worker",
            error,
        )
        self.counters["worker_restarts"] += 1
        self.workers[k] = self._spawn()  # version -1: it fetches the weights on its first call

    def close(self) -> None:
        """Stop the workers (Ray stays up; a later generate starts new ones)."""
        ray_pool.kill_workers(self.workers)
        self.workers = []

    # ---- weights --------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """How many weight versions were put so far (a new batch samples with this one)."""
        return self.weights.version

    def _weights_ref(self) -> Any:
        """The learner's current weights in the object store, put once per version."""
        weights = self.weights.due()  # the first call always has them
        if weights is not None:
            ray = ray_pool.connect(self.config)
            self._weights = ray.put(weights)
            self.counters["weight_broadcasts"] += 1
        return self._weights

    def weights_updated(self) -> None:
        """The learner stepped its optimizer: send the new weights before the next generate."""
        self.weights.updated()

    def shards(self, rows: int) -> list[tuple[int, int]]:
        """[start, stop) row ranges per worker, cut at group boundaries (empty ones dropped)."""
        groups = -(-rows // self.group_size)
        bounds = ray_pool.split_ranges(groups, self.config.num_workers)
        ranges = [(a * self.group_size, min(b * self.group_size, rows)) for a, b in bounds]
        return [(a, b) for a, b in ranges if b > a]

    def submit(
        self,
        prompts: list[str],
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> Pending:
        """Send `prompts` to the workers and return at once; `result()` gathers them in order.

        generator: the sampling stream. With one shard the worker continues it and result()
            moves it on (one batch in flight per generator); with several, one seed is drawn
            from it now. None: torch's global stream, the same way.
        seed: shard k samples from `shard_seed(seed, k)` instead, for batches in flight
            together.
        """
        if generator is not None and seed is not None:
            raise ConfigError("submit takes a generator or a seed, not both")
        self.start()
        started = time.perf_counter()
        weights, version = self._weights_ref(), self.version
        shards = self.shards(len(prompts))
        shared = seed is None and len(shards) == 1  # sample with the learner's own stream
        rng: torch.Tensor | None = None
        if shared:
            rng = generator.get_state() if generator is not None else torch.get_rng_state()
        elif seed is None:
            seed = int(torch.randint(2**62, (1,), generator=generator).item())
        sent_to: dict[int, Any] = {}  # the actor each shard went to

        def send(k: int) -> Any:
            start, stop = shards[k]
            sent_to[k] = self.workers[k]
            return self.workers[k].generate.remote(
                version,
                [weights],
                prompts[start:stop],
                sampling,
                rng,
                None if seed is None else shard_seed(seed, k),
            )

        def restart(k: int, error: Exception) -> None:
            # Another batch in flight on the same dead actor may have replaced it already.
            if self.workers[k] is sent_to[k]:
                self._restart(k, error)

        futures = {k: send(k) for k in range(len(shards))}

        def gather() -> Generation:
            results = ray_pool.gather_restarting(futures, self.config, restart, send)
            parts = [results[k][0] for k in range(len(shards))]
            if shared:  # the learner's stream continues where the worker left it
                state = results[0][1]
                assert state is not None
                continue_stream(generator, state)
            self.last_seconds = time.perf_counter() - started
            return parts[0] if len(parts) == 1 else concat_generations(parts, self.pad_token_id)

        return Pending(version, gather)

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, generator: torch.Generator | None = None
    ) -> Generation:
        """Completions of `prompts` (in order), sampled on the workers."""
        return self.submit(prompts, sampling, generator=generator).result()

    def metrics(self) -> dict[str, float]:
        """ray/... metrics logged with every step (cumulative counters)."""
        return {
            **{f"ray/{name}": float(value) for name, value in self.counters.items()},
            "ray/workers": float(self.config.num_workers),
            "ray/weight_mb": self.weights.bytes / 2**20,
        }
