"""Create environments from any Gymnasium id, with errors that suggest close matches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from payoff.core.errors import EnvError, suggest


@dataclass
class EnvConfig:
    """Which environment to train on.

    id: any registered Gymnasium id ('CartPole-v1', 'FrozenLake-v1', 'payoff/...').
    kwargs: passed to `gymnasium.make` (e.g. {map_name: 8x8, is_slippery: true}).
    """

    id: str = "CartPole-v1"
    kwargs: dict[str, Any] = field(default_factory=dict)


def register_payoff_envs() -> None:
    """Import payoff's own env modules so they register under the `payoff/` namespace."""
    import payoff.envs.registry  # noqa: F401


def known_env_ids() -> list[str]:
    register_payoff_envs()
    return sorted(gym.registry.keys())


def check_env_id(env_id: str) -> None:
    """Raise EnvError naming close matches when `env_id` is not registered."""
    register_payoff_envs()
    if env_id not in gym.registry:
        ids = known_env_ids()
        plain = [i for i in ids if "/" not in i]
        hint = suggest(env_id, ids) or f" Known ids include: {', '.join(plain[:12])}, ..."
        raise EnvError(f"unknown environment id {env_id!r}.{hint}")


def make_env(env: EnvConfig | str, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """`gymnasium.make` with payoff's envs registered and one clear error for a bad id."""
    config = EnvConfig(id=env) if isinstance(env, str) else env
    check_env_id(config.id)
    options = {**config.kwargs, **kwargs}
    if render_mode is not None:
        options["render_mode"] = render_mode
    try:
        return gym.make(config.id, disable_env_checker=True, **options)
    except TypeError as err:
        raise EnvError(
            f"environment {config.id!r} rejected its arguments {options}: {err}"
        ) from None
    except gym.error.Error as err:
        raise EnvError(f"cannot create environment {config.id!r}: {err}") from None


def is_success(env_id: str, info: dict[str, Any], final_reward: float) -> bool | None:
    """Whether a finished episode succeeded, where the env defines success; None otherwise."""
    for key in ("is_success", "success"):
        if key in info:
            return bool(info[key])
    if env_id.startswith("FrozenLake"):
        return final_reward > 0
    return None
