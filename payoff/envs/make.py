"""Create environments from any Gymnasium id, with errors that suggest close matches."""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from payoff.core.config import PYTHON_ONLY
from payoff.core.errors import ConfigError, EnvError, suggest
from payoff.core.imports import import_module, import_object


@dataclass
class WrapperSpec:
    """One wrapper around the env, applied in list order (the first is innermost).

    name: a class of `gymnasium.wrappers` ('NormalizeObservation', 'TimeLimit',
        'FlattenObservation', 'RecordEpisodeStatistics', ...) or 'module:Class' for your own.
    kwargs: its arguments besides the env.
    """

    name: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value: object) -> WrapperSpec | None:
        """A bare name, `env.wrappers=[FlattenObservation]`, is a wrapper without arguments."""
        return cls(name=value) if isinstance(value, str) else None


@dataclass
class EnvConfig:
    """Which environment to train on.

    id: a registered Gymnasium id ('CartPole-v1', 'FrozenLake-v1', 'payoff/...'), or
        'module:EnvId-v0' (Gymnasium's convention: the module is imported first, so its
        `gymnasium.register` calls run). With entry_point set, only a label (by default
        the entry point itself).
    kwargs: passed to `gymnasium.make` or to the entry point (e.g. {map_name: 8x8}).
    entry_point: 'module:Class' (or a function) that builds the env from kwargs, without
        registering it. The module is imported from the Python path or the working folder.
    max_episode_steps: cut episodes at this length (Gymnasium's TimeLimit); null keeps the
        registration's limit (none for an entry point).
    wrappers: wrappers to apply, e.g. [{name: NormalizeObservation}].
    factory / vector: set from Python only (`PPO(env=my_env)` with a gym.Env instance, a
        vector env or a function returning an env); not written to config.yaml.
    python_env: true when the env was such a Python object that no id can rebuild (its
        `id` is then only its class or function's name): a saved agent needs it passed
        again, `Algo.load(path, env=...)`.
    """

    id: str = "CartPole-v1"
    kwargs: dict[str, Any] = field(default_factory=dict)
    entry_point: str = ""
    max_episode_steps: int | None = None
    wrappers: list[WrapperSpec] = field(default_factory=list)
    factory: Callable[..., gym.Env] | None = field(
        default=None, repr=False, compare=False, metadata=PYTHON_ONLY
    )
    vector: gym.vector.VectorEnv | None = field(
        default=None, repr=False, compare=False, metadata=PYTHON_ONLY
    )
    python_env: bool = False

    @classmethod
    def from_value(cls, value: object) -> EnvConfig | None:
        """A bare id, `env: CartPole-v1` in a recipe, as Python's `PPO("CartPole-v1")`."""
        return cls(id=value) if isinstance(value, str) else None

    def validate(self) -> None:
        if self.python_env and self.factory is None and self.vector is None:
            raise EnvError(
                f"this agent was trained on a Python env ({self.id}: an instance or function "
                f"given as env=), which a saved file cannot rebuild; pass it again: "
                f"Algo.load(path, env=...) with that env, or a function that returns one"
            )
        if self.entry_point and self.id == "CartPole-v1":  # the default id: label it by the class
            self.id = self.entry_point
        if self.max_episode_steps is not None and self.max_episode_steps <= 0:
            raise ConfigError(
                f"config key 'env.max_episode_steps' must be > 0, or null to keep the "
                f"registration's limit; got {self.max_episode_steps}"
            )

    @property
    def custom(self) -> bool:
        """Built by the user's code (factory or entry point), not by `gymnasium.make`."""
        return self.factory is not None or bool(self.entry_point)


def code_named_by(env: EnvConfig | dict[str, Any]) -> frozenset[str]:
    """The 'module:name' specs an env config imports: its entry point, a 'module:EnvId' id,
    and wrappers given as 'module:Class'."""

    def get(owner: Any, key: str) -> Any:
        return owner.get(key) if isinstance(owner, dict) else getattr(owner, key, None)

    names = {str(get(env, "entry_point") or ""), str(get(env, "id") or "")}
    names |= {str(get(wrapper, "name") or "") for wrapper in get(env, "wrappers") or []}
    return frozenset(name for name in names if ":" in name)


