"""Vectorized envs and the loop that steps them: on-policy rollouts, episode stats, checks.

`make_vector_env` picks the fastest vector env for an id: payoff's batched NumPy CartPole
where one exists, otherwise Gymnasium's SyncVectorEnv (in-process; for cheap envs faster
than subprocesses on a few cores) or AsyncVectorEnv when asked. All use Gymnasium 1.x's
NEXT_STEP autoreset: the step after an episode ends only resets that env. The runner marks
such steps invalid, so learners never train on the action the env ignored.

Devices: envs step on the CPU in NumPy. A runner given a `device` sends each step's
observations there once (one copy per step, none on the CPU); the policy hands back CPU
tensors and NumPy actions for the envs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from payoff.core.errors import ConfigError, EnvError, PayoffError
from payoff.envs.make import EnvConfig, check_env, is_success, make_env
from payoff.envs.snapshot import EnvStateError, restore_env, snapshot_env
from payoff.models.encoding import obs_dim
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.evaluate import (
    EARLY_NOTE_STEPS,
    EPISODE_STEP_LIMIT,
    EvalResult,
    check_actions,
    check_episodes,
    check_stop,
    note_long_episodes,
    warn_unended,
)
from payoff.track.interrupt import ignore_ctrl_c_in_worker
from payoff.track.progress import LateProgress

Vectorization = Literal["auto", "batched", "sync", "async"]
# Gymnasium ids that payoff implements as a batched NumPy env with identical dynamics.
BATCHED_ALIASES = {"CartPole-v1": "payoff/CartPole-v1"}

# policy(obs [N, ...] on the runner's device) -> (actions for storage, actions for env.step,
# logprobs [N]); the tensors it returns are on the CPU, where the storage is.
PolicyStep = Callable[[torch.Tensor], tuple[torch.Tensor, np.ndarray, torch.Tensor | None]]


def batched_id(env: EnvConfig) -> str | None:
    """The payoff id whose batched NumPy `vector_entry_point` can run `env`, if any."""
    env_id = BATCHED_ALIASES.get(env.id, env.id) if not env.kwargs else env.id
    if not env_id.startswith("payoff/") or env_id not in gym.registry:
        return None
    return env_id if gym.registry[env_id].vector_entry_point is not None else None


def make_vector_env(
    env: EnvConfig, num_envs: int, vectorization: Vectorization = "auto"
) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env` behind one batched step() (NEXT_STEP autoreset)."""
    if env.vector is not None:
        if env.vector.num_envs != num_envs:
            raise ConfigError(
                f"the vector env passed holds {env.vector.num_envs} envs, but this algorithm "
                f"runs {num_envs} (its num_envs key, where it has one; MBRL plans for one env "
                f"at a time): pass a single env, or a vector env of {num_envs}"
            )
        return check_next_step(env.vector, "the vector env passed")
    check_env(env)
    batched = None if env.custom or env.wrappers or env.max_episode_steps else batched_id(env)
    if vectorization == "batched" and batched is None:
        raise ConfigError(
            f"vectorization 'batched' needs an env payoff implements as a batched NumPy env "
            f"(CartPole-v1, or a payoff/ id with a vector_entry_point), got {env.id!r}; "
            f"use 'sync' or 'async'"
        )
    if vectorization in ("auto", "batched") and batched is not None:
        envs = gym.make_vec(
            batched, num_envs, vectorization_mode="vector_entry_point", **env.kwargs
        )
        return check_next_step(envs, f"batched env {batched!r}")
    if vectorization == "async":
        # each worker process gets its own pickled copy of an env given from Python
        check_picklable(env, "vectorization 'async' runs each env in its own process")
        # Ctrl-C reaches the worker processes too: they must not die mid-step while the
        # main process finishes its iteration, checkpoints and closes them
        main = os.getpid()
        return gym.vector.AsyncVectorEnv([lambda: _worker_env(env, main) for _ in range(num_envs)])
    return gym.vector.SyncVectorEnv([lambda: make_env(env) for _ in range(num_envs)])


def check_next_step(envs: gym.vector.VectorEnv, what: str) -> gym.vector.VectorEnv:
    """`envs`, or an EnvError where they autoreset other than Gymnasium's default NEXT_STEP:
    the runner drops the step after an episode ends as a reset-only step, which under
    SAME_STEP is every episode's first real transition (PPO learnt nothing from an env whose
    reward came on the first step)."""
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        raise EnvError(
            f"{what} uses autoreset mode {getattr(mode, 'name', mode)}; payoff's runner needs "
            f"NEXT_STEP (Gymnasium's default): make it with autoreset_mode="
            f"gym.vector.AutoresetMode.NEXT_STEP, or pass one env (or a function that makes "
            f"one) and payoff vectorizes it"
        )
    return envs


