"""What every algorithm shares: config handling, logging, save/load and exact resume.

An algorithm module defines a config dataclass and a subclass of `Algorithm` that implements
`learn`, `state_dict` and `load_state_dict`. Two kinds of trainable thing build on it:

- `Agent` (`payoff.algos.agent`): acts in an environment. `predict(observation)` gives (action, state) as
  Stable-Baselines3's does, `act(observation)` the action alone; `evaluate`
  plays fresh episodes and returns their statistics (`EvalResult`); `record_gif` renders
  some. Q-learning, DQN, the on-policy family, imitation, AlphaZero and IPPO are agents.
- `LMAlgorithm` (`payoff.algos.shared.lm`): a language model. It generates completions;
  `evaluate` returns greedy accuracy and pass@k on a task split (`LMEvalResult`); it
  exports the model.

The learning math stays in the algorithm's own module; this file only carries the plumbing
around it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, get_type_hints

import gymnasium as gym
import numpy as np
import torch
import yaml

from payoff.algos.loop import LearnInterrupted, LoopState, TrainLoop
from payoff.algos.response import Responder, RollbackConfig
from payoff.core.cache import remember_written, written_here
from payoff.core.config import (
    MAX_ENV_COPIES,
    MAX_SEED,
    MAX_THREADS,
    annotated_class,
    check_ranges,
    coerce_shorthands,
    fields_of,
    from_dict,
    in_range,
    key_hint,
    to_dict,
)
from payoff.core.device import available_devices, check_device_name, resolve_device
from payoff.core.errors import CheckpointError, ConfigError, TrainingError
from payoff.core.imports import names_from, weights_from
from payoff.core.state import count_values, restore, state_of
from payoff.envs.make import EnvConfig, code_named_by, env_config_of
from payoff.monitor.detectors import Alarm, Monitor, build_monitors, unfed
from payoff.monitor.detectors import replay as replay_records
from payoff.monitor.integrity import alarm_samples
from payoff.track.checkpoint import save_state
from payoff.track.progress import say
from payoff.track.run import OtherAlgorithmError, Run, load_checkpoint_file

RUN_KEYS = (
    "recipe",
    "description",
    "algo",
    "label",
    "monitors",
    "overrides",
    "recipe_note",
    "from_defaults",  # made by `payoff train ALGO`: the algorithm's defaults, no recipe
)  # keys of config.yaml that are not algorithm config


@dataclass
class RunKeys:
    """The keys every algorithm's config shares, declared here once, each with its range. A
    config class inherits them and redeclares only a key whose default differs (with the
    key's range: a redeclared field replaces the whole field).

    seed: seeds Python, NumPy and torch, and through them the envs, the data and the
        evaluation episodes.
    threads: torch CPU threads. Small networks run fastest on 1 on a 2-core machine (more
        threads fight over the cores); algorithms without torch (Q-learning) ignore it.
    log_every / eval_every / checkpoint_every: the loop's intervals, in the algorithm's own
        unit (env steps, episodes, optimizer steps, iterations); eval_every 0 = never.
        Evaluation is off (0) for an algorithm made in Python, so learn(n) trains n steps
        and nothing else; `payoff train` runs evaluate as the config class's `run_defaults`
        say (see `run_defaults`), unless the recipe or an override sets the key.
    device: where networks train: auto | cpu | cuda | cuda:N | mps (payoff.core.device;
        auto = a GPU when torch sees one). Agents default to cpu: their small networks
        train faster there than on a GPU; the language-model trainers default to auto.
        Envs always step on the CPU.
    on_alarm: what a monitor's alarm does: warn (an event and a console line; the default),
        halt (stop after that step, then evaluate and write the summary), or rollback (back
        to the last snapshot before the alarm's onset, its flagged samples quarantined; see
        payoff.algos.response). rollback: every / keep / max of those snapshots.
    """

    seed: int = field(default=0, metadata=in_range(0, MAX_SEED))
    threads: int = field(default=1, metadata=in_range(1, MAX_THREADS))
    device: str = field(default="cpu", metadata={"check": check_device_name})
    log_every: int = field(default=1, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=1_000, metadata=in_range(0, low_open=True))
    on_alarm: Literal["warn", "halt", "rollback"] = "warn"
    rollback: RollbackConfig = field(default_factory=RollbackConfig)

    # What a `payoff train` run sets where its recipe and overrides do not: the evaluations
    # a run's curves, summary and report are made of (payoff.train.resolve). A class lists
    # its own; those of the classes it inherits from apply too (see `run_defaults`).
    run_defaults: ClassVar[dict[str, Any]] = {}


def run_defaults(config_class: type) -> dict[str, Any]:
    """The keys a `payoff train` run of `config_class` sets where its recipe does not: each
    class's own `run_defaults` over those of the classes it inherits from. An algorithm
    made in Python keeps the dataclass defaults (evaluation off)."""
    merged: dict[str, Any] = {}
    for klass in reversed(config_class.__mro__):
        merged.update(klass.__dict__.get("run_defaults", {}))
    return merged


@dataclass
class AgentKeys(RunKeys):
    """RunKeys plus what every agent's config has.

    env: the environment (env.id, env.kwargs; see payoff.envs.make.EnvConfig).
    eval_episodes: episodes of each periodic evaluation (deterministic policy).
    final_eval_episodes: episodes of the final evaluation at the end of training (logged as
        final/..., summary.json's final_eval); 0 = none, the default in Python (learn(n)
        evaluates only when asked; agent.evaluate(100) measures it yourself). `payoff
        train` runs default to 50.
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    eval_episodes: int = field(default=20, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES))
    final_eval_episodes: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))

    run_defaults: ClassVar[dict[str, Any]] = {"final_eval_episodes": 50}


