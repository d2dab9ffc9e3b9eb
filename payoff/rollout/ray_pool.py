"""A fault-tolerant pool of Ray actors: the pieces both Ray backends share.

`RayRunner` (`payoff.rollout.ray_runner`, env rollouts) and `RaySampler`
(`payoff.rollout.ray_generation`, LM completions) each keep `num_workers` actors of their own
kind and use the same protocol with them:

- start: connect to Ray once per process (`connect`), spawn the actors, and wait until every
  one answers `ready` (`wait_until_ready`), failing with the cluster's free CPUs instead of
  hanging when the cluster is too small;
- split the work into even contiguous ranges, one per actor (`split_ranges`);
- weights by version: the learner `ray.put`s its weights once per version and sends the
  version with each call; an actor `ray.get`s them only when the version changed;
- gather: fetch every actor's result; an actor that died is killed for good
  (`retire_worker`, which enforces `ray.max_restarts`), replaced, and asked again
  (`gather_restarting`); a payoff error raised inside an actor is raised as itself;
- close: kill the actors (`kill_workers`); Ray itself stays up.

`RayConfig` is the `ray:` block of a recipe, shared by both backends.

Ray is imported lazily: the config and this module load without Ray installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from payoff.core.config import check_ranges, in_range
from payoff.core.errors import ConfigError, PayoffError, RunError
from payoff.core.imports import refuse_untrusted
from payoff.track.interrupt import stop_signals_kept


@dataclass
class RayConfig:
    """Where and how Ray workers run: the `ray:` block (used when backend is 'ray').

    address: null starts a private local Ray instance (ray.init(num_cpus=...)); 'auto'
        joins the cluster this machine belongs to (`ray start --head` / `ray start
        --address=...` ran here); 'ray://host:10001' or 'host:6379' joins a remote one.
        An already initialized Ray (ray.init in your own script) is always reused.
    num_workers: rollout actors; num_envs is split between them (num_envs >= num_workers).
        Trap: more workers only help when env stepping dominates; with cheap envs and a
        small network the per-update round trip costs more than it saves (docs/scaling.md).
    num_cpus: CPUs of the private local instance (null: all of this machine's).
    cpus_per_worker: CPUs Ray reserves per actor; a cluster needs this many free per worker.
    overlap: collect the next rollout while the learner updates on the current one.
        Rollouts are then one policy version old (policy lag 1); PPO's ratio corrects
        mild staleness. Off (default) is synchronous and exactly reproducible.
    stale: what to do with a rollout older than max_lag versions: 'use' it anyway (logged
        as ray/policy_lag) or 'drop' it and collect again with current weights
        (counted in ray/dropped_rollouts). Trap: overlap + stale 'drop' + max_lag 0 drops
        every overlapped rollout (twice the env steps for nothing).
    max_lag: the largest policy lag (learner version - rollout version) accepted.
    max_restarts: worker restarts allowed over the run before it stops with an error.
    startup_timeout: seconds to wait for the workers to start; they wait for free CPUs
        (num_workers x cpus_per_worker), so a too-small cluster fails here with an error
        instead of hanging.
    """

    address: str | None = None
    num_workers: int = field(default=2, metadata=in_range(0, low_open=True))
    num_cpus: int | None = field(default=None, metadata=in_range(0, low_open=True))
    cpus_per_worker: float = field(default=1.0, metadata=in_range(0))
    overlap: bool = False
    stale: Literal["use", "drop"] = "use"
    max_lag: int = field(default=1, metadata=in_range(0))
    max_restarts: int = field(default=10, metadata=in_range(0))
    startup_timeout: float = field(default=120.0, metadata=in_range(0, low_open=True))

    def validate(self) -> None:
        # the fields' ranges, also for a RayConfig built in Python rather than loaded
        check_ranges(self, "ray.")
        if self.address:  # a cluster named by a downloaded run would get its code and weights
            refuse_untrusted("ray.address", self.address, "a Ray cluster to connect to")


def import_ray() -> Any:
    """The ray module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "backend 'ray' needs Ray: pip install 'payoff[distributed]' (or 'ray>=2.30'), "
            "or set backend: local"
        ) from None
    return ray


