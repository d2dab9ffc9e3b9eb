"""Policy files: an actor (and optionally its critic) on their own, for behavior cloning
to hand to PPO (`init_from`), for `payoff play`, and for other programs.

One safetensors file: the weights as tensors, the architecture and the spaces as JSON in
its header (`payoff.track.checkpoint`), never a pickle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from payoff.core.device import resolve_device
from payoff.core.errors import CheckpointError, EnvError
from payoff.core.imports import weights_from
from payoff.core.state import count_values
from payoff.models.mlp import ACTIVATIONS, Actor, Critic, make_actor
from payoff.track.checkpoint import load_state, save_state

POLICY_FORMAT = "payoff-policy/2"  # /1 was a torch.save pickle, refused on load


def save_policy(path: str | Path, actor: Actor, critic: Critic | None = None) -> Path:
    """Write an actor (and optionally a critic) to one file that `load_policy` and
    PPO's `init_from` read: weights in safetensors, the architecture as JSON (no pickle)."""
    spec = actor.spec()
    payload = {
        "format": POLICY_FORMAT,
        "spec": {
            **spec,
            "observation_space": space_to_data(spec["observation_space"]),
            "action_space": space_to_data(spec["action_space"]),
        },
        "actor": actor.state_dict(),
        "critic": None if critic is None else critic.state_dict(),
        "critic_hidden": None if critic is None else critic.hidden,
        "critic_activation": None if critic is None else critic.activation,
    }
    return save_state(path, payload)


def load_policy(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[Actor, Critic | None]:
    """Rebuild the actor (and critic, if saved) written by `save_policy`, on `device`
    (a torch.device, or a config spelling: auto, cpu, cuda, cuda:N, mps)."""
    payload = load_state(path, "policy file")
    if not is_policy_payload(payload):
        raise CheckpointError(
            f"{str(path)!r} is not a payoff policy file (written by payoff.models.save_policy)"
        )
    actor, critic = policy_from_payload(payload, path)
    target = resolve_device(device) if isinstance(device, str) else device
    if target.type != "cpu":  # files hold CPU tensors: a CPU load needs no copy
        actor.to(target)
        if critic is not None:
            critic.to(target)
    return actor, critic


def is_policy_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("format") == POLICY_FORMAT


def policy_from_payload(payload: dict[str, Any], source: str | Path) -> tuple[Actor, Critic | None]:
    """The actor (and critic) of a loaded policy file; CheckpointError when it does not fit."""

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"policy file {str(source)!r} is malformed: {problem}")

    spec = payload.get("spec")
    if not isinstance(spec, dict):
        raise bad("no 'spec' (the actor's architecture)")
    hidden: Any = spec.get("hidden")
    if not _layer_sizes(hidden):
        raise bad(f"hidden sizes {hidden!r} are not a list of positive ints")
    if spec.get("activation") not in ACTIVATIONS:
        raise bad(f"activation {spec.get('activation')!r} is not one of {sorted(ACTIVATIONS)}")
    if not isinstance(spec.get("normalize_obs"), bool):
        raise bad("'normalize_obs' is not true/false")
    log_std_init = spec.get("log_std_init", 0.0)
    if not isinstance(log_std_init, int | float) or isinstance(log_std_init, bool):
        raise bad("'log_std_init' is not a number")
    observation_space = space_from_data(spec.get("observation_space"), source)
    action_space = space_from_data(spec.get("action_space"), source)
    for name in ("actor", "critic"):
        if payload.get(name) is not None and not isinstance(payload[name], dict):
            raise bad(f"{name!r} is not a dict of tensors")
    if not isinstance(payload.get("actor"), dict):
        raise bad("no actor weights")
    # What the file's weights cannot fill is refused before it is made (check_weights).
    budget = weights_from(f"policy file {str(source)!r}", count_values(payload))
    try:
        with budget:
            actor = make_actor(
                observation_space,
                action_space,
                hidden=list(hidden),
                activation=spec["activation"],
                normalize_obs=spec["normalize_obs"],
                log_std_init=float(log_std_init),
            )
            actor.load_state_dict(payload["actor"])
            critic = None
            if payload.get("critic") is not None:
                critic_hidden: Any = payload.get("critic_hidden")
                if not _layer_sizes(critic_hidden):
                    raise bad(
                        f"critic hidden sizes {critic_hidden!r} are not a list of positive ints"
                    )
                if payload.get("critic_activation") not in ACTIVATIONS:
                    raise bad(f"critic activation {payload.get('critic_activation')!r} is unknown")
                critic = Critic(
                    observation_space,
                    critic_hidden,
                    payload["critic_activation"],
                    normalizer=actor.normalizer,
                )
                critic.load_state_dict(payload["critic"])
    except (RuntimeError, ValueError, TypeError, KeyError, EnvError) as err:
        raise bad(
            f"its weights do not fit its architecture ({type(err).__name__}: {err})"
        ) from None
    return actor, critic


