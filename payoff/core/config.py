"""Configs are plain dataclasses, loaded from YAML recipes and `key=value` overrides.

Every key is checked: an unknown key names the valid ones, a value of the wrong type names
the key, the value and the type it should have, and a number outside its range names the key,
the value and the range. A numeric key declares its range once, beside it, in its field's
metadata: `field(default=0.99, metadata=in_range(0, 1))`; a config class that redeclares a
key declares its range again. Core names no key of the layers above it.

Every count has an upper bound and every float is finite, whatever its range says: an integer
key without an upper bound of its own (in_range's `most`) is held to MAX_COUNT, a float key
refuses inf and NaN, and keys whose product is allocated at once (in_range's `product`:
num_steps x num_envs, prompts x group_size) are held to a bound on the product. A config file
from elsewhere asking for `eval_episodes: 1e30` is refused before anything is allocated.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from payoff.core.errors import ConfigError, suggest
from payoff.core.io import (  # noqa: F401 (MAX_YAML_VALUES, safe_yaml: imported from here too)
    MAX_YAML_CHARS,
    MAX_YAML_VALUES,
    TooLarge,
    YAMLTooLarge,
    read_text_capped,
    safe_yaml,
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Range:
    """The valid values of a numeric config key: `low` and/or `high`, each bound open or closed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (
            self.high is not None and (value >= self.high if self.high_open else value > self.high)
        )

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_bound(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_bound(self.high)}"
        return (
            f"in {'(' if self.low_open else '['}{_bound(self.low)}, {_bound(self.high)}"
            f"{')' if self.high_open else ']'}"
        )


def _bound(value: float | None) -> str:
    """A range's bound as a reader writes it: 4,294,967,295 rather than 4.29497e+09."""
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return f"{value:g}"


# Field metadata of a key that holds a Python object (an env factory): never read from YAML
# or key=value, never written to config.yaml.
PYTHON_ONLY = {"python_only": True}


def absolute_path(value: Any) -> Any:
    """A relative path that exists from the working folder, made absolute; any other value as
    given (an absolute path, a name that is no file here: a shipped expert, a Hub id).

    Config keys that name files pass their value through it as they are set (a dataclass's
    __post_init__), so that config.yaml and checkpoints hold paths that still lead to the
    files from another folder: `payoff eval RUN` run elsewhere rebuilds the run from them."""
    if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
        return value
    path = Path(value)
    return str(path.resolve()) if path.exists() else value


# Upper bounds on counts, generous for real use: every integer key is held to one, whatever
# its range says. A count without a bound of its own (steps, iterations, intervals, ...) is
# held to MAX_COUNT: a billion steps is months of training, and `1e30` in a file is refused
# here rather than allocated, looped over or overflowed later. The others are for fields to
# declare (in_range(..., most=MAX_BATCH)) and say what they bound.
MAX_COUNT = 10**9
# envs or episodes held at once: a batched evaluation makes one env per episode
MAX_ENV_COPIES = 100_000
MAX_WIDTH = 65_536  # a layer's width: a 65,536 x 65,536 layer is already 17 GB of float32
MAX_DEPTH = 1_024  # layers, heads, blocks, ensemble members
MAX_TOKENS = 1_000_000  # tokens of one sequence: the longest contexts of today's models
MAX_BATCH = 10_000_000  # examples in one batch
MAX_REPLAY = 100_000_000  # transitions in one replay buffer
MAX_PROMPTS = 100_000  # prompts (tasks) in one rollout batch
MAX_GROUP = 1_024  # completions (episodes) of one prompt
MAX_SIMULATIONS = 1_000_000  # tree-search simulations per move
# torch threads: a file asking for 100,000 crashes the process inside OpenMP
MAX_THREADS = 1_024
# seeds: what NumPy's legacy seeding, Gymnasium's spaces and most libraries take (torch
# overflows past 2**63, and payoff adds offsets to the run's seed for its other streams)
MAX_SEED = 2**32 - 1


#: A field's metadata for a key another key replaced: still read from old configs and runs
#: (the config class maps it onto its replacement and sets it back to None), never written.
REPLACED: dict[str, Any] = {"replaced": True}