def check_picklable(env: EnvConfig, why: str, instead: str = "vectorization 'sync'") -> None:
    """EnvError in this process when the env given from Python cannot be sent to other
    processes (`why` says which): raised in a worker, the error reached the user as a
    ConnectionResetError or Ray's serialization dump."""
    if env.factory is None:
        return
    import cloudpickle

    try:
        cloudpickle.dumps(env.factory)
    except Exception as err:
        raise EnvError(
            f"{why}, so the env given from Python ({env.id}) must pickle, and it does not "
            f"({type(err).__name__}: {err}). Pass a function that builds the env inside the "
            f"process (a module-level function or class, not an instance holding a lock or "
            f"an open file), or use {instead}"
        ) from None


def _worker_env(env: EnvConfig, main: int) -> gym.Env:
    """The env of one AsyncVectorEnv worker process, deaf to Ctrl-C. AsyncVectorEnv also
    calls it once in the main process (a dummy env for the spaces): there Ctrl-C must keep
    stopping training, so only another process (pid) ignores it."""
    if os.getpid() != main:
        ignore_ctrl_c_in_worker()
    return make_env(env)


# Fused collectors: an env type whose whole rollout an accelerator can run in one call
# registers `collector(runner, sampler, storage) -> bool` for it (payoff.accel does, for
# payoff's batched CartPole). `VectorRunner.collect` tries it first, given a sampler, and runs
# its own step loop where it returns False (having done nothing).
FusedCollector = Callable[["VectorRunner", Any, RolloutStorage], bool]
FUSED_COLLECTORS: dict[type, FusedCollector] = {}


def register_fused_collector(env_type: type, collector: FusedCollector) -> None:
    """Let `collector` run whole rollouts of envs of exactly `env_type` (see FUSED_COLLECTORS)."""
    FUSED_COLLECTORS[env_type] = collector


