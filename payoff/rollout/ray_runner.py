"""Rollouts on Ray: actor workers that own vector envs, fed policy weights by version.

`RayRunner` is a drop-in for `payoff.rollout.vector.VectorRunner` on the learner side: the
same `collect(policy, storage, value_fn)`, `env_steps`, `drain_episodes()`,
`drain_episode_info()` and `state_dict()`. Behind it, `num_workers` Ray actors
(`RolloutWorker`) each own `num_envs / num_workers` of the envs and run the *local* runner
(`VectorRunner.collect`) on them, so a worker does exactly what local collection does.

Per update the learner puts its weights into the object store once (`ray.put`); each worker
`ray.get`s them only when the version changed. The torch RNG state that drives action
sampling travels with each call and comes back with the rollout, so a worker is stateless
apart from its envs: with one worker and no overlap the learner's own RNG stream is used,
which makes `backend: ray` with `ray.num_workers: 1` reproduce `backend: local` bit for bit.

A worker that dies (killed, node lost, an env raising a non-payoff exception) is replaced
by a fresh actor whose envs start new episodes from a seeded reset; its in-flight rollout
and unfinished episodes are discarded and counted (`ray/worker_restarts`,
`ray/discarded_episodes`); completed rollouts of the other workers are kept.

The Ray plumbing (connecting, startup, restarts, `RayConfig`) is `payoff.rollout.ray_pool`.
Ray is imported lazily: this module loads without Ray installed.
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

import torch

from payoff.core.errors import ConfigError
from payoff.envs.make import EnvConfig
from payoff.rollout.buffers import RolloutStorage
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
from payoff.rollout.vector import VectorRunner, check_picklable, make_vector_env

# Seed offset between successive incarnations of one worker (a restart gets new episodes).
RESTART_SEED_STRIDE = 1_000_003


class RolloutWorker:
    """One Ray actor: a vector env, a copy of the actor/critic, and the local runner."""

    def __init__(
        self,
        env: EnvConfig,
        num_envs: int,
        vectorization: str,
        seed: int,
        check_finite: bool,
        info_keys: tuple[str, ...],
        models: tuple[torch.nn.Module, torch.nn.Module | None],
        num_steps: int,
        threads: int,
    ):
        torch.set_num_threads(threads)  # same thread count as the learner: same float results
        self.envs = make_vector_env(env, num_envs, vectorization)  # type: ignore[arg-type]
        self.runner = VectorRunner(self.envs, env.id, seed, check_finite, info_keys)
        self.seed = seed
        self.actor, self.critic = models
        self.version = -1
        self.storage = RolloutStorage.for_spaces(
            num_steps,
            num_envs,
            self.envs.single_observation_space,
            self.envs.single_action_space,
            info_keys=info_keys,
        )

    @torch.no_grad()
    def _policy_step(self, obs: torch.Tensor) -> Any:
        # Mirrors OnPolicyAlgorithm._policy_step (the determinism test holds them equal).
        actions, logprobs = self.actor.sample(obs)  # type: ignore[operator]
        return actions, self.actor.to_env(actions), logprobs  # type: ignore[operator]

    @torch.no_grad()
    def _values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)  # type: ignore[misc]

    def collect(self, version: int, weights: list[Any], rng_state: torch.Tensor) -> dict[str, Any]:
        """One rollout under policy `version`; weights = [ObjectRef] (fetched only if new)."""
        import ray

        if version != self.version:
            state = ray.get(weights[0])
            self.actor.load_state_dict(state["actor"])
            if self.critic is not None:
                self.critic.load_state_dict(state["critic"])
            self.version = version
        torch.set_rng_state(rng_state)
        before = self.runner.env_steps
        self.runner.collect(
            self._policy_step, self.storage, self._values if self.critic is not None else None
        )
        returns, lengths = self.runner.drain_episodes()
        return {
            "version": version,
            "storage": self.storage,
            "steps": self.runner.env_steps - before,
            "returns": returns,
            "lengths": lengths,
            "info": self.runner.drain_episode_info(),
            "rng_state": torch.get_rng_state(),
        }

    def ready(self) -> bool:
        return True

    def get_state(self) -> dict[str, Any]:
        return self.runner.state_dict()

    def set_state(self, state: dict[str, Any]) -> None:
        self.runner.load_state_dict(state, seed=self.seed)


class RayRunner:
    """Learner-side stand-in for VectorRunner that collects on Ray actors."""

    def __init__(
        self,
        config: RayConfig,
        env: EnvConfig,
        num_envs: int,
        num_steps: int,
        vectorization: str,
        seed: int,
        actor: torch.nn.Module,
        critic: torch.nn.Module | None,
        check_finite: bool = True,
        info_keys: tuple[str, ...] = (),
        threads: int = 1,
    ):
        config.validate()
        if num_envs < config.num_workers:
            raise ConfigError(
                f"num_envs ({num_envs}) must be >= ray.num_workers ({config.num_workers}): "
                f"every worker needs at least one env"
            )
        import_ray()  # fail at setup, not at the first rollout, when Ray is missing
        check_picklable(env, "backend 'ray' runs the envs in Ray's workers", "backend 'local'")
        self.config = config
        self.env, self.num_envs, self.num_steps = env, num_envs, num_steps
        self.vectorization, self.seed = vectorization, seed
        self.check_finite, self.info_keys, self.threads = check_finite, tuple(info_keys), threads
        self.actor, self.critic = actor, critic
        self.slices = split_ranges(num_envs, config.num_workers)
        # One worker, synchronous: share the learner's RNG stream (exactly like local).
        self.shared_rng = config.num_workers == 1 and not config.overlap
        self.rng_states = [
            torch.Generator().manual_seed(seed * 7919 + 104729 * (k + 1)).get_state()
            for k in range(config.num_workers)
        ]
        self.workers: list[Any] = []  # spawned lazily: `payoff eval` never starts Ray
        self.incarnation = [0] * config.num_workers
        self.env_steps = 0
        self.version = 0  # bumped per collect(): the learner updated in between
        self._weights: tuple[int, Any] | None = None
        self._pending: dict[int, Any] | None = None  # overlap: in-flight rollout futures
        self._pending_version = 0
        self._ready: list[dict[str, Any]] | None = None  # overlap: fetched, not yet used
        self._restored: list[dict[str, Any]] | None = None  # worker states from a checkpoint
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.finished_info: dict[str, list[float]] = {key: [] for key in self.info_keys}
        self.counters = {
            "worker_restarts": 0,
            "discarded_episodes": 0,
            "dropped_rollouts": 0,
            "dropped_steps": 0,
        }
        self.last_lag = 0
        self.startup_seconds = 0.0
        self.last_wait_seconds = 0.0

    # ---- workers --------------------------------------------------------------------------
    def _spawn(self, k: int) -> Any:
        ray = connect(self.config)
        start, stop = self.slices[k]
        seed = self.seed + start + RESTART_SEED_STRIDE * self.incarnation[k]
        remote = ray.remote(num_cpus=self.config.cpus_per_worker)(RolloutWorker)
        return remote.remote(
            self.env,
            stop - start,
            self.vectorization,
            seed,
            self.check_finite,
            self.info_keys,
            (self.actor, self.critic),  # pickled together: the shared normalizer stays shared
            self.num_steps,
            self.threads,
        )

    def start(self) -> None:
        """Connect to Ray and start the workers (once; later calls do nothing)."""
        if self.workers:
            return
        started = time.perf_counter()
        self.workers = [self._spawn(k) for k in range(self.config.num_workers)]
        wait_until_ready(self.workers, self.config, "workers", self.close)
        ray = connect(self.config)
        if self._restored is not None:
            ray.get(
                [w.set_state.remote(s) for w, s in zip(self.workers, self._restored, strict=True)]
            )
            self._restored = None
        self.startup_seconds = time.perf_counter() - started

    def _restart(self, k: int, error: Exception) -> None:
        retire_worker(
            self.workers, k, self.counters["worker_restarts"], self.config, "worker", error
        )
        start, stop = self.slices[k]
        self.counters["worker_restarts"] += 1
        self.counters["discarded_episodes"] += stop - start  # every env was mid-episode
        self.incarnation[k] += 1
        self.workers[k] = self._spawn(k)

    def close(self) -> None:
        """Stop the workers (Ray itself stays up for the next run in this process)."""
        kill_workers(self.workers)
        self.workers = []

    # ---- collection -----------------------------------------------------------------------
    def _weights_ref(self) -> Any:
        """The current weights in the object store, put once per version."""
        if self._weights is None or self._weights[0] != self.version:
            ray = connect(self.config)
            state = {
                "actor": self.actor.state_dict(),
                "critic": None if self.critic is None else self.critic.state_dict(),
            }
            self._weights = (self.version, ray.put(state))
        return self._weights[1]

    def _rng_for(self, k: int) -> torch.Tensor:
        return torch.get_rng_state() if self.shared_rng else self.rng_states[k]

    def _launch(self) -> dict[int, Any]:
        ref = self._weights_ref()
        self._pending_version = self.version
        return {
            k: w.collect.remote(self.version, [ref], self._rng_for(k))
            for k, w in enumerate(self.workers)
        }

    def _gather(self, futures: dict[int, Any]) -> list[dict[str, Any]]:
        """Results of every worker in order, restarting and re-asking workers that died."""
        version = self._pending_version
        results = gather_restarting(
            futures, self.config, self._restart, lambda k: self._resubmit(k, version)
        )
        return [results[k] for k in range(len(self.workers))]

    def _resubmit(self, k: int, version: int) -> Any:
        assert self._weights is not None and self._weights[0] == version
        return self.workers[k].collect.remote(version, [self._weights[1]], self._rng_for(k))

    def collect(self, policy: Any, storage: RolloutStorage, value_fn: Any = None) -> None:
        """Fill `storage` from the workers; `policy`/`value_fn` are ignored (their weights
        are sent instead: the workers compute the same thing)."""
        self.start()
        waited = time.perf_counter()
        self.version += 1
        if self._ready is not None:
            results, self._ready = self._ready, None
            version = self._pending_version
        else:
            futures = self._pending if self._pending is not None else self._launch()
            version = self._pending_version
            self._pending = None
            results = self._gather(futures)
        lag = self.version - version
        if lag > self.config.max_lag and self.config.stale == "drop":
            self.counters["dropped_rollouts"] += 1
            self.counters["dropped_steps"] += sum(r["steps"] for r in results)
            self._keep_rng(results)  # the envs moved on; so does sampling
            results, lag = self._gather(self._launch()), 0
        self.last_lag = lag
        self._use(results, storage)
        if self.config.overlap:  # start the next rollout before the learner updates
            self._pending = self._launch()
        self.last_wait_seconds = time.perf_counter() - waited

    def _keep_rng(self, results: list[dict[str, Any]]) -> None:
        for k, result in enumerate(results):
            if self.shared_rng:
                torch.set_rng_state(result["rng_state"])
            else:
                self.rng_states[k] = result["rng_state"]

    def _use(self, results: list[dict[str, Any]], storage: RolloutStorage) -> None:
        """Copy worker rollouts into `storage` (envs side by side) and book their episodes."""
        self._keep_rng(results)
        for (start, stop), result in zip(self.slices, results, strict=True):
            part: RolloutStorage = result["storage"]
            for name in (
                "obs",
                "actions",
                "logprobs",
                "values",
                "rewards",
                "terminated",
                "truncated",
                "valid",
            ):
                getattr(storage, name)[:, start:stop] = getattr(part, name)
            storage.next_values[start:stop] = part.next_values
            for key, values in storage.info.items():
                values[:, start:stop] = part.info[key]
            self.env_steps += result["steps"]
            self.finished_returns += result["returns"]
            self.finished_lengths += result["lengths"]
            for key, sums in result["info"].items():
                self.finished_info[key] += sums

    # ---- the VectorRunner interface the learner uses ----------------------------------------
    def drain_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.finished_returns, self.finished_lengths
        self.finished_returns, self.finished_lengths = [], []
        return returns, lengths

    def drain_episode_info(self) -> dict[str, list[float]]:
        drained = self.finished_info
        self.finished_info = {key: [] for key in self.info_keys}
        return drained

    def metrics(self) -> dict[str, float]:
        """ray/... metrics logged with every update (cumulative counters, last lag)."""
        return {
            **{f"ray/{name}": float(value) for name, value in self.counters.items()},
            "ray/policy_lag": float(self.last_lag),
            "ray/workers": float(self.config.num_workers),
            "perf/ray_wait_s": self.last_wait_seconds,
        }

    def state_dict(self) -> dict[str, Any]:
        """Counters, RNG streams and each worker's runner state (envs included where they
        can be captured). An overlapped rollout in flight is fetched and saved with it."""
        if self._pending is not None:
            self._ready, self._pending = self._gather(self._pending), None
        if self.workers:
            ray = connect(self.config)
            workers = ray.get([w.get_state.remote() for w in self.workers])
        else:
            workers = self._restored
        return {
            "backend": "ray",
            "env_steps": self.env_steps,
            "version": self.version,
            "rng_states": [s.clone() for s in self.rng_states],
            "incarnation": list(self.incarnation),
            "counters": dict(self.counters),
            "workers": workers,
            "ready": None if self._ready is None else [_as_data(r) for r in self._ready],
            "ready_version": self._pending_version,
            # episodes finished since the last log (as VectorRunner keeps them)
            "finished": {
                "returns": list(self.finished_returns),
                "lengths": list(self.finished_lengths),
            },
        }

    def load_state_dict(self, state: dict[str, Any], seed: int | None = None) -> None:
        from payoff.core.errors import CheckpointError

        if state.get("backend") != "ray" or len(state["workers"] or []) != len(self.slices):
            raise CheckpointError(
                f"this checkpoint was written by backend "
                f"{state.get('backend', 'local')!r} with "
                f"{len(state.get('workers') or []) or 'no'} ray workers; resume it with the "
                f"same backend and ray.num_workers ({len(self.slices)} now)"
            )
        self.env_steps = int(state["env_steps"])
        self.version = int(state["version"])
        self.rng_states = [torch.as_tensor(s) for s in state["rng_states"]]
        self.incarnation = list(state["incarnation"])
        self.counters.update(state["counters"])
        ready = state.get("ready")
        self._ready = None if ready is None else [_from_data(r) for r in ready]
        self._pending_version = int(state.get("ready_version", 0))
        finished = state.get("finished") or {}  # (checkpoints before 2026-11-28 hold none)
        self.finished_returns = [float(r) for r in finished.get("returns", [])]
        self.finished_lengths = [int(n) for n in finished.get("lengths", [])]
        self._restored = state["workers"]
        if self.workers:  # already running: push the states now
            ray = connect(self.config)
            ray.get(
                [w.set_state.remote(s) for w, s in zip(self.workers, self._restored, strict=True)]
            )
            self._restored = None


def _as_data(result: dict[str, Any]) -> dict[str, Any]:
    """A fetched rollout as plain data for a checkpoint (its storage as a dict of tensors)."""
    storage = result["storage"]
    return {**result, "storage": {f.name: getattr(storage, f.name) for f in fields(storage)}}


def _from_data(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "storage": RolloutStorage(**result["storage"])}
