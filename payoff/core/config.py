"""Configs are plain dataclasses, loaded from YAML recipes and `key=value` overrides.

Every key is checked: an unknown key names the valid ones, a value of the wrong type names
the key, the value and the type it should have.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from payoff.core.errors import ConfigError, suggest

T = TypeVar("T")


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with a clear error for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping of keys, got {type(data).__name__}"
        )
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b=3' -> (['a', 'b'], 3). The value is read as YAML, so `true`, `1e-3`, `[1, 2]` work."""
    if "=" not in text:
        raise ConfigError(
            f"override {text!r} must look like key=value (dotted keys for nesting, e.g. env.id=CartPole-v1)"
        )
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):  # YAML 1.1 reads '1e-3' as a string; users mean a number
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            pass
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `key=value` override set (dotted keys create nesting)."""
    import copy

    result = copy.deepcopy(data)
    for text in overrides:
        keys, value = parse_override(text)
        node = result
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[keys[-1]] = value
    return result


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if origin is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and gently coerce) `value` to type `tp`, or raise a ConfigError naming `key`."""
    origin = get_origin(tp)
    bad = ConfigError(
        f"config key {key!r} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})"
    )
    if tp is Any:
        return value
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(
                f"config key {key!r} must be one of {', '.join(repr(a) for a in get_args(tp))}, got {value!r}."
                + suggest(str(value), [str(a) for a in get_args(tp)])
            )
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise bad
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(
                f"config key {key!r} must be a mapping of {tp.__name__} fields, got {value!r}"
            )
        return from_dict(tp, value, prefix=key + ".")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise bad
        (item_type, *_) = get_args(tp) or (Any,)
        items = [_coerce(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise bad
    if tp is float:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise bad
    if isinstance(tp, type) and not isinstance(value, tp):
        raise bad
    return value


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, checking every key and value."""
    if not isinstance(data, dict):
        raise ConfigError(f"config {prefix.rstrip('.') or 'root'} must be a mapping, got {data!r}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(
                f"unknown config key {prefix + str(key)!r}.{suggest(str(key), fields)} "
                f"Valid keys{' under ' + prefix.rstrip('.') if prefix else ''}: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], prefix + key)
    try:
        obj = cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"config {prefix.rstrip('.') or cls.__name__}: {err}") from None
    check = getattr(obj, "validate", None)
    if callable(check):
        check()
    return obj


def to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as plain nested dicts/lists, ready for YAML."""
    return typing.cast(dict[str, Any], dataclasses.asdict(config))


def save_yaml(data: dict[str, Any], path: str | Path) -> None:
    """Write a mapping as YAML atomically."""
    from payoff.core.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