def _layer_sizes(sizes: Any) -> bool:
    return isinstance(sizes, list | tuple) and all(
        isinstance(h, int) and not isinstance(h, bool) and 0 < h <= 1_000_000 for h in sizes
    )


_SPACE_TYPES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
_SPACE_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"}


def space_to_data(space: gym.Space) -> dict[str, Any]:
    """A Box, Discrete, MultiDiscrete or MultiBinary space as plain data (for policy files)."""
    if isinstance(space, gym.spaces.Discrete):
        return {
            "type": "Discrete",
            "n": int(space.n),
            "start": int(space.start),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.copy(),
            "high": space.high.copy(),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec, dtype=np.int64),
            "start": np.asarray(space.start, dtype=np.int64),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return {"type": "MultiBinary", "n": int(space.shape[0]), "dtype": "int8"}
    raise CheckpointError(
        f"policy files hold Box, Discrete, MultiDiscrete and MultiBinary spaces, not {space}"
    )


def space_from_data(data: Any, source: str | Path) -> gym.Space:
    """Inverse of `space_to_data`; CheckpointError for anything else."""
    where = f"policy file {str(source)!r}"
    if not isinstance(data, dict) or data.get("type") not in _SPACE_TYPES:
        raise CheckpointError(
            f"{where} is malformed: a space that is not one of {', '.join(_SPACE_TYPES)}"
        )
    if data.get("dtype") not in _SPACE_DTYPES:
        raise CheckpointError(f"{where} is malformed: space dtype {data.get('dtype')!r}")
    try:
        if data["type"] == "Discrete":
            n, start = data.get("n"), data.get("start", 0)
            if not (isinstance(n, int) and n > 0 and isinstance(start, int)):
                raise ValueError(f"n={n!r}, start={start!r}")
            return gym.spaces.Discrete(n, start=start, dtype=np.dtype(data["dtype"]))
        if data["type"] == "MultiBinary":
            n = data.get("n")
            if not (isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 100_000):
                raise ValueError(f"n={n!r}")
            return gym.spaces.MultiBinary(n)
        if data["type"] == "MultiDiscrete":
            nvec, start = data.get("nvec"), data.get("start")
            if not (isinstance(nvec, np.ndarray) and isinstance(start, np.ndarray)):
                raise ValueError("nvec/start are not arrays")
            if nvec.ndim != 1 or start.shape != nvec.shape or not 0 < nvec.size <= 100_000:
                raise ValueError(f"nvec {nvec.shape} and start {start.shape}")
            if nvec.dtype.kind != "i" or start.dtype.kind != "i" or (nvec <= 0).any():
                raise ValueError("nvec must hold positive ints, start ints")
            if int(nvec.sum()) > 10_000_000:
                raise ValueError(f"{int(nvec.sum())} options in all")
            return gym.spaces.MultiDiscrete(nvec, start=start, dtype=np.dtype(data["dtype"]))
        low, high = data.get("low"), data.get("high")
        if not (isinstance(low, np.ndarray) and isinstance(high, np.ndarray)):
            raise ValueError("low/high are not arrays")
        if low.shape != high.shape or low.size > 10_000_000:
            raise ValueError(f"low {low.shape} and high {high.shape}")
        return gym.spaces.Box(low=low, high=high, dtype=np.dtype(data["dtype"]))
    except (ValueError, TypeError, AssertionError) as err:
        raise CheckpointError(f"{where} is malformed: a bad {data['type']} space ({err})") from None
