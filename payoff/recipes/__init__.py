"""Shipped YAML recipes, one per named experiment.

A recipe is a YAML mapping with `description` (one line), `algo` (an algorithm module name)
and the algorithm's config keys. An experiment recipe instead has `kind: experiment` and a
list of `members` (each a recipe name plus overrides and seeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from payoff.core.config import load_yaml
from payoff.core.errors import ConfigError, suggest

RECIPE_DIR = Path(__file__).parent


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


def load_recipe(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """A shipped recipe by name, or a YAML file by path; returns (name, mapping)."""
    path = recipe_file(name_or_path)
    if path is not None:
        data = load_yaml(path)
        recorded = data.get("recipe") if isinstance(data, dict) else None
        if path.name == "config.yaml" and isinstance(recorded, str) and recorded.strip():
            return recorded, data  # a run's config trained again: named as that run was
        return path.stem, data
    names = recipe_names()
    if name_or_path not in names:
        raise ConfigError(
            f"unknown recipe {name_or_path!r}.{suggest(name_or_path, names)} "
            f"Shipped recipes: {', '.join(names)} (or pass a path to a .yaml file)"
        )
    return name_or_path, load_yaml(RECIPE_DIR / f"{name_or_path}.yaml")