def known_env_ids() -> list[str]:
    """Every registered id; payoff's own are among them (`import payoff` registers them)."""
    return sorted(gym.registry.keys())


def check_env_id(env_id: str) -> None:
    """Raise EnvError naming close matches when `env_id` is not registered. An id
    'module:EnvId' imports the module first (its import registers the env)."""
    if ":" in env_id:
        module_name, _, bare = env_id.partition(":")
        import_module(module_name, "env.id", env_id, EnvError)
        if bare not in gym.registry:
            hint = suggest(bare, list(gym.registry.keys()))
            raise EnvError(
                f"env.id {env_id!r}: importing {module_name!r} did not register {bare!r}.{hint}"
            )
        return
    if env_id not in gym.registry:
        ids = known_env_ids()
        plain = [i for i in ids if "/" not in i]
        hint = suggest(env_id, ids) or f" Known ids include: {', '.join(plain[:12])}, ..."
        raise EnvError(
            f"unknown environment id {env_id!r}.{hint} Your own env: env.id=module:EnvId-v0 "
            f"(the module registers it) or env.entry_point=module:Class"
        )


def check_env(config: EnvConfig) -> None:
    """Fail early, with one clear error, on an env the config cannot build."""
    if config.factory is not None:
        return
    if config.entry_point:
        import_object(config.entry_point, "env.entry_point", EnvError)
    else:
        check_env_id(config.id)
    for wrapper in config.wrappers:
        wrapper_class(wrapper.name)
        if wrapper.name == "NormalizeReward":
            warnings.warn(
                "wrapper NormalizeReward also scales the rewards that evaluations and "
                "train/return add up, so they are no longer in the env's units; PPO, A2C and "
                "REINFORCE scale rewards for learning only with normalize_reward=true",
                UserWarning,
                stacklevel=2,
            )


def wrapper_class(name: str) -> Any:
    """A `gymnasium.wrappers` class by name, or 'module:Class'."""
    if ":" in name:
        return import_object(name, "env.wrappers name", EnvError)
    import gymnasium.wrappers as wrappers

    if not name or not hasattr(wrappers, name):
        valid = [n for n in getattr(wrappers, "__all__", dir(wrappers)) if n[:1].isupper()]
        raise EnvError(
            f"unknown wrapper {name!r}.{suggest(name, valid)} Use a gymnasium.wrappers class "
            f"({', '.join(valid[:8])}, ...) or 'module:Class'"
        )
    return getattr(wrappers, name)


