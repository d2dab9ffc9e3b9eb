"""One module per algorithm. Each module exposes `ALGORITHM`, its class.

The algorithm name used in recipes (`algo: ppo`) is the module name, so adding an algorithm
is adding a module; nothing else needs registering.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from payoff.core.errors import ConfigError, suggest

if TYPE_CHECKING:
    from payoff.algos.base import Algorithm


def available_algorithms() -> list[str]:
    """Names of the algorithm modules shipped with payoff."""
    names = []
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_") or module.name in (
            "agent",
            "base",
            "loop",
            "response",
            "shared",
        ):
            continue
        names.append(module.name)
    return sorted(names)


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class for `name` ('qlearning', 'ppo', ...), with a clear error if unknown."""
    valid = available_algorithms()
    if name not in valid and isinstance(name, str) and name.lower() in valid:
        name = name.lower()  # `algo: PPO`, as the class is spelt
    if name not in valid:
        raise ConfigError(
            f"unknown algorithm {name!r}.{suggest(name, valid)} Valid algorithms: {', '.join(valid)}"
        )
    module = importlib.import_module(f"payoff.algos.{name}")
    algorithm = getattr(module, "ALGORITHM", None)
    if algorithm is None:
        raise ConfigError(
            f"payoff.algos.{name} defines no ALGORITHM; it is a helper module, not an algorithm"
        )
    return algorithm