class VectorRunner:
    """Steps a vector env, remembers the current observations and tracks finished episodes."""

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        env_id: str,
        seed: int,
        check_finite: bool = True,
        info_keys: tuple[str, ...] = (),
        device: torch.device | None = None,
    ):
        self.envs = envs
        self.env_id = env_id
        self.check_finite = check_finite
        # Where the policy runs; None or the CPU: observations are used where they are.
        self.device = device if device is not None and device.type != "cpu" else None
        self.num_envs = envs.num_envs
        self.seed = seed  # fresh episodes after a resume that cannot restore the envs count from it
        # one clear error for a space the MLP networks cannot take, before reset's checks
        obs_dim(envs.single_observation_space, env_id)
        self.obs, _ = reset_envs(envs, seed, env_id, "the first reset")
        self.check_step(self.obs, None, 0)
        self.resetting = np.zeros(self.num_envs, dtype=bool)  # this step only resets the env
        self.episode_return = np.zeros(self.num_envs)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.env_steps = 0  # valid steps taken (what "training steps" counts)
        # Numeric info keys (a true objective, a cost) kept per step and summed per episode.
        self.info_keys = tuple(info_keys)
        self.step_info = {key: np.zeros(self.num_envs) for key in self.info_keys}
        self.episode_info = {key: np.zeros(self.num_envs) for key in self.info_keys}
        self.finished_info: dict[str, list[float]] = {key: [] for key in self.info_keys}
        # Why the last load_state_dict could not restore the envs (None when it could).
        self.restore_note: str | None = None

    # ---- one step -----------------------------------------------------------------------
    def step(
        self, env_actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every env; returns (next_obs, rewards, terminated, truncated, valid)."""
        valid = ~self.resetting
        if self.check_finite:
            check_actions(env_actions, self.env_id, self.env_steps)
        next_obs, rewards, terminated, truncated, infos = step_envs(
            self.envs, env_actions, self.env_id, self.env_steps, "training"
        )
        rewards = np.asarray(rewards, dtype=np.float32)
        self.check_step(next_obs, rewards, self.env_steps)
        self.env_steps += int(np.count_nonzero(valid))
        self.episode_return += rewards
        self.episode_length += valid
        for key in self.info_keys:
            if key not in infos and not valid.any():
                # every env only reset this step (next-step autoreset): its infos are
                # reset()'s, which need not carry the key; no step's value is missing
                self.step_info[key] = np.zeros(self.num_envs)
                continue
            if key not in infos:
                raise EnvError(
                    f"env {self.env_id!r} puts no {key!r} in info (asked for by episode_info); "
                    f"its info keys are: {', '.join(sorted(k for k in infos if not k.startswith('_')))}"
                )
            self.step_info[key] = np.where(valid, np.asarray(infos[key], dtype=np.float64), 0.0)
            self.episode_info[key] += self.step_info[key]
        done = terminated | truncated
        # count_nonzero: a quarter of ndarray.any()'s cost; tolist: one call for all the
        # episodes that ended (the same floats)
        if np.count_nonzero(done):
            self.finished_returns += self.episode_return[done].tolist()
            self.finished_lengths += self.episode_length[done].tolist()
            for key in self.info_keys:
                self.finished_info[key] += self.episode_info[key][done].tolist()
                self.episode_info[key][done] = 0.0
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0
        self.resetting = done
        self.obs = next_obs
        return next_obs, rewards, terminated, truncated, valid

    def check_step(self, obs: np.ndarray, rewards: np.ndarray | None, step: int) -> None:
        """Stop with a clear error when the env produces NaN or inf (check_finite=false skips)."""
        if not self.check_finite:
            return
        if not np.isfinite(obs).all():
            env_index = int(np.flatnonzero(~np.isfinite(obs.reshape(self.num_envs, -1)).all(1))[0])
            raise EnvError(
                f"env {self.env_id!r} returned a non-finite observation at step {step} "
                f"(env {env_index} of {self.num_envs}): {obs[env_index]}. "
                f"Fix the env or wrap it; set check_finite=false to skip this check."
            )
        if rewards is not None and not np.isfinite(rewards).all():
            env_index = int(np.flatnonzero(~np.isfinite(rewards))[0])
            raise EnvError(
                f"env {self.env_id!r} returned a non-finite reward {rewards[env_index]} at step "
                f"{step} (env {env_index} of {self.num_envs}; a reward of None is stored as "
                f"nan). Fix the env or wrap it; set check_finite=false to skip this check."
            )

    # ---- a whole on-policy rollout --------------------------------------------------------
    # Inference mode: no autograd bookkeeping (version counters, view tracking) on the
    # rollout's many small tensors; the storage it fills stays an ordinary tensor.
    @torch.inference_mode()
    def collect(
        self,
        policy: PolicyStep | None,
        storage: RolloutStorage,
        value_fn: Any = None,
        numpy_policy: Any = None,
        sampler: Any = None,
    ) -> None:
        """Fill `storage` with `storage.num_steps` steps of every env under `policy`.

        numpy_policy(obs) -> env actions, given, replaces `policy`: it takes each step's
        observations as the NumPy rows of the storage and keeps its own record of the
        actions and log-probs, which the caller copies into `storage` after the rollout
        (an accelerated sampler: no tensor per step). Given that sampler too (`sampler`),
        an env type with a fused collector (`register_fused_collector`) may run the whole
        rollout in one call instead: the same steps and books.

        value_fn(obs) -> [B] is the critic, None when the learner has none. It gives V of
        every step's observation and of the one after the last step (for GAE and truncation
        bootstrapping) in one forward pass after the rollout: the critic does not change
        during collection, so this equals calling it each step, with one call's overhead
        instead of one per step.

        The storage stays on the CPU; off the CPU, each step's observations go to
        `self.device` once and the values come back in one copy.
        """
        # NumPy views sharing the storage tensors' memory: NumPy-into-NumPy writes skip torch's
        # per-call dispatch, which with small envs costs as much as stepping them.
        fused = FUSED_COLLECTORS.get(type(self.envs)) if sampler is not None else None
        if fused is not None and fused(self, sampler, storage):
            self._values_after(storage, value_fn)
            return
        obs_np, actions_np = storage.obs.numpy(), storage.actions.numpy()
        logprobs_np = storage.logprobs.numpy()
        rewards_np, valid_np = storage.rewards.numpy(), storage.valid.numpy()
        terminated_np, truncated_np = storage.terminated.numpy(), storage.truncated.numpy()
        for t in range(storage.num_steps):
            obs_np[t] = self.obs
            if numpy_policy is not None:
                env_actions = numpy_policy(obs_np[t])
            else:
                assert policy is not None
                obs_t = torch.from_numpy(obs_np[t])
                if self.device is not None:
                    obs_t = obs_t.to(self.device)
                actions, env_actions, logprobs = policy(obs_t)
                actions_np[t] = actions.numpy()
                if logprobs is not None:
                    logprobs_np[t] = logprobs.numpy()
            _, rewards_np[t], terminated_np[t], truncated_np[t], valid_np[t] = self.step(
                env_actions
            )
            for key, values_t in storage.info.items():
                values_t[t] = torch.from_numpy(self.step_info[key])
        self._values_after(storage, value_fn)

    def _values_after(self, storage: RolloutStorage, value_fn: Any) -> None:
        """V of every stored observation and of the one after the last step, in one pass."""
        if value_fn is None:
            return
        final = torch.as_tensor(np.asarray(self.obs), dtype=storage.obs.dtype)
        every = torch.cat([storage.obs, final[None]])  # [T + 1, N, ...]
        if self.device is not None:
            every = every.to(self.device)
        values = value_fn(every.reshape(-1, *every.shape[2:])).reshape(every.shape[:2])
        if self.device is not None:
            values = values.cpu()
        storage.values[:] = values[:-1]
        storage.next_values[:] = values[-1]

    def drain_episode_info(self) -> dict[str, list[float]]:
        """Per-episode sums of the info keys, for episodes finished since the last call."""
        drained = self.finished_info
        self.finished_info = {key: [] for key in self.info_keys}
        return drained

    def metrics(self) -> dict[str, float]:
        """Backend metrics for the training log (a Ray runner reports its workers); none here."""
        return {}

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of episodes finished since the last call."""
        returns, lengths = self.finished_returns, self.finished_lengths
        self.finished_returns, self.finished_lengths = [], []
        return returns, lengths

    # ---- exact resume ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The runner's counters and, where possible, the envs' full state, as data.

        payoff's batched envs expose their state (`get_state`); Gymnasium envs in a
        SyncVectorEnv are saved attribute by attribute (payoff.envs.snapshot: classic control,
        toy text and the like). Envs that hold other objects (Box2D worlds, MuJoCo) or run
        in subprocesses (AsyncVectorEnv) cannot be saved: a resumed run restarts the
        episodes in progress from a seeded reset, and says so.
        """
        state: dict[str, Any] = {
            "obs": np.array(self.obs),
            "resetting": self.resetting.copy(),
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "env_steps": self.env_steps,
            "envs": None,
            "envs_note": None,
            "episode_info": {key: sums.copy() for key, sums in self.episode_info.items()},
            # episodes finished since the last log, which a checkpoint between two logs
            # must keep: without them a resumed run's next train/return differed
            "finished": {
                "returns": list(self.finished_returns),
                "lengths": list(self.finished_lengths),
                "info": {key: list(v) for key, v in self.finished_info.items()},
            },
        }
        envs = self.envs.unwrapped
        if hasattr(envs, "get_state"):
            state["envs"] = ("batched", envs.get_state())
        elif isinstance(self.envs, gym.vector.SyncVectorEnv):
            try:
                state["envs"] = ("gymnasium", [snapshot_env(env) for env in self.envs.envs])
            except EnvStateError as err:
                state["envs_note"] = f"its state cannot be saved as data ({err})"
        else:
            state["envs_note"] = (
                f"{type(self.envs).__name__} keeps its envs in other processes, whose state "
                f"is not saved"
            )
        return state

    def load_state_dict(self, state: dict[str, Any], seed: int | None = None) -> None:
        self.env_steps = int(state["env_steps"])
        finished = state.get("finished") or {}  # (checkpoints before 2026-11-28 hold none)
        self.finished_returns = [float(r) for r in finished.get("returns", [])]
        self.finished_lengths = [int(n) for n in finished.get("lengths", [])]
        for key, values in (finished.get("info") or {}).items():
            if key in self.finished_info:
                self.finished_info[key] = [float(v) for v in values]
        saved: Any = state.get("envs")
        self.restore_note = None
        kind = saved[0] if isinstance(saved, list | tuple) and len(saved) == 2 else None
        try:
            if kind == "batched" and hasattr(self.envs.unwrapped, "set_state"):
                self.envs.unwrapped.set_state(saved[1])
            elif kind == "gymnasium" and isinstance(self.envs, gym.vector.SyncVectorEnv):
                if not isinstance(saved[1], list) or len(saved[1]) != len(self.envs.envs):
                    raise EnvStateError("the checkpoint holds a different number of envs")
                for env, snapshot in zip(self.envs.envs, saved[1], strict=True):
                    restore_env(env, snapshot)
                self.envs._autoreset_envs = np.asarray(state["resetting"], dtype=bool).copy()
            elif kind is not None:
                raise EnvStateError(
                    f"its saved state ({kind}) does not fit a {type(self.envs).__name__}"
                )
            else:
                raise EnvStateError(
                    str(state.get("envs_note") or "the checkpoint has no env state")
                )
        except EnvStateError as err:
            self._restart_episodes(self.seed if seed is None else seed, str(err))
            return
        self.obs = np.array(state["obs"])
        self.resetting = np.array(state["resetting"], dtype=bool)
        self.episode_return = np.array(state["episode_return"])
        self.episode_length = np.array(state["episode_length"], dtype=np.int64)
        for key, sums in state.get("episode_info", {}).items():
            if key in self.episode_info:
                self.episode_info[key] = np.array(sums)

    def _restart_episodes(self, seed: int, reason: str) -> None:
        """Cannot restore the envs: start fresh episodes, seeded from the step counter.
        `restore_note` says so; resuming (`Algorithm.from_run`, `.load`) reports it."""
        self.restore_note = (
            f"env {self.env_id!r}: {reason}; the episodes in progress at the checkpoint were "
            f"restarted from a seeded reset, so this resume is not exactly an uninterrupted run"
        )
        self.obs, _ = self.envs.reset(seed=seed + self.env_steps)
        self.resetting[:] = False
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0
        for sums in self.episode_info.values():
            sums[:] = 0.0


def step_envs(
    envs: gym.vector.VectorEnv, actions: Any, env_id: str, steps: int, during: str
) -> tuple[Any, ...]:
    """`envs.step(actions)`. An error the user's env raises becomes one EnvError saying which
    env, when (`during`, after `steps` env steps), and for the vector env's shape check (an
    observation that does not fit the space) what that means; its traceback stays chained."""
    when = f"step during {during}, after {steps:,} env steps"
    with env_errors(envs.single_observation_space, env_id, when):
        return envs.step(actions)


def reset_envs(envs: gym.vector.VectorEnv, seed: Any, env_id: str, during: str) -> tuple[Any, Any]:
    """`envs.reset(seed=seed)`, with `step_envs`'s one EnvError for what the env raises."""
    with env_errors(envs.single_observation_space, env_id, f"reset during {during}"):
        return envs.reset(seed=seed)