# A rollout's storage [num_steps, num_envs] is allocated at once: an on-policy config's
# num_steps declares in_range(..., product=ROLLOUT_STEPS).
ROLLOUT_STEPS = ("num_envs", 100_000_000, "env steps in one rollout")


@dataclass
class VectorAgentKeys(AgentKeys):
    """AgentKeys plus what the deep-RL agents trained on vectorized envs share (DQN and
    the on-policy family: PPO, A2C, REINFORCE).

    total_steps: training length in env steps, summed over envs.
    num_envs: envs stepped together.
    vectorization: 'auto' (payoff's batched NumPy env where one exists, else sync),
        'batched', 'sync' (in-process, fastest for cheap envs) or 'async' (subprocesses).
    gamma: discount.
    max_grad_norm: clip the global gradient norm to this (0 turns clipping off).
    stop_at_return: stop early once a periodic evaluation averages at least this
        (e.g. 475 on CartPole-v1); null trains for total_steps.
    check_finite: stop with an error naming the env and step when an observation or
        reward is NaN or infinite (false skips the check).
    """

    total_steps: int = field(default=100_000, metadata=in_range(0, low_open=True))
    num_envs: int = field(default=8, metadata=in_range(1, MAX_ENV_COPIES))
    vectorization: Literal["auto", "batched", "sync", "async"] = "auto"
    gamma: float = field(default=0.99, metadata=in_range(0, 1))
    max_grad_norm: float = field(default=0.5, metadata=in_range(0))
    stop_at_return: float | None = None
    check_finite: bool = True


_RESTORING: ContextVar[bool] = ContextVar("payoff_restoring", default=False)

# Algorithm(env=...) left out (the config's default env), as against env=None given
NO_ENV: Any = object()


@contextmanager
def _restoring() -> Iterator[None]:
    """While active, algorithms are being rebuilt from a file (`Algorithm.load`, a resume)."""
    token = _RESTORING.set(True)
    try:
        yield
    finally:
        _RESTORING.reset(token)


def restoring() -> bool:
    """Whether the algorithm being set up is rebuilt from a file: what only training needs
    (a run's reward functions) may then be missing until training asks for it."""
    return _RESTORING.get()


class _LoopCounter:
    """An attribute of an algorithm that is the field of the same name in its LoopState."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, algorithm: Any, owner: type | None = None) -> Any:
        return self if algorithm is None else getattr(algorithm.state, self.name)

    def __set__(self, algorithm: Any, value: Any) -> None:
        setattr(algorithm.state, self.name, value)


def _code_specs(value: Any) -> frozenset[str]:
    """Every 'module:name' string inside `value` (settings a caller passes to load)."""
    if isinstance(value, dict):
        return frozenset().union(*(_code_specs(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return frozenset().union(*(_code_specs(v) for v in value))
    return frozenset({value}) if isinstance(value, str) and ":" in value else frozenset()


def _from_python_material(config: dict[str, Any]) -> bool:
    """Whether a saved config names what only Python gave it: task rows (a jsonl task with no
    data file) or reward functions defined in a script or a function."""
    task = config.get("task")
    if isinstance(task, dict) and task.get("name") == "jsonl" and not task.get("data"):
        return True
    preferences = config.get("preferences")
    if isinstance(preferences, dict) and preferences.get("from_python"):
        return True
    rewards = config.get("rewards")
    names = (
        [r.get("name", "") for r in rewards if isinstance(r, dict)]
        if isinstance(rewards, list)
        else []
    )
    return any(str(n).startswith("__main__:") or "<" in str(n) for n in names)


def check_deterministic(value: Any, where: str) -> None:
    """ConfigError unless `value` is True or False: the string "false" would read as true."""
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{where}(deterministic=...) takes True or False, got {value!r}")


_SB3_POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")

#: summary.json's final_line of a run whose final evaluation was off (the key that says so)
NO_FINAL_EVALUATION = "no final evaluation ({})"


def _sb3_learn_arguments(algo: str, total: Any, sb3: dict[str, Any]) -> tuple[Any, bool]:
    """learn(total_timesteps=N), as Stable-Baselines3 spells it, is learn(N);
    progress_bar=False hides the bar and reset_num_timesteps=False is what payoff does
    anyway. SB3's other arguments (log_interval, tb_log_name, reset_num_timesteps=True)
    have no meaning here: refused. Returns (total, whether to show the bar)."""
    if "total_timesteps" in sb3:
        if total is not None:
            raise ConfigError("learn() got both a step count and total_timesteps; pass one")
        total = sb3.pop("total_timesteps")
    progress_bar = sb3.pop("progress_bar", True)
    if not isinstance(progress_bar, bool | np.bool_):
        raise ConfigError(f"learn(progress_bar=...) takes True or False, got {progress_bar!r}")
    if "reset_num_timesteps" in sb3:
        reset = sb3.pop("reset_num_timesteps")
        if reset is not False:
            raise ConfigError(
                f"learn(reset_num_timesteps={reset!r}): payoff's counters always go on, as "
                f"SB3's reset_num_timesteps=False (a second learn(10_000) ends at step "
                f"20,000); for a fresh count make a new {algo}(...)"
            )
    if sb3:
        raise ConfigError(
            f"{algo}.learn() takes the number of steps, callback= and progress_bar= "
            f"(learn(10_000, callback=fn)); got {', '.join(sorted(sb3))}. Logging and "
            f"evaluation are config keys (log_every, eval_every, final_eval_episodes, "
            f"stop_at_return, ...), and where metrics go is the run's loggers (tensorboard, "
            f"wandb, mlflow; docs/tracking.md). learn(n) again continues where the last call "
            f"stopped, so `for _ in range(10): agent.learn(10_000); agent.save(...)` saves "
            f"every 10,000 steps"
        )
    return total, bool(progress_bar)


def _check_stop_is_evaluated(config: Any, given: dict[str, Any]) -> None:
    """ConfigError when a stop condition is set (stop_at_return, stop_at_accuracy) but
    eval_every is 0 by default: the condition is checked at each periodic evaluation, which
    is off unless asked for, so the run would never stop early, in silence. (eval_every=0
    given with it is a choice, as in a recipe with evaluation turned off.)"""
    if "eval_every" in given:
        return
    for key in ("stop_at_return", "stop_at_accuracy"):
        if getattr(config, key, None) is not None and getattr(config, "eval_every", 1) == 0:
            # what a `payoff train` run of this kind evaluates at, in its own units
            every = run_defaults(type(config)).get("eval_every") or 10_000
            unit = "env steps" if key == "stop_at_return" else "optimizer steps"
            raise ConfigError(
                f"{key}={getattr(config, key)} is checked at each periodic evaluation, and "
                f"eval_every is 0 (evaluation is off unless asked for): give eval_every too "
                f"(e.g. eval_every={every:_}, in {unit}; {key} then stops at the first "
                f"evaluation that reaches it)"
            )


def _callbacks(algo: str, callback: Any) -> list[Any]:
    """learn(callback=...)'s functions as a list: one callable, or a list or tuple of them;
    anything else is refused, Stable-Baselines3's callback objects with a word on how
    payoff's differ."""
    if callback is None:
        return []
    given = list(callback) if isinstance(callback, list | tuple) else [callback]
    for fn in given:
        # SB3's objects (BaseCallback, EvalCallback, CallbackList) are driven through their
        # on_step and hooks of their own, callable or not: said, not called wrongly
        sb3 = any(hasattr(fn, name) for name in ("_on_step", "on_step"))
        if callable(fn) and not sb3:
            try:
                inspect.signature(fn).bind(None, None)
            except TypeError:
                raise ConfigError(
                    f"{algo}.learn(callback=...): {getattr(fn, '__name__', fn)!r} cannot be "
                    f"called with two arguments; a callback is fn(algorithm, metrics), called "
                    f"at every log with the metrics just logged"
                ) from None
            except ValueError:  # a builtin without a signature: called as it is
                pass
            continue
        raise ConfigError(
            f"{algo}.learn(callback=...) takes a function fn(algorithm, metrics) or a list of "
            f"them, got "
            + (
                f"a Stable-Baselines3 callback object ({type(fn).__name__}), which payoff "
                f"cannot drive: its callbacks are plain functions, called at every log "
                f"(log_every steps) with the algorithm and the metrics just logged (a dict "
                f"with 'step'); returning False stops training. E.g. `def stop(agent, "
                f"metrics): return metrics.get('train/return', 0) < 400`. Evaluation "
                f"(EvalCallback) is a config key: eval_every=10_000; saving "
                f"(CheckpointCallback) is learn(n) then save(path) in a loop, or a run's "
                f"checkpoint_every"
                if sb3
                else f"{type(fn).__name__} {fn!r}"[:200]
            )
        )
    return given