def connect(config: RayConfig) -> Any:
    """Initialize Ray once per process (reusing an existing connection); returns the module."""
    ray = import_ray()
    if not ray.is_initialized():
        if config.address:
            _init_leaving_stop_signals(ray, address=config.address, log_to_driver=False)
        else:
            _init_leaving_stop_signals(
                ray, num_cpus=config.num_cpus, include_dashboard=False, log_to_driver=False
            )
    return ray


def _init_leaving_stop_signals(ray: Any, **options: Any) -> None:
    """`ray.init`, with SIGTERM left to payoff's training loop.

    Ray's init takes SIGTERM for itself twice (the driver's handler exits at once with
    status 15; the local node's kills Ray's processes and exits with status 1), and its C++
    core worker adds a crash handler on top. Ray starts inside the loop (at the first
    rollout), so either would end the run without its checkpoint. Ray's registration is
    skipped while it starts (one private helper, `ray._private.utils.set_sigterm_handler`;
    where a Ray lacks it, only a signal during the start itself is lost) and the handlers
    that were there before are put back afterwards, which also removes the C++ one. Ray's
    own processes are still stopped at exit (its atexit hook).
    """
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    take_sigterm = getattr(utils, "set_sigterm_handler", None)
    with stop_signals_kept():
        if take_sigterm is not None:
            utils.set_sigterm_handler = lambda handler: None  # type: ignore[union-attr]
        try:
            ray.init(**options)
        finally:
            if take_sigterm is not None:
                utils.set_sigterm_handler = take_sigterm  # type: ignore[union-attr]


def split_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) index ranges of `total` items over `parts` workers, as even as possible."""
    bounds = np.linspace(0, total, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def wait_until_ready(workers: list[Any], config: RayConfig, what: str, close: Any) -> None:
    """Block until every actor answers `ready`; on timeout `close()` them and say why."""
    ray = connect(config)
    try:
        ray.get([w.ready.remote() for w in workers], timeout=config.startup_timeout)
    except ray.exceptions.GetTimeoutError:
        free = ray.available_resources().get("CPU", 0.0)
        close()
        raise RunError(
            f"{config.num_workers} Ray {what} x {config.cpus_per_worker} CPUs did not start "
            f"within {config.startup_timeout:g} s; the cluster has {free:g} CPUs free. Lower "
            f"ray.num_workers or ray.cpus_per_worker, or stop other Ray jobs"
        ) from None


def retire_worker(
    workers: list[Any], k: int, restarts: int, config: RayConfig, what: str, error: Exception
) -> None:
    """Kill failed actor k before it is replaced, unless the restart budget is spent."""
    if restarts >= config.max_restarts:
        raise RunError(
            f"ray {what} {k} failed and the run already restarted workers {restarts} times "
            f"(ray.max_restarts): {error}"
        ) from error
    kill_workers(workers[k : k + 1])


def gather_restarting(
    futures: dict[int, Any], config: RayConfig, restart: Any, resubmit: Any
) -> dict[int, Any]:
    """Results of worker calls by worker index; a worker that died is restarted and re-asked.

    A payoff error raised inside a worker (NaN observation, bad key) is raised here as itself:
    it would fail again, so it is not retried.
    """
    ray = connect(config)
    results: dict[int, Any] = {}
    while futures:
        k, future = next(iter(futures.items()))
        try:
            results[k] = ray.get(future)
            del futures[k]
        except ray.exceptions.RayTaskError as error:
            cause = error.as_instanceof_cause()
            if isinstance(cause, PayoffError):
                raise cause.__class__(str(error.cause)) from error
            restart(k, error)
            futures[k] = resubmit(k)
        except ray.exceptions.RayActorError as error:
            restart(k, error)
            futures[k] = resubmit(k)
    return results


def kill_workers(workers: list[Any]) -> None:
    """Kill actors for good, ignoring ones already gone."""
    if not workers:
        return
    ray = import_ray()
    for worker in workers:
        try:
            ray.kill(worker, no_restart=True)
        except Exception:  # already gone
            pass