def refuse_non_finite(obs: Any, reward: Any, env_id: str, when: str) -> None:
    """One EnvError for a NaN or inf observation or reward (`when`: during what, after how
    many steps), for the loops that step envs without a VectorRunner (imitation, recording
    an expert)."""
    rewards_ok = bool(np.isfinite(np.asarray(reward, dtype=np.float64)).all())
    if rewards_ok and np.isfinite(np.asarray(obs, dtype=np.float64)).all():
        return
    which = "observation" if rewards_ok else "reward (a reward of None is stored as nan)"
    raise EnvError(f"env {env_id!r} returned a non-finite {which} {when}; fix the env or wrap it")


@contextmanager
def env_errors(space: gym.Space, env_id: str, when: str) -> Iterator[None]:
    """What an env raises inside the block (its own errors, the old Gym API's return
    values) as one `env_error`; payoff's own errors already say what went wrong."""
    try:
        yield
    except PayoffError:
        raise
    except Exception as err:
        raise env_error(space, err, env_id, when) from err


def env_error(space: gym.Space, err: Exception, env_id: str, when: str) -> EnvError:
    """One EnvError for an exception raised inside an env's step or reset (`space`: its
    observation space), with what the usual ones mean: an observation off its space, or
    the old Gym API's return values."""
    text, hint = str(err), ""
    if isinstance(err, ValueError) and "shape" in text:
        hint = (
            f". A vector env raises this when an observation does not fit the env's "
            f"observation_space ({space})"
        )
    elif "array element with a sequence" in text:
        hint = (
            ". A vector env stores one number per env as its reward: step must return the "
            "reward as a float, not an array or a list"
        )
    elif "0-dimensional arrays" in text or "float() argument must be" in text:
        hint = (  # float(reward) of a one-element array or a list, read inside the step
            ". payoff reads the reward step returns as one number: step must return the "
            "reward as a float, not an array or a list (e.g. float(reward))"
        )
    elif "values to unpack" in text:
        hint = (
            ". Gymnasium's API is reset() -> (observation, info) and step() -> (observation, "
            "reward, terminated, truncated, info); an env written for the old Gym returns "
            "an observation alone from reset and 4 values from step"
        )
    elif "has no attribute 'items'" in text or "has no attribute 'keys'" in text:
        hint = (
            ". reset() and step() return info as a dict (an empty {} when there is nothing "
            "to say); this env returned something else there"
        )
    return EnvError(f"env {env_id!r} raised {type(err).__name__} in {when}: {err}{hint}")