class Algorithm:
    """Base of payoff's algorithms: `Algo(env=..., **config).learn()`, `.save()`, `Algo.load()`."""

    name: ClassVar[str]  # the recipe name (`algo: ppo`): the module's name
    config_class: ClassVar[type]  # the class of `config`, read from its annotation
    total_key: ClassVar[str] = "steps"  # the config key of the training length
    # why `payoff train --resume RUN <total_key>=N` cannot train a run of this kind further
    # (None: it can)
    extend_refusal: ClassVar[str | None] = None
    loop_unit: ClassVar[str] = "step"  # what the progress bar counts
    eval_at_end: bool = False  # also evaluate after the last iteration (the curve's last point)
    eval_at_start: bool = False  # evaluate before the first iteration of a fresh run
    saved: ClassVar[tuple[str, ...]] = ()  # attributes a checkpoint holds (state_dict)
    config: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """An algorithm class says `config: PPOConfig`; its name and config class follow."""
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__module__.rsplit(".", 1)[-1]
        config_class = annotated_class(cls, "config")
        if config_class is not None and "config_class" not in cls.__dict__:
            cls.config_class = config_class

    def __init__(
        self,
        *args: Any,
        config: Any = None,
        run: Run | None = None,
        **kwargs: Any,
    ):
        env = self._env_argument(args, kwargs)
        if run is not None and not isinstance(run, Run):
            raise ConfigError(
                f"run= takes a payoff.track.run.Run, got {type(run).__name__} {run!r}: "
                f"Run.create(folder, name, {{'algo': '{type(self).__name__.lower()}'}}) makes "
                f"one (docs/tracking.md), or payoff.train.train(recipe, out=folder) writes the "
                f"run folder itself"
            )
        # monitors=[{kind: ...}, ...] or Monitor objects, as a recipe's `monitors:`
        monitors = kwargs.pop("monitors", None)
        data_given = config is None
        if config is None:
            data = dict(kwargs)
            if env is not None:
                data["env"] = env_config_of(env)
                vector = getattr(data["env"], "vector", None)
                if vector is not None and "num_envs" in fields_of(self.config_class):
                    data.setdefault("num_envs", vector.num_envs)
            config = from_dict(self.config_class, data)
        elif env is not None or kwargs:
            raise ConfigError("pass either config=... or env/keyword settings, not both")
        elif dataclasses.is_dataclass(config):  # made in Python (PPOConfig(...)): the
            coerce_shorthands(config)  # same shorthands (learning_rate=5e-4 a schedule),
            check_ranges(config)  # ranges and bounds as a recipe's
        if data_given:  # made in Python: a stop set there must meet an evaluation
            _check_stop_is_evaluated(config, kwargs)
        self.config = config
        # Whether the training length was chosen (a recipe, a saved config or the keyword);
        # when it was not, learn(n) plans n steps instead of the default length.
        self._length_was_set = not data_given or self.total_key in kwargs
        self.run = run
        self.history: list[dict[str, Any]] = []
        self.interrupted = False  # set by learn() when Ctrl-C stopped it early
        # learn()'s options for the loop while it runs (callbacks, progress_bar): TrainLoop
        self.loop_options: dict[str, Any] = {}
        self.state = LoopState()  # step, updates, evals, ...: the loop's counters (algos/loop.py)
        self._record: dict[str, Any] = {}  # metrics of the last iteration, until they are logged
        self.monitors: list[Monitor] = []  # reward-hacking / safety detectors fed by log()
        self.attached: list[Monitor] = []  # those the user attached (recipe's `monitors:`)
        self.logged_keys: set[str] = set()  # every metric key logged (say_unfed_monitors)
        self.alarms: list[Alarm] = []
        self.halted: Alarm | None = None  # set by on_alarm: halt; the loop stops
        # the latest samples that looked like hacks (paid but wrong, canary passes): evidence
        self.suspects: deque[dict[str, Any]] = deque(maxlen=64)
        self.responder = Responder(self)
        self.setup()
        if run is not None:
            self.record_config(run)
        self.monitors = self.default_monitors()
        if monitors is not None:
            self.attach_monitors(
                [m if isinstance(m, Monitor) else build_monitors([m])[0] for m in monitors]
            )

    @classmethod
    def _env_argument(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The env given to the constructor (None: the config's default), taken out of
        `kwargs`; SB3's policy name and a None from an env factory are refused, each with
        what to pass instead."""
        # the env: the one positional argument or env= (read so, instead of as a parameter,
        # so that SB3's PPO("MlpPolicy", env=env) meets the message below, not a TypeError)
        env: Any = args[0] if args else kwargs.pop("env", NO_ENV)
        extra = args[1:] + ((kwargs.pop("env"),) if args and "env" in kwargs else ())
        if extra or (isinstance(env, str) and env in _SB3_POLICIES):
            raise ConfigError(
                f"{cls.__name__} takes the env as its one positional argument and "
                f"everything else by keyword: {cls.__name__}(env, learning_rate=...). "
                f"There is no policy name to pass (Stable-Baselines3's 'MlpPolicy'): the "
                f"networks follow the env's spaces, sized by keys such as hidden=[64, 64]"
            )
        if env is None:  # given, but None: an env factory that returned nothing?
            try:
                default = getattr(getattr(cls.config_class(), "env", None), "id", None)
            except Exception:  # a config class that needs keys of its own
                default = None
            raise ConfigError(
                f"{cls.__name__}(env=None): no env was given (did the function that "
                f"makes it return None?); pass an env id, a gymnasium.Env or a function that "
                f"returns one"
                + (f", or leave env out to train on the default, {default}" if default else "")
            )
        if env is NO_ENV:
            env = None
        return env

    # ---- the loop's counters, under the names algorithms and users read ------------------
    step = _LoopCounter()
    updates = _LoopCounter()
    evals = _LoopCounter()
    solved_at = _LoopCounter()
    recent_returns = _LoopCounter()
    train_seconds = _LoopCounter()

    # ---- training ---------------------------------------------------------------------
    def learn(self, total: int | None = None, callback: Any = None, **sb3: Any) -> Self:
        """Train `total` more steps (env steps, episodes, optimizer steps: the unit of the
        config key named by `total_key`), or, with no argument, until that key's value (a
        resumed run finishes its planned length). Returns the algorithm.

        Like Stable-Baselines3's `learn(total_timesteps)`, each call adds training; unlike
        it, the counters go on (a second `learn(10_000)` ends at step 20,000). Schedules
        (learning rate, epsilon, clip) span the planned length: the config key when you set
        it, else the steps this call trains to, so `PPO("CartPole-v1").learn(10_000)`
        anneals over those 10,000 steps rather than over the default length.

        It trains and evaluates only when asked: eval_every and final_eval_episodes (LM
        trainers: final_eval) are off for an algorithm made in Python; `payoff train` runs
        turn them on (`run_defaults`).

        callback: fn(algorithm, metrics), or a list of them, called at every log (log_every
            steps, and the run's last record) with what was just logged (a dict with
            'step'); one that returns False (None and True go on) stops training after that
            step. The run then ends as a stop_at_return stop does: its final evaluation (if
            asked for) and summary. One that raises: the checkpoint is written, then the
            error goes on.
        progress_bar: False hides the progress bar. reset_num_timesteps=False (SB3's) is
            accepted: it is what payoff does.

        A stop signal (Ctrl-C, SIGTERM, SIGHUP) ends the current iteration, writes the
        checkpoint, then raises `LearnInterrupted` (a KeyboardInterrupt) saying the step
        reached: the algorithm holds that training, so learn(n) trains on from there.
        """
        total, options = self.learn_arguments(total, callback, sb3)
        self._warn_if_learn_cannot_train(total)
        target = self._learn_target(total)
        self.interrupted = False
        self.loop_options = options
        try:
            self.train_until(target)
        finally:
            self.loop_options = {}
        if self.interrupted:
            raise self._interruption(target)
        return self

    def _warn_if_learn_cannot_train(self, total: int | None) -> None:
        """Say why learn() will train nothing (a halt, a stop condition met) and pass on a
        note of an inexact restore."""
        if self.halted is not None:  # the loop would stop at once, without a word
            warnings.warn(
                f"{type(self).__name__} was halted by the {self.halted.kind} alarm at step "
                f"{self.halted.step} (on_alarm: halt), so learn() trains no further; set "
                f"agent.halted = None to train on past it",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.state.solved_at is not None and total is not None:
            set_stops = {
                key: value
                for key in ("stop_at_return", "stop_at_accuracy")
                if (value := getattr(self.config, key, None)) is not None
            }
            if not set_stops:  # the stop was turned off since (load(..., stop_at_return=None))
                self.state.solved_at = None
            else:  # the loop would stop at once, without a word
                shown = ", ".join(f"{k}={v}" for k, v in set_stops.items())
                first = next(iter(set_stops))
                warnings.warn(
                    f"{type(self).__name__} met its stop condition ({shown}) at step "
                    f"{self.state.solved_at}, so learn({total}) trains no further; set "
                    f"agent.config.{first} = None (or load the file with {first}=None) to "
                    f"train on past it",
                    RuntimeWarning,
                    stacklevel=3,
                )
        note, self._unexact_restore = getattr(self, "_unexact_restore", None), None
        if note:  # loaded from a file whose envs could not be restored exactly
            warnings.warn(note, RuntimeWarning, stacklevel=3)

    def _learn_target(self, total: Any) -> int:
        """The step learn(total) trains to, with the planned length (the key `total_key`)
        raised to it when it is past the plan."""
        key = self.total_key
        if total is not None:
            if isinstance(total, float) and total.is_integer():
                total = int(total)  # learn(1e5), as SB3 users write it
            if isinstance(total, numbers.Integral) and not isinstance(total, bool):
                total = int(total)  # learn(np.int64(50))
            if isinstance(total, bool) or not isinstance(total, int) or total < 0:
                raise ConfigError(
                    f"learn() takes a whole number of steps >= 0 (e.g. 10_000 or 1e4), "
                    f"got {total!r}"
                )
            target = self.state.step + total
            planned = getattr(self.config, key) if self._length_was_set else 0
            setattr(self.config, key, max(target, planned, 1))
            self._length_was_set = True
        else:
            target = getattr(self.config, key)
            if (
                self.state.step >= target > 0
                and self.halted is None
                and not self.interrupted
                and self.run is None  # a run's resume finishes what is left: nothing to say
            ):
                warnings.warn(  # SB3's learn() always trains more; this one trains to the key
                    f"learn() with no number trains until {key}={target:,}, which this "
                    f"{type(self).__name__} has reached (step {self.state.step:,}), so it "
                    f"trains no further: learn(n) trains n more",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return target

    def learn_arguments(
        self, total: Any, callback: Any, sb3: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """learn()'s arguments, Stable-Baselines3's names included, checked: (the step
        count, the loop's options: callbacks and progress_bar)."""
        algo = type(self).__name__
        total, progress_bar = _sb3_learn_arguments(algo, total, sb3)
        return total, {"callbacks": _callbacks(algo, callback), "progress_bar": progress_bar}

    def _interruption(self, target: int) -> LearnInterrupted:
        """What learn() raises once a stop signal ended its loop: where it stopped, and how
        to go on."""
        step, unit = self.state.step, self.total_key.removeprefix("total_")
        where = (
            f"during the final evaluation, at step {step:,} (its training was complete)"
            if step >= target
            else f"at step {step:,} of {target:,} ({unit})"
        )
        if self.run is not None:
            resume = (
                f"its checkpoint is in {self.run.path}: `payoff train --resume {self.run.path}` "
                f"finishes the run"
            )
        else:
            resume = (
                f"this {type(self).__name__} holds its training so far: learn(n) trains on "
                f"from there, save(path) keeps it"
            )
        return LearnInterrupted(
            f"{type(self).__name__}.learn() was stopped {where}; {resume}", step, resume
        )

    def first_logged(self, key: str) -> dict[str, Any] | None:
        """The first record that holds `key` (a run's starting evaluation): from the run's
        metrics.jsonl where there is a run, since a resumed process's history begins at its
        checkpoint; else this process's history."""
        records = self.run.records() if self.run is not None else []
        found = next((r for r in records if key in r), None)
        return found or next((r for r in self.history if key in r), None)

    # ---- to implement -----------------------------------------------------------------
    def setup(self) -> None:
        """Build envs, tables or networks from self.config."""

    def train_until(self, total: int) -> None:
        """Run the loop (payoff.algos.loop.TrainLoop) until the step counter reaches `total`,
        in the unit of total_key, on the intervals the config declares."""
        TrainLoop.from_config(
            self,
            total,
            desc=f"{self.name} {self.progress_label()}".rstrip(),
            unit=self.loop_unit,
            eval_at_end=self.eval_at_end,
            eval_at_start=self.eval_at_start,
            planned=getattr(self.config, self.total_key, None),
        ).run()

    def progress_label(self) -> str:
        """What the progress bar names after the algorithm: the env, or the task (your
        preference pairs' file where a trainer learns from them, not the task it would
        make pairs from)."""
        env, task = getattr(self.config, "env", None), getattr(self.config, "task", None)
        preferences = getattr(self.config, "preferences", None)
        if preferences is not None and getattr(preferences, "own", False):
            return Path(preferences.path).name if preferences.path else "your pairs"
        return str(env.id if env is not None else getattr(task, "name", ""))

    def log_training(self) -> None:
        """What the loop calls every log_every steps: by default, the metrics the last
        iteration kept in self._record."""
        self.log(self.step, **self._record)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the loop's counters and each attribute named
        in `saved` (modules, optimizers, buffers, generators, counters; payoff.core.state)."""
        return {
            "loop": self.state.state_dict(),
            **{n: state_of(getattr(self, n)) for n in self.saved},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state["loop"])
        device = getattr(self, "device", None)
        for name in self.saved:
            if name not in state and isinstance(getattr(self, name), list):
                continue  # a list kept since (what a log averages): older checkpoints lack it
            value = restore(getattr(self, name), state.get(name), name)
            if isinstance(value, list) and isinstance(device, torch.device):
                # tensors a log averages come back on the CPU; the run appends device ones
                value = [v.to(device) if isinstance(v, torch.Tensor) else v for v in value]
            setattr(self, name, value)
            if isinstance(value, torch.nn.Module):  # NaN weights would act in silence
                for param, tensor in value.named_parameters():  # (buffers may hold -inf masks)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        raise CheckpointError(
                            f"the checkpoint's {name}.{param} holds NaN or inf values: its "
                            f"weights are broken (a diverged run, or a damaged file); load an "
                            f"earlier checkpoint"
                        )

    def record_config(self, run: Run) -> None:
        """The run's config.yaml holds this agent's whole config: a run made in Python with
        Run.create(folder, name, {"algo": ...}) recorded only that dict, so its report
        showed another env and `payoff train RUN/config.yaml` trained another agent. Keys
        the run has besides (recipe, label, overrides) stay."""
        ours = {"algo": self.name, **to_dict(self.config)}
        recorded = dict(run.config)
        if any(recorded.get(key) != value for key, value in ours.items()):
            try:
                run.write_config({**recorded, **ours})
            except yaml.YAMLError:  # Python material YAML cannot hold: the run keeps its own
                pass

    def spaces(self) -> dict[str, str]:
        """repr of observation/action spaces, checked when a checkpoint meets an env (an
        agent's `observation_space` and `action_space`, where it has them)."""
        names = ("observation_space", "action_space")
        if not all(hasattr(self, name) for name in names):
            return {}
        return {name: repr(getattr(self, name)) for name in names}

    # ---- logging ----------------------------------------------------------------------
    def log(self, step: int, **metrics: Any) -> None:
        """Record metrics (history, metrics.jsonl, TensorBoard) and feed them to the monitors."""
        self.history.append({"step": step, **metrics})
        self.logged_keys.update(metrics)
        if self.run is not None:
            self.run.log(step, **metrics)
        refuse_diverged_loss(step, metrics)
        alarms = [alarm for monitor in self.monitors for alarm in monitor.update(step, metrics)]
        for alarm in alarms:
            samples = self.alarm_samples(alarm)
            if samples:
                alarm.evidence.setdefault("samples", samples)
            self.alarms.append(alarm)
            if self.run is not None:
                self.run.event(
                    alarm.step, alarm.kind, alarm.message, alarm.severity, **alarm.evidence
                )
        for alarm in alarms:
            if self.halted is None:
                self.responder.respond(alarm)

    def attach_monitors(
        self, monitors: list[Monitor], replay: list[dict[str, Any]] | None = None
    ) -> None:
        """Watch this trainer with its default monitors and `monitors`; `replay` feeds them
        the records logged before a resume."""
        watching = [*self.default_monitors(), *monitors]
        replay_records(watching, replay or [])
        self.monitors, self.attached = watching, list(monitors)
        for record in replay or []:
            self.logged_keys.update(record)

    def say_unfed_monitors(self) -> None:
        """At the end of training: name each attached monitor that read a metric this run
        never logged (on the console and as a warning event in the run)."""
        for line in unfed(self.attached, self.logged_keys):
            say(f"payoff: {line}")
            if self.run is not None:
                self.run.event(self.step, "monitor_unfed", line, "warning")

    # ---- integrity: the hooks monitors and on_alarm use (payoff.algos.response) -----------
    def default_monitors(self) -> list[Monitor]:
        """Monitors this algorithm always runs (the LM RL trainers' integrity checks)."""
        return []

    def alarm_samples(self, alarm: Alarm) -> list[dict[str, Any]]:
        """Evidence for an alarm: the latest of the samples the algorithm kept as suspects
        (e.g. completions paid but failing the verifier), newest first."""
        return alarm_samples(list(reversed(self.suspects)))

    def quarantine(self, alarm: Alarm) -> int:
        """Keep the samples `alarm` flagged out of the loss from now on; returns how many."""
        return 0

    def after_rollback(self) -> None:
        """Called after a rollback restored the learned state (e.g. resend sampler weights)."""

    def between_iterations(self) -> None:
        """Called by the loop before the first iteration and after each: a rollback snapshot
        when one is due."""
        self.responder.snapshot_due(self.step)

    def checkpoint(self, name: str = "latest") -> None:
        if self.run is not None:
            payload = self._payload_state()
            self.run.save_checkpoint(payload, algo=self.name, name=name)
            # resuming or evaluating the run here may import the code its config names
            remember_written(self.run.path, payload["config"])
            self.run.flush()

    def _payload_state(self) -> dict[str, Any]:
        return {"config": to_dict(self.config), "spaces": self.spaces(), "state": self.state_dict()}

    # ---- save / load / resume ---------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save the trained algorithm to one file (atomically): safetensors + JSON, no pickle.
        Any name works; `ppo.safetensors` says what it holds."""
        if Path(path).is_dir():
            raise ConfigError(
                f"save() writes one file, and {str(path)!r} is a folder: give a file name, "
                f"e.g. {str(Path(path) / (self.name + '.safetensors'))!r}"
            )
        payload = self._payload_state()
        saved = save_state(path, {"format": 2, "algo": self.name, "state": payload})
        remember_written(saved, payload["config"])  # loading it here may import what it names
        return saved

    @classmethod
    def load(
        cls,
        path: str | Path,
        env: Any = None,
        device: str | None = None,
        trust_code: bool = False,
        **settings: Any,
    ) -> Self:
        """Load from a file written by `save`, a checkpoint, or a run directory.

        env: optionally a different env id/config; its spaces must match the checkpoint's.
        settings: config keys to set on the saved config, as the constructor takes them: what
            a file cannot hold (`GRPO.load(path, task=rows, rewards=[my_reward])` for a run
            trained on Python rows and functions) or what to change (`eval_every=...`).
        device: where the networks go (auto, cpu, cuda, cuda:N, mps); None keeps the saved
            config's device, or the CPU (with a warning) when this machine lacks it. Files
            hold CPU tensors, so a model trained on a GPU loads on a CPU-only machine.
        trust_code: import the code the file's config names (an env entry point, a wrapper,
            a reward module) even though payoff did not write the file on this machine for
            you; without it such a file is refused (payoff.core.imports).
        """
        path = Path(path)
        if path.is_dir():
            path = Run.open(path).checkpoint_path("latest")
        try:
            payload, _ = load_checkpoint_file(path, cls.name)
        except OtherAlgorithmError as err:
            raise CheckpointError(
                f"{str(path)!r} holds a {err.found!r} agent, not {cls.name!r}: load it with "
                f"{_loader_of(err.found)}"
            ) from None
        algorithm = cls._from_payload(
            payload, env=env, source=path, device=device, trust_code=trust_code, settings=settings
        )
        # said when training goes on (learn), where it matters; predict and evaluate
        # do not depend on the episodes that were in progress
        algorithm._unexact_restore = algorithm.restore_note()
        return algorithm

    @classmethod
    def _from_payload(
        cls,
        payload: dict[str, Any],
        env: Any = None,
        run: Run | None = None,
        source: str | Path | None = None,
        device: str | None = None,
        trust_code: bool = False,
        settings: dict[str, Any] | None = None,
    ) -> Self:
        """Rebuild from what `_payload_state` saved; `source` (the file) is named in errors.
        `device` replaces the saved config's (see `load`). The config names no code that
        runs unless payoff wrote `source` here or `trust_code` (payoff.core.imports)."""
        where = f"checkpoint {str(source)!r}" if source is not None else "the checkpoint"
        for part in ("config", "state"):
            if not isinstance(payload.get(part), dict):
                raise CheckpointError(
                    f"{where} holds no {cls.name} {part}: it was not written by a payoff run "
                    f"or {cls.name}.save (its top-level keys: {sorted(map(str, payload))})"
                )
        config_data, yours = cls._config_to_load(payload, where, env, device, settings)
        try:
            config: Any = from_dict(cls.config_class, config_data)
        except ConfigError as err:
            raise CheckpointError(f"{where}: its config does not fit {cls.name}: {err}") from None
        trusted = trust_code or (source is not None and written_here(source, payload["config"]))
        untrusted = None if trusted else where
        with (
            names_from(untrusted, yours),
            _restoring(),
            weights_from(untrusted, count_values(payload["state"])),
        ):
            try:
                algorithm = cls(config=config, run=run)
            except ConfigError as err:
                if not _from_python_material(payload["config"]) or settings:
                    raise
                raise ConfigError(
                    f"{where}: {err}. It was trained on Python rows or functions, which a file "
                    f"cannot hold: pass them again, {cls.__name__}.load(path, task=rows, "
                    f"rewards=[fn]) or preferences=pairs"
                ) from None
        _check_spaces(where, payload.get("spaces", {}), algorithm.spaces(), config)
        try:
            with names_from(None if trusted else where, yours):
                algorithm.load_state_dict(payload["state"])
        except (KeyError, RuntimeError, ValueError, TypeError, AttributeError, IndexError) as err:
            # a hand-edited or foreign file: wrong keys, shapes or types inside the state
            raise CheckpointError(
                f"{where}: its state does not fit this {cls.name} model "
                f"({type(err).__name__}: {err})"
            ) from None
        return algorithm

    @classmethod
    def _config_to_load(
        cls,
        payload: dict[str, Any],
        where: str,
        env: Any,
        device: str | None,
        settings: dict[str, Any] | None,
    ) -> tuple[dict[str, Any], frozenset[str]]:
        """The saved config with what the caller gives on top (an env, config keys, a
        device; a device this machine lacks becomes the CPU, with a warning), and the code
        names the caller's own material brings (theirs to run)."""
        config_data = dict(payload["config"])
        yours: frozenset[str] = frozenset()  # code the caller's own env names
        if env is not None:
            config_data["env"] = env_config_of(env)
            yours = code_named_by(config_data["env"])
        if settings:  # the caller's own keys: checked as theirs, and the code they name is theirs
            valid = fields_of(cls.config_class)
            unknown = [key for key in settings if key not in valid]
            if unknown:
                raise ConfigError(
                    f"{cls.__name__}.load() got unknown config key(s) {unknown}."
                    f"{key_hint(unknown[0], valid)} It takes path, env, device, trust_code and "
                    f"{cls.__name__}'s config keys"
                )
            config_data.update(_onto_saved(cls.config_class, config_data, settings))
            yours = yours | _code_specs(settings)
        if device is not None:
            config_data["device"] = device
        elif not _device_here(config_data.get("device")):
            warnings.warn(
                f"{where} was trained on device {config_data['device']!r}, which this machine "
                f"does not have (torch sees: {', '.join(available_devices())}); loading it on "
                f"the CPU (pass device=... to choose)",
                RuntimeWarning,
                stacklevel=4,
            )
            config_data["device"] = "cpu"
        return config_data, yours

    @classmethod
    def from_run(cls, run: Run) -> Self:
        """Rebuild the algorithm of a run from its latest checkpoint, ready to continue. A
        key the checkpoint's config lacks (written before the key existed: LM trainers'
        final_eval) takes its run default, as the run was made with it on."""
        payload, elapsed = run.load_checkpoint(cls.name)
        if isinstance(payload.get("config"), dict):
            payload["config"] = {**run_defaults(cls.config_class), **payload["config"]}
        recorded = run.config
        edited = sorted(
            str(key)
            for key, value in payload.get("config", {}).items()
            if key in recorded and recorded[key] != value
        )
        if edited:
            warnings.warn(
                f"{str(run.path / 'config.yaml')!r} differs from the checkpoint's config in "
                f"{', '.join(edited)}: a run resumes with the config it trained with, the "
                f"checkpoint's; to change it, start a new run (init_from= takes these weights)",
                RuntimeWarning,
                stacklevel=2,
            )
        algorithm = cls._from_payload(payload, run=run, source=run.checkpoint_path())
        run.truncate_metrics(algorithm.progress_step(), elapsed)
        note = algorithm.restore_note()
        if note:
            run.event(algorithm.progress_step(), "resume_not_exact", note)
            warnings.warn(note, RuntimeWarning, stacklevel=2)
        return algorithm

    def restore_note(self) -> str | None:
        """Why the last load could not restore the envs exactly (they restarted their
        episodes: an env whose state is not plain data), or None."""
        return getattr(getattr(self, "runner", None), "restore_note", None)

    def progress_step(self) -> int:
        """The step counter metrics are logged against (used to trim metrics on resume)."""
        return self.step


def _check_spaces(where: str, saved: Any, current: dict[str, str], config: Any) -> None:
    """A CheckpointError where the file's spaces are not those of the env `config` names."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{where} has a malformed 'spaces' entry")
    for key in saved:
        if key in current and saved[key] != current[key]:
            raise CheckpointError(
                f"{where} was trained with {key} {saved[key]}, but env {config.env.id!r} has {key} {current[key]}"
            )


def _onto_saved(
    config_class: type, saved: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Any]:
    """`load`'s settings laid over the saved config: a sub-config given as a mapping
    (`task={"eval_size": 50}`) changes only the keys it names, and one given as Python
    material (`task=rows`, `preferences=pairs`) keeps the saved keys that are not about the
    material (task.eval_size) unless it changes the kind (a built-in task to your rows)."""
    hints = get_type_hints(config_class)
    laid = {}
    for key, value in settings.items():
        old = saved.get(key)
        from_value = getattr(hints.get(key), "from_value", None)
        made = from_value(value) if isinstance(old, dict) and from_value else None
        if isinstance(old, dict) and isinstance(value, dict):
            if value.get("name", old.get("name")) == old.get("name"):  # same kind: merge
                value = {**old, **value}
        elif dataclasses.is_dataclass(made) and getattr(made, "name", None) in (
            None,
            old.get("name"),  # type: ignore[union-attr]
        ):
            # the saved files give way to the material passed in their place
            kept = {k: v for k, v in old.items() if k not in _DATA_LOCATIONS}  # type: ignore[union-attr]
            base = from_dict(type(made), kept, prefix=f"{key}.")  # type: ignore[arg-type]
            value = dataclasses.replace(base, **_changed_fields(made))
        laid[key] = value
    return laid


# Sub-config keys naming where material lives (task data, preference pairs): Python
# material passed to load() replaces them.
_DATA_LOCATIONS = frozenset({"data", "test_data", "ood_data", "path", "test_path"})


def _changed_fields(config: Any) -> dict[str, Any]:
    """The fields of a config dataclass that differ from their defaults."""
    changed = {}
    for f in dataclasses.fields(config):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        value = getattr(config, f.name)
        if value is not default and not _equal(value, default):
            changed[f.name] = value
    return changed


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a Dataset against None, arrays: not a default
        return False


def _device_here(name: Any) -> bool:
    """Whether a saved config's device (or its absence) can be used on this machine; a
    malformed name counts as usable here: the config check names it."""
    try:
        check_device_name(name)
    except (ConfigError, TypeError):
        return True
    try:
        resolve_device(name)
    except ConfigError:
        return False
    return True


def config_from_run(run_config: dict[str, Any]) -> dict[str, Any]:
    """The algorithm's part of a run's config.yaml."""
    return {k: v for k, v in run_config.items() if k not in RUN_KEYS}


def same_layout(trained: Any, found: Any) -> bool:
    """Whether an env's space `found` fits an agent trained on `trained`: the same kind of
    space and the same shape, or number of choices; Box bounds and dtype may differ."""
    if type(trained) is not type(found):
        return False
    if isinstance(trained, gym.spaces.Box):
        return trained.shape == found.shape
    if isinstance(trained, gym.spaces.Dict):
        return trained.spaces.keys() == found.spaces.keys() and all(
            same_layout(space, found.spaces[k]) for k, space in trained.spaces.items()
        )
    if isinstance(trained, gym.spaces.Tuple):
        return len(trained) == len(found) and all(
            same_layout(a, b) for a, b in zip(trained, found, strict=True)
        )
    return trained == found  # Discrete (n, start), MultiDiscrete, MultiBinary, ...


def _loader_of(name: str) -> str:
    """How to load a file of algorithm `name`: `payoff.PPO.load(path)`, say."""
    from payoff.algos import available_algorithms, get_algorithm

    if name not in available_algorithms():
        return f"the payoff version that has the algorithm {name!r}"
    return f"payoff.{get_algorithm(name).__name__}.load(path)"


def refuse_diverged_loss(step: int, metrics: dict[str, Any]) -> None:
    """TrainingError when a training loss is NaN or inf: the update that produced it left
    the weights non-finite, and training on would go on in silence (a discrete policy's
    argmax of NaN is always action 0). The record is logged first, for the diagnosis."""
    for key, value in metrics.items():
        if (
            key.startswith("train/")
            and key.endswith("loss")
            and isinstance(value, float | int | np.floating)
            and not math.isfinite(float(value))
        ):
            raise TrainingError(
                f"{key} is {float(value)} at step {step}: the update diverged, so the weights "
                f"are no longer finite. Lower learning_rate, clip gradients (max_grad_norm) or "
                f"scale the rewards down (very large rewards overflow the value loss); a "
                f"checkpoint saved before step {step} holds the last finite weights"
            )
