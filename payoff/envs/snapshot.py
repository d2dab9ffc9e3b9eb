"""A Gymnasium env's state as plain data, for exact resume without pickling the env.

`snapshot_env(env)` walks the wrapper chain (TimeLimit, OrderEnforcing, ..., the unwrapped
env) and keeps each layer's attributes that are data: numbers, strings, arrays, containers
of those, NumPy random generators (as their bit-generator state), deques, the RNG of a space,
and small plain objects made of the same (a running mean/std). Configuration (spaces, the
spec, constructor arguments, callables) is left out: a fresh env made from the same config
already has it. A layer holding anything else (a Box2D world, a MuJoCo simulation, a pygame
window) cannot be saved this way: `EnvStateError` says which attribute, and the caller
restarts episodes instead.

`restore_env(env, snapshot)` writes the saved values onto a freshly made env of the same
wrapper chain. It only overwrites attributes the fresh env already has and only with data,
so a crafted snapshot can at worst give the env odd numbers, never run code.
"""

from __future__ import annotations

import collections
import functools
import types
from typing import Any

import gymnasium as gym
import numpy as np
import torch

# Layer attributes that are configuration, rebuilt by making the env again.
CONFIG_ATTRIBUTES = frozenset(
    {"env", "spec", "_cached_spec", "_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs"}
)
CONFIG_TYPES = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
    type,
    types.ModuleType,
    gym.envs.registration.EnvSpec,
)
MAX_OBJECT_DEPTH = 3  # plain objects inside an env (a running mean/std) are followed this deep
BIT_GENERATORS = {
    cls.__name__: cls
    for cls in (
        np.random.PCG64,
        np.random.PCG64DXSM,
        np.random.MT19937,
        np.random.Philox,
        np.random.SFC64,
    )
}


class EnvStateError(Exception):
    """The env's state cannot be captured or restored as data (the message says why)."""


def snapshot_env(env: gym.Env) -> list[dict[str, Any]]:
    """One entry per layer, outermost first: {"type": class name, "attrs": {...}}."""
    layers = []
    for layer in _chain(env):
        layers.append({"type": _type_name(layer), "attrs": _capture_attrs(layer, 0)})
    return layers


def restore_env(env: gym.Env, snapshot: Any) -> None:
    """Put a `snapshot_env` result back into a freshly made env with the same wrappers."""
    chain = _chain(env)
    if not isinstance(snapshot, list) or len(snapshot) != len(chain):
        raise EnvStateError("the saved env has a different wrapper chain")
    for layer, saved in zip(chain, snapshot, strict=True):
        if not isinstance(saved, dict) or saved.get("type") != _type_name(layer):
            raise EnvStateError(
                f"the saved env layer {saved.get('type') if isinstance(saved, dict) else saved!r} "
                f"is not this env's {_type_name(layer)}"
            )
        _restore_attrs(layer, saved.get("attrs"), _type_name(layer), 0)


# ---- capture ------------------------------------------------------------------------------
def _chain(env: gym.Env) -> list[Any]:
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _type_name(value: Any) -> str:
    kind = type(value)
    try:
        return f"{kind.__module__}.{kind.__qualname__}"
    except AttributeError:  # some extension types (Box2D's SWIG fixture defs) lack them
        raise EnvStateError(f"an attribute of type {kind.__name__!r} cannot be saved") from None