def make_env(env: EnvConfig | str, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """Build the env a config names (gymnasium.make, an entry point or a factory), wrapped
    as it says, with one clear error for a bad id or bad arguments."""
    config = EnvConfig(id=env) if isinstance(env, str) else env
    options = {**config.kwargs, **kwargs}
    if render_mode is not None:
        options["render_mode"] = render_mode
    try:
        if config.factory is not None:
            made = _call_factory(config.factory, render_mode)
        elif config.entry_point:
            made = import_object(config.entry_point, "env.entry_point", EnvError)(**options)
            if not isinstance(made, gym.Env):
                raise EnvError(
                    f"env.entry_point {config.entry_point!r} returned {type(made).__name__}, "
                    f"not a gymnasium.Env"
                )
        else:
            check_env_id(config.id)
            # gymnasium.make's own max_episode_steps replaces the registered limit (a
            # TimeLimit around it could only cut episodes shorter than that limit)
            limit = (
                {}
                if config.max_episode_steps is None
                else {"max_episode_steps": config.max_episode_steps}
            )
            made = gym.make(config.id, disable_env_checker=True, **limit, **options)
    except TypeError as err:
        hint = ""
        if render_mode is not None and "render_mode" in str(err):
            hint = (
                ". payoff passes render_mode to draw episodes (GIFs, `payoff play`): give the "
                "env's __init__ a render_mode=None argument and return RGB frames from render() "
                "when it is 'rgb_array'"
            )
        raise EnvError(
            f"environment {config.id!r} rejected its arguments {options}: {err}{hint}"
        ) from None
    except gym.error.Error as err:
        raise EnvError(f"cannot create environment {config.id!r}: {err}") from None
    except (ValueError, KeyError, AssertionError) as err:  # its own check of env.kwargs
        if not options and not isinstance(err, ValueError):
            raise  # no arguments to blame: the env's own failure, with its traceback
        kind = "" if isinstance(err, ValueError) else f"{type(err).__name__}: "
        raise EnvError(
            f"environment {config.id!r} rejected its arguments {options}: {kind}{err}"
        ) from None
    for space in ("observation_space", "action_space"):
        if not isinstance(getattr(made, space, None), gym.spaces.Space):
            raise EnvError(
                f"environment {config.id!r} has no {space} (got "
                f"{type(getattr(made, space, None)).__name__}): a gymnasium.Env sets "
                f"self.observation_space and self.action_space to gymnasium.spaces in its "
                f"__init__ (e.g. spaces.Box(-1, 1, (4,)), spaces.Discrete(2))"
            )
    if config.max_episode_steps is not None and config.custom:  # gymnasium.make's is set
        made = gym.wrappers.TimeLimit(made, config.max_episode_steps)
    for wrapper in config.wrappers:
        try:
            made = wrapper_class(wrapper.name)(made, **wrapper.kwargs)
        except (TypeError, ValueError, KeyError, AssertionError) as err:
            raise EnvError(
                f"wrapper {wrapper.name!r} rejected {wrapper.kwargs}: {type(err).__name__}: {err}"
            ) from None
    return made


def _call_factory(factory: Callable[..., gym.Env], render_mode: str | None) -> gym.Env:
    """Call a user's env factory, passing render_mode where it takes one."""
    if render_mode is not None:
        try:
            parameters = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]
        if "render_mode" in parameters:
            return factory(render_mode=render_mode)
    made = factory()
    if not isinstance(made, gym.Env):
        raise EnvError(f"the env factory returned {type(made).__name__}, not a gymnasium.Env")
    return made


def env_config_of(env: Any) -> EnvConfig | dict[str, Any]:
    """What `Algo(env=...)` accepts, as config: an id string, a mapping of EnvConfig keys, an
    EnvConfig, a gymnasium.Env instance, a vector env, or a function that returns an env.

    An instance is used as it is for the first env the algorithm makes; further copies
    (more num_envs, evaluation episodes) are deep copies of it, taken before training.
    """
    if isinstance(env, str):
        return {"id": env}
    if isinstance(env, EnvConfig | dict):
        return env
    if isinstance(env, gym.vector.VectorEnv):
        _refuse_vector_wrappers(env)
        if (registered := _registered_config(env)) is not None:
            return registered
        makers = getattr(env, "env_fns", None)
        # (gymnasium 1.3's make_vec keeps a spent generator)
        if not isinstance(makers, list | tuple) or not makers:
            raise EnvError(
                f"a {type(env).__name__} without env_fns cannot make evaluation envs; pass a "
                f"function that returns one env (payoff vectorizes it), a SyncVectorEnv, or "
                f"gymnasium.make_vec(id, ...) of a registered id without wrappers="
            )
        label = _label(makers[0])
        return EnvConfig(
            id=label, factory=makers[0], vector=env, python_env=label not in gym.registry
        )
    if isinstance(env, gym.Env):
        return _instance_config(env)
    if callable(env):
        return EnvConfig(id=_label(env), factory=env, python_env=True)
    raise EnvError(
        f"env must be an id, a gymnasium.Env, a vector env or a function returning an env, "
        f"got {type(env).__name__}"
    )


# Vector wrappers that change nothing an agent sees (episode statistics, the info layout).
_HARMLESS_VECTOR_WRAPPERS = ("RecordEpisodeStatistics", "DictInfoToList")