def episode_limit(envs: gym.vector.VectorEnv) -> int | None:
    """The episodes' time limit (their spec's max_episode_steps, or a batched env's own
    attribute), or None where the env declares none."""
    limit = getattr(envs, "max_episode_steps", None)
    if limit is None:
        try:
            spec = envs.get_attr("spec")[0]
        except Exception:  # a vector env of the user's own, without get_attr or a spec
            return None
        limit = getattr(spec, "max_episode_steps", None)
    return int(limit) if isinstance(limit, int | np.integer) and limit > 0 else None


@torch.no_grad()
def evaluate_batched(
    env: EnvConfig,
    act: Callable[[torch.Tensor], np.ndarray],
    episodes: int,
    seed: int,
    vectorization: Vectorization = "sync",
    device: torch.device | None = None,
    step_limit: int = EPISODE_STEP_LIMIT,
) -> EvalResult:
    """Play `episodes` episodes at once, one per env (episode k seeded `seed + k`).

    Same episodes and seeds as `payoff.rollout.evaluate.evaluate_policy`, but with one batched
    forward pass per step instead of one per env. `act` gets the observations on `device`
    (default: the CPU) and returns NumPy actions. Episodes still running after `step_limit`
    steps are cut there, with a warning.
    """
    check_episodes(episodes)
    to_device = device if device is not None and device.type != "cpu" else None
    # fresh envs for evaluation, never the vector env a user passed in for training
    envs = make_vector_env(dataclasses.replace(env, vector=None), episodes, vectorization)
    limit = episode_limit(envs)
    progress = LateProgress(episodes, f"evaluating {env.id}", episode_steps=limit)
    try:
        obs, _ = reset_envs(envs, seed, env.id, "evaluation")
        returns = np.zeros(episodes)
        lengths = np.zeros(episodes, dtype=np.int64)
        running = np.ones(episodes, dtype=bool)
        successes: list[bool | None] = [None] * episodes
        while running.any():
            check_stop(env.id)  # a pending stop signal ends it here (EvaluationStopped)
            obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32))
            actions = act(obs_t if to_device is None else obs_t.to(to_device))
            check_actions(actions, env.id, int(lengths.max()))
            obs, rewards, terminated, truncated, infos = step_envs(
                envs, actions, env.id, int(lengths.max()), "evaluation"
            )
            returns += np.asarray(rewards) * running
            lengths += running
            still = running & ~(np.asarray(terminated) | np.asarray(truncated))
            # episodes still running at the limit are cut here: they end now, judged on
            # their last step as evaluate_policy does
            cut = bool(still.any()) and lengths.max() >= step_limit
            ended = running if cut else running & ~still
            for i in np.flatnonzero(ended):
                successes[i] = is_success(env.id, env_info(infos, int(i)), float(rewards[i]))
            unused = int((limit - lengths[ended]).clip(0).sum()) if limit else 0
            progress.tick(int(running.sum()), int(ended.sum()), unused)
            running = still
            if cut:
                warn_unended(env.id, step_limit)
                break
            if lengths.max() == EARLY_NOTE_STEPS and running.any() and limit is None:
                note_long_episodes(env.id, EARLY_NOTE_STEPS, step_limit)
    finally:
        envs.close()
        progress.close()
    if not np.isfinite(returns).all():
        raise EnvError(f"env {env.id!r} returned non-finite rewards during evaluation")
    defined = [s for s in successes if s is not None]
    return EvalResult.of(returns, lengths, float(np.mean(defined)) if defined else None)


def env_info(infos: Any, i: int) -> dict[str, Any]:
    """Env i's info from a vector env's step: Gymnasium's dict of arrays (each key's "_key"
    mask saying which envs set it), or a list/tuple of per-env dicts."""
    if isinstance(infos, list | tuple):
        return dict(infos[i]) if i < len(infos) and isinstance(infos[i], dict) else {}
    if not isinstance(infos, dict):
        return {}
    own: dict[str, Any] = {}
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        try:
            if mask is not None and not bool(mask[i]):
                continue
            own[key] = values[i]
        except (TypeError, IndexError, KeyError):  # not per env: not this env's to read
            continue
    return own