def in_range(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    most: int | None = None,
    product: tuple[str, int, str] | None = None,
) -> dict[str, Any]:
    """Field metadata declaring a numeric key's valid values, beside the key:
    `field(default=0.5, metadata=in_range(0, 1))`.

    most: the upper bound of a count whose range has none (without it, MAX_COUNT); a message
    names it only for a value above it: `in_range(0, low_open=True, most=MAX_ENV_COPIES)`
    reads "must be > 0" for 0 and "must be in [1, 100,000]" for 1e30.
    product: (another key, the most, what it counts) where this key times the other is
    allocated at once (num_steps x num_envs); checked in a config that has both keys.
    """
    metadata: dict[str, Any] = {}
    if low is not None or high is not None:
        metadata["range"] = Range(low, high, low_open, high_open)
    if most is not None:
        metadata["most"] = most
    if product is not None:
        metadata["product"] = product
    return metadata


def declared(field: dataclasses.Field[Any], what: str) -> Any:
    """What `field` declares about its values ('range', 'most' or 'product', as in_range
    writes them in its metadata), or None."""
    return field.metadata.get(what)


def annotated_class(cls: type, attribute: str) -> type | None:
    """The class that `cls`'s own annotation of `attribute` names (`config: PPOConfig` ->
    PPOConfig), looked up in its module when annotations are strings; None without one."""
    annotation = cls.__dict__.get("__annotations__", {}).get(attribute)
    if isinstance(annotation, str):
        annotation = vars(sys.modules[cls.__module__]).get(annotation)
    return annotation if isinstance(annotation, type) else None


def fields_of(cls: type) -> list[str]:
    """The key names of a config dataclass."""
    return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def field_range(field: dataclasses.Field[Any]) -> Range | None:
    """The range a config field must lie in (`declared`), None for any value."""
    return typing.cast("Range | None", declared(field, "range"))


def count_range(field: dataclasses.Field[Any]) -> Range:
    """The range an integer value of `field` must lie in: `field_range` with an upper bound
    always (its declared `most`, else MAX_COUNT) and, where it declares no lower bound,
    -MAX_COUNT."""
    valid = field_range(field) or Range()
    if valid.high is not None:
        return valid if valid.low is not None else dataclasses.replace(valid, low=-MAX_COUNT)
    high = declared(field, "most") or MAX_COUNT
    if valid.low is None:
        return Range(-MAX_COUNT, high)
    if valid.low_open and float(valid.low).is_integer():  # > 0 reads [1, ...] for a count
        return Range(int(valid.low) + 1, high)
    return Range(valid.low, high, valid.low_open)


def coerce_shorthands(config: Any) -> None:
    """Give a config made in Python what from_dict gives a recipe: a plain number where a
    field takes a Schedule (learning_rate=5e-4) becomes a constant schedule, in place, in
    nested configs too. Other values are left for check_ranges and the fields' validation."""
    hints = get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        tp = hints.get(field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            coerce_shorthands(value)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and not isinstance(value, tp):
            from_value = getattr(tp, "from_value", None)
            made = from_value(value) if from_value is not None and type(value) is not dict else None
            if made is not None:
                setattr(config, field.name, made)


def check_ranges(config: Any, prefix: str = "") -> None:
    """Raise a ConfigError naming the first numeric key of `config` outside its range.

    Every integer is held to `count_range` (an upper bound always), every float must be
    finite, and a key that declares a `product` is held to a bound on it. Nested config
    dataclasses are checked too, with their dotted keys.
    """
    from payoff.core.schedules import Schedule

    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        key = prefix + field.name
        check = field.metadata.get("check")
        if check is not None:
            check(value)  # a key whose valid values are not a range (e.g. device names)
        valid = field_range(field)
        if isinstance(value, Schedule):
            if valid is not None:
                _check_value(f"{key}.start", value.start, valid, field)
                # a linear schedule may decay to exactly 0 (a learning rate annealed to zero)
                end_valid = valid
                if value.kind == "linear" and valid.low == 0 and valid.low_open:
                    end_valid = dataclasses.replace(valid, low_open=False)
                _check_value(f"{key}.end", value.end, end_valid, field)
            check_ranges(value, key + ".")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, key + ".")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                _check_value(f"{key}[{i}]", item, valid, field)
        else:
            _check_value(key, value, valid, field)
    _check_products(config, prefix)


