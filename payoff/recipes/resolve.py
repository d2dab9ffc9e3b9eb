"""From a recipe to an algorithm and its config: `resolve` reads a recipe (a YAML file, a
shipped recipe's name or an algorithm's name), applies the overrides, retargets a recipe
pointed at another env, makes paths absolute and checks the monitors, and returns what
`payoff.train` builds and records in the run's config.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from payoff.algos import get_algorithm
from payoff.algos.base import Algorithm, run_defaults
from payoff.core.config import apply_overrides, from_dict, parse_override, to_dict
from payoff.core.errors import ConfigError
from payoff.envs.tasks import TASKS
from payoff.monitor.detectors import build_monitors
from payoff.recipes import FROM_DEFAULTS, load_recipe, recipe_file


def resolve(
    recipe: str, overrides: list[str] | tuple[str, ...] = (), seed: int | None = None
) -> tuple[type[Algorithm], Any, dict[str, Any]]:
    """Recipe + overrides + defaults -> (algorithm class, config, resolved mapping for config.yaml).

    recipe: a YAML file, a shipped recipe's name, or an algorithm's name: that algorithm's
    config defaults, titled by the algorithm and what it trains on ("ppo on Acrobot-v1")."""
    name, data = load_recipe(recipe)
    if data.get("kind") == "experiment":
        raise ConfigError(
            f"{name!r} is an experiment recipe; run it with train_experiment (payoff train does this)"
        )
    data = dict(data)
    algo = data.pop("algo", None)
    if algo is None:
        raise ConfigError(
            f"recipe {name!r} has no 'algo' key; say which algorithm to run (e.g. algo: ppo)"
        )
    description = data.pop("description", "")
    label = data.pop("label", None)
    from_defaults = bool(data.pop(FROM_DEFAULTS, False))
    # A run's config.yaml trains again as a recipe: what it records about how it was made
    # (the recipe's name, the overrides already applied, a note) is not config
    for bookkeeping in ("recipe", "overrides", "recipe_note"):
        data.pop(bookkeeping, None)
    written = list(overrides)  # all of them, monitors' too, for the record
    if from_defaults:
        overrides = _own_data_task(overrides)
    chosen_by = {*data, *(parse_override(o)[0][0] for o in overrides)}  # set, not by defaults
    monitors, overrides = _monitor_overrides(data.pop("monitors", None), overrides)
    given = [value for keys, value in map(parse_override, overrides) if keys == ["seed"]]
    if seed is not None and any(value != seed for value in given):
        raise ConfigError(
            f"two seeds: seed={given[-1]} among the overrides and {seed} (--seed, or an "
            f"experiment member's seeds); give one"
        )
    all_overrides = list(overrides) + ([f"seed={seed}"] if seed is not None else [])
    data, note = _retarget(name, str(algo), data, all_overrides)
    data = _without_other_task_options(data, all_overrides)
    if (path := recipe_file(recipe)) is not None:  # its paths are also found beside it
        data = _absolute_paths(data, folder=path.expanduser().resolve().parent)
    data = _absolute_paths(apply_overrides(data, all_overrides))
    cls = get_algorithm(str(algo))
    config: Any = from_dict(cls.config_class, with_run_defaults(cls, data))
    resolved: dict[str, Any] = {"recipe": name, "description": description, "algo": algo}
    if from_defaults:  # no recipe: titled by what it trains on
        description, chosen = _defaults_title(cls, to_dict(config), chosen_by)
        resolved = {"description": description, "algo": cls.name, FROM_DEFAULTS: True}
        note = note or chosen
    # what the run changed from the recipe (reports, plot labels)
    resolved["overrides"] = written + ([f"seed={seed}"] if seed is not None else [])
    if note:
        resolved["recipe_note"] = note
    if label:
        resolved["label"] = label
    if monitors:
        build_monitors(monitors)  # check the specs now, before any training
        resolved["monitors"] = monitors
    resolved.update(to_dict(config))
    return cls, config, resolved


def with_run_defaults(cls: type[Algorithm], data: dict[str, Any]) -> dict[str, Any]:
    """A run's config keys with the evaluations a `payoff train` run makes wherever the
    recipe and overrides leave them unset (the config class's `run_defaults`: a final
    evaluation of 50 episodes, SAC's every 5,000 steps, ...). In Python the same keys
    default to off, so that learn(n) only trains; every run built from keys goes through
    here, so a run's curves, summary and report keep their evaluations."""
    return {**run_defaults(cls.config_class), **data}


def trained_on(config: dict[str, Any]) -> tuple[str, str]:
    """(what a config trains on, the key that names it): ('Acrobot-v1', 'env.id'),
    ('pairs.jsonl', 'preferences.path'), ('addition', 'task.name'), ('tictactoe', 'game');
    ('', '') where it names none of them."""
    prefs = config.get("preferences")
    if isinstance(prefs, dict) and prefs.get("path"):
        return Path(str(prefs["path"])).name, "preferences.path"
    task = config.get("task")
    if isinstance(task, dict) and task.get("name"):
        if task["name"] == "jsonl" and task.get("data"):
            return Path(str(task["data"])).name, "task.data"
        return str(task["name"]), "task.name"
    env = config.get("env")
    if isinstance(env, dict):
        if env.get("entry_point"):
            return str(env["entry_point"]), "env.entry_point"
        kwargs = env.get("kwargs")
        if isinstance(kwargs, dict) and isinstance(kwargs.get("env_id"), str):
            return kwargs["env_id"], "env.kwargs.env_id"  # a PettingZoo env through its adapter
        if env.get("id"):
            return str(env["id"]), "env.id"
    if isinstance(config.get("game"), str):
        return config["game"], "game"
    return "", ""


def _defaults_title(
    cls: type[Algorithm], config: dict[str, Any], named: set[str]
) -> tuple[str, str | None]:
    """A run of an algorithm's defaults: its title ('ppo on Acrobot-v1'), and a note saying
    which env or task the defaults chose when no key (`named`: the top-level keys given)
    named one (None when one did)."""
    target, key = trained_on(config)
    title = f"{cls.name} on {target}" if target else cls.name
    if not key or named & {"env", "task", "game", "preferences"}:
        return title, None
    if "preferences" in config:
        other = "preferences=PAIRS.jsonl trains on your pairs"
    elif key.startswith("task"):
        other = "task=NAME or task.data=ROWS.jsonl trains on another"
    else:
        other = f"{key}=... trains on another"
    where = key.split(".")[0]
    return title, (
        f"{title}: no {where} was given, so the one {cls.config_class.__name__}'s defaults "
        f"name ({other})"
    )


def _own_data_task(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """An algorithm's defaults given `task.data=FILE` alone train on that file: task.name
    'jsonl' is added (a recipe names its task, where task.data for another task is an
    error that says to add it)."""
    keys = [parse_override(o)[0] for o in overrides]
    if ["task", "data"] in keys and ["task", "name"] not in keys and ["task"] not in keys:
        return ["task.name=jsonl", *overrides]
    return list(overrides)


def _monitor_overrides(
    monitors: list[Any] | None, overrides: list[str] | tuple[str, ...]
) -> tuple[list[Any] | None, list[str]]:
    """The recipe's monitors after the command line's `monitors=[...]` (replaces them all;
    `monitors=[]` removes them) and `monitors.N.key=value` (changes the Nth, from 0); and
    the other overrides."""
    rest: list[str] = []
    watching = [dict(m) if isinstance(m, dict) else m for m in monitors or []]
    example = "monitors=[{kind: threshold, key: train/kl, above: 0.5}]"
    for text in overrides:
        keys, value = parse_override(text)
        if keys[0] != "monitors":
            rest.append(text)
            continue
        if len(keys) == 1:
            if value in (None, ""):
                value = []
            if not isinstance(value, list):
                raise ConfigError(
                    f"monitors must be a list of monitors, e.g. {example}; got {value!r}"
                )
            watching = value
            continue
        kinds = ", ".join(
            f"{i}: {m.get('kind') if isinstance(m, dict) else m!r}" for i, m in enumerate(watching)
        )
        index = int(keys[1]) if keys[1].isdigit() else -1
        if (
            len(keys) != 3
            or not 0 <= index < len(watching)
            or not isinstance(watching[index], dict)
        ):
            raise ConfigError(
                f"override {text!r}: monitors are changed by number, monitors.N.key=value, "
                f"with N one of the recipe's monitors ({kinds or 'it has none'}); or replaced "
                f"by {example}"
            )
        watching[index][keys[2]] = value
    return (watching if monitors is not None or watching else None), rest


# Config keys whose value may be a file or folder (at any depth: task.data, model.path,
# preferences.path, ...). A run records them absolute, so `payoff eval RUN` and `--resume`
# work from any folder.
_PATH_KEYS = frozenset(
    {
        "path",
        "test_path",
        "data",
        "test_data",
        "ood_data",
        "init_from",
        "expert",
        "reward_model",
        "demonstrations",
    }
)


def _absolute_paths(data: Any, key: str = "", folder: Path | None = None) -> Any:
    """`data` with every relative path under a path key that exists from the working folder
    made absolute, and the file of a reward named 'file.py:function' too. Names that are
    not paths on disk ('kart', 'CartPole-v1', 'module:function') stay as written.

    folder: a recipe file's folder: a path written in the recipe that is not found from the
    working folder but is beside the recipe is taken from there (`payoff train
    exp/mine.yaml` run from the project root finds exp/mine.yaml's data/rows.jsonl)."""
    if isinstance(data, dict):
        return {k: _absolute_paths(v, str(k), folder) for k, v in data.items()}
    if isinstance(data, list):
        return [_absolute_paths(v, key, folder) for v in data]
    if not isinstance(data, str) or not data:
        return data
    if key == "expert" and data in ("kart", "cartpole", "keyboard"):  # shipped experts
        return data

    def found(path: str, exists: Any) -> Path | None:
        if Path(path).expanduser().is_absolute():
            return None
        for base in (Path.cwd(), folder):
            if base is not None and exists(base / path):
                return (base / path).resolve()
        return None

    path_key = key in _PATH_KEYS or key == "preferences" or (key == "task" and data not in TASKS)
    if path_key and (where := found(data, Path.exists)) is not None:  # task: FILE too
        return str(where)
    if key == "name" and ".py:" in data:
        file, function = data.rsplit(":", 1)
        if file.endswith(".py") and (where := found(file, Path.is_file)) is not None:
            return f"{where}:{function}"
    return data


def _retarget(
    name: str, algo: str, data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], str | None]:
    """A recipe's settings were tuned for its env. When the overrides point it at another env,
    leave those settings out (the algorithm's general defaults apply instead, and any setting
    the overrides name is still set) and say so: a CartPole schedule on Acrobot fails quietly.
    The recipe's env keys go too (its kwargs, wrappers, episode limit, and its id or entry
    point): FrozenLake's map_name means nothing to CliffWalking.
    """
    recipe_env = data.get("env")
    if not isinstance(recipe_env, dict):
        return data, None
    keys_named = [parse_override(o)[0] for o in overrides]
    env_overrides = [o for o, keys in zip(overrides, keys_named, strict=True) if keys[0] == "env"]
    yours = apply_overrides({}, env_overrides).get("env", {})  # only what the overrides wrote
    target = apply_overrides({"env": recipe_env}, env_overrides)["env"]
    if not isinstance(target, dict) or not isinstance(yours, dict):
        return data, None  # env=<an id string>: the config reads it as the env's id
    named_env = set(yours)
    before = recipe_env.get("entry_point") or recipe_env.get("id")
    if "entry_point" in named_env:
        after = target.get("entry_point")
    elif "id" in named_env:
        after = target.get("id")
    else:
        return data, None  # the recipe's own env, with some of its keys changed
    if before == after:
        return data, None
    named = {keys[0] for keys in keys_named}
    dropped = [k for k in data if k != "env" and k not in named]
    dropped += [f"env.{k}" for k in recipe_env if k not in named_env]
    env = yours
    note = (
        f"recipe {name!r} was tuned for {before}; on {after} its settings for that env "
        f"({', '.join(dropped)}) are left out and {algo}'s defaults apply. Name any of them "
        f"as key=value to keep it."
    )
    kept = {k: v for k, v in data.items() if k not in dropped}
    return {**kept, "env": env}, note


def _without_other_task_options(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The recipe less its task.options when an override names another task: those options
    are the recipe's task's knobs (a jsonl task takes none)."""
    task = data.get("task")
    names = [value for keys, value in map(parse_override, overrides) if keys == ["task", "name"]]
    if not isinstance(task, dict) or not names or names[-1] == task.get("name"):
        return data
    return {**data, "task": {k: v for k, v in task.items() if k != "options"}}
