"""Shipped YAML recipes, one per named experiment.

A recipe is a YAML mapping with `description` (one line), `algo` (an algorithm module name)
and the algorithm's config keys. An experiment recipe instead has `kind: experiment` and a
list of `members` (each a recipe name plus overrides and seeds).

Where a name is no file and no recipe, an algorithm's name (`ppo`, `recurrent-ppo`) stands
for a recipe of that algorithm's config defaults: `payoff train ppo env.id=Acrobot-v1`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from payoff.core.config import load_yaml
from payoff.core.errors import ConfigError, suggest

RECIPE_DIR = Path(__file__).parent
# The key marking a run made from an algorithm's config defaults rather than a recipe
# (`payoff train ppo ...`): config.yaml records it, and the run is titled by its algorithm
# and env or task ("ppo on Acrobot-v1").
FROM_DEFAULTS = "from_defaults"


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def list_recipes() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped recipe."""
    return [
        (name, str(load_yaml(RECIPE_DIR / f"{name}.yaml").get("description", "")))
        for name in recipe_names()
    ]


def recipe_file(name_or_path: str) -> Path | None:
    """The YAML file a recipe argument names by path, or None for a shipped recipe's name."""
    path = Path(name_or_path)
    return path if path.suffix in (".yaml", ".yml") or path.is_file() else None


def algorithm_named(name: str) -> str | None:
    """The algorithm `name` means ('ppo'; 'recurrent-ppo' and 'PPO' as spelt elsewhere),
    or None when no algorithm has that name."""
    from payoff.algos import available_algorithms

    algo = name.strip().lower().replace("-", "_")
    return algo if algo in available_algorithms() else None


def load_recipe(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """A YAML file by path, else a shipped recipe by name, else an algorithm by name (a
    recipe of its config defaults, {algo: NAME, from_defaults: true}); returns (name,
    mapping)."""
    path = recipe_file(name_or_path)
    if path is not None:
        data = load_yaml(path)
        recorded = data.get("recipe") if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get(FROM_DEFAULTS) and not recorded:
            recorded = data.get("algo")  # a run made from an algorithm's defaults
        if path.name == "config.yaml" and isinstance(recorded, str) and recorded.strip():
            return recorded, data  # a run's config trained again: named as that run was
        return path.stem, data
    names = recipe_names()
    if name_or_path in names:
        return name_or_path, load_yaml(RECIPE_DIR / f"{name_or_path}.yaml")
    algo = algorithm_named(name_or_path)
    if algo is not None:
        return algo, {"algo": algo, FROM_DEFAULTS: True}
    from payoff.algos import available_algorithms

    algos = available_algorithms()
    raise ConfigError(
        f"unknown recipe or algorithm {name_or_path!r}.{suggest(name_or_path, names + algos)} "
        f"Shipped recipes: {', '.join(names)}. Algorithms, trained from their defaults with "
        f"the keys you give (payoff train ppo env.id=Acrobot-v1): {', '.join(algos)}. Or pass "
        f"a path to a .yaml file"
    )