def _check_value(key: str, value: Any, valid: Range | None, field: dataclasses.Field[Any]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return  # None (unset) or not a number: the type check speaks for those
    if valid is not None and value not in valid:
        raise ConfigError(f"config key {key!r} must be {valid}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # a range open above takes inf
        raise ConfigError(
            f"config key {key!r} must be a finite number{f' {valid}' if valid else ''}, "
            f"got {value!r}"
        )
    if isinstance(value, int) and value not in (bounded := count_range(field)):
        if valid is None or valid.low is None:  # no range of its own: name the side it broke
            bounded = Range(high=bounded.high) if value > 0 else Range(low=bounded.low)
        raise ConfigError(f"config key {key!r} must be {bounded}, got {value!r}")


class _WholeFloat(int):
    """An int read from a whole float too large to be a count (`1e30`): it is refused by its
    key's upper bound, and the message shows it as it was written."""

    def __repr__(self) -> str:
        return repr(float(self))


def _check_products(config: Any, prefix: str) -> None:
    """A ConfigError where keys allocated together (in_range's `product`) ask for too much at
    once."""
    names = {field.name for field in dataclasses.fields(config)}
    for field in dataclasses.fields(config):
        product = declared(field, "product")
        if product is None or product[0] not in names:
            continue
        (other, most, what), first = product, field.name
        a, b = getattr(config, first), getattr(config, other)
        if isinstance(a, int) and isinstance(b, int) and a * b > most:
            raise ConfigError(
                f"config keys {prefix + first!r} x {prefix + other!r} must be at most "
                f"{most:,} ({what}), got {a:,} x {b:,} = {a * b:,}"
            )


# What YAML 1.1 (PyYAML) reads as a string but users, YAML 1.2 and the command line read as a
# number: scientific notation without a dot, `3e-4`, `2e3`.
_SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def _numbers(data: Any) -> Any:
    """`data` with every string in scientific notation (`3e-4`) read as the float it spells."""
    if isinstance(data, dict):
        return {key: _numbers(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_numbers(value) for value in data]
    if isinstance(data, str) and _SCIENTIFIC.match(data):
        return float(data.replace("_", ""))
    return data


def read_yaml_text(text: str) -> Any:
    """`safe_yaml`, with `3e-4` read as a number."""
    return _numbers(safe_yaml(text))


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with a clear error for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:  # (a file above the cap is not read at all)
        data = read_yaml_text(read_text_capped(path, MAX_YAML_CHARS, "config file"))
    except TooLarge as err:
        raise ConfigError(f"{err} (configs are a few KB)") from None
    except YAMLTooLarge as err:
        raise ConfigError(f"config file {str(path)!r} is too large to read: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text ({err})") from None
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
        value = _numbers(yaml.safe_load(raw)) if raw.strip() else ""  # [64, 1e3] too
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):  # YAML 1.1 reads '1e-3' as a string; users mean a number
        try:
            # (inf and nan too: the ranges refuse them by name, not a type error later)
            numeric = any(c in value for c in ".eE") or value.strip().lower() in _NOT_FINITE
            value = float(value) if numeric else int(value)
        except ValueError:
            pass
    return key.split("."), value


_NOT_FINITE = {f"{sign}{word}" for sign in ("", "+", "-") for word in ("inf", "infinity", "nan")}


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `key=value` override set (dotted keys create nesting)."""

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
        from_value = getattr(tp, "from_value", None)
        # (a DatasetDict is a dict too, but not a mapping of fields: from_value takes it)
        if from_value is not None and type(value) is not dict:
            made = from_value(value)  # a Schedule from a number, a RewardSpec from a function
            if made is not None:
                return made
        from_mapping = getattr(tp, "from_mapping", None)
        if from_mapping is not None and isinstance(value, dict):
            made = from_mapping(value, key)  # a RewardSpec's keys around a Python function
            if made is not None:
                return made
        if not isinstance(value, dict):
            refusal = getattr(tp, "refusal", None)
            if refusal is not None and (why := refusal(value)):
                raise ConfigError(f"config key {key!r} {why}; got {value!r}")
            raise ConfigError(
                f"config key {key!r} must be a mapping of {tp.__name__} fields, got {value!r}"
            )
        return from_dict(tp, value, prefix=key + ".")
    if origin in (list, tuple):
        (item_type, *_) = get_args(tp) or (Any,)
        if callable(value) and getattr(item_type, "from_value", None) is not None:
            value = [value]  # one function where a list of them goes (TRL's reward_funcs=f)
        if not isinstance(value, list | tuple):
            raise bad
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
            # 1e30 too: every count has an upper bound (check_ranges), which refuses it
            return int(value) if abs(value) <= MAX_COUNT else _WholeFloat(value)
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


# What Stable-Baselines3 and TRL call some of payoff's keys: a key that is close in spelling
# to another is not always the one meant (SB3's buffer_size is not batch_size).
# Other libraries' names for payoff's keys: (library, {payoff's name: a note}); the first
# name this config has is given ("" for a note alone). Keys payoff shares with them
# (learning_rate, gamma, ...) need no entry.
OTHER_LIBRARIES: dict[str, tuple[str, dict[str, str]]] = {
    "buffer_size": ("SB3", {"replay.size": ""}),
    "train_freq": (
        "SB3",
        {
            "train_every": " (env steps summed over num_envs; each training takes "
            "gradient_steps updates, which DQN sets to 16 where SB3's gradient_steps is 1: set "
            "gradient_steps too for SB3's ratio of updates to env steps)"
        },
    ),
    "tau": ("SB3", {"target_network.tau": ""}),
    "env_kwargs": ("SB3", {"env.kwargs": ""}),
    "action_noise": (
        "SB3",
        {"exploration_noise": " (a Gaussian's std, in half action ranges)"},
    ),
    "use_sde": ("SB3", {"": " payoff has no state-dependent exploration"}),
    "policy": (
        "SB3",
        {
            "": " there is no policy name to pass: the networks follow the env's spaces, "
            "sized by hidden=[64, 64]"
        },
    ),
    "n_steps": ("SB3", {"num_steps": ""}),
    "n_epochs": ("SB3", {"epochs": ""}),
    "n_envs": ("SB3", {"num_envs": ""}),
    "clip_range": ("SB3", {"clip": ""}),
    "total_timesteps": ("SB3", {"total_steps": ""}),
    "net_arch": ("SB3", {"hidden": " (one list for the actor and the critic)"}),
    "policy_kwargs": ("SB3", {"hidden": " (net_arch), and 'activation' (activation_fn)"}),
    "activation_fn": ("SB3", {"activation": " ('tanh' or 'relu')"}),
    "exploration_fraction": ("SB3", {"epsilon.fraction": ""}),
    "exploration_initial_eps": ("SB3", {"epsilon.start": ""}),
    "exploration_final_eps": ("SB3", {"epsilon.end": ""}),
    "target_update_interval": (
        "SB3",
        {"target_network.update_every": " (counted in gradient steps, not env steps)"},
    ),
    "ent_coef": ("SB3", {"alpha": " (and 'autotune' for SAC's automatic entropy tuning)"}),
    "tensorboard_log": (
        "SB3",
        {
            "": " TensorBoard is one of payoff's loggers, writing into a run folder: payoff "
            "train RECIPE --track tensorboard (or PAYOFF_LOGGERS=tensorboard); from Python, "
            "run = Run.create(folder, name, {'algo': ...}, loggers=['tensorboard']) "
            "(payoff.track.run) and PPO(env, run=run) (docs/tracking.md)"
        },
    ),
    "verbose": (
        "SB3",
        {
            "": " payoff shows a progress bar and a line per evaluation; PAYOFF_PROGRESS=0 hides the bar"
        },
    ),
    "num_generations": ("TRL", {"group_size": ""}),
    "max_completion_length": ("TRL", {"max_new_tokens": ""}),
    "max_steps": ("TRL", {"steps": ""}),
    "per_device_train_batch_size": (
        "TRL",
        {
            "prompts_per_step": " (TRL's counts completions: prompts_per_step x group_size)",
            "batch_size": "",
        },
    ),
    "epsilon": ("TRL", {"clip_eps": ""}),
    "epsilon_high": ("TRL", {"clip_eps_high": ""}),
    "loss_type": ("TRL", {"loss_aggregation": "", "loss": ""}),
    "reward_funcs": ("TRL", {"rewards": ""}),
    "train_dataset": (
        "TRL",
        # preferences first: DPO and reward models also have a task (what they evaluate on)
        {"preferences": " (pairs, a file or a folder)", "task": " (rows, a file or a folder)"},
    ),
    "num_train_epochs": ("TRL", {"steps": " (payoff counts optimizer steps)"}),
    "num_iterations": ("TRL", {"updates_per_batch": " (passes over each rollout batch)"}),
    "gradient_accumulation_steps": (
        "TRL",
        {
            "microbatch_size": " (the completions per forward/backward inside one optimizer "
            "step: gradients accumulate, the update is the same)",
            "": " payoff has no gradient accumulation for this trainer",
        },
    ),
    "peft_config": (
        "TRL",
        {"model.lora_rank": " (with model.lora_alpha, model.lora_targets: LoRA)"},
    ),
    "completion_only_loss": ("TRL", {"loss_on": " ('completion' or 'all')"}),
    "max_prompt_length": (
        "TRL",
        {
            "": " payoff does not cut prompts: one longer than the model's context is refused "
            "before training, naming the row"
        },
    ),
    "max_seq_length": (
        "TRL",
        {
            "": " payoff does not cut rows: one longer than the model's context is refused "
            "before training, naming the row"
        },
    ),
    "max_length": (
        "TRL",
        {
            "": " payoff does not cut rows: one longer than the model's context is refused "
            "before training, naming the row"
        },
    ),
    "logging_steps": ("TRL", {"log_every": ""}),
    "eval_steps": ("TRL", {"eval_every": ""}),
    "save_steps": ("TRL", {"checkpoint_every": ""}),
    "model_name_or_path": ("TRL", {"model.path": " (a local folder: nothing is downloaded)"}),
    "output_dir": (
        "TRL",
        {
            "": " each run gets a folder of its own under `payoff train --out DIR` (default "
            "runs/); from Python, pass run=payoff.track.run.Run.create(DIR, name, config)"
        },
    ),
    "use_vllm": ("TRL", {"": " payoff generates with its own batched sampler; there is no vLLM"}),
    "packing": (
        "TRL",
        {"": " payoff pads each batch to its longest row and does not pack rows together"},
    ),
    "dataset_text_field": (
        "TRL",
        {
            "": " payoff reads TRL's column names: 'text', 'prompt' with 'completion' or "
            "'answer', 'messages'"
        },
    ),
    "ref_model": (
        "TRL",
        {
            "": " the reference is the model training starts from, kept frozen (beta weighs "
            "the KL to it)"
        },
    ),
}


def key_hint(key: str, fields: Any) -> str:
    """' Did you mean ...?', or the key's name here when another library's name was used."""
    names = set(fields)
    library, ours = OTHER_LIBRARIES.get(key, ("", {}))
    for name, note in ours.items():
        if not name:  # a note alone, when none of the names before it applies
            return f" That is {library}'s;{note}."
        if name.split(".", 1)[0] in names:
            parent, _, child = name.partition(".")
            python = f" ({parent}={{{child!r}: ...}} from Python)" if child else ""
            return f" That is {library}'s name; payoff's is {name!r}{python}{note}."
    return suggest(key, names)


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, checking every key and value."""
    if not isinstance(data, dict):
        raise ConfigError(f"config {prefix.rstrip('.') or 'root'} must be a mapping, got {data!r}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in fields and fields[key].metadata.get("python_only"):
            raise ConfigError(
                f"config key {prefix + str(key)!r} is set from Python only (e.g. PPO(env=my_env)), "
                f"not from a recipe, YAML or key=value"
            )
        if key not in fields:
            current = [name for name, f in fields.items() if not f.metadata.get("replaced")]
            raise ConfigError(
                f"unknown config key {prefix + str(key)!r}.{key_hint(str(key), current)} "
                f"Valid keys{' under ' + prefix.rstrip('.') if prefix else ''}: {', '.join(sorted(current))}"
            )
        kwargs[key] = _coerce(value, hints[key], prefix + key)
    try:
        obj = cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"config {prefix.rstrip('.') or cls.__name__}: {err}") from None
    check_ranges(obj, prefix)
    check = getattr(obj, "validate", None)
    if callable(check):
        check()
    return obj


def to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as plain nested dicts/lists, ready for YAML (Python-only fields,
    such as an env factory, are left out)."""
    return typing.cast(dict[str, Any], _plain(config))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.metadata.get("python_only")
            and not (f.metadata.get("replaced") and getattr(value, f.name) is None)
        }
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return copy.deepcopy(value)