def _refuse_vector_wrappers(env: gym.vector.VectorEnv) -> None:
    """EnvError for a vector env inside gymnasium's vector wrappers that transform what the
    agent sees (observations, actions, rewards): payoff makes single envs for evaluation,
    GIFs and saved agents from the id or env_fns inside, without those wrappers, so the
    agent would be scored on observations it never trained on."""
    layers, current = [], env
    while isinstance(current, gym.vector.VectorWrapper):
        layers.append(type(current).__name__)
        current = current.env
    transforming = [name for name in layers if name not in _HARMLESS_VECTOR_WRAPPERS]
    if transforming:
        raise EnvError(
            f"the vector env is wrapped by {', '.join(transforming)} (gymnasium.wrappers.vector), "
            f"which payoff cannot rebuild for single envs (evaluation, GIFs, a saved agent): "
            f"they would see unwrapped observations. Wrap each env instead: "
            f"gymnasium.make_vec(id, n, wrappers=[...]) with the single-env wrappers "
            f"(gymnasium.wrappers), or pass a function that returns one wrapped env"
        )


# make_vec's own arguments in a vector env's spec.kwargs, not the env's
_VECTOR_KWARGS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")


def _registered_config(env: gym.vector.VectorEnv) -> EnvConfig | None:
    """A vector env that `gymnasium.make_vec` made of a registered id (CartPole's own vector
    env, which keeps no env_fns, or a sync/async one) as its id and env arguments, so single
    envs (evaluation, GIFs, a saved agent) come from `gymnasium.make`. None without such a
    spec, or with make_vec's `wrappers` (then the vector env's env_fns make them)."""
    spec = getattr(env, "spec", None)
    if spec is None or not getattr(spec, "id", None) or spec.id not in gym.registry:
        return None
    if (spec.kwargs or {}).get("wrappers"):  # make_vec's wrappers: only its env_fns hold them
        return None
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VECTOR_KWARGS}
    limit = kwargs.pop("max_episode_steps", None)
    if limit == gym.spec(spec.id).max_episode_steps:
        limit = None  # the registration's own
    return EnvConfig(id=spec.id, kwargs=kwargs, max_episode_steps=limit, vector=env)


def _instance_config(env: gym.Env) -> EnvConfig:
    """An env instance as config: used as it is (and deep-copied) while the agent lives; for
    a saved agent, its id with the arguments `gymnasium.make` was given (FrozenLake's
    map_name, a max_episode_steps) where the id can rebuild it, else marked `python_env` (a
    file cannot rebuild it: loading asks for the env again). Wrappers added around a made
    env (its spec's additional_wrappers) are not rebuilt from an id: that env is marked too."""
    label = _label(env)
    spec = getattr(env, "spec", None)
    factory = _instance_factory(env)
    if spec is None or label not in gym.registry or getattr(spec, "additional_wrappers", None):
        return EnvConfig(id=label, factory=factory, python_env=True)
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k != "render_mode"}
    if not _plain(kwargs):  # arrays, objects: not for config.yaml
        return EnvConfig(id=label, factory=factory, python_env=True)
    limit = spec.max_episode_steps
    if limit == gym.spec(label).max_episode_steps:
        limit = None  # the registration's own
    return EnvConfig(id=label, kwargs=kwargs, max_episode_steps=limit, factory=factory)


def _plain(value: Any) -> bool:
    """Whether `value` is made of what config.yaml holds: strings, numbers, lists, mappings."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | bool | int | float)


def _label(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    if isinstance(env, gym.Env):  # a wrapped instance is named by the env inside
        target: Any = type(env.unwrapped)
    else:
        target = env if callable(env) else type(env)
    return f"{target.__module__}:{target.__qualname__}"


def _instance_factory(env: gym.Env) -> Callable[[], gym.Env]:
    try:
        template = copy.deepcopy(env)
    except Exception as err:
        template, reason = None, f"{type(err).__name__}: {err}"
    handed = False

    def make() -> gym.Env:
        nonlocal handed
        if not handed:
            handed = True
            return env
        if template is None:
            raise EnvError(
                f"this {type(env).__name__} instance cannot be copied ({reason}), and the "
                f"algorithm needs more than one env (num_envs > 1 or evaluation); pass a function "
                f"that returns a new env instead, e.g. env=lambda: {type(env).__name__}(...)"
            )
        return copy.deepcopy(template)

    return make


def is_success(env_id: str, info: dict[str, Any], final_reward: float) -> bool | None:
    """Whether a finished episode succeeded, where the env defines success; None otherwise."""
    for key in ("is_success", "success"):
        if key in info:
            return bool(info[key])
    if env_id.startswith("FrozenLake"):
        return final_reward > 0
    return None