def _capture_attrs(obj: Any, depth: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if name in CONFIG_ATTRIBUTES:
            continue
        entry = _capture(value, depth, f"{type(obj).__qualname__}.{name}")
        if entry is not None:
            attrs[name] = entry
    return attrs


def _capture(value: Any, depth: int, where: str) -> dict[str, Any] | None:
    """How to save one attribute; None for configuration; EnvStateError for the rest."""
    if _is_data(value):
        return {"value": _copy(value)}
    if isinstance(value, np.random.Generator):
        return {"generator": value.bit_generator.state}
    if isinstance(value, np.random.RandomState):
        return {"random_state": value.get_state(legacy=True)}
    if isinstance(value, gym.spaces.Space):
        rng = value._np_random  # sampled from only if someone calls space.sample()
        return {"space_rng": None if rng is None else rng.bit_generator.state}
    if isinstance(value, collections.deque) and all(_is_data(v) for v in value):
        return {"deque": [_copy(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, CONFIG_TYPES):
        return None  # configuration: functions, classes, the registry entry
    if isinstance(value, gym.Env):
        raise EnvStateError(f"{where} holds a second env")
    if depth < MAX_OBJECT_DEPTH and hasattr(value, "__dict__"):
        try:
            return {"object": _type_name(value), "attrs": _capture_attrs(value, depth + 1)}
        except EnvStateError:
            if depth:
                raise
    if depth == 0:  # name the env's own attribute, not something deep inside it
        raise EnvStateError(f"{where} is a {_type_name(value)}, which is not plain data")
    raise EnvStateError(f"{where} is a {_type_name(value)}, which is not data")


def _is_data(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str | bytes | np.generic):
        return not isinstance(value, np.generic) or value.dtype.kind in "biufcUS"
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biufcUS"
    if isinstance(value, torch.Tensor):
        return value.layout == torch.strided
    if isinstance(value, list | tuple):
        return type(value) in (list, tuple) and all(_is_data(v) for v in value)
    if isinstance(value, dict):
        return all(
            _is_data(k) and not isinstance(k, list | np.ndarray | torch.Tensor) and _is_data(v)
            for k, v in value.items()
        )
    return False


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


# ---- restore ------------------------------------------------------------------------------
def _restore_attrs(obj: Any, attrs: Any, where: str, depth: int) -> None:
    if not isinstance(attrs, dict) or depth > MAX_OBJECT_DEPTH:
        raise EnvStateError(f"the saved state of {where} is malformed")
    current = vars(obj)
    for name, entry in attrs.items():
        if not isinstance(name, str) or name not in current or name.startswith("__"):
            raise EnvStateError(f"this {where} has no attribute {str(name)[:60]!r} to restore")
        if not isinstance(entry, dict) or len(entry) not in (1, 2):
            raise EnvStateError(f"the saved {where}.{name} is malformed")
        _restore_one(obj, name, current[name], entry, f"{where}.{name}", depth)


def _restore_one(
    obj: Any, name: str, current: Any, entry: dict[str, Any], where: str, depth: int
) -> None:
    try:
        if "value" in entry:
            if not _is_data(entry["value"]):
                raise EnvStateError(f"the saved {where} is not data")
            setattr(obj, name, _copy(entry["value"]))
        elif "generator" in entry:
            setattr(obj, name, _generator(current, entry["generator"]))
        elif "random_state" in entry:
            state = (
                current if isinstance(current, np.random.RandomState) else np.random.RandomState()
            )
            state.set_state(entry["random_state"])
            setattr(obj, name, state)
        elif "space_rng" in entry:
            if entry["space_rng"] is not None and isinstance(current, gym.spaces.Space):
                current._np_random = _generator(current._np_random, entry["space_rng"])
        elif "deque" in entry:
            items, maxlen = entry["deque"], entry.get("maxlen")
            if not isinstance(items, list) or not _is_data(items):
                raise EnvStateError(f"the saved {where} is not a list of data")
            if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
                raise EnvStateError(f"the saved {where} has a bad maxlen")
            setattr(obj, name, collections.deque(_copy(items), maxlen=maxlen))
        elif "object" in entry:
            if entry["object"] != _type_name(current):
                raise EnvStateError(
                    f"{where} is a {_type_name(current)}, saved as {entry['object']!r}"
                )
            _restore_attrs(current, entry.get("attrs"), where, depth + 1)
        else:
            raise EnvStateError(f"the saved {where} has an unknown kind {sorted(entry)}")
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise EnvStateError(f"cannot restore {where}: {type(err).__name__}: {err}") from None


def _generator(current: Any, state: Any) -> np.random.Generator:
    """A Generator continuing `state` (a bit generator's state dict), reusing `current`."""
    if not isinstance(state, dict) or state.get("bit_generator") not in BIT_GENERATORS:
        raise EnvStateError("a saved random generator of an unknown kind")
    kind = BIT_GENERATORS[state["bit_generator"]]
    if isinstance(current, np.random.Generator) and type(current.bit_generator) is kind:
        current.bit_generator.state = state  # type: ignore[assignment]  # checked by numpy
        return current
    bit_generator = kind()
    bit_generator.state = state  # type: ignore[assignment]
    return np.random.Generator(bit_generator)
